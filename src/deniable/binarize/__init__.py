"""Binary word codes for BRR (SPEC section 4): m-bit codes, m in {64, 128, 256, 512}.

- ``"autoencoder"``: the near-lossless binarizing autoencoder of Tissier, Gravier and
  Habrard (AAAI 2019), one weight matrix shared by encoder and decoder, trained here on
  the embedding itself (numpy, minibatch Adam).
- ``"simhash"`` (alias ``"random"``): sign of a Gaussian random projection.
- ``"itq"``: iterative quantization (PCA + learned rotation).

:func:`binarize` returns the packed codes of every word, a read-only ``(V, bits // 8)``
uint8 matrix. Trained codes are cached on disk next to the embedding, keyed by method,
bits, seed and hyper-parameters, and memory-mapped on the next call. The
:mod:`deniable.binarize.device` module holds the on-device artefact (codes + words only) and
:class:`~deniable.binarize.device.CodeVocabulary`, the vocabulary it loads as.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .._errors import EmbeddingError, InvalidParameterError
from .._threads import one_blas_thread
from .._validation import check_choice, check_int
from ..artefacts import register_kind
from ._methods import autoencoder_codes, itq_codes, simhash_codes, train_autoencoder
from .device import CodeVocabulary

if TYPE_CHECKING:
    from ..embedding import Embedding, Vocabulary

__all__ = [
    "ALIASES",
    "BINARIZERS",
    "BITS",
    "CODES_KIND",
    "CodeVocabulary",
    "autoencoder_codes",
    "binarize",
    "build_codes_artefact",
    "check_binarizer",
    "check_binarizer_options",
    "check_bits",
    "check_codes",
    "codes_artefact_params",
    "codes_cache_path",
    "itq_codes",
    "simhash_codes",
    "train_autoencoder",
]

#: Supported code lengths.
BITS = (64, 128, 256, 512)
#: Binarizer names.
BINARIZERS = ("autoencoder", "simhash", "itq")
#: Other accepted names -> canonical name.
ALIASES = {"random": "simhash", "sign": "simhash"}

_OPTIONS: dict[str, dict[str, Any]] = {
    "autoencoder": {
        "epochs": 5,
        "batch_size": 256,
        "learning_rate": 1e-3,
        "lam": 1.0,
        "max_train_rows": 100000,
    },
    "itq": {"iterations": 50, "max_train_rows": 10000},
    "simhash": {},
}


def check_bits(bits: object, name: str = "bits") -> int:
    """A code length in :data:`BITS`."""
    if isinstance(bits, bool) or not isinstance(bits, int | np.integer) or int(bits) not in BITS:
        raise InvalidParameterError(name, bits, "one of " + ", ".join(map(str, BITS)))
    return int(bits)


def check_binarizer(method: object, name: str = "binarizer") -> str:
    """A binarizer name (aliases resolved)."""
    if isinstance(method, str) and method in ALIASES:
        return ALIASES[method]
    return check_choice(name, method, BINARIZERS)


def check_codes(codes: npt.ArrayLike, rows: int | None = None, name: str = "codes") -> npt.NDArray[np.uint8]:
    """Packed codes: a 2-d uint8 array with at least one byte per row (and ``rows`` rows)."""
    arr = np.asarray(codes)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] == 0:
        raise InvalidParameterError(
            name, f"array of dtype {arr.dtype} and shape {arr.shape}", "a (V, bits // 8) uint8 array of packed bits"
        )
    if rows is not None and arr.shape[0] != rows:
        raise InvalidParameterError(name, f"array with {arr.shape[0]} rows", f"one row per word ({rows} rows)")
    return arr


def check_binarizer_options(method: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` for binarizer ``method``, validated and completed with the defaults."""
    known = _OPTIONS[method]
    for key in options:
        if key not in known:
            allowed = ", ".join(known) if known else "none"
            raise InvalidParameterError(f"binarizer option {key!r}", options[key], f"{method} options: {allowed}")
    merged = {**known, **options}
    for key in ("epochs", "batch_size", "iterations"):
        if key in merged:
            merged[key] = check_int(key, merged[key], minimum=1)
    if merged.get("max_train_rows") is not None:
        merged["max_train_rows"] = check_int("max_train_rows", merged["max_train_rows"], minimum=2)
    for key in ("learning_rate", "lam"):
        if key in merged:
            value = merged[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value) or value < 0:
                raise InvalidParameterError(key, value, "a finite number >= 0")
            merged[key] = float(value)
    return merged


#: The prepared-artefact kind of trained codes (:mod:`deniable.artefacts`) and its file.
CODES_KIND = "binary-codes"
CODES_FILE = "codes.npy"


def codes_artefact_params(method: str, bits: int, seed: int, options: dict[str, Any]) -> dict[str, Any]:
    """The store parameters of codes (method, bits, seed and the binarizer's full options)."""
    return {"method": method, "bits": int(bits), "seed": int(seed), "options": dict(options)}


def codes_cache_path(embedding: Embedding, method: str, bits: int, seed: int, options: dict[str, Any]) -> Path:
    """Where the codes for these parameters are kept: the file of their prepared artefact.

    It exists only once the artefact is complete (built in a temporary folder, renamed into place).
    """
    from ..artefacts import artefact_path

    return artefact_path(embedding, CODES_KIND, codes_artefact_params(method, bits, seed, options)) / CODES_FILE


def _legacy_codes_path(embedding: Embedding, method: str, bits: int, seed: int, options: dict[str, Any]) -> Path:
    """The codes file of versions before the prepared-artefact store (no checksum)."""
    key = json.dumps({"method": method, "bits": bits, "seed": seed, "options": options, "v": 1}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return embedding.cache_path("binary-codes", f"{method}-{bits}b-seed{seed}-{digest}.npy")


def _compute_codes(
    embedding: Embedding, bits: int, method: str, seed: int, show_progress: bool | None, opts: dict[str, Any]
) -> npt.NDArray[np.uint8]:
    x = embedding.vectors
    if method == "simhash":
        return simhash_codes(x, bits, seed)
    if method == "itq":
        return itq_codes(x, bits, seed, show_progress=show_progress, **opts)
    return autoencoder_codes(x, bits, seed, show_progress=show_progress, **opts)


def build_codes_artefact(
    embedding: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None
) -> None:
    """Write ``codes.npy``: the packed codes of every word of ``embedding`` (a registered artefact builder).

    A codes file of the cache of versions before the store is taken over when it has the
    right dtype and shape, else the codes are computed.
    """
    from ..embedding import Embedding

    embedding = Embedding.check(embedding)
    method, bits, seed, opts = str(params["method"]), int(params["bits"]), int(params["seed"]), params["options"]
    codes: npt.NDArray[np.uint8] | None = None
    legacy = _legacy_codes_path(embedding, method, bits, seed, opts)
    if legacy.is_file():
        try:
            old = np.load(legacy, mmap_mode="r", allow_pickle=False)
            if old.dtype == np.uint8 and old.shape == (embedding.size, bits // 8):
                codes = np.asarray(old)
        except (OSError, ValueError):
            codes = None
    if codes is None:
        # 1 BLAS thread (deniable._threads): the training's small products lose on 2 threads (50k
        # words at load 6: 2.1 s against 7.5 s; bench/bench_prepare.py -m brr --workers 0,1,2)
        with one_blas_thread():
            codes = _compute_codes(embedding, bits, method, seed, show_progress, opts)
    with open(folder / CODES_FILE, "wb") as fh:
        np.save(fh, codes, allow_pickle=False)


def binarize(
    embedding: Embedding,
    bits: int = 256,
    method: str = "autoencoder",
    *,
    seed: int = 0,
    cache: bool = True,
    show_progress: bool | None = None,
    **options: Any,
) -> npt.NDArray[np.uint8]:
    """Packed ``bits``-bit codes of every word of ``embedding``, a read-only uint8 ``(V, bits // 8)`` matrix.

    Parameters
    ----------
    embedding
        The float embedding to binarize.
    bits
        Code length: 64, 128, 256 or 512.
    method
        ``"autoencoder"`` (Tissier et al.), ``"simhash"`` (alias ``"random"``) or ``"itq"``.
    seed
        Seed of the training / projection (a public parameter, not privacy noise): the
        same seed gives the same codes.
    cache
        Read / write the codes as a prepared artefact (:mod:`deniable.artefacts`: manifest,
        sha256 verified once per process, memory-mapped; a damaged copy is rebuilt).
    show_progress
        Progress bar (default: when stderr is a terminal).
    options
        Hyper-parameters. autoencoder: ``epochs`` (5), ``batch_size`` (256),
        ``learning_rate`` (1e-3), ``lam`` (1.0, the orthogonality weight),
        ``max_train_rows`` (100000 random rows; ``None`` = all). itq: ``iterations``
        (50), ``max_train_rows`` (10000).
    """
    bits = check_bits(bits)
    method = check_binarizer(method)
    seed = check_int("seed", seed, minimum=0)
    opts = check_binarizer_options(method, options)
    if not cache:
        codes = _compute_codes(embedding, bits, method, seed, show_progress, opts)
        codes.flags.writeable = False
        return codes
    from ..artefacts import build_artefact

    info = build_artefact(
        embedding, CODES_KIND, codes_artefact_params(method, bits, seed, opts), show_progress=show_progress
    )
    codes = np.load(info.file(CODES_FILE), mmap_mode="r", allow_pickle=False)
    if codes.dtype != np.uint8 or codes.shape != (embedding.size, bits // 8):
        raise EmbeddingError(f"prepared codes {info.path} have shape {codes.shape}; rebuild them with deniable prepare")
    return codes


# the store's kind, declared where its builder is
register_kind(
    CODES_KIND,
    build_codes_artefact,
    about="the binary codes of the words BRR privatizes",
)
