"""Time is an output (issue 27): in history-free mode a call's latency must not tell the input.

A small version of ``bench/bench_timing.py``: the Mann-Whitney AUC of per-call latency for
(a) kept vs changed single-token calls (TEM with prepared tables and totals, the service's
set-up) and (b) one word repeated vs distinct words (TEM, truncated_gumbel, exponential). The history-free
mechanism and a MUTANT with the early exit (or the dedup by distinct word) put back are timed
in the same loop, calls interleaved at random, so load on the machine hits both alike. For (a)
the history-free one must stay within a generous band around 0.5 and the mutant outside it;
for (b) the check is the effect size (median distinct / one) of the calls' CPU time, the work
(see _one_vs_distinct), since a cache residue remains that a classifier sees on a quiet
machine (see RATIO_FREE). Either way the mutant must be detected, so the check is not vacuous.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from conftest import make_tiny_embedding
from deniable import NotPrivateWarning, Privatizer
from deniable.mechanisms.exponential import ExponentialMechanism
from deniable.mechanisms.tem import TruncatedExponential
from deniable.mechanisms.tem._self_first import privatize_fast
from deniable.mechanisms.truncated_gumbel import TruncatedGumbel
from deniable.preparation import prepare

pytestmark = pytest.mark.slow

#: |AUC - 0.5| allowed for the history-free mechanism (the bench's target is 0.05; this is a
#: loaded CI machine) and required of the mutant.
BAND = 0.2
#: One vs many distinct words is checked by EFFECT SIZE, not by AUC: what history-free mode
#: removes is the dedup (work proportional to the number of distinct words: 4x-14x here), and
#: that is what these tests hold it to. What remains is small but systematic, so a classifier
#: still sees it on a quiet machine (measured in CI's clean clone, load 0.2: AUC 0.81 for TEM,
#: CPU caches; 0.997 for truncated_gumbel, whose faiss search of 300 distinct queries takes
#: about 1.4x that of one query repeated). docs/threat-model.md ("Timing in the library")
#: states this residue, and that the service's padded responses are what hide it.
#: The distinct/one ratio of median CPU times (see _one_vs_distinct) allowed for history-free mode,
#: and required of the mutant. Measured on a quiet machine: TEM 1.09 vs 2.7, truncated_gumbel 1.15 vs
#: 52, exponential 1.01 vs 7.7; beside 3 spinning processes on the 2 cores: TEM 1.07-1.10 vs 2.6-2.8,
#: truncated_gumbel 1.04-1.16 vs 300, exponential 1.02-1.03 vs 4.8-5.9. (Wall-time medians on a quiet
#: machine: TEM 1.07-1.09 vs 2.8-3.2, truncated_gumbel 1.33-1.43 vs 16-17, exponential 1.00 vs 8.8.)
RATIO_FREE = {"tem": 1.5, "truncated_gumbel": 2.5, "exponential": 1.5}
RATIO_MUTANT = {"tem": 2.0, "truncated_gumbel": 6.0, "exponential": 3.0}
#: The gap allowed between the median latencies of padded calls of two classes (seconds).
PAD_GAP_S = 50e-6
#: Calls of each class a padded comparison needs within one epoch of the padding's schedule.
MIN_EPOCH_CALLS = 12


def _ratio(by: dict[int, list[float]]) -> float:
    """Median latency of the distinct-words class over that of the one-word class."""
    return float(np.median(by[1]) / np.median(by[0]))


def _auc(neg: list[float], pos: list[float]) -> float:
    return float(mannwhitneyu(pos, neg).statistic) / (len(neg) * len(pos))


class EarlyExitTEM(TruncatedExponential):
    """The mutant: history-free, but with the fast path's self test (a kept word returns at once)."""

    def _privatize(self, flat: Any, rng: np.random.Generator) -> Any:
        return privatize_fast(self, flat, rng)


def _timed(
    mech: Any, ids: np.ndarray, rng: np.random.Generator, repeat: int, clock: Callable[[], float] = time.perf_counter
) -> tuple[float, np.ndarray]:
    """The smallest latency of ``repeat`` calls (filters out preemption), and the first call's output."""
    best, first = np.inf, None
    for _ in range(repeat):
        if hasattr(mech, "timed"):
            took, y = mech.timed(ids, rng)
        else:
            t0 = clock()
            y = mech.privatize(ids, rng)
            took = clock() - t0
        best = min(best, took)
        first = y if first is None else first
    assert first is not None
    return best, first


def _interleaved(
    mechs: dict[str, Any],
    make: Callable[[np.random.Generator], tuple[int, np.ndarray]],
    calls: int,
    repeat: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, dict[int, list[float]]]:
    """Latencies by mechanism and class; ``make(rng) -> (class or -1: labelled by the output, ids)``."""
    rng = np.random.default_rng(0)
    out: dict[str, dict[int, list[float]]] = {name: {0: [], 1: []} for name in mechs}
    names = list(mechs)
    for _ in range(calls):
        label, ids = make(rng)
        for name in rng.permutation(names).tolist():
            t, y = _timed(mechs[name], ids, rng, repeat, clock)
            lab = int(y[0] == ids[0]) if label < 0 else label
            out[name][lab].append(t)
    return out


@pytest.fixture(scope="module")
def tem_pair() -> dict[str, Any]:
    emb = make_tiny_embedding(3000, 4, seed=5)
    eps = 12.0  # about half the tokens are kept
    prepare(emb, ["tem"], options={"epsilon": eps}, show_progress=False)
    mechs = {
        "history_free": TruncatedExponential(emb, eps, history_free=True),
        "mutant": EarlyExitTEM(emb, eps, history_free=True),
    }
    for m in mechs.values():
        m.privatize(np.arange(50), np.random.default_rng(1))  # open the tables (public), warm up
    return mechs


def test_tem_kept_vs_changed_is_not_timed(tem_pair: dict[str, Any]) -> None:
    v = tem_pair["history_free"].embedding.size
    lat = _interleaved(tem_pair, lambda rng: (-1, rng.integers(0, v, size=1)), 1500)
    for name, by in lat.items():
        assert min(len(by[0]), len(by[1])) >= 100, (name, len(by[0]), len(by[1]))  # both classes occur
    free = _auc(lat["history_free"][0], lat["history_free"][1])
    mutant = _auc(lat["mutant"][0], lat["mutant"][1])
    assert abs(free - 0.5) < BAND, f"history-free TEM: latency tells kept from changed (AUC {free:.3f})"
    assert abs(mutant - 0.5) > BAND, f"the early-exit mutant was not detected (AUC {mutant:.3f})"


def _one_vs_distinct(mechs: dict[str, Any], size: int, tokens: int, calls: int) -> dict[str, tuple[float, float]]:
    """``name -> (median distinct / one, AUC)``: ``tokens`` copies of one word vs ``tokens`` distinct words.

    Timed in the process's CPU time, the WORK of a call, which is what history-free mode makes
    a function of the token count. Wall time on a loaded machine adds the scheduler's time
    slices: a call a few percent longer crosses one more slice boundary, so beside 3 spinning
    processes on 2 cores the cache residue of history-free TEM (1.07-1.10x in CPU time, and in
    wall time on a quiet machine) read 1.4-2.1x in wall-time medians and failed this check.
    (The padded test below is on the wall clock: that is what padding is about.)
    """

    def make(rng: np.random.Generator) -> tuple[int, np.ndarray]:
        label = int(rng.integers(2))
        ids = rng.choice(size, tokens, replace=False) if label else np.repeat(rng.integers(size), tokens)
        return label, ids

    lat = _interleaved(mechs, make, calls, repeat=3, clock=time.process_time)
    return {name: (_ratio(by), _auc(by[0], by[1])) for name, by in lat.items()}


def test_tem_one_vs_distinct_words_is_not_timed(tem_pair: dict[str, Any]) -> None:
    got = _one_vs_distinct(tem_pair, tem_pair["history_free"].embedding.size, 1000, 80)
    (free, auc), (mutant, _) = got["history_free"], got["mutant"]
    assert free < RATIO_FREE["tem"], f"history-free TEM: distinct words cost {free:.2f}x one word (AUC {auc:.3f})"
    assert mutant > RATIO_MUTANT["tem"], f"the dedup mutant was not detected ({mutant:.2f}x)"


def _gumbels(emb: Any) -> dict[str, TruncatedGumbel]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        mechs = {
            "history_free": TruncatedGumbel(emb, 8.0, history_free=True),
            "mutant": TruncatedGumbel(emb, 8.0),  # the default: dedup by distinct word
        }
    for m in mechs.values():
        m.privatize(np.arange(50), np.random.default_rng(1))  # build the public artefacts, warm up
    return mechs


def test_truncated_gumbel_one_vs_distinct_words_is_not_timed() -> None:
    emb = make_tiny_embedding(8000, 16, seed=6)
    got = _one_vs_distinct(dict(_gumbels(emb)), emb.size, 300, 40)
    (free, auc), (mutant, _) = got["history_free"], got["mutant"]
    assert free < RATIO_FREE["truncated_gumbel"], f"history-free truncated_gumbel: {free:.2f}x (AUC {auc:.3f})"
    assert mutant > RATIO_MUTANT["truncated_gumbel"], f"the dedup mutant was not detected ({mutant:.2f}x)"


def test_exponential_one_vs_distinct_words_is_not_timed() -> None:
    # the whole-vocabulary mechanisms (exponential, santext, santext_plus): history-free computes one
    # distance row per token; the default (the mutant here) one per distinct word
    emb = make_tiny_embedding(40000, 16, seed=8)  # large enough that a row, not a draw, is the cost
    mechs = {
        "history_free": ExponentialMechanism(emb, 8.0, history_free=True),
        "mutant": ExponentialMechanism(emb, 8.0),
    }
    for m in mechs.values():
        m.privatize(np.arange(50), np.random.default_rng(1))  # build the output set (public), warm up
    got = _one_vs_distinct(dict(mechs), emb.size, 200, 40)
    (free, auc), (mutant, _) = got["history_free"], got["mutant"]
    assert free < RATIO_FREE["exponential"], f"history-free exponential: {free:.2f}x (AUC {auc:.3f})"
    assert mutant > RATIO_MUTANT["exponential"], f"the dedup mutant was not detected ({mutant:.2f}x)"


class _Padded:
    """``privatize(ids, rng)`` through ``Privatizer(mech, pad_time=pad)`` (text in, text out), as a user calls it."""

    def __init__(self, mech: Any, pad: bool) -> None:
        self.priv = Privatizer(mech, pad_time=pad)
        self.emb = mech.embedding

    def timed(self, ids: np.ndarray, rng: np.random.Generator) -> tuple[float, np.ndarray]:
        """The latency of the Privatizer's call alone (the text is made before, read after)."""
        text = " ".join(self.emb.words(ids))
        t0 = time.perf_counter()
        out = self.priv.privatize(text, rng)
        took = time.perf_counter() - t0
        return took, np.asarray(self.emb.tokenizer.tokenize([out]).ids)

    def privatize(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.timed(ids, rng)[1]


def test_padding_hides_even_the_dedup_path() -> None:
    # the library's padded mode (Privatizer(pad_time=True)) on truncated_gumbel's default path,
    # whose work is proportional to the number of distinct words (16x here). Checked by effect
    # size, like history-free mode above: padded, the medians of one vs distinct words must agree
    # within PAD_GAP_S (the release is spun on the clock; what remains is a few microseconds,
    # caches after different work, which the minimum of repeated calls makes visible to a
    # classifier on a quiet machine but no observer of a real call can use); the same mechanism
    # unpadded is the twin that must show its 16x gap.
    # The schedule itself changes on a miss (work not done by its release time: on a loaded
    # machine, CI's once at 7.9 ms): its budget doubles, for every later call of both classes.
    # That change is the residue docs/threat-model.md states ("Time"), so the classes are
    # compared between changes: within the epoch (misses so far) that holds the most calls,
    # calling until it holds MIN_EPOCH_CALLS of each class.
    emb = make_tiny_embedding(8000, 16, seed=7)
    dedup = _gumbels(emb)["mutant"]
    mechs = {"padded": _Padded(dedup, True), "unpadded": _Padded(dedup, False)}
    for m in mechs.values():
        m.privatize(np.arange(300), np.random.default_rng(2))  # the padding's calibration (public words)
    timing = mechs["padded"].priv._timing()
    rng = np.random.default_rng(0)
    # name -> epoch -> class -> latencies (the smallest of 3 calls, with the epoch after it)
    lat: dict[str, dict[int, dict[int, list[float]]]] = {name: {} for name in mechs}

    def enough() -> bool:
        return any(min(len(by[0]), len(by[1])) >= MIN_EPOCH_CALLS for by in lat["padded"].values())

    calls = 0
    while calls < 40 or (not enough() and calls < 400):
        calls += 1
        label = int(rng.integers(2))
        ids = rng.choice(emb.size, 300, replace=False) if label else np.repeat(rng.integers(emb.size), 300)
        for name in rng.permutation(list(mechs)).tolist():
            took, epoch = min((mechs[name].timed(ids, rng)[0], timing.misses + timing.recoveries) for _ in range(3))
            lat[name].setdefault(epoch if name == "padded" else 0, {0: [], 1: []})[label].append(took)
    assert enough(), f"the padding's schedule changed {timing.misses + timing.recoveries} times in {calls} calls"
    padded = max(lat["padded"].values(), key=lambda by: min(len(by[0]), len(by[1])))
    gap = {
        name: float(np.median(by[1]) - np.median(by[0]))
        for name, by in (("padded", padded), ("unpadded", lat["unpadded"][0]))
    }
    assert abs(gap["padded"]) < PAD_GAP_S, f"padded: distinct words {gap['padded'] * 1e6:.1f} us apart from one word"
    assert gap["unpadded"] > 20 * PAD_GAP_S, f"the unpadded twin was not detected ({gap['unpadded'] * 1e6:.1f} us)"
