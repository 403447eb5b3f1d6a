"""Deadline padding: the time of a call depends on public quantities only (issue 27).

Owns the release schedule shared by the service (every work response) and the library's
``Privatizer(pad_time=True)``: predictive black-box mitigation (Askarov, Zhang and Myers,
CCS 2010). A call of public ``size`` (its number of word tokens) is released at
``start + budget`` of its size class (half octaves). A class's budget is the largest of its
own and of every smaller class's (monotone in the size); its own starts from a calibration
on public inputs (``margin * predicted + floor_s``, its *idle* value), doubles on a miss (work
not done by then) and is back at its idle value once ``recover_s`` have passed without a miss
in it (issue 40: a burst or a spell of CPU contention no longer inflates a budget for good).
So, once the misses stop, every class -- whether it gets traffic or not -- is back at its
idle budget within ``recover_s`` of the last miss (in the service: within ``timeout_s +
recover_s`` of the end of the load). A budget is a function of the calibration, the clock and the times
and sizes of past misses (public load history), never of a call's words. Release times are
points of the schedule, which changes only on a miss or a recovery, so the latency reveals
at most those changes, never which words, whether they were kept, or how many were distinct.
docs/threat-model.md ("Time") has the measured AUCs and what padding does not hide.

May import: the standard library only.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

__all__ = ["FLOOR_S", "MARGIN", "RECOVER_S", "Calibration", "Timing", "class_top", "size_class", "wait_until"]


#: Default safety factor on the calibrated time (the calibration runs alone; requests share the CPU).
MARGIN = 2.0
#: Added to every budget: the event loop's own jitter (scheduling, the thread hop, JSON).
FLOOR_S = 0.004
#: The library's final spin before a release time (see :attr:`Timing.spin_s`).
SPIN_S = 0.0005
#: Seconds without a miss after which a class's budget is back at its idle (calibrated) value.
RECOVER_S = 30.0


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
    """The padding schedule of one worker process or one Privatizer (see the module docstring).

    ``enabled=False`` keeps the calibration (the deadline checks use it) but holds nothing.
    ``timeout_s``: no budget exceeds it (the service's deadline; ``math.inf`` in the library).
    """

    timeout_s: float
    enabled: bool = True
    margin: float = MARGIN
    floor_s: float = FLOOR_S
    clock: Callable[[], float] = time.monotonic
    #: how :meth:`wait` sleeps (the library: ``time.sleep``; tests: a virtual clock)
    sleep: Callable[[float], None] = time.sleep
    #: :meth:`wait` sleeps until this long before the release time, then spins on the clock: a
    #: sleep's wake-up is late by a jitter that depends on how long it slept (that is, on how
    #: fast the work was), a spin is not (0: sleep all the way, e.g. on a virtual clock)
    spin_s: float = SPIN_S
    calibrations: dict[Hashable, Calibration] = field(default_factory=dict)
    #: each class's own budget (raised by its misses); :meth:`budget` is the effective one
    budgets: dict[tuple[Hashable, int], float] = field(default_factory=dict)
    #: a class's own budget is back at its idle value once this many seconds passed without a
    #: miss in it (0: never, the strict schedule: budgets only grow)
    recover_s: float = RECOVER_S
    misses: int = 0
    recoveries: int = 0
    _changed: dict[tuple[Hashable, int], float] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

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

    def idle(self, key: Hashable, size: int) -> float:
        """The idle budget of ``size``'s class: from the calibration alone (no load history), monotone in the size."""
        return min(self.timeout_s, self.margin * self.predict(key, class_top(size_class(size))) + self.floor_s)

    # -- per request ----------------------------------------------------------------------
    def budget(self, key: Hashable, size: int, now: float | None = None) -> float:
        """The budget of ``size``'s class at ``now`` (default: the clock): its own, or a smaller class's if larger."""
        with self._lock:
            return self._effective(key, size_class(size), self.clock() if now is None else now)

    def _own(self, key: Hashable, c: int, now: float) -> float:
        """Class ``c``'s own budget at ``now``: made idle on first use, idle again ``recover_s`` after its last miss."""
        found = self.budgets.get((key, c))
        if found is None:
            found = self.budgets[(key, c)] = self.idle(key, class_top(c))
        elif self.recover_s > 0 and now - self._changed.get((key, c), -math.inf) >= self.recover_s:
            idle = self.idle(key, class_top(c))
            if found > idle:
                found = self.budgets[(key, c)] = idle
                self.recoveries += 1
        return found

    def _effective(self, key: Hashable, c: int, now: float) -> float:
        own = self._own(key, c, now)
        smaller = [cc for (k, cc) in self.budgets if k == key and cc < c]
        return max([own, *(self._own(key, cc, now) for cc in smaller)])

    def release_at(self, key: Hashable, size: int, start: float, done: float) -> float:
        """The release time of work that started at ``start`` and ended at ``done`` (doubling on a miss).

        The budget is the one at ``start`` (a public time), never one chosen by when the work ended.
        """
        with self._lock:  # one schedule, shared by the threads of a process
            c = size_class(size)
            budget = self._effective(key, c, start)
            took = done - start
            if took > budget:
                while budget < took and budget < self.timeout_s:
                    budget = min(self.timeout_s, budget * 2)
                    self.misses += 1
                self.budgets[(key, c)] = budget  # larger classes follow (the effective budget is monotone)
                self._changed[(key, c)] = done
            return start + budget

    def wait(self, key: Hashable, size: int, start: float) -> None:
        """Block until the release time of work of ``size`` units that started at ``start`` (now done)."""
        if self.enabled:
            wait_until(self.release_at(key, size, start, self.clock()), self.clock, self.sleep, self.spin_s)

    def describe(self) -> dict[str, object]:
        """Public facts for ``/v1/mechanisms``: on or off (never a budget or a miss: they depend on past inputs)."""
        return {"padded": self.enabled}


def wait_until(
    target: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    spin_s: float = 0.0,
) -> None:
    """``sleep`` until ``spin_s`` before ``clock() >= target``, then spin (a sleep may also end early: loop)."""
    while True:
        left = target - clock()
        if left <= 0 or not math.isfinite(left):
            return
        if left > spin_s:
            sleep(left - spin_s)
