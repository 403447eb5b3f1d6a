"""Deadline-padded responses: the time of a work response depends on public quantities only.

Every mechanism's work takes a time that may depend on the words (which were kept, how
many are distinct, frequent or rare: issue 27). The mechanisms are being made
data-oblivious where they can be; this module is the service's defence in depth on top
of that: each response of a work route (``/v1/privatize`` and its alias, ``/v1/explain``)
is **held until a release time chosen from public quantities only**, with
``await asyncio.sleep`` (no thread, no CPU is held while waiting).

The schedule (predictive black-box mitigation, Askarov, Zhang and Myers, CCS 2010):

* A request belongs to a **size class** (half octaves: ``c = ceil(2 log2(size))``, sizes up
  to ``floor(2**(c/2))``) with ``size`` a public
  quantity (``/v1/privatize``: word tokens + texts of the request, which the response
  states anyway; ``/v1/explain``: 1 + the number of alternatives). One schedule per
  (offered mechanism instance, route, size class).
* Its **budget** starts from a calibration made at start-up, before ``/readyz``, on public
  inputs only (distinct vocabulary words spread from the most to the least frequent):
  ``margin * (t_1 + slope * top(c)) + floor_s`` where ``t_1`` is the slowest of a few one-token
  calls and ``slope`` the per-token cost measured on ``calibration_tokens`` tokens.
* A response is released at ``start + budget``. When the work is not done by then (a
  *miss*), the class's budget **doubles** (as many times as needed) and the response is
  released at the new ``start + budget``: release times are always points of the schedule,
  and the schedule changes only on a miss. So what the latency can reveal is bounded by the
  number of schedule changes, not by the number of requests. Budgets are monotone in the
  size class (a doubled class lifts every larger class to at least its budget) and never
  exceed the request's deadline (``timeout_s``).
* **Recovery** (so that one burst of load does not slow a long-lived service for ever): a
  class's budget halves again, never below its first budget, after ``recover_after`` (100)
  consecutive responses whose work took at most half of it, and at most once per
  ``recover_s`` (``pad_recover_s``, 60 s; 0: never, the strict schedule). So the schedule
  changes at most ``log2(timeout_s / first budget)`` times per class by misses, plus once
  per ``recover_s`` per class by recoveries, each of those a statement about 100 requests
  together. Misses and recoveries are counted (:attr:`Timing.misses`,
  :attr:`Timing.recoveries`) but neither logged nor served: they depend on inputs.
* A request stopped at its deadline (503) is answered at the deadline, not earlier.

What it does not hide: the time spent before the work starts (reading the body, parsing
JSON: functions of the body's length), a miss (one doubling, then hidden again), and the
CPU the work consumes (a concurrent request's latency may still feel it: only a
data-oblivious mechanism removes that). docs/service.md ("Timing") and
docs/threat-model.md say the same for operators.

``pad_responses = false`` in the configuration turns this off (the fastest answers;
NotPrivateWarning at start-up, and every response lists the time among what is not
protected).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

__all__ = ["Calibration", "Timing", "class_top", "size_class"]

#: Default safety factor on the calibrated time (the calibration runs alone; requests share the CPU).
MARGIN = 2.0
#: Added to every budget: the event loop's own jitter (scheduling, the thread hop, JSON).
FLOOR_S = 0.004


def size_class(size: int) -> int:
    """``ceil(2 * log2(size))`` (0 for sizes 0 and 1): half octaves, class ``c`` holds sizes up to ``class_top(c)``."""
    c = 0
    while class_top(c) < size:
        c += 1
    return c


def class_top(c: int) -> int:
    """The largest size of class ``c``: ``floor(2 ** (c / 2))``."""
    return math.isqrt(1 << c)


@dataclass(frozen=True)
class Calibration:
    """What the start-up measurement found for one (instance, route): seconds for one unit, and per extra unit."""

    t1: float
    slope: float

    def predict(self, size: int) -> float:
        return self.t1 + self.slope * max(0, size - 1)


@dataclass
class Timing:
    """The padding schedule of one worker process (see the module docstring).

    ``enabled=False`` keeps the calibration (the deadline checks use it) but holds nothing.
    """

    timeout_s: float
    enabled: bool = True
    margin: float = MARGIN
    floor_s: float = FLOOR_S
    clock: Callable[[], float] = time.monotonic
    calibrations: dict[Hashable, Calibration] = field(default_factory=dict)
    budgets: dict[tuple[Hashable, int], float] = field(default_factory=dict)
    #: a class's budget may halve again (not below its first budget) after ``recover_after``
    #: consecutive responses done within half of it, at most once per ``recover_s`` (0: never)
    recover_s: float = 60.0
    recover_after: int = 100
    misses: int = 0
    recoveries: int = 0
    _first: dict[tuple[Hashable, int], float] = field(default_factory=dict, repr=False)
    _changed: dict[tuple[Hashable, int], float] = field(default_factory=dict, repr=False)
    _on_time: dict[tuple[Hashable, int], int] = field(default_factory=dict, repr=False)

    # -- start-up -------------------------------------------------------------------------
    def calibrate(
        self, key: Hashable, measure: Callable[[int, int], float], *, units: int, probes: int = 3, repeats: int = 3
    ) -> Calibration:
        """Keep the time model of ``key`` from ``measure(n, probe)``: the wall time of ``n`` public units.

        ``probe`` selects among public inputs (e.g. a frequent, a middle and a rare word): the
        slowest probe is kept (the worst case over inputs), and of each probe the fastest of
        ``repeats`` runs (the cost of the input, not of whatever else the machine was doing:
        load is what the margin and the doubling absorb). One unit: ``probes`` probes;
        ``units`` units: one probe (it spans the public inputs already). Called before the
        service is ready, on public inputs only.
        """
        reps = max(1, repeats)
        t1 = max(min(measure(1, p) for _ in range(reps)) for p in range(max(1, probes)))
        slope = 0.0
        if units > 1:
            tn = min(measure(units, 0) for _ in range(reps))
            slope = max(0.0, (tn - t1) / (units - 1))
        cal = Calibration(t1=t1, slope=slope)
        self.calibrations[key] = cal
        return cal

    def predict(self, key: Hashable, size: int) -> float:
        """The calibrated time of ``size`` units (0 when ``key`` was not calibrated)."""
        cal = self.calibrations.get(key)
        return cal.predict(size) if cal is not None else 0.0

    # -- per request ----------------------------------------------------------------------
    def budget(self, key: Hashable, size: int) -> float:
        """The current budget of ``size``'s class (made from the calibration on first use)."""
        c = size_class(size)
        found = self.budgets.get((key, c))
        if found is None:
            found = min(self.timeout_s, self.margin * self.predict(key, class_top(c)) + self.floor_s)
            # monotone in the class: never below a smaller class's (possibly doubled) budget
            below = [b for (k, cc), b in self.budgets.items() if k == key and cc < c]
            found = max([found, *below])
            self.budgets[(key, c)] = found
            self._first[(key, c)] = found
        return found

    def release_at(self, key: Hashable, size: int, start: float, done: float) -> float:
        """The release time of work that started at ``start`` and ended at ``done`` (doubling on a miss)."""
        c = size_class(size)
        budget = self.budget(key, size)
        took = done - start
        if took > budget:
            while budget < took and budget < self.timeout_s:
                budget = min(self.timeout_s, budget * 2)
                self.misses += 1
            self.budgets[(key, c)] = budget
            for (k, cc), b in list(self.budgets.items()):  # larger classes: at least this budget
                if k == key and cc > c and b < budget:
                    self.budgets[(k, cc)] = budget
            self._changed[(key, c)] = done
            self._on_time[(key, c)] = 0
            return start + budget
        self._recover(key, c, budget, took, done)
        return start + budget

    def _recover(self, key: Hashable, c: int, budget: float, took: float, now: float) -> None:
        """Count an on-time response; halve the class's budget after enough of them (rate-limited)."""
        if self.recover_s <= 0:
            return
        count = self._on_time.get((key, c), 0) + 1 if took <= budget / 2 else 0
        self._on_time[(key, c)] = count
        first = self._first.get((key, c), budget)
        if (
            count < self.recover_after
            or budget <= first
            or now - self._changed.get((key, c), -math.inf) < self.recover_s
        ):
            return
        below = [b for (k, cc), b in self.budgets.items() if k == key and cc < c]
        self.budgets[(key, c)] = max([first, budget / 2, *below])
        self._changed[(key, c)] = now
        self._on_time[(key, c)] = 0
        self.recoveries += 1

    async def hold(self, key: Hashable, size: int, start: float) -> None:
        """Sleep until the release time of work of ``size`` units that started at ``start`` (now done)."""
        if not self.enabled:
            return
        target = self.release_at(key, size, start, self.clock())
        await sleep_until(target, self.clock)

    async def hold_until(self, target: float) -> None:
        """Sleep until ``target`` (a deadline: the answer of a stopped request)."""
        if self.enabled:
            await sleep_until(target, self.clock)

    def describe(self) -> dict[str, object]:
        """Public facts for ``/v1/mechanisms``: on or off (never a budget or a miss: they depend on past inputs)."""
        return {"padded": self.enabled}


async def sleep_until(target: float, clock: Callable[[], float] = time.monotonic) -> None:
    """``asyncio.sleep`` until ``clock() >= target`` (the loop's timer may wake a little early: loop)."""
    while True:
        left = target - clock()
        if left <= 0 or not math.isfinite(left):
            return
        await asyncio.sleep(left)
