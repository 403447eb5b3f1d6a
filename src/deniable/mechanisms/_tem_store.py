"""Neighbour tables ``L_w`` for TEM: an in-memory LRU bounded in bytes, backed by disk shards.

A table is ``(ids, dist)``: the sorted ids of ``L_w = {y : d(w, y) <= gamma}`` (int32)
and their exact float64 distances. It depends on (embedding, metric, gamma) only, not
on epsilon. On disk, under ``embedding.cache_path("tem", <metric>-<gamma>)``, tables are
kept in shards of four ``.npy`` files (``words``, ``offsets``, ``ids``, ``dist``), each
written atomically, the ``words`` file last (it is the commit mark); shards are
memory-mapped when read, so many processes share one copy. All state is guarded by a
lock: a mechanism may be shared across threads.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .._cache import atomic_path

__all__ = ["TableStore"]

Table = tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]

_PARTS = ("offsets", "ids", "dist", "words")


class TableStore:
    """Tables by word id: memory LRU, then disk shards; new tables are flushed in shards."""

    def __init__(
        self,
        directory: Callable[[], Path] | None,
        *,
        memory_bytes: int,
        disk_bytes: int,
        flush_bytes: int = 4 << 20,
    ) -> None:
        self._directory_fn = directory
        self._directory: Path | None = None
        self.memory_bytes = memory_bytes
        self.disk_bytes = disk_bytes
        self.flush_bytes = flush_bytes
        self._lock = threading.Lock()
        self._lru: OrderedDict[int, Table] = OrderedDict()
        self._lru_bytes = 0
        self._pending: dict[int, Table] = {}
        self._pending_bytes = 0
        self._disk: dict[int, tuple[int, int, int]] | None = None
        self._shards: list[tuple[np.ndarray, np.ndarray]] = []
        self._disk_used = 0

    @property
    def directory(self) -> Path | None:
        """The shard folder (resolved on first use: it needs the embedding's fingerprint)."""
        if self._directory is None and self._directory_fn is not None:
            self._directory = self._directory_fn()
        return self._directory

    # -- lookups -----------------------------------------------------------------------
    def get_many(self, words: npt.NDArray[np.int64]) -> list[Table | None]:
        """The table of each word, or None where none is stored."""
        with self._lock:
            self._load_disk_index()
            out: list[Table | None] = []
            for w in words.tolist():
                t = self._lru.get(w)
                if t is not None:
                    self._lru.move_to_end(w)
                else:
                    t = self._pending.get(w)
                    if t is None and self._disk is not None:
                        loc = self._disk.get(w)
                        if loc is not None:
                            ids_mm, dist_mm = self._shards[loc[0]]
                            t = (ids_mm[loc[1] : loc[2]], dist_mm[loc[1] : loc[2]])
                out.append(t)
            return out

    def put(self, w: int, table: Table) -> None:
        """Remember a freshly built table (memory now, disk at the next flush)."""
        size = table[0].nbytes + table[1].nbytes
        with self._lock:
            if w in self._lru:
                return
            self._lru[w] = table
            self._lru_bytes += size
            while self._lru_bytes > self.memory_bytes and len(self._lru) > 1:
                _, old = self._lru.popitem(last=False)
                self._lru_bytes -= old[0].nbytes + old[1].nbytes
            if self._directory_fn is not None and (self._disk is None or w not in self._disk):
                if self._disk_used + self._pending_bytes + size <= self.disk_bytes:
                    self._pending[w] = table
                    self._pending_bytes += size

    def maybe_flush(self) -> None:
        """Write pending tables to disk once there are ``flush_bytes`` of them."""
        if self._pending_bytes >= self.flush_bytes:
            self.flush()

    def flush(self) -> None:
        """Write every pending table to a new shard (atomically)."""
        with self._lock:
            directory = self.directory
            if not self._pending or directory is None:
                return
            words = np.array(sorted(self._pending), dtype=np.int64)
            tables = [self._pending[w] for w in words.tolist()]
            lengths = np.array([len(t[0]) for t in tables], dtype=np.int64)
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            ids = np.concatenate([t[0] for t in tables]).astype(np.int32)
            dist = np.concatenate([t[1] for t in tables]).astype(np.float64)
            stem = f"shard-{uuid.uuid4().hex}"
            directory.mkdir(parents=True, exist_ok=True)
            arrays: dict[str, np.ndarray] = {"offsets": offsets, "ids": ids, "dist": dist, "words": words}
            for part in _PARTS:  # words last: a shard without it is ignored
                atomic_path(directory / f"{stem}.{part}.npy", _saver(arrays[part]))
            n = len(self._shards)
            self._shards.append((ids, dist))
            if self._disk is None:
                self._disk = {}
            for j, w in enumerate(words.tolist()):
                self._disk[w] = (n, int(offsets[j]), int(offsets[j + 1]))
            self._disk_used += ids.nbytes + dist.nbytes
            self._pending.clear()
            self._pending_bytes = 0

    @property
    def memory_used(self) -> int:
        """Bytes of tables held in memory (LRU)."""
        return self._lru_bytes

    def disk_used(self) -> int:
        """Bytes of tables in the disk shards of this (embedding, metric, gamma)."""
        with self._lock:
            self._load_disk_index()
            return self._disk_used

    # -- disk --------------------------------------------------------------------------
    def _load_disk_index(self) -> None:
        if self._disk is not None or self._directory_fn is None:
            return
        self._disk = {}
        directory = self.directory
        if directory is None or not directory.is_dir():
            return
        for words_file in sorted(directory.glob("shard-*.words.npy")):
            stem = words_file.name[: -len(".words.npy")]
            try:
                words = np.load(words_file, allow_pickle=False)
                offsets = np.load(directory / f"{stem}.offsets.npy", allow_pickle=False)
                # plain ndarray views of the memory maps: slicing them is cheap
                ids = np.asarray(np.load(directory / f"{stem}.ids.npy", mmap_mode="r", allow_pickle=False))
                dist = np.asarray(np.load(directory / f"{stem}.dist.npy", mmap_mode="r", allow_pickle=False))
            except (OSError, ValueError):
                continue  # a damaged or partial shard is skipped (tables are rebuilt)
            if offsets.size != words.size + 1 or ids.size != dist.size or int(offsets[-1]) != ids.size:
                continue
            n = len(self._shards)
            self._shards.append((ids, dist))
            for j, w in enumerate(words.tolist()):
                self._disk[int(w)] = (n, int(offsets[j]), int(offsets[j + 1]))
            self._disk_used += ids.nbytes + dist.nbytes


def _saver(arr: np.ndarray) -> Callable[[Path], None]:
    def save(path: Path) -> None:
        with open(path, "wb") as fh:
            np.save(fh, arr, allow_pickle=False)

    return save
