"""The on-device artefact of BRR: packed binary codes + the word list + a small JSON file.

Folder layout (everything BRR needs to privatize, nothing else)::

    codes.npy    (V, bits // 8) uint8 packed codes, memory-mapped when loaded
    words.txt    one word per line, in id order
    brr.json     {"format": "deniable-brr-device", "version": 1, "bits": ..., "binarizer": ..., ...}

:class:`CodeVocabulary` is what a loaded artefact is: a
:class:`~deniable.embedding.Vocabulary` (words, ids, ``index_of``, ``fingerprint``,
``tokenizer``, ``subset``, ``restrict_to_words``: the Privatizer and the CLI use it like an
embedding) whose only payload is the codes. It is a sibling of
:class:`~deniable.embedding.Embedding`, not a kind of it: it has no float vectors, so a
float mechanism (madlib, tem) given one raises an :class:`~deniable.EmbeddingError` saying
the artefact holds binary codes only. ``deniable.load_embedding(folder)`` recognises the
folder by ``brr.json``.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._cache import atomic_path
from .._errors import EmbeddingError

# the embedding's types, not its package: the package's loaders read device artefacts (this module)
from ..embedding._embedding import WORDS_FILE
from ..embedding._vocabulary import Vocabulary, unique_index

__all__ = [
    "CODES_FILE",
    "DEVICE_FORMAT",
    "PARAMS_FILE",
    "WEB_FORMAT",
    "WEB_MANIFEST",
    "WEB_VERSION",
    "CodeVocabulary",
    "artefact_size",
    "is_device_artefact",
    "load_device_artefact",
    "save_device_artefact",
    "save_web_artefact",
    "web_artefact",
    "web_artefact_id",
    "web_artefact_of",
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


def __getattr__(name: str) -> Any:
    if name == "CodeEmbedding":  # its former, documented name (docs/brr.md)
        warnings.warn(
            "deniable.binarize.device.CodeEmbedding is deprecated: it is CodeVocabulary (not an Embedding)",
            DeprecationWarning,
            stacklevel=2,
        )
        return CodeVocabulary
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


# -- the web format: static files a browser or Node client loads whole (clients/js) ------------

#: ``manifest.json`` ``format`` and ``version`` of the web artefact (clients/js reads them).
WEB_FORMAT = "deniable-web-device"
WEB_VERSION = 1
WEB_MANIFEST = "manifest.json"
#: The mechanisms a web artefact exists for, and the payload file of each.
WEB_PAYLOAD = {"brr": "codes.bin", "madlib": "vectors.bin"}


def web_artefact(
    mechanism: str,
    words: Sequence[str],
    payload: npt.ArrayLike,
    *,
    lowercase: bool,
    fingerprint: str,
    params: dict[str, Any] | None = None,
) -> dict[str, bytes]:
    """The files of a web device artefact, name -> bytes (``manifest.json`` last).

    ``mechanism`` ``"brr"``: ``payload`` is the ``(V, bits // 8)`` uint8 packed codes, written
    as ``codes.bin`` row by row; ``"madlib"``: the ``(V, d)`` vectors, written as
    ``vectors.bin``, float32 little-endian, row-major. ``words.txt`` is one word per line
    (UTF-8, ``\\n``). The manifest holds the format version, the mechanism, the sizes, the
    embedding fingerprint, ``lowercase`` (lookups fold case) and each file's size and
    sha256. A function of public data only, and deterministic: the same inputs give the
    same bytes (the service serves exactly these bytes).
    """
    if mechanism not in WEB_PAYLOAD:
        raise EmbeddingError(f"web artefact: mechanism {mechanism!r} is not one of {sorted(WEB_PAYLOAD)}")
    arr = np.asarray(payload)
    if arr.ndim != 2 or arr.shape[0] != len(words) or arr.shape[0] == 0:
        raise EmbeddingError(f"web artefact: payload of shape {arr.shape} does not match {len(words)} words")
    if any("\n" in w or "\r" in w for w in words):
        raise EmbeddingError("web artefact: a vocabulary word holds a line break")
    meta: dict[str, Any] = {"format": WEB_FORMAT, "version": WEB_VERSION, "mechanism": mechanism}
    if mechanism == "brr":
        if arr.dtype != np.uint8 or arr.shape[1] % 4:
            raise EmbeddingError("web artefact: brr codes must be uint8 with bits a multiple of 32")
        data = np.ascontiguousarray(arr).tobytes()
        meta.update(bits=int(arr.shape[1] * 8))
    else:
        data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        meta.update(dim=int(arr.shape[1]), dtype="float32-le")
    files = {"words.txt": ("\n".join(words) + "\n").encode("utf-8"), WEB_PAYLOAD[mechanism]: data}
    meta.update(
        vocab_size=len(words),
        lowercase=bool(lowercase),
        fingerprint=fingerprint,
        **{k: v for k, v in (params or {}).items() if k not in meta and k != "files"},
    )
    meta["files"] = {n: {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in files.items()}
    files[WEB_MANIFEST] = (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode("utf-8")
    return files


def web_artefact_id(files: dict[str, bytes]) -> str:
    """The artefact's content address: the first 16 hex digits of the manifest's sha256."""
    return hashlib.sha256(files[WEB_MANIFEST]).hexdigest()[:16]


def web_artefact_of(mechanism: Any) -> dict[str, bytes]:
    """The web artefact of a prepared ``brr`` or ``madlib`` mechanism instance (see :func:`web_artefact`).

    BRR: its codes (trained or read once) and the binarizer's public parameters; madlib:
    its embedding's float vectors. Any other mechanism: an :class:`~deniable.EmbeddingError`.
    """
    name = getattr(mechanism, "name", None)
    emb = mechanism.embedding
    words = list(emb.vocabulary)
    if name == "brr":
        params = {"binarizer": mechanism.binarizer, "seed": mechanism.seed}
        return web_artefact(
            "brr", words, mechanism.codes, lowercase=emb.is_lowercase, fingerprint=emb.fingerprint, params=params
        )
    if name == "madlib" and type(mechanism).__name__ == "MultivariateLaplace":
        return web_artefact("madlib", words, emb.vectors, lowercase=emb.is_lowercase, fingerprint=emb.fingerprint)
    raise EmbeddingError(f"no web device artefact for mechanism {name!r} (brr and madlib have one)")


def save_web_artefact(folder: str | Path, files: dict[str, bytes]) -> dict[str, int]:
    """Write the files of :func:`web_artefact` into ``folder`` (each atomically, the manifest last)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name in sorted(files, key=lambda n: n == WEB_MANIFEST):
        data = files[name]
        atomic_path(out / name, lambda p, data=data: p.write_bytes(data))  # type: ignore[misc]
    sizes = {name: len(b) for name, b in files.items()}
    sizes["total"] = sum(sizes.values())
    return sizes
