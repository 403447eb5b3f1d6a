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

__all__ = ["atomic_path", "cache_dir", "file_lock", "made_folders", "remove_empty"]


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
    The folders this call created for it are removed again when the write fails (a failed
    build leaves no empty folder behind).
    """
    from .io._files import temporary_beside

    created = made_folders(final.parent)
    try:
        with temporary_beside(final, suffix=".tmp") as (fd, tmp):
            os.close(fd)
            write(tmp)
    except BaseException:
        remove_empty(created)
        raise
    return final


def made_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; return those it created, deepest first."""
    missing = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def remove_empty(folders: list[Path]) -> None:
    """Remove each of ``folders`` (deepest first) that is empty; stop at the first that is not."""
    for p in folders:
        try:
            p.rmdir()
        except OSError:  # not empty (another writer's file), or gone
            return


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
