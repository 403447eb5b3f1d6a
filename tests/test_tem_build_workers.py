"""TEM's prepared builds give the same bytes whatever the number of worker threads (issue 43)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import deniable
from conftest import make_tiny_embedding
from deniable.mechanisms.tem import _far, _shared, _tables


def _digests(root: Path) -> dict[str, str]:
    """Every artefact data file under ``root`` (by kind and name; the store's key folders vary in name only)."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*.npy")):
        out[f"{path.parent.name}/{path.name}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("metric", ["euclidean", "angular"])
def test_one_two_and_three_workers_write_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, metric: str
) -> None:
    monkeypatch.setattr(_tables, "_TILE", 128)  # several rows of tiles: the workers share them
    monkeypatch.setattr(_far, "_TILE", 96)
    emb = make_tiny_embedding(1500, 8, seed=11)
    found = []
    try:
        for workers in (1, 2, 3):
            _shared.set_build_workers(workers)
            cache = tmp_path / f"w{workers}"
            monkeypatch.setenv("DENIABLE_CACHE", str(cache))
            deniable.prepare(emb, ["tem"], metric=metric, options={"epsilon": 1.0}, show_progress=False)
            found.append(_digests(cache))
    finally:
        _shared.set_build_workers(None)
    names = {name.split("/")[1] for name in found[0]}
    assert {"ids.npy", "dist.npy", "bounds.npy", "totals.npy"} <= names  # k-NN tables, far bounds, totals
    assert found[0] == found[1] == found[2]


def test_build_workers_follow_the_thread_policy() -> None:
    from deniable._threads import usable_cores

    assert _shared.build_workers() == usable_cores()
    with pytest.raises(ValueError, match="at least 1"):
        _shared.set_build_workers(0)
