"""Contextual decoding for madlib (issue 44, ``prior="ngram:PATH"``): a joint decode per text.

Post-processing of the noisy vectors only. Per token, the ``k`` best candidates by the unigram
posterior ``log P1(y) - eps ||v - phi(y)||`` (``P1`` the n-gram model's unigram marginal over the
words, ``<unk>`` left out: a release is a word), emissions ``-eps ||v - phi(y)||`` (madlib's
log-likelihood up to a constant), then the n-gram model's joint decode (:func:`deniable.ngram.decode`,
Viterbi by default) **per text**: ``offsets`` are the text starts, so a text's output depends only on
its own noisy vectors and public data (the model, the vectors, epsilon, ``k``), never on the
other texts decoded with it or on how they are batched.

:func:`contextual_decode` reads nothing but ``noisy``, ``offsets`` and public data: it never sees
the input words. Memory: ``row_block * V`` floats for the candidate scan.

May import: numpy, :mod:`deniable._errors`, :mod:`deniable.ngram`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from ..ngram import NgramModel, decode

__all__ = ["contextual_candidates", "contextual_decode"]


def _vectors(embedding: object) -> npt.NDArray[np.float64]:
    vec = getattr(embedding, "vectors", embedding)
    return np.asarray(vec, dtype=np.float64)


def contextual_candidates(
    noisy: npt.ArrayLike,
    model: NgramModel,
    embedding: object,
    eps: float,
    k: int,
    *,
    row_block: int = 1024,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Each row's ``k`` best words by ``log P1(y) - eps d(v, y)`` (best first) and their emissions ``-eps d``.

    Exact (a full blocked scan, a partition per row); among the ``k`` kept, ties go to the lower id.
    """
    vec = _vectors(embedding)
    q = np.asarray(noisy, dtype=np.float64)
    if vec.ndim != 2 or vec.shape[0] != model.vocab_size:
        raise InvalidParameterError(
            "embedding", f"{vec.shape[0] if vec.ndim == 2 else '?'} rows", f"{model.vocab_size:,} word vectors"
        )
    if q.ndim != 2 or q.shape[1] != vec.shape[1]:
        raise InvalidParameterError("noisy vectors", f"shape {q.shape}", f"(n, {vec.shape[1]}) rows")
    if not np.all(np.isfinite(q)):
        raise InvalidParameterError("noisy vectors", "not finite", "finite rows")
    e = float(eps)
    if not np.isfinite(e) or e <= 0:
        raise InvalidParameterError("eps", eps, "a finite epsilon > 0")
    v = vec.shape[0]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= int(k) <= v:
        raise InvalidParameterError("k", k, f"an integer in 1..{v}")
    kk = int(k)
    p1 = model.unigram()[:v]
    logp = np.log(p1 / p1.sum())
    ysq = np.einsum("ij,ij->i", vec, vec)
    n = q.shape[0]
    cand = np.empty((n, kk), dtype=np.int64)
    emis = np.empty((n, kk), dtype=np.float64)
    ids = np.arange(v)
    for a in range(0, n, row_block):
        qb = q[a : a + row_block]
        d2 = np.einsum("ij,ij->i", qb, qb)[:, None] - 2.0 * (qb @ vec.T) + ysq[None, :]
        dist = np.sqrt(np.maximum(d2, 0.0))
        score = logp[None, :] - e * dist
        if kk < v:  # the k best (a partition), then ordered best first, exact ties to the lower id
            part = np.sort(np.argpartition(-score, kk - 1, axis=1)[:, :kk], axis=1)
        else:
            part = np.broadcast_to(ids, score.shape)
        top = np.take_along_axis(score, part, axis=1)
        order = np.take_along_axis(part, np.argsort(-top, axis=1, kind="stable"), axis=1)
        cand[a : a + row_block] = order
        emis[a : a + row_block] = -e * np.take_along_axis(dist, order, axis=1)
    return cand, emis


def contextual_decode(
    noisy: npt.ArrayLike,
    offsets: npt.ArrayLike,
    model: NgramModel,
    embedding: object,
    eps: float,
    k: int = 16,
    *,
    method: str = "viterbi",
) -> npt.NDArray[np.int64]:
    """The joint posterior decode (``method="viterbi"``: the most probable word sequence over each
    token's ``k`` candidates; ``"marginal"``: each token's most probable word) of madlib's noisy
    vectors ``noisy`` ``(T, d)``, one text per ``offsets`` interval (``n + 1`` starts, 0 to ``T``).

    ``embedding``: the public word vectors ``(V, d)`` (or an object with ``.vectors``) the model's
    ids index. Returns ``(T,)`` word ids.
    """
    cand, emis = contextual_candidates(noisy, model, embedding, eps, k)
    off = np.asarray(offsets, dtype=np.int64)
    return decode(model, cand, emis, off, method=method, words_only=True)
