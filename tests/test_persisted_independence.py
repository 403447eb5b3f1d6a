"""No instance that touched input computes anything persisted (issue 40, item 2, and its class).

Every statistic deniable stores or reports beside a release -- a mechanism's strength point
(the one-point calibration artefact ``calibration/*/table.json``, copied into every manifest
as ``privacy``), the whole calibration table, and every other file a mechanism leaves under
the cache folder -- must be a function of public data only: the same bytes whatever the
process privatized before. Each test here privatizes different inputs first (nothing,
"leukemia diagnosis", "the", a long random text), each in a fresh cache folder with a fresh
instance, then computes and stores the statistic, and compares the bytes.

Before the fix, the strength point was measured by the very instance that had privatized the
input (0.998891 after nothing or "leukemia diagnosis", 0.998572 after "the", on GloVe with
TEM): :class:`Remembering` below is a mechanism whose draws depend on what it met, and its
stored point must not.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pytest

from deniable import Embedding
from deniable.calibrate.table import obtain_table, strength
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.registry import MechanismInfo, mechanism_names, register, unregister
from fake_mechanisms import FakeMechanism
from test_tem_cache_privacy import snapshot

#: the inputs privatized first ("" = nothing)
HISTORIES = ("", "leukemia diagnosis", "the", "long")


def _embedding() -> Embedding:
    """300 words in 4-d: "the" first (the most frequent rank of the reference text), then the
    two private words, then w0..w296."""
    words = ["the", "leukemia", "diagnosis"] + [f"w{i}" for i in range(297)]
    vec = np.random.default_rng(11).normal(size=(len(words), 4)).astype(np.float32)
    return Embedding(words, vec, name="persisted")


def _input_ids(emb: Embedding, history: str) -> npt.NDArray[np.int64]:
    if history == "long":
        return np.random.default_rng(99).integers(0, emb.size, size=5000).astype(np.int64)
    return emb.ids(history.split()).astype(np.int64)


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``use(name)``: a new empty cache folder (set as DENIABLE_CACHE), returned."""

    def use(name: str) -> Path:
        root = tmp_path / name
        monkeypatch.setenv("DENIABLE_CACHE", str(root))
        return root

    yield use


def _after(
    name: str, emb: Embedding, history: str, epsilon: float, **options: Any
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A fresh ``name`` instance privatizes ``history``, then states its strength: (describe, cache files)."""
    import os

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mech = make_mechanism(name, emb, epsilon, **options)
        ids = _input_ids(emb, history)
        if ids.size:
            mech.privatize(np.repeat(ids, 20), np.random.default_rng(1))
        described = strength(mech).describe()
    return described, snapshot(Path(os.environ["DENIABLE_CACHE"]))


def _same_whatever_the_history(fresh_cache: Any, name: str, epsilon: float, **options: Any) -> None:
    emb = _embedding()
    seen = []
    for i, history in enumerate(HISTORIES):
        fresh_cache(f"{name}-{epsilon}-{i}")
        seen.append(_after(name, emb, history, epsilon, **options))
    first = seen[0]
    assert any(name.startswith("calibration/") or "/calibration/" in name for name in first[1])  # it was stored
    for history, other in zip(HISTORIES[1:], seen[1:], strict=True):
        assert other[0] == first[0], f"the strength stated after privatizing {history!r} differs"
        assert other[1].keys() == first[1].keys(), f"other files under the cache after {history!r}"
        for path in first[1]:
            assert other[1][path] == first[1][path], f"{path} differs after privatizing {history!r}"


# every registered mechanism at the library's defaults (the ones the CLI's first run stores)
_SLOWER = {"brr", "custext_plus"}  # they build prepared artefacts first (a second or two each)


@pytest.mark.parametrize("name", [n for n in mechanism_names() if n not in _SLOWER])
def test_every_mechanism_stores_the_same_strength_whatever_it_privatized(fresh_cache: Any, name: str) -> None:
    _same_whatever_the_history(fresh_cache, name, 3.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_SLOWER))
def test_the_slower_mechanisms_too(fresh_cache: Any, name: str) -> None:
    _same_whatever_the_history(fresh_cache, name, 3.0)


@pytest.mark.parametrize("epsilon", [0.5, 4.0, 12.0, 40.0])
@pytest.mark.parametrize("options", [{}, {"gamma": 0.8}, {"metric": "angular"}])
def test_tem_strength_at_every_regime(fresh_cache: Any, epsilon: float, options: dict[str, Any]) -> None:
    """TEM's lazy tables (ball, k-NN, shells, uniform) at small and large epsilon."""
    _same_whatever_the_history(fresh_cache, "tem", epsilon, **options)


def test_tem_strength_with_prepared_tables(fresh_cache: Any) -> None:
    from deniable.preparation import prepare

    emb = _embedding()
    seen = []
    for i, history in enumerate(HISTORIES):
        fresh_cache(f"prepared-{i}")
        prepare(emb, ["tem"], options={"epsilon": [6.0]}, show_progress=False)
        seen.append(_after("tem", emb, history, 6.0))
    for other in seen[1:]:
        assert other == seen[0]


def test_the_calibration_table_after_privatizing(fresh_cache: Any) -> None:
    """The whole table (``deniable prepare --calibration``; ``epsilon="auto"`` builds it when missing)."""
    import os

    emb = _embedding()
    seen = []
    for i, history in enumerate(HISTORIES):
        fresh_cache(f"table-{i}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mech = make_mechanism("tem", emb, 2.0)
            ids = _input_ids(emb, history)
            if ids.size:
                mech.privatize(np.repeat(ids, 20), np.random.default_rng(1))
            table = obtain_table(emb, "tem", {}, tokens=512)
        seen.append((table.to_json(), snapshot(Path(os.environ["DENIABLE_CACHE"]))))
    for other in seen[1:]:
        assert other == seen[0]


@pytest.mark.parametrize(("name", "method"), [("tem", "exact"), ("madlib", "held-out")])
def test_the_attacker_recovery_curve_after_privatizing(fresh_cache: Any, name: str, method: str) -> None:
    """Issue 41: the recovery each point records (exact, or held out from the point's own draws) is a
    function of public data only: the same table bytes whatever the instance privatized before."""
    import os

    emb = _embedding()
    seen = []
    for i, history in enumerate(HISTORIES):
        fresh_cache(f"recovery-{name}-{i}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mech = make_mechanism(name, emb, 3.0)
            ids = _input_ids(emb, history)
            if ids.size:
                mech.privatize(np.repeat(ids, 20), np.random.default_rng(1))
            table = obtain_table(emb, name, {}, tokens=512)
            described = strength(mech).describe()
        assert all(p.recovery_method == method and p.recovered is not None for p in table.points)
        assert "recovered" in described and "recovered_content" in described
        seen.append((table.to_json(), described, snapshot(Path(os.environ["DENIABLE_CACHE"]))))
    for other in seen[1:]:
        assert other == seen[0]


def test_the_manifest_privacy_block(fresh_cache: Any, tmp_path: Path) -> None:
    """What every manifest copies: ``privacy`` (the strength) after the same privatizer met other text."""
    from deniable import Privatizer
    from deniable.api import privatize_file

    emb = _embedding()
    src = tmp_path / "public.txt"
    src.write_text("w1 w2 w3\nw4 w5\n", encoding="utf-8")
    blocks = []
    for i, history in enumerate(HISTORIES):
        fresh_cache(f"manifest-{i}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            priv = Privatizer(make_mechanism("tem", emb, 12.0), random_state=None)
            if history:
                text = history if history != "long" else " ".join(emb.words(_input_ids(emb, "long")))
                priv.privatize(text)
            dst = tmp_path / f"out-{i}.txt"
            privatize_file(src, dst, priv)
        manifest = json.loads(dst.with_name(dst.name + ".manifest.json").read_text(encoding="utf-8"))
        blocks.append(manifest["privacy"])
    assert "recovered" in blocks[0]  # the attacker's recovery is part of what every manifest states
    for block in blocks[1:]:
        assert block == blocks[0]


# -- a mechanism whose draws depend on what it met: its stored point must not --------------


@dataclass(frozen=True, eq=False)
class Remembering(FakeMechanism):
    """Keeps each token unchanged with probability 1/2, else moves it by one more than the number
    of distinct words it has met (NOT private: a test double for per-instance state)."""

    name: ClassVar[str] = "remembering"
    _met: set[int] = field(default_factory=set, init=False, repr=False)

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        shift = 1 + len(self._met)
        self._met.update(ids.tolist())
        keep = rng.random(ids.size) < 0.5
        return np.where(keep, ids, (ids + shift) % self.embedding.size)


def test_a_mechanism_with_memory_states_the_same_strength(fresh_cache: Any) -> None:
    register("remembering", Remembering, info=MechanismInfo(summary="test double"))
    try:
        emb = _embedding()
        seen = []
        for i, history in enumerate(HISTORIES):
            fresh_cache(f"remembering-{i}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mech = Remembering(emb, 3.0)
                ids = _input_ids(emb, history)
                if ids.size:
                    mech.privatize(ids, np.random.default_rng(1))
                seen.append(strength(mech).describe())
        for other in seen[1:]:
            assert other == seen[0]
    finally:
        unregister("remembering")
