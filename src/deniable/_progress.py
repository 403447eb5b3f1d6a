"""The one progress API: bars (rich on a terminal, silent otherwise: pipes, CI, services) and
the log records of long one-time work (:func:`building`), which the CLI turns into one line
on stderr.

Every one-time build (an artefact of :mod:`deniable.artefacts`: k-NN tables, far bounds,
HNSW indexes, calibration curves, output lists) runs inside :func:`building`, which says
*what* is built and *why* (one line, e.g. "the k-NN tables TEM samples from; once per
embedding, reused"), and its builder advances a :func:`progress` bar in its natural unit
(words, epsilon points), with elapsed time and an estimate of the time left.

- On a terminal (stderr a tty): the line of :func:`building` and the bars below it.
- Elsewhere: no bar; the library never prints, it logs one INFO record at the start and
  one at the end of a build (logger ``"deniable"``; ``logging.basicConfig(level=logging.INFO)``
  shows them in a program of your own; the CLI prints the start line when a build is still
  running after a second).

What is shown is a function of public work only (the embedding, the mechanism's settings,
public reference data): never of the text being privatized. The per-request privatize path
shows no bar unless a caller asked for one explicitly (``show_progress=True``).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["BUILD", "Advance", "building", "log", "progress"]

log = logging.getLogger("deniable")
#: The ``extra`` key of :func:`building`'s records: ``"start"`` or ``"end"``.
BUILD = "deniable_build"


@contextmanager
def building(description: str, *, enabled: bool | None = None) -> Iterator[None]:
    """Long one-time work (an index, prepared tables): an INFO record when it starts and one
    when it ends (``description`` says what is built and why, in one line, and never holds
    user text).

    On a terminal (``enabled``: default when stderr is one) ``description`` heads the
    progress display, above the bars of the work's steps, with the time elapsed. The CLI
    shows ``description`` on stderr when the work is still running after a second and no
    bar is on screen.
    """
    t0 = time.perf_counter()
    log.info("%s", description, extra={BUILD: "start"})
    show = _interactive() if enabled is None else enabled
    try:
        if show:
            with _shared_bar() as bar:
                task = bar.add_task(description, total=None, heading=True)
                try:
                    yield
                finally:
                    bar.update(task, total=1, completed=1)
        else:
            yield
    finally:
        seconds = time.perf_counter() - t0
        log.info("%s: done in %.1f s", description, seconds, extra={BUILD: "end", "deniable_seconds": seconds})


class Advance:
    """What :func:`progress` yields: ``advance(n)`` marks ``n`` more units done;
    ``advance.set_total(t)`` changes the total when the work grows (e.g. refined points)."""

    def __init__(self, bar: Any = None, task: Any = None) -> None:
        self._bar, self._task = bar, task

    def __call__(self, n: float) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def set_total(self, total: float | None) -> None:
        if self._bar is not None:
            self._bar.update(self._task, total=total)


def _interactive() -> bool:
    if _bar is not None:  # a display is on the terminal: rich has put a proxy (no isatty in rich 13) on stderr
        return True
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


@contextmanager
def progress(total: float | None, description: str, *, enabled: bool | None = None) -> Iterator[Advance]:
    """Yield an :class:`Advance` (``advance(n)``); draws a rich bar on stderr (done/total,
    elapsed, time left) when ``enabled`` (default: when stderr is a terminal).

    ``description`` and ``total`` must be functions of public work only (never of user text,
    nor of how many words it has).
    """
    show = _interactive() if enabled is None else enabled
    if not show:
        yield Advance()
        return
    with _shared_bar() as bar:
        task = bar.add_task(description, total=total)
        yield Advance(bar, task)


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
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.table import Column
    from rich.text import Text

    class _Unless(ProgressColumn):
        """A column that is blank on a heading row (a build's what-and-why line of :func:`building`)."""

        def __init__(self, inner: ProgressColumn) -> None:
            super().__init__()
            self.inner = inner

        def render(self, task: Any) -> Any:
            return Text("") if task.fields.get("heading") else self.inner.render(task)

    with _lock:
        if _bar is None:
            _bar = Progress(
                TextColumn("{task.description}", table_column=Column(ratio=1, overflow="fold")),
                _Unless(BarColumn()),
                _Unless(MofNCompleteColumn()),
                TimeElapsedColumn(),
                _Unless(TimeRemainingColumn()),
                console=Console(stderr=True),
                transient=False,
                expand=True,
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
