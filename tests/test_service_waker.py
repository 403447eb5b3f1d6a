"""The service's waker (issue 43): held answers are released at their release time, never before, without a spin."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("fastapi")

from deniable.service._timing import WAKE_EARLY_S, WAKER, Timing, wake_at  # noqa: E402


def test_wake_at_never_releases_before_the_target_and_serves_many_waits_with_one_thread() -> None:
    async def one(delay: float) -> float:
        target = time.monotonic() + delay
        await wake_at(target)
        return time.monotonic() - target

    async def many() -> list[float]:
        return await asyncio.gather(*(one(d) for d in [0.0, 1e-4, 0.003, 0.02, 0.01, 0.03] * 5))

    lates = asyncio.run(many())
    assert min(lates) >= 0  # never early, whatever the wait
    assert WAKER._thread is not None and WAKER._thread.is_alive()  # one thread for all of them
    assert 0 < WAKE_EARLY_S < 0.002  # the spin left is shorter than the old 2 ms


def test_a_cancelled_hold_leaves_the_waker_working() -> None:
    async def run() -> float:
        task = asyncio.ensure_future(wake_at(time.monotonic() + 0.05))
        await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        target = time.monotonic() + 0.01
        await wake_at(target)
        return time.monotonic() - target

    assert asyncio.run(run()) >= 0


def test_hold_with_the_real_clock_uses_the_waker() -> None:
    t = Timing(timeout_s=1.0, margin=1.0, floor_s=0.0)
    t.calibrate("k", lambda n, p: 0.02, units=1, repeats=1)
    start = time.monotonic()
    asyncio.run(t.hold("k", 1, start))
    assert time.monotonic() >= start + t.budget("k", 1, start)
