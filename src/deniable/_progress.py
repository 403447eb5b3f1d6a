"""Progress bars (rich on a terminal, silent otherwise: pipes, CI, services) and the log
records of long one-time work (:func:`building`), which the CLI turns into one line on stderr.

The library never prints: what it says goes through :mod:`logging` (logger ``"deniable"``)
and never holds user text. Configure logging (``logging.basicConfig(level=logging.INFO)``)
to see its records in a program of your own.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["BUILD", "building", "log", "progress"]

log = logging.getLogger("deniable")
#: The ``extra`` key of :func:`building`'s records: ``"start"`` or ``"end"``.
BUILD = "deniable_build"


@contextmanager
def building(description: str) -> Iterator[None]:
    """Long one-time work (an index, prepared tables): an INFO record when it starts and one
    when it ends (``description`` is one line and never holds user text).

    The CLI shows ``description`` on stderr when the work is still running after a second.
    """
    t0 = time.perf_counter()
    log.info("%s", description, extra={BUILD: "start"})
    try:
        yield
    finally:
        seconds = time.perf_counter() - t0
        log.info("%s: done in %.1f s", description, seconds, extra={BUILD: "end", "deniable_seconds": seconds})


def _interactive() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


@contextmanager
def progress(
    total: float | None, description: str, *, enabled: bool | None = None
) -> Iterator[Callable[[float], None]]:
    """Yield ``advance(n)``; draws a rich bar on stderr when it is a terminal.

    ``description`` must never contain user text.
    """
    show = _interactive() if enabled is None else enabled
    if not show:
        yield lambda n: None
        return
    with _shared_bar() as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


_lock = threading.Lock()
_bar: Any = None  # the rich Progress on screen, shared by concurrent and nested bars
_users = 0


@contextmanager
def _shared_bar() -> Iterator[Any]:
    """One rich ``Progress`` for every bar open at once (rich allows one live display):
    bars of concurrent builds (threads) or nested steps are tasks of the same display."""
    global _bar, _users
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with _lock:
        if _bar is None:
            _bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            _bar.start()
        _users += 1
        bar = _bar
    try:
        yield bar
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                _bar.stop()
                _bar = None
