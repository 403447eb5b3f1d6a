"""A quantized embedding: 8 bits per coordinate, itself a public embedding (docs/device.md).

:func:`quantize` maps every coordinate of an :class:`~deniable.embedding.Embedding` to one of
256 evenly spaced levels of its dimension (from the column's minimum to its maximum) and
returns a :class:`QuantizedEmbedding`: an ordinary :class:`~deniable.embedding.Embedding`
whose float32 vectors are those levels (``vectors[v, k] = levels[k, codes[v, k]]``), so
every mechanism runs on it unchanged, and whose guarantee is exact in *its* distances. The
codes (one byte per coordinate) and the level table (``(d, 256)`` float32) are what the
on-device madlib artefact ships: 4x smaller than float32, and the JavaScript client rebuilds
the very same float32 vectors by a table lookup (no arithmetic, so bit for bit).

Each coordinate moves by at most half a step, so each vector by at most
:attr:`QuantizedEmbedding.max_error` (measured; ``<= sqrt(d) * max step / 2``): a distance in the
quantized embedding is within ``2 * max_error`` of the source's, and a metric-DP guarantee
``exp(eps * d_q(w, w'))`` in the quantized distances is ``<= exp(eps * (d(w, w') + 2 max_error))``
in the source's.
"""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from .._errors import EmbeddingError
from ._embedding import Embedding

__all__ = ["LEVELS", "QuantizedEmbedding", "quantize"]

#: Levels per dimension (one byte per coordinate).
LEVELS = 256


class QuantizedEmbedding(Embedding):
    """An :class:`Embedding` whose vectors are ``levels[k, codes[v, k]]`` (see :func:`quantize`).

    :attr:`vectors` are the dequantized float32 vectors (what every mechanism uses);
    :attr:`levels` the ``(d, 256)`` float32 table, increasing along each row; :attr:`codes`
    the ``(V, d)`` uint8 codes (the lowest code of each value). A subset keeps the table (and
    stays a :class:`QuantizedEmbedding`); saving writes the float32 vectors (loaded back, an
    ordinary :class:`Embedding` with the same :attr:`fingerprint`). ``source_fingerprint`` is
    the fingerprint of the embedding it was quantized from.
    """

    levels: npt.NDArray[np.float32]
    source_fingerprint: str

    def _derive(self, words: list[str], payload: np.ndarray, name: str) -> Self:
        emb = type(self).__new__(type(self))
        emb._set_parts(words, payload, name, None)
        emb.levels = self.levels
        emb.source_fingerprint = self.source_fingerprint
        emb.max_error = self.max_error
        return emb

    @property
    def codes(self) -> npt.NDArray[np.uint8]:
        """The ``(V, d)`` uint8 codes: per dimension, the lowest level equal to the coordinate."""
        vec = self.vectors
        out = np.empty(vec.shape, dtype=np.uint8)
        for k in range(vec.shape[1]):
            out[:, k] = np.searchsorted(self.levels[k], vec[:, k], side="left")
        return out

    @property
    def bits(self) -> int:
        """Bits per coordinate (8)."""
        return int(np.log2(self.levels.shape[1]))

    #: The largest distance ``||q(w) - phi(w)||`` between a word's quantized and source vectors,
    #: rounded up to 4 significant digits (measured by :func:`quantize`; a subset keeps it as a bound).
    max_error: float

    def describe_quantization(self) -> dict[str, Any]:
        """What a manifest records about the quantization (public)."""
        return {
            "quantization": f"uniform-{self.bits}bit-per-dimension",
            "quantized_from": self.source_fingerprint,
            "max_error": self.max_error,
        }


def quantize(embedding: Embedding, *, bits: int = 8) -> QuantizedEmbedding:
    """The embedding with every coordinate on one of 256 evenly spaced levels of its dimension.

    Dimension ``k``'s levels are ``float32(lo_k + step_k * c)`` for ``c = 0..255``, with
    ``lo_k``, ``hi_k`` the column's minimum and maximum and ``step_k = (hi_k - lo_k) / 255``
    (float64); a coordinate takes the nearest level (``rint``). A function of the public
    embedding only, and deterministic (the same input, the same bytes). Quantize after taking a
    subset (``quantize(emb.subset(n))``): the levels span the words kept.
    """
    if bits != 8:
        raise EmbeddingError(f"quantize: bits={bits!r}; only 8 bits per coordinate is supported")
    emb = Embedding.check(embedding)
    src = np.asarray(emb.vectors)
    n_levels = LEVELS
    v, d = src.shape
    levels = np.empty((d, n_levels), dtype=np.float32)
    out = np.empty((v, d), dtype=np.float32)
    grid = np.arange(n_levels, dtype=np.float64)
    worst_sq = np.zeros(v, dtype=np.float64)  # per word, the squared distance moved
    for k in range(d):
        col = src[:, k].astype(np.float64)
        lo, hi = float(col.min()), float(col.max())
        step = (hi - lo) / (n_levels - 1)
        levels[k] = (lo + step * grid).astype(np.float32)
        if step > 0:
            code = np.clip(np.rint((col - lo) / step), 0, n_levels - 1).astype(np.intp)
        else:
            code = np.zeros(v, dtype=np.intp)
        out[:, k] = levels[k][code]
        worst_sq += (out[:, k].astype(np.float64) - col) ** 2
    worst = float(worst_sq.max())
    if np.any(np.diff(levels.astype(np.float64), axis=1) < 0):  # pragma: no cover - float32 rounding is monotone
        raise EmbeddingError("quantize: levels are not increasing")
    q = QuantizedEmbedding.__new__(QuantizedEmbedding)
    q._set_parts(emb.vocabulary, out, f"{emb.name}[uint8]", dict(emb.index_of))
    levels.flags.writeable = False
    q.levels = levels
    q.source_fingerprint = emb.fingerprint
    q.max_error = _round_up(float(np.sqrt(worst)))
    return q


def _round_up(x: float, digits: int = 4) -> float:
    """``x`` rounded up to ``digits`` significant digits (a bound stays a bound)."""
    if x <= 0:
        return 0.0
    unit = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    r = float(f"{math.ceil(x / unit) * unit:.{digits}g}")
    return r if r >= x else math.nextafter(r, math.inf)
