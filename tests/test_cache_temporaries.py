"""What an interrupted ``deniable prepare`` leaves in the cache is listed and removed (issue 27)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import make_tiny_embedding, make_toy_embedding
from deniable._cache import file_lock
from deniable.artefacts import (
    artefact_path,
    build_artefact,
    open_artefact,
    register_kind,
    remove_artefacts,
    remove_temporaries,
    stale_temporaries,
)
from deniable.embedding import Embedding


def _hanging_builder(embedding: Embedding, params: dict[str, Any], folder: Path, show: bool | None) -> None:
    (folder / "part.bin").write_bytes(b"x" * 5000)
    Path(params["ready"]).write_text("writing", encoding="utf-8")
    time.sleep(60)  # killed here


def _quick_builder(embedding: Embedding, params: dict[str, Any], folder: Path, show: bool | None) -> None:
    (folder / "data.bin").write_bytes(b"y" * 10)


def _build_in_child(cache: str, params: dict[str, Any]) -> None:
    os.environ["DENIABLE_CACHE"] = cache
    register_kind("test-hang", _hanging_builder)  # type: ignore[arg-type]
    build_artefact(make_tiny_embedding(10, 2), "test-hang", params)


def _killed_build(tmp_path: Path) -> tuple[Embedding, dict[str, Any]]:
    """A build killed (SIGKILL) half way: its temporary folder stays behind."""
    ready = tmp_path / "ready"
    ready.unlink(missing_ok=True)
    params = {"ready": str(ready)}
    child = multiprocessing.get_context("fork").Process(
        target=_build_in_child, args=(os.environ["DENIABLE_CACHE"], params)
    )
    child.start()
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    return make_tiny_embedding(10, 2), params


def test_a_killed_build_is_listed_and_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    emb, _ = _killed_build(tmp_path)
    (stale,) = stale_temporaries()
    assert stale.path.name.startswith(".tmp-") and stale.disk_bytes == 5000
    assert stale_temporaries(emb) == [stale] and stale_temporaries(make_toy_embedding()) == []
    assert remove_artefacts(emb) == [] and not stale.path.exists()  # removing this embedding's artefacts
    _killed_build(tmp_path)
    (again,) = stale_temporaries()
    assert remove_temporaries() == [again] and not again.path.exists() and stale_temporaries() == []


def test_the_next_build_of_the_artefact_removes_its_leftover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    emb, params = _killed_build(tmp_path)
    (stale,) = stale_temporaries()
    register_kind("test-hang", _quick_builder)  # type: ignore[arg-type]
    info = build_artefact(emb, "test-hang", params)
    assert info.files == {"data.bin": 10} and not stale.path.exists()
    assert open_artefact(emb, "test-hang", params) is not None


def test_a_running_build_is_never_listed_or_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    emb = make_tiny_embedding(10, 2)
    path = artefact_path(emb, "test-hang", {"a": 1})
    running = path.parent / f".tmp-{path.name}-{'0' * 32}"
    running.mkdir(parents=True)
    (running / "part.bin").write_bytes(b"z" * 7)
    with file_lock(path.parent / f"{path.name}.lock"):  # a build holds the artefact's lock
        assert stale_temporaries() == [] and remove_temporaries() == []
        assert running.exists()
    (stale,) = stale_temporaries()  # the lock is free: nobody is building it
    assert stale.path == running and stale.disk_bytes == 7


def test_cli_lists_and_removes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from deniable.cli import run_app

    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    _killed_build(tmp_path)
    emb_dir = tmp_path / "toy"
    make_toy_embedding().save(emb_dir)  # another embedding: --remove deletes every stale temporary
    capsys.readouterr()
    assert run_app(["prepare", "--list"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("(interrupted build)\t") and "interrupted build(s) left" in out.err
    assert run_app(["prepare", "--remove", "--embedding", str(emb_dir)]) == 0
    assert "removed 1 interrupted build(s)" in capsys.readouterr().err
    assert run_app(["prepare", "--list"]) == 0
    out = capsys.readouterr()
    assert out.out == "" and "interrupted" not in out.err
