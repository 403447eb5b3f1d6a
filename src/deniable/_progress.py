"""Progress bars: rich on a terminal, silent otherwise (pipes, CI, services)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["progress"]


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
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
