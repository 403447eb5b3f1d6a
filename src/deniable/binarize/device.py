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

# the device artefact's vocabulary and folder format live with the vocabulary types (the loaders read it)
from ..embedding._codes import (
    CODES_FILE,
    DEVICE_FORMAT,
    PARAMS_FILE,
    CodeVocabulary,
    artefact_size,
    is_device_artefact,
    load_device_artefact,
    save_device_artefact,
)

__all__ = [
    "CODES_FILE",
    "DEVICE_BUDGET_BYTES",
    "DEVICE_FORMAT",
    "PARAMS_FILE",
    "QUANTIZED_VOCAB",
    "WEB_FORMAT",
    "WEB_MANIFEST",
    "WEB_PRIOR_FILE",
    "WEB_VERSION",
    "WEB_VERSION_PRIOR",
    "WEB_VERSION_QUANTIZED",
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


def __getattr__(name: str) -> Any:
    if name == "CodeEmbedding":  # its former, documented name (docs/brr.md)
        warnings.warn(
            "deniable.binarize.device.CodeEmbedding is deprecated: it is CodeVocabulary (not an Embedding)",
            DeprecationWarning,
            stacklevel=2,
        )
        return CodeVocabulary
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- the web format: static files a browser or Node client loads whole (clients/js) ------------

#: ``manifest.json`` ``format`` and ``version`` of the web artefact (clients/js reads them).
WEB_FORMAT = "deniable-web-device"
WEB_VERSION = 1
#: The version of an artefact whose decode assumes a non-uniform prior (``logprior.bin``): a
#: version-1 client would decode it by nearest neighbour, so it refuses it; uniform stays version 1.
WEB_VERSION_PRIOR = 2
WEB_MANIFEST = "manifest.json"
#: The decode prior's file: ``log prior(y)`` per word, float64 little-endian (what the Python decoders read).
WEB_PRIOR_FILE = "logprior.bin"
#: The mechanisms a web artefact exists for, and the payload file of each.
WEB_PAYLOAD = {"brr": "codes.bin", "madlib": "vectors.bin"}
#: The version of a madlib artefact with 8-bit vectors (``qvectors.bin`` + ``levels.bin``, with or
#: without a prior): older clients know neither file, so they refuse it.
WEB_VERSION_QUANTIZED = 3
#: A quantized madlib artefact's files: the ``(V, d)`` uint8 codes and the ``(d, 256)`` float32 levels.
WEB_QVECTORS = "qvectors.bin"
WEB_LEVELS = "levels.bin"
#: The words of the quantized madlib artefact the service offers beside the float32 one (the most
#: frequent 250,000 of the embedding at 8 bits per coordinate: 14.6 MB with GloVe 6B 50-d's words).
QUANTIZED_VOCAB = 250_000
#: The size under which a device downloads the exact float32 artefact by default (else the quantized one).
DEVICE_BUDGET_BYTES = 16_000_000


def web_artefact(
    mechanism: str,
    words: Sequence[str],
    payload: npt.ArrayLike,
    *,
    lowercase: bool,
    fingerprint: str,
    params: dict[str, Any] | None = None,
    prior: tuple[dict[str, str], npt.ArrayLike] | None = None,
    levels: npt.ArrayLike | None = None,
) -> dict[str, bytes]:
    """The files of a web device artefact, name -> bytes (``manifest.json`` last).

    ``mechanism`` ``"brr"``: ``payload`` is the ``(V, bits // 8)`` uint8 packed codes, written
    as ``codes.bin`` row by row; ``"madlib"``: the ``(V, d)`` vectors, written as
    ``vectors.bin``, float32 little-endian, row-major. ``words.txt`` is one word per line
    (UTF-8, ``\\n``). The manifest holds the format version, the mechanism, the sizes, the
    embedding fingerprint, ``lowercase`` (lookups fold case) and each file's size and
    sha256. A function of public data only, and deterministic: the same inputs give the
    same bytes (the service serves exactly these bytes).

    ``prior``: ``(record, log_prior)`` of a non-uniform decode prior (issue 44): the manifest's
    ``prior`` record (:func:`deniable.mechanisms._posterior.prior_record`) and ``log prior(y)`` per
    word, written as ``logprior.bin`` in float64 little-endian, the very values the Python
    decoders' penalties ``(max log prior - log prior(y)) / epsilon`` are computed from (a client
    computing a Zipf prior itself would need numpy's summation and logarithm to the last bit).
    Such an artefact is version :data:`WEB_VERSION_PRIOR`; without one nothing changes (version 1).

    ``levels``: a madlib artefact with 8-bit vectors (a :class:`~deniable.embedding.QuantizedEmbedding`):
    ``payload`` is then the ``(V, d)`` uint8 codes, written as ``qvectors.bin``, and ``levels`` the
    ``(d, 256)`` float32 table, written as ``levels.bin`` (little-endian, row ``k`` the levels of
    dimension ``k``); the vectors are ``levels[k, codes[v, k]]``. Version :data:`WEB_VERSION_QUANTIZED`
    (with or without a prior), ``"dtype": "uint8"``.
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
    elif levels is None:
        data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        meta.update(dim=int(arr.shape[1]), dtype="float32-le")
    else:
        table = np.asarray(levels)
        if arr.dtype != np.uint8 or table.shape != (arr.shape[1], 256) or not np.all(np.isfinite(table)):
            raise EmbeddingError("web artefact: 8-bit madlib vectors need uint8 codes and (d, 256) finite levels")
        data = np.ascontiguousarray(arr).tobytes()
        meta.update(dim=int(arr.shape[1]), dtype="uint8", version=WEB_VERSION_QUANTIZED)
    payload_file = WEB_PAYLOAD[mechanism] if levels is None else WEB_QVECTORS
    files = {"words.txt": ("\n".join(words) + "\n").encode("utf-8"), payload_file: data}
    if levels is not None:
        files[WEB_LEVELS] = np.ascontiguousarray(levels, dtype="<f4").tobytes()
    if prior is not None:
        record, log_prior = prior
        logp = np.asarray(log_prior, dtype=np.float64)
        if logp.shape != (len(words),) or not np.all(np.isfinite(logp)):
            raise EmbeddingError(f"web artefact: a log prior of shape {logp.shape}, not one finite value per word")
        files[WEB_PRIOR_FILE] = np.ascontiguousarray(logp, dtype="<f8").tobytes()
        meta.update(version=max(meta["version"], WEB_VERSION_PRIOR), **record)
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
    A non-uniform ``prior`` option ships its log prior (see :func:`web_artefact`).
    """
    name = getattr(mechanism, "name", None)
    emb = mechanism.embedding
    words = list(emb.vocabulary)
    prior = _prior_of(mechanism)
    if name == "brr":
        params = {"binarizer": mechanism.binarizer, "seed": mechanism.seed}
        return web_artefact(
            "brr",
            words,
            mechanism.codes,
            lowercase=emb.is_lowercase,
            fingerprint=emb.fingerprint,
            params=params,
            prior=prior,
        )
    if name == "madlib" and type(mechanism).__name__ == "MultivariateLaplace":
        from ..embedding import QuantizedEmbedding

        if isinstance(emb, QuantizedEmbedding):  # 8-bit vectors: the codes and the level table
            return web_artefact(
                "madlib",
                words,
                emb.codes,
                lowercase=emb.is_lowercase,
                fingerprint=emb.fingerprint,
                params=emb.describe_quantization(),
                prior=prior,
                levels=emb.levels,
            )
        return web_artefact(
            "madlib", words, emb.vectors, lowercase=emb.is_lowercase, fingerprint=emb.fingerprint, prior=prior
        )
    raise EmbeddingError(f"no web device artefact for mechanism {name!r} (brr and madlib have one)")


def _prior_of(mechanism: Any) -> tuple[dict[str, str], npt.NDArray[np.float64]] | None:
    """``(manifest record, log prior per word)`` of a mechanism's non-uniform decode prior; None if uniform.

    The record is the one the mechanism's manifest holds (``describe()``: ``prior`` and, for a
    counts file, ``prior_sha256``); uniform is every word alike (the mechanisms' ``is_uniform``).
    """
    from ..priors import make_prior

    spec = getattr(mechanism, "prior", "uniform")
    if isinstance(spec, str) and spec == "uniform":
        return None
    logp = make_prior(spec, mechanism.embedding).log()
    if np.all(logp == logp[0]):
        return None
    described = mechanism.describe()
    return {k: str(described[k]) for k in ("prior", "prior_sha256") if k in described}, logp


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
