"""Contextual decoding for madlib and Mahalanobis (issue 44, ``prior="ngram:PATH"``): a joint decode per text.

Post-processing of the noisy vectors only. Per token, the ``k`` best candidates by the unigram
posterior ``log P1(y) - eps ||v - phi(y)||`` (``P1`` the n-gram model's unigram marginal over the
words, ``<unk>`` left out: a release is a word; Mahalanobis: the norm ``||Sigma^-1/2 (v - phi(y))||``
of its noise law), emissions ``-eps ||v - phi(y)||`` (the noise law's log-likelihood up to a
constant), then the n-gram model's joint decode (:func:`deniable.ngram.decode`, Viterbi by default)
**per text**: ``offsets`` are the text starts, so a text's output depends only on its own noisy
vectors and public data (the model, the vectors, epsilon, ``k``), never on the other texts decoded
with it or on how they are batched.

:class:`ContextualDecoder` and :func:`contextual_decode` read nothing but the noisy rows, ``offsets``
and public data: they never see the input words. Cost: a full float64 scan of the vocabulary per
token (``rows x words`` blocks of at most 4M cells, 32 MB), then one numpy step per position within
a text for a group of texts (:func:`deniable.ngram.viterbi`).

May import: numpy, :mod:`deniable._errors`, :mod:`deniable._validation`, :mod:`deniable.ngram`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._validation import check_epsilon, check_int
from ..ngram import DECODERS, NgramModel, decode

__all__ = ["DEFAULT_K", "ContextualDecoder", "contextual_candidates", "contextual_decode"]


#: Candidates per token kept for the joint decode of ``prior="ngram:PATH"``
DEFAULT_K = 16
#: Cells of one block of the candidate scan (rows x vocabulary words, float64): 32 MB
_BLOCK_CELLS = 1 << 22
#: A noisy row whose largest coordinate exceeds this is scanned after scaling (tiny epsilon: no overflow)
_FAR = 1e100


def _vectors(embedding: object) -> npt.NDArray[np.float64]:
    vec = getattr(embedding, "vectors", embedding)
    return np.asarray(vec, dtype=np.float64)


class ContextualDecoder:
    """The joint decode of noisy vectors under a public n-gram model (the ``ngram:PATH`` prior).

    Holds public data only: the word vectors (``transform`` applied: Mahalanobis's ``Sigma^-1/2``, so
    that the Euclidean distance is the noise law's norm), their squared norms, the n-gram model's
    unigram marginal over the words, epsilon and ``k``.
    """

    def __init__(
        self,
        vectors: npt.ArrayLike,
        model: NgramModel,
        epsilon: float,
        *,
        k: int = DEFAULT_K,
        transform: npt.NDArray[np.float64] | None = None,
        method: str = "viterbi",
    ) -> None:
        vec = np.asarray(vectors, dtype=np.float64)
        if vec.ndim != 2 or vec.shape[0] != model.vocab_size:
            raise InvalidParameterError(
                "embedding", f"{vec.shape[0] if vec.ndim == 2 else '?'} rows", f"{model.vocab_size:,} word vectors"
            )
        self.transform = None if transform is None else np.asarray(transform, dtype=np.float64)
        if self.transform is not None:
            vec = vec @ self.transform.T
        self.vectors = np.ascontiguousarray(vec)
        self.ysq = np.einsum("ij,ij->i", self.vectors, self.vectors)
        # [-2 y; |y|^2; 1] per word: [v, 1, |v|^2] @ aug = |v - y|^2 in one product
        self.aug = np.ascontiguousarray(
            np.concatenate([-2.0 * self.vectors.T, self.ysq[None], np.ones((1, vec.shape[0]))])
        )
        p1 = model.unigram()[: model.vocab_size]
        self.logp = np.log(p1 / p1.sum())
        self.model = model
        self.epsilon = check_epsilon(epsilon, "eps")
        self.k = check_int("k", k, minimum=1, maximum=model.vocab_size)
        if method not in DECODERS:
            raise InvalidParameterError("method", method, " or ".join(DECODERS))
        self.method = method

    def candidates(self, noisy: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Each row's ``k`` best words by ``log P1(y) - eps d(v, y)`` (best first, ties to the lower id)
        and their emissions ``-eps d(v, y)``. Exact: a blocked full scan in float64."""
        q = np.asarray(noisy, dtype=np.float64)
        d = self.vectors.shape[1]
        if q.ndim != 2 or q.shape[1] != d:
            raise InvalidParameterError("noisy vectors", f"shape {q.shape}", f"(n, {d}) rows")
        if not np.all(np.isfinite(q)):
            raise InvalidParameterError("noisy vectors", "not finite", "finite rows")
        if self.transform is not None:
            q = q @ self.transform.T
        n, v, kk = q.shape[0], self.vectors.shape[0], self.k
        cand = np.empty((n, kk), dtype=np.int64)
        emis = np.empty((n, kk), dtype=np.float64)
        rows = max(1, min(1024, _BLOCK_CELLS // max(v, 1)))
        cols = max(kk, min(v, _BLOCK_CELLS // rows))
        for a in range(0, n, rows):
            cand[a : a + rows], emis[a : a + rows] = self._scan(q[a : a + rows], cols)
        return cand, emis

    def _scan(self, q: npt.NDArray[np.float64], cols: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The ``k`` best of rows ``q`` over the vocabulary, ``cols`` words at a time (a running best), then
        their distances again exactly (``||v - phi(y)||`` by differences) for the emissions and the order."""
        e, kk, v = self.epsilon, self.k, self.vectors.shape[0]
        scale = np.maximum(np.abs(q).max(axis=1, keepdims=True), 1.0)
        scale[scale < _FAR] = 1.0  # only rows far out are scaled (their squares would overflow)
        u = q / scale
        # [u, 1, |u|^2] @ [-2 y / s; |y|^2 / s^2; 1] = |u - y / s|^2: one product per block (rows scaled alike)
        qa = np.concatenate([u, np.ones((u.shape[0], 1)), np.einsum("ij,ij->i", u, u)[:, None]], axis=1)
        best_s = np.full((q.shape[0], 0), -np.inf)
        best_i = np.zeros((q.shape[0], 0), dtype=np.int64)
        same = bool(np.all(scale == 1.0))
        for c in range(0, v, cols):
            y = self.vectors[c : c + cols]
            if same:
                sc = qa @ self.aug[:, c : c + cols]
            else:  # far rows: each row its own scale
                sc = qa[:, :-2] @ (-2.0 * y.T)
                sc /= scale
                sc += qa[:, -1:] + self.ysq[None, c : c + cols] / scale / scale
            np.maximum(sc, 0.0, out=sc)
            np.sqrt(sc, out=sc)
            sc *= -e * scale
            sc += self.logp[None, c : c + cols]
            top_s, top_i = _top_k(sc, kk)
            best_s, best_i = _merge(best_s, best_i, top_s, top_i + c, kk)
        # the k kept, scored again exactly (by differences) and ordered: best first, ties to the lower id
        diff = u[:, None, :] - self.vectors[best_i] / scale[:, :, None]
        dist = scale * np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
        score = self.logp[best_i] - e * dist
        order = np.lexsort((best_i, -score), axis=1)
        return np.take_along_axis(best_i, order, axis=1), -e * np.take_along_axis(dist, order, axis=1)

    def decode(self, noisy: npt.ArrayLike, offsets: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Word ids: each text's (``offsets``: ``n + 1`` starts) joint decode of its noisy rows."""
        cand, emis = self.candidates(noisy)
        off = np.asarray(offsets, dtype=np.int64)
        return decode(self.model, cand, emis, off, method=self.method, words_only=True)


def _top_k(sc: npt.NDArray[np.float64], k: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Each row's ``k`` largest entries and their columns (ties at the ``k``-th value: the lower columns)."""
    n, c = sc.shape
    if c <= k:
        return sc.copy(), np.broadcast_to(np.arange(c), sc.shape).copy()
    kth = np.partition(sc, c - k, axis=1)[:, c - k]
    rows, cols = np.nonzero(sc >= kth[:, None])
    vals = sc[rows, cols]
    if rows.size != n * k:  # ties at the k-th value: keep the lower columns
        order = np.lexsort((cols, -vals, rows))
        rows, cols, vals = rows[order], cols[order], vals[order]
        first = np.searchsorted(rows, np.arange(n))
        keep = np.arange(rows.size) - first[rows] < k
        rows, cols, vals = rows[keep], cols[keep], vals[keep]
    return vals.reshape(n, k), cols.reshape(n, k)


def _merge(
    s1: npt.NDArray[np.float64],
    i1: npt.NDArray[np.int64],
    s2: npt.NDArray[np.float64],
    i2: npt.NDArray[np.int64],
    k: int,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """The ``k`` best of two running lists per row (ties: the lower id)."""
    if s1.shape[1] == 0:
        return s2, i2
    s = np.concatenate([s1, s2], axis=1)
    i = np.concatenate([i1, i2], axis=1)
    order = np.lexsort((i, -s), axis=1)[:, :k]
    return np.take_along_axis(s, order, axis=1), np.take_along_axis(i, order, axis=1)


def contextual_candidates(
    noisy: npt.ArrayLike,
    model: NgramModel,
    embedding: object,
    eps: float,
    k: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Each row's ``k`` best words by ``log P1(y) - eps d(v, y)`` (best first) and their emissions ``-eps d``.

    Exact (a full blocked scan, a partition per block); among the ``k`` kept, ties go to the lower id.
    """
    return ContextualDecoder(_vectors(embedding), model, eps, k=k).candidates(noisy)


def contextual_decode(
    noisy: npt.ArrayLike,
    offsets: npt.ArrayLike,
    model: NgramModel,
    embedding: object,
    eps: float,
    k: int = DEFAULT_K,
    *,
    method: str = "viterbi",
) -> npt.NDArray[np.int64]:
    """The joint posterior decode (``method="viterbi"``: the most probable word sequence over each
    token's ``k`` candidates; ``"marginal"``: each token's most probable word) of madlib's noisy
    vectors ``noisy`` ``(T, d)``, one text per ``offsets`` interval (``n + 1`` starts, 0 to ``T``).

    ``embedding``: the public word vectors ``(V, d)`` (or an object with ``.vectors``) the model's
    ids index. Returns ``(T,)`` word ids.
    """
    return ContextualDecoder(_vectors(embedding), model, eps, k=k, method=method).decode(noisy, offsets)
