"""The BRR device artefact's vocabulary: :class:`CodeVocabulary` (words + packed binary codes, no
float vectors) and its folder format (``codes.npy``, ``words.txt``, ``brr.json``).

It lives beside the other vocabulary types because :func:`~deniable.embedding.load_embedding`
reads such a folder; :mod:`deniable.binarize.device` (which makes the codes and the web
artefact) re-exports it. Layout::

    codes.npy    (V, bits // 8) uint8 packed codes, memory-mapped when loaded
    words.txt    one word per line, in id order
    brr.json     {"format": "deniable-brr-device", "version": 1, "bits": ..., "binarizer": ..., ...}

May import: ``deniable._cache``, ``deniable._errors`` and the vocabulary types of this package.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._cache import atomic_path
from .._errors import EmbeddingError
from ._embedding import WORDS_FILE
from ._vocabulary import Vocabulary, unique_index

__all__ = [
    "CODES_FILE",
    "DEVICE_FORMAT",
    "PARAMS_FILE",
    "CodeVocabulary",
    "artefact_size",
    "is_device_artefact",
    "load_device_artefact",
    "save_device_artefact",
]

CODES_FILE = "codes.npy"
PARAMS_FILE = "brr.json"
DEVICE_FORMAT = "deniable-brr-device"
_VERSION = 1


class CodeVocabulary(Vocabulary):
    """A vocabulary whose per-word payload is a packed binary code (a BRR device artefact).

    Parameters
    ----------
    words
        The vocabulary, in id order (unique).
    codes
        ``(V, bits // 8)`` uint8 packed codes; ``bits`` must be a multiple of 32.
    name
        Shown in messages (a loaded artefact: its folder).
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
        if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0 or arr.shape[1] % 4:
            raise EmbeddingError(
                f"{name}: codes must be a non-empty (V, bits // 8) uint8 matrix with bits a multiple of 32, "
                f"got dtype {arr.dtype} and shape {arr.shape}"
            )
        if len(words) != arr.shape[0]:
            raise EmbeddingError(f"{name}: {len(words)} words but {arr.shape[0]} code rows; they must match")
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        word_list = list(words)
        self.params: dict[str, Any] = dict(params or {})
        self._set_parts(word_list, arr, name, unique_index(word_list, name))

    def _derive(self, words: list[str], payload: np.ndarray, name: str) -> CodeVocabulary:
        out = CodeVocabulary.__new__(CodeVocabulary)
        out.params = dict(self.params)
        out._set_parts(words, payload, name, None)
        return out

    def _fingerprint_header(self) -> str:
        return f"packed-codes{self._payload.shape}"  # never equal to a float Embedding's header

    def float_vectors_error(self) -> EmbeddingError:
        return EmbeddingError(
            f"{self.name} is a BRR device artefact: it holds binary codes only, no float vectors; "
            "only the brr mechanism can use it"
        )

    @property
    def codes(self) -> npt.NDArray[np.uint8]:
        """The packed codes, ``(V, bits // 8)`` uint8 (read-only or memory-mapped)."""
        return self._payload

    @property
    def bits(self) -> int:
        """The code length m."""
        return int(self._payload.shape[1] * 8)

    @property
    def dim(self) -> int:
        """The dimension of the code space {0, 1}^m: the code length in bits (same as :attr:`bits`)."""
        return self.bits

    def __repr__(self) -> str:
        return f"CodeVocabulary(name={self.name!r}, size={self.size}, bits={self.bits})"

    def save(self, folder: str | Path) -> Path:
        """Write the device artefact (same as :func:`save_device_artefact`)."""
        save_device_artefact(folder, self._words, self._payload, self.params)
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path, *, mmap: bool = True) -> CodeVocabulary:
        """Read a device artefact (same as :func:`load_device_artefact`)."""
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


def load_device_artefact(folder: str | Path, *, mmap: bool = True) -> CodeVocabulary:
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
    return CodeVocabulary(words, codes, name=str(p), params=meta)
