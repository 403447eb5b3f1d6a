"""`deniable prepare` of several mechanisms builds them two at a time; progress bars share one display."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from conftest import make_tiny_embedding
from deniable._progress import progress
from deniable.artefacts import list_artefacts
from deniable.preparation import planned_artefacts, prepare


def test_several_mechanisms_are_prepared_concurrently_in_plan_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    emb = make_tiny_embedding(300, 8, seed=70)
    names = ["tem", "madlib", "brr"]
    options = {"epsilon": [5.0], "bits": 64, "index": "hnsw"}
    seen: set[str] = set()
    import deniable.artefacts as artefacts

    real = artefacts.build_artefact

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(artefacts, "build_artefact", spy)
    infos = prepare(emb, names, options=options, show_progress=True)  # bars of two threads at once
    plan = planned_artefacts(emb, names, options=options)
    assert [(i.kind, i.params) for i in infos] == plan  # the plan's order, whatever finished first
    assert len(seen) == 2  # two builder threads
    assert sorted(i.kind for i in list_artefacts(emb)) == sorted(k for k, _ in plan)
    again = prepare(emb, names, options=options, show_progress=False)  # verified copies, nothing built
    assert [i.path for i in again] == [i.path for i in infos]


def test_concurrent_and_nested_bars_share_one_display(capsys: pytest.CaptureFixture[str]) -> None:
    errors: list[BaseException] = []

    def work(name: str) -> None:
        try:
            with progress(10, f"outer {name}", enabled=True) as advance:
                with progress(5, f"inner {name}", enabled=True) as inner:
                    for _ in range(5):
                        inner(1)
                for _ in range(10):
                    advance(1)
        except BaseException as exc:  # rich refuses a second live display
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(str(i),)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    err = capsys.readouterr().err
    assert all(f"outer {i}" in err and f"inner {i}" in err for i in range(3))
    with progress(1, "after", enabled=True) as advance:  # the display was released
        advance(1)
