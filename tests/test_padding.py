"""The library's padded mode (``Privatizer(pad_time=True)``, :mod:`deniable._padding`).

A fake mechanism whose cost grows with the number of *distinct* words (the leak of issue 27,
made large and deterministic with sleeps) is timed on texts of the same token count: one
word repeated vs distinct words. Padded, a latency classifier cannot tell the two apart
(AUC near 0.5, medians within a millisecond); its twin without padding must tell them apart
(AUC near 1), so the test can fail.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt
import pytest

from deniable import Embedding, Privatizer
from deniable._padding import Timing, size_class
from fake_mechanisms import FakeMechanism

#: seconds of work per distinct word of a call (the fake's data-dependent cost)
PER_DISTINCT = 0.0015
TOKENS = 12
CALLS = 16  # per class


@dataclass(frozen=True, eq=False)
class DistinctCost(FakeMechanism):
    """Identity, after work proportional to the number of distinct words (a dedup path's cost)."""

    name: ClassVar[str] = "distinct_cost"

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        time.sleep(PER_DISTINCT * len(np.unique(ids)))
        return ids.copy()


def _auc(neg: list[float], pos: list[float]) -> float:
    """Mann-Whitney AUC: the chance a latency of ``pos`` exceeds one of ``neg`` (ties count half)."""
    a, b = np.asarray(pos)[:, None], np.asarray(neg)[None, :]
    return float(((a > b).sum() + 0.5 * (a == b).sum()) / a.size / b.size)


def _latencies(priv: Privatizer, emb: Embedding) -> tuple[list[float], list[float]]:
    one = " ".join(["w0"] * TOKENS)
    distinct = " ".join(f"w{i}" for i in range(TOKENS))
    lat: dict[int, list[float]] = {0: [], 1: []}
    for label in np.random.default_rng(0).permutation(np.repeat([0, 1], CALLS)):
        t0 = time.perf_counter()
        priv.privatize(distinct if label else one)
        lat[int(label)].append(time.perf_counter() - t0)
    return lat[0], lat[1]


@pytest.fixture(scope="module")
def emb() -> Embedding:
    words = [f"w{i}" for i in range(64)]
    return Embedding(words, np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32), name="pad")


def test_padded_calls_do_not_reveal_distinct_words(emb: Embedding) -> None:
    priv = Privatizer(DistinctCost(emb), pad_time=True)
    priv.privatize("w1 w2")  # calibrates the schedule on public words (and one miss at most per class)
    one, distinct = _latencies(priv, emb)
    assert abs(_auc(one, distinct) - 0.5) < 0.25
    assert abs(float(np.median(distinct) - np.median(one))) < 0.001
    # every release is a point of the schedule of the token count's class
    timing = priv._timing()
    assert ("privatize", size_class(TOKENS)) in timing.budgets


def test_its_unpadded_twin_reveals_them(emb: Embedding) -> None:
    one, distinct = _latencies(Privatizer(DistinctCost(emb)), emb)
    assert _auc(one, distinct) > 0.9
    assert float(np.median(distinct) - np.median(one)) > 0.5 * PER_DISTINCT * (TOKENS - 1)


def test_the_schedule_doubles_on_a_miss_and_never_depends_on_which_words() -> None:
    now = [0.0]
    timing = Timing(timeout_s=float("inf"), clock=lambda: now[0], recover_s=0)
    timing.calibrate("k", lambda n, probe: 0.001 * n, units=8)
    first = timing.budget("k", 4)
    assert timing.release_at("k", 4, 10.0, 10.0 + first / 2) == 10.0 + first  # on time: the budget
    assert timing.release_at("k", 4, 20.0, 20.0 + first * 3) == 20.0 + first * 4  # a miss: doubled twice
    assert timing.misses == 2
    assert timing.budget("k", 9) >= first * 4  # larger classes lifted with it


def test_the_fastest_path_stays_the_default(emb: Embedding) -> None:
    priv = Privatizer(DistinctCost(emb))
    assert priv.pad_time is False
    priv.privatize("w1 w2")
    assert "_padding" not in priv.__dict__  # no schedule, no calibration
