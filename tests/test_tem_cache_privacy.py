"""Nothing TEM persists or remembers may depend on the private input (issue 13, items 1 and 2)."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import make_tiny_embedding, make_toy_embedding
from deniable import Privatizer
from deniable.mechanisms.tem import TruncatedExponential
from deniable.preparation import prepare
from test_tem_support import force_path


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root``: relative name -> contents (lock files are empty).

    A manifest's build time and date are left out (they differ between two builds), and so are
    the inode and mtime in a verification stamp (file-system facts of the build, not of any input).
    """
    if not root.exists():
        return {}
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if p.name == "manifest.json":
                m = json.loads(data)
                del m["build_seconds"], m["created"]
                data = json.dumps(m, sort_keys=True).encode()
            elif p.name == "verified.json":
                stamp = {
                    k: {f: v for f, v in e.items() if f not in ("inode", "mtime_ns")}
                    for k, e in json.loads(data).items()
                }
                data = json.dumps(stamp, sort_keys=True).encode()
            out[str(p.relative_to(root))] = data
    return out


def _privatize_in(cache: Path, monkeypatch: pytest.MonkeyPatch, ids: np.ndarray, prepared: bool) -> dict[str, bytes]:
    monkeypatch.setenv("DENIABLE_CACHE", str(cache))
    emb = make_tiny_embedding(300, 3, seed=40)
    if prepared:
        prepare(emb, ["tem"], show_progress=False)
    before = snapshot(cache)
    mech = TruncatedExponential(emb, 6.0, gamma=1.0)
    mech.privatize(np.repeat(ids, 50), np.random.default_rng(1))
    mech.flush_cache()
    del mech  # the old code also flushed pending tables when the mechanism went away
    gc.collect()
    after = snapshot(cache)
    assert after == before  # privatizing wrote nothing
    return after


@pytest.mark.parametrize("path", ["default", "table", "knn", "shells"])
@pytest.mark.parametrize("prepared", [False, True])
def test_the_cache_does_not_depend_on_the_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, path: str, prepared: bool
) -> None:
    if path != "default":
        force_path(monkeypatch, path)
    a = _privatize_in(tmp_path / "a", monkeypatch, np.array([3, 17, 250]), prepared)
    b = _privatize_in(tmp_path / "b", monkeypatch, np.array([5, 60, 140, 299]), prepared)
    assert a == b  # file names and contents
    # no file holds a word id list other than the whole-vocabulary build's
    for name in a:
        assert ".words." not in name and "shard" not in name


def test_the_cli_leaves_no_trace_of_the_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deniable.cli import run_app

    emb_dir = tmp_path / "toy"
    make_toy_embedding().save(emb_dir)
    snaps = []
    for j, text in enumerate(["the hockey puck was great\n", "nasa launched a rocket into orbit\n"]):
        cache = tmp_path / f"cache{j}"
        monkeypatch.setenv("DENIABLE_CACHE", str(cache))
        assert run_app(["prepare", "--embedding", str(emb_dir), "-q"]) == 0
        prepared = snapshot(cache)
        src = tmp_path / f"in{j}.txt"
        src.write_text(text * 30, encoding="utf-8")
        args = ["privatize", str(src), "-o", str(tmp_path / f"out{j}.txt"), "--mechanism", "tem", "-q"]
        assert run_app([*args, "--embedding", str(emb_dir), "--epsilon", "8"]) == 0
        after = snapshot(cache)
        # what the run added is the stored strength point (public: embedding, mechanism, epsilon)
        added = {name for name in after if name not in prepared or after[name] != prepared[name]}
        assert added and all("/prepared/calibration/" in name for name in added), sorted(added)
        snaps.append(after)
    assert snaps[0] == snaps[1]  # file names and contents: the same whatever the input


# -- history-free mode -----------------------------------------------------------------------------


def _state(mech: TruncatedExponential) -> tuple[int, int, int, dict[int, float]]:
    return (len(mech._store), len(mech._knn), mech.cache_info()["memory_bytes"], dict(mech._totals))  # type: ignore[attr-defined]


def _count_screens(monkeypatch: pytest.MonkeyPatch, mech: TruncatedExponential) -> list[int]:
    calls: list[int] = []
    geo = mech._geo  # type: ignore[attr-defined]
    original = geo.screen

    def counting(q: np.ndarray, out: np.ndarray) -> None:
        calls.append(int(np.asarray(q).size))
        original(q, out)

    monkeypatch.setattr(geo, "screen", counting)
    return calls


@pytest.mark.parametrize("path", ["table", "knn", "shells"])
@pytest.mark.parametrize("prepared", [False, True])
def test_history_free_keeps_no_per_word_state(monkeypatch: pytest.MonkeyPatch, path: str, prepared: bool) -> None:
    opts = force_path(monkeypatch, path)
    emb = make_tiny_embedding(300, 3, seed=41)
    if prepared:
        prepare(emb, ["tem"], show_progress=False)
    rng = np.random.default_rng(2)
    mech = TruncatedExponential(emb, 6.0, gamma=1.0, history_free=True, **opts)  # type: ignore[arg-type]
    mech.cache_info()  # load the prepared tables (input-independent) before measuring
    empty = _state(mech)
    calls = _count_screens(monkeypatch, mech)
    work = []
    for _ in range(3):
        calls.clear()
        mech.privatize(np.array([7, 7, 123]), rng)
        assert _state(mech) == empty
        work.append(list(calls))
    assert work[0] == work[1] == work[2]  # the same work on the first and later calls


def test_without_history_free_the_second_call_is_cheaper(monkeypatch: pytest.MonkeyPatch) -> None:
    # the measurement above can fail: the default mode remembers words (memory only)
    opts = force_path(monkeypatch, "table")
    emb = make_tiny_embedding(300, 3, seed=41)
    mech = TruncatedExponential(emb, 6.0, gamma=1.0, **opts)  # type: ignore[arg-type]
    calls = _count_screens(monkeypatch, mech)
    mech.privatize(np.array([7, 123]), np.random.default_rng(3))
    first = sum(calls)
    calls.clear()
    mech.privatize(np.array([7, 123]), np.random.default_rng(3))
    assert first > 0 and sum(calls) == 0 and _state(mech)[0] > 0


def test_history_free_refuses_per_word_precompute() -> None:
    from deniable import InvalidParameterError

    mech = TruncatedExponential(make_tiny_embedding(50, 3), 4.0, history_free=True)
    with pytest.raises(InvalidParameterError, match="history-free"):
        mech.precompute([1, 2])
    with pytest.raises(InvalidParameterError, match="history_free"):
        TruncatedExponential(make_tiny_embedding(50, 3), 4.0, history_free="yes")  # type: ignore[arg-type]


def test_history_free_privatizer_output_is_valid() -> None:
    emb = make_toy_embedding()
    mech = TruncatedExponential(emb, 10.0, history_free=True)
    out = Privatizer(mech, random_state=np.random.default_rng(5)).privatize("the hockey game was great")
    assert len(out.split()) == 5


def test_history_free_prefaults_the_shared_prepared_tables() -> None:
    # rows faulted in on demand would time which words earlier calls read: history-free mode
    # touches every page once at open, and still shares one mapped copy between processes
    emb = make_tiny_embedding(80, 3, seed=42)
    prepare(emb, show_progress=False)
    shared = TruncatedExponential(emb, 4.0)
    private = TruncatedExponential(emb, 4.0, history_free=True)
    assert shared.cache_info()["disk_bytes"] == private.cache_info()["disk_bytes"] > 0
    for mech in (shared, private):  # both read-only memory maps of the same files
        assert not mech._prepared.knn.dist.flags.writeable  # type: ignore[attr-defined]
        assert not mech._prepared.knn.dist.flags.owndata  # type: ignore[attr-defined]
    assert private._prepared.knn.prefaulted and not shared._prepared.knn.prefaulted  # type: ignore[attr-defined]
