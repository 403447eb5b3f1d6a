"""Deadline-padded responses: the time of a work response depends on public quantities only.

Every mechanism's work takes a time that may depend on the words (which were kept, how
many are distinct, frequent or rare: issue 27). The mechanisms are being made
data-oblivious where they can be; this module is the service's defence in depth on top
of that: each response of a work route (``/v1/privatize`` and its alias, ``/v1/explain``)
is **held until a release time chosen from public quantities only**: the coroutine awaits a
future that one thread per process (:class:`Waker`) completes just before the release time
(no work slot, no thread per answer and almost no CPU is held while waiting).

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
  and the schedule changes only on a miss or a recovery. So what the latency can reveal is bounded by the
  number of schedule changes, not by the number of requests. Budgets are monotone in the
  size class (a doubled class lifts every larger class to at least its budget) and never
  exceed the request's deadline (``timeout_s``).
* **Recovery** (issue 40: a burst of requests or a spell of CPU contention must not slow a
  long-lived service for good): a class's own budget is back at its idle (calibrated) value
  once ``recover_s`` (``pad_recover_s``, 30 s; 0: never, the strict schedule) have passed
  without a miss in it, checked at each request's start and for every class, whether it gets
  traffic or not. So once the misses stop, every class is back at its idle budget within
  ``pad_recover_s`` of the last miss: within ``timeout_s + pad_recover_s`` of the end of the
  load. A budget depends on the calibration, the clock and past misses (public load
  history), never on a request's words. Under sustained load a class changes at most twice
  per ``recover_s`` (a recovery, then a miss). Misses and recoveries are counted
  (:attr:`Timing.misses`, :attr:`Timing.recoveries`) but neither logged nor served: a miss
  may depend on inputs.
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
import contextlib
import heapq
import math
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from .._padding import FLOOR_S, MARGIN, Calibration, class_top, size_class
from .._padding import Timing as Schedule

__all__ = ["FLOOR_S", "MARGIN", "Calibration", "Timing", "class_top", "size_class"]


#: The last stretch before a release time is waited by yielding to the event loop (``sleep(0)``)
#: instead of a timer: the loop's timers wake late by up to its selector's 1 ms granularity, by
#: an amount that depends on how long they slept (that is, on how fast the work was).
SPIN_S = 0.002
#: With the real clock, a held answer is woken by :class:`Waker` (one thread per process, a precise
#: timed wait) this long before its release time, then yields to the loop for the rest: the 2 ms
#: spin of :data:`SPIN_S` cost 2 ms of a core per answer and starved the work threads (issue 43).
WAKE_EARLY_S = 0.0005


@dataclass
class Timing(Schedule):
    """The service's schedule (:class:`deniable._padding.Timing`), held with ``asyncio.sleep``."""

    spin_s: float = SPIN_S  # the last stretch yields to the event loop (see :data:`SPIN_S`)

    async def hold(self, key: Hashable, size: int, start: float) -> None:
        """Sleep until the release time of work of ``size`` units that started at ``start`` (now done)."""
        if not self.enabled:
            return
        await self._until(self.release_at(key, size, start, self.clock()))

    async def hold_until(self, target: float) -> None:
        """Sleep until ``target`` (a deadline: the answer of a stopped request)."""
        if self.enabled:
            await self._until(target)

    async def _until(self, target: float) -> None:
        if self.clock is time.monotonic and self.spin_s > 0:  # the real clock: the waker thread, a short spin
            await wake_at(target)
        else:  # a virtual clock (tests), or spin_s = 0: the loop's timers
            await sleep_until(target, self.clock, self.spin_s)


class Waker:
    """One thread that wakes held answers on time: a heap of release times, a precise timed wait.

    The event loop's own timers wake late by up to its selector's 1 ms granularity, by an
    amount that depends on how long they slept; spinning on the loop instead (``sleep(0)``)
    costs a core for as long as it spins. This thread waits on a condition with the clock's
    own resolution (a futex with a timeout) until the earliest release time less
    :data:`WAKE_EARLY_S`, then hands the future back to its loop (``call_soon_threadsafe``,
    which wakes the loop at once); :func:`wake_at` yields for the last stretch. One thread per
    process, whatever the number of held answers; it holds no work slot and draws nothing.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._seq = 0
        self._thread: threading.Thread | None = None

    def at(self, target: float) -> asyncio.Future[None]:
        """A future of the running loop, done at ``target - WAKE_EARLY_S`` (``time.monotonic``)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (target - WAKE_EARLY_S, self._seq, loop, fut))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="deniable-waker", daemon=True)
                self._thread.start()
            self._cond.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                when, _, loop, fut = self._heap[0]
                left = when - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue  # an earlier one may have come
                heapq.heappop(self._heap)
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_done, fut)


def _done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


#: The process's waker (a thread started on first use).
WAKER = Waker()


async def wake_at(target: float) -> None:
    """Wait until ``time.monotonic() >= target``: :data:`WAKER` until just before, then yield to the loop."""
    if target - time.monotonic() > WAKE_EARLY_S:
        fut = WAKER.at(target)
        try:
            await fut
        finally:
            fut.cancel()  # cancelled while waiting: the waker skips a done future
    await sleep_until(target, time.monotonic, WAKE_EARLY_S + 0.001)


async def sleep_until(target: float, clock: Callable[[], float] = time.monotonic, spin_s: float = SPIN_S) -> None:
    """``asyncio.sleep`` until ``spin_s`` before ``clock() >= target``, then yield to the loop until it is."""
    while True:
        left = target - clock()
        if left <= 0 or not math.isfinite(left):
            return
        await asyncio.sleep(left - spin_s if left > spin_s else 0)
