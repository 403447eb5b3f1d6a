"""Where pre-computed artefacts (converted embeddings, indexes, neighbour lists,
binary codes) live on disk: ``$DENIABLE_CACHE`` or ``~/.cache/deniable``.

Artefacts are keyed by the embedding's fingerprint and their parameters, written
atomically, and memory-mapped when read, so many processes share one copy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "cache_dir", "file_lock"]


def cache_dir() -> Path:
    """The root cache folder (created on first use)."""
    root = os.environ.get("DENIABLE_CACHE")
    if root:
        path = Path(root)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "deniable"
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_path(final: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temporary path beside ``final``, then rename it into place.

    Either the whole artefact appears at ``final`` or nothing does (the temporary is removed
    on an error or a SIGTERM / SIGHUP / SIGINT, and a killed run's stale one by the next
    run); the artefact gets the mode a plain write would give, so the cache can be shared.
    """
    from .io._files import temporary_beside

    final.parent.mkdir(parents=True, exist_ok=True)
    with temporary_beside(final, suffix=".tmp") as (fd, tmp):
        os.close(fd)
        write(tmp)
    return final


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl`` lock on ``path`` (created if needed) for the block.

    Processes (and threads: each call opens its own descriptor) building the same
    artefact take turns; the lock is released when the block ends or the process dies.
    """
    import fcntl  # POSIX only: imported here so that `import deniable` works everywhere

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
