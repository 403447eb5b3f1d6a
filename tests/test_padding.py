"""The library's padded mode (``Privatizer(pad_time=True)``, :mod:`deniable._padding`).

A fake mechanism whose cost grows with the number of *distinct* words (the leak of issue 27)
runs on a virtual clock: its work advances the clock by ``PER_DISTINCT`` per distinct word,
and the schedule's sleeps advance it by what they ask. So the test is exact and does not
depend on the machine's load: padded, a text of one word repeated and a text of as many
distinct words return at the same virtual time (the release time of their token count's
class); its twin without padding returns at different times, so the test can fail.
tests/statistical/test_timing_slow.py times a real mechanism on the real clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt
import pytest

from deniable import Embedding, Privatizer
from deniable._padding import Timing, size_class
from fake_mechanisms import FakeMechanism

#: virtual seconds of work per distinct word of a call (the fake's data-dependent cost)
PER_DISTINCT = 0.0015
TOKENS = 12


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


CLOCK = VirtualClock()


@dataclass(frozen=True, eq=False)
class DistinctCost(FakeMechanism):
    """Identity, after (virtual) work proportional to the number of distinct words (a dedup path's cost)."""

    name: ClassVar[str] = "distinct_cost"

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        CLOCK.now += PER_DISTINCT * len(np.unique(ids))
        return ids.copy()


@pytest.fixture(scope="module")
def emb() -> Embedding:
    words = [f"w{i}" for i in range(300)]
    return Embedding(words, np.random.default_rng(0).normal(size=(300, 3)).astype(np.float32), name="pad")


def _virtual(priv: Privatizer) -> Timing:
    """Give ``priv`` a schedule on the virtual clock, calibrated as the library does (public words)."""
    timing = Timing(timeout_s=float("inf"), clock=CLOCK, sleep=CLOCK.sleep, spin_s=0)

    def measure(n: int, probe: int) -> float:
        before = CLOCK.now
        priv._measure(n, probe)  # the library's own public calibration texts
        return CLOCK.now - before

    timing.calibrate("privatize", measure, units=256)
    object.__setattr__(priv, "_padding", timing)
    return timing


def _latencies(priv: Privatizer) -> dict[str, list[float]]:
    texts = {"one": " ".join(["w0"] * TOKENS), "distinct": " ".join(f"w{i}" for i in range(TOKENS))}
    lat: dict[str, list[float]] = {"one": [], "distinct": []}
    for label in np.random.default_rng(0).permutation(["one", "distinct"] * 10):
        before = CLOCK.now
        out = priv.privatize(texts[label])
        lat[label].append(CLOCK.now - before)
        assert out == texts[label].capitalize()  # the text went through (the fake is the identity)
    return lat


def test_padded_calls_do_not_reveal_distinct_words(emb: Embedding) -> None:
    priv = Privatizer(DistinctCost(emb), pad_time=True)
    timing = _virtual(priv)
    lat = _latencies(priv)
    budget = timing.budgets[("privatize", size_class(TOKENS))]
    assert np.allclose(lat["one"] + lat["distinct"], budget, rtol=0, atol=1e-9)  # one release time for both
    assert timing.misses == 0
    assert budget >= PER_DISTINCT * TOKENS  # the budget covers the worst case of its class


def test_its_unpadded_twin_reveals_them(emb: Embedding) -> None:
    lat = _latencies(Privatizer(DistinctCost(emb)))
    assert min(lat["distinct"]) > max(lat["one"])  # every distinct-words call is slower
    assert np.median(lat["distinct"]) - np.median(lat["one"]) == pytest.approx(PER_DISTINCT * (TOKENS - 1))


def test_a_miss_doubles_the_class_and_every_later_call_of_it_waits_as_long(emb: Embedding) -> None:
    priv = Privatizer(DistinctCost(emb), pad_time=True)
    timing = _virtual(priv)
    first = timing.budget("privatize", TOKENS)
    timing.budgets[("privatize", size_class(TOKENS))] = first = PER_DISTINCT * 2  # too small for 12 distinct
    lat = _latencies(priv)
    assert timing.misses >= 1
    # release times are points of the schedule: the budgets it went through, nothing in between
    points = {round(t, 9) for t in lat["one"] + lat["distinct"]}
    assert len(points) <= 1 + timing.misses
    assert max(lat["one"] + lat["distinct"]) <= 2**timing.misses * first + 1e-12


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
    priv = Privatizer(DistinctCost(emb))  # the default: no schedule
    assert priv.pad_time is False
    priv.privatize("w1 w2")
    assert "_padding" not in priv.__dict__  # no schedule, no calibration
