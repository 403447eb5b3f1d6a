"""The on-device artefact of BRR: packed binary codes + the word list + a small JSON file.

Folder layout (everything BRR needs to privatize, nothing else)::

    codes.npy    (V, bits // 8) uint8 packed codes, memory-mapped when loaded
    words.txt    one word per line, in id order
    brr.json     {"format": "deniable-brr-device", "version": 1, "bits": ..., "binarizer": ..., ...}

:class:`CodeEmbedding` is an :class:`~deniable.embedding.Embedding` whose only payload is
the codes: the vocabulary, ``ids``/``words``, ``index_of``, ``fingerprint`` and
``cache_path`` work as usual (so the Privatizer and the CLI use it unchanged), but it has
no float vectors: reading ``.vectors`` raises :class:`~deniable.EmbeddingError`, so a
mechanism that needs them (madlib, tem) fails with a clear message instead of computing
on garbage. ``deniable.load_embedding(folder)`` recognises the folder by ``brr.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from .._cache import atomic_path
from .._errors import EmbeddingError
from ..embedding import WORDS_FILE, Embedding

__all__ = [
    "CODES_FILE",
    "DEVICE_FORMAT",
    "PARAMS_FILE",
    "CodeEmbedding",
    "artefact_size",
    "is_device_artefact",
    "load_device_artefact",
    "save_device_artefact",
]

CODES_FILE = "codes.npy"
PARAMS_FILE = "brr.json"
DEVICE_FORMAT = "deniable-brr-device"
_VERSION = 1


class CodeEmbedding(Embedding):
    """A vocabulary with packed binary codes instead of float vectors (a BRR device artefact).

    Parameters
    ----------
    words
        The vocabulary, in id order.
    codes
        ``(V, bits // 8)`` uint8 packed codes; ``bits`` must be a multiple of 32.
    params
        Metadata (bits, binarizer, seed, source embedding...), kept in :attr:`params`.
    """

    def __init__(
        self,
        words: Sequence[str],
        codes: npt.ArrayLike,
        *,
        name: str = "brr-codes",
        params: dict[str, Any] | None = None,
    ) -> None:
        arr = codes if isinstance(codes, np.ndarray) else np.asarray(codes)
        if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] == 0 or arr.shape[1] % 4:
            raise EmbeddingError(
                f"{name}: codes must be a (V, bits // 8) uint8 matrix with bits a multiple of 32, "
                f"got dtype {arr.dtype} and shape {arr.shape}"
            )
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        if arr.flags.writeable:
            arr = arr.view()
            arr.flags.writeable = False
        self._codes = arr
        self.params: dict[str, Any] = dict(params or {})
        # The float32 *view* of the code bytes (no copy) stands in for the matrix, so the
        # fingerprint and cache keys cover the codes; it is never exposed as vectors.
        super().__init__(words, arr.view(np.float32), name=name, check_finite=False)

    @property
    def codes(self) -> npt.NDArray[np.uint8]:
        """The packed codes, ``(V, bits // 8)`` uint8 (read-only or memory-mapped)."""
        return self._codes

    @property
    def bits(self) -> int:
        """The code length m."""
        return int(self._codes.shape[1] * 8)

    @property
    def vectors(self) -> NoReturn:
        raise EmbeddingError(
            f"{self.name} is a BRR device artefact: it holds binary codes only, no float vectors; "
            "only the brr mechanism can use it"
        )

    @property
    def dim(self) -> int:
        """The code length in bits (there are no float dimensions)."""
        return self.bits

    def __repr__(self) -> str:
        return f"CodeEmbedding(name={self.name!r}, size={self.size}, bits={self.bits})"

    def subset(self, vocab_size: int) -> CodeEmbedding:
        from .._validation import check_int

        n = check_int("vocab_size", vocab_size, minimum=1)
        if n >= self.size:
            return self
        return CodeEmbedding(self._words[:n], self._codes[:n], name=f"{self.name}[:{n}]", params=self.params)

    def _take(self, rows: npt.NDArray[np.int64], name: str) -> CodeEmbedding:
        w = self._words
        return CodeEmbedding([w[i] for i in rows.tolist()], self._codes[rows], name=name, params=self.params)

    def save(self, folder: str | Path) -> Path:
        """Write the device artefact (same as :func:`save_device_artefact`)."""
        save_device_artefact(folder, self._words, self._codes, self.params)
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path, *, mmap: bool = True) -> CodeEmbedding:
        return load_device_artefact(folder, mmap=mmap)


def is_device_artefact(path: str | Path) -> bool:
    """True when ``path`` is a folder written by :func:`save_device_artefact`."""
    p = Path(path)
    return p.is_dir() and (p / PARAMS_FILE).is_file()


def save_device_artefact(
    folder: str | Path, words: Sequence[str], codes: npt.ArrayLike, params: dict[str, Any] | None = None
) -> dict[str, int]:
    """Write ``codes.npy``, ``words.txt`` and ``brr.json`` into ``folder`` (each atomically).

    Returns the size in bytes of each file and their total (key ``"total"``).
    """
    arr = np.ascontiguousarray(np.asarray(codes))
    if arr.dtype != np.uint8 or arr.ndim != 2 or len(words) != arr.shape[0]:
        raise EmbeddingError(f"codes of shape {arr.shape} / dtype {arr.dtype} do not match {len(words)} words")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": DEVICE_FORMAT,
        "version": _VERSION,
        "bits": int(arr.shape[1] * 8),
        "vocab_size": int(arr.shape[0]),
        **{k: v for k, v in (params or {}).items() if k not in ("format", "version", "bits", "vocab_size")},
    }

    def write_codes(p: Path) -> None:
        with open(p, "wb") as fh:
            np.save(fh, arr, allow_pickle=False)

    atomic_path(out / CODES_FILE, write_codes)

    def write_words(p: Path) -> None:
        p.write_text("\n".join(words) + "\n", encoding="utf-8")

    def write_params(p: Path) -> None:
        p.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    atomic_path(out / WORDS_FILE, write_words)
    atomic_path(out / PARAMS_FILE, write_params)
    return artefact_size(out)


def artefact_size(folder: str | Path) -> dict[str, int]:
    """Bytes of each file of a device artefact and the total."""
    p = Path(folder)
    sizes = {name: (p / name).stat().st_size for name in (CODES_FILE, WORDS_FILE, PARAMS_FILE)}
    sizes["total"] = sum(sizes.values())
    return sizes


def load_device_artefact(folder: str | Path, *, mmap: bool = True) -> CodeEmbedding:
    """Read a device artefact; the codes are memory-mapped by default."""
    p = Path(folder)
    for name in (CODES_FILE, WORDS_FILE, PARAMS_FILE):
        if not (p / name).is_file():
            raise EmbeddingError(
                f"{p}: missing {name} (a BRR device artefact has {CODES_FILE}, {WORDS_FILE}, {PARAMS_FILE})"
            )
    try:
        meta = json.loads((p / PARAMS_FILE).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EmbeddingError(f"{p / PARAMS_FILE}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != DEVICE_FORMAT:
        raise EmbeddingError(f"{p / PARAMS_FILE}: not a {DEVICE_FORMAT} file")
    if meta.get("version") != _VERSION:
        raise EmbeddingError(f"{p / PARAMS_FILE}: version {meta.get('version')!r}, this library reads {_VERSION}")
    codes = np.load(p / CODES_FILE, mmap_mode="r" if mmap else None, allow_pickle=False)
    words = (p / WORDS_FILE).read_text(encoding="utf-8").split("\n")
    if words and words[-1] == "":
        words.pop()
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[0] != len(words):
        raise EmbeddingError(f"{p}: {len(words)} words but codes of shape {codes.shape} and dtype {codes.dtype}")
    if int(meta.get("bits", -1)) != codes.shape[1] * 8:
        raise EmbeddingError(f"{p}: {PARAMS_FILE} says {meta.get('bits')} bits, codes have {codes.shape[1] * 8}")
    seen: dict[str, int] = {}
    for i, w in enumerate(words):
        if seen.setdefault(w, i) != i:
            raise EmbeddingError(f"{p}: duplicate word at rows {seen[w] + 1} and {i + 1}")
    emb = CodeEmbedding(words, codes, name=str(p), params=meta)
    emb.__dict__["index_of"] = seen
    return emb
