"""Posterior-mode decoding: the ``prior`` option of the perturb-then-decode mechanisms (issue 44).

The noise pays for the guarantee; the decode is post-processing of the noisy vector (or code)
and may use anything public. Under a public prior over words the most probable input word
given the noisy observation ``v`` is

- madlib (density ``∝ exp(-eps ||z||)``): ``argmax_y log prior(y) - eps ||v - phi(y)||``;
- mahalanobis (density ``∝ exp(-eps ||S^-1/2 z||)``): the same in the whitened space,
  ``argmax_y log prior(y) - eps ||S^-1/2 (v - phi(y))||``;
- brr (bits flipped with probability ``p = 1 / (1 + e^eps)``):
  ``argmax_y log prior(y) + hamming(b_hat, c(y)) log(p / (1 - p))`` and ``log(p / (1 - p)) = -eps``;
  words sharing a code differ only by their prior: the most probable of them (lowest id on ties).

``prior="uniform"`` keeps each mechanism's nearest-neighbour decode exactly (the same code path,
byte-identical outputs under a seed). The decoders here read only the noisy rows, the public
vectors / codes, epsilon and the public prior: never the input word.

Everything is a full scan (exact): blocked GEMMs (``[q, 1, |q|^2] @ [-2 y; |y|^2; 1]`` gives the
squared distances in one product), a square root and one bias vector per block, a running
best; memory stays at ``query_block * vocab_block`` floats.

May import: numpy, :mod:`deniable._errors`, :mod:`deniable.priors`, :mod:`deniable.index` (faiss's exact binary search).
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from ..artefacts import file_sha256
from ..priors import Prior, make_prior
from ._options import Option

__all__ = [
    "PRIOR_OPTION",
    "CodePosteriorDecoder",
    "PosteriorDecoder",
    "check_prior",
    "is_contextual",
    "is_uniform",
    "load_contextual",
    "load_prior",
    "ngram_record",
    "prior_record",
    "second_neighbour_probability",
    "vickrey_choice",
]

#: The ``prior`` option every perturb-then-decode mechanism declares (operator-only: never a client's).
PRIOR_OPTION = Option(
    "prior",
    str,
    "uniform",
    objects=True,
    client=False,
    # not --prior: evaluate's --prior is the attacker's prior, and one run can set both
    flag="--decode-prior",
    help="public prior of the decode: uniform (nearest neighbour, today's decode), zipf, zipf:S (Zipf over the "
    "embedding's row order) or counts:PATH (word counts of a public text file): the posterior mode; madlib and "
    "mahalanobis also ngram:PATH (a public n-gram model made by `deniable prepare --ngram FILE`: each text "
    "decoded jointly); same privacy (post-processing)",
)
_ALLOWED = "uniform, zipf, zipf:S or counts:PATH"
_ALLOWED_CONTEXTUAL = "uniform, zipf, zipf:S, counts:PATH or ngram:PATH"


def check_prior(spec: object, *, contextual: bool = False) -> str | Prior:
    """``spec`` checked for its form (a :class:`Prior` as is); a counts file must exist. Nothing is read.

    ``contextual``: the mechanism decodes ``ngram:PATH`` (madlib, mahalanobis): PATH must be a prepared
    model (a folder of ``deniable prepare --ngram FILE``, or a ``.npz`` of :meth:`NgramModel.save`), never
    the text itself. Elsewhere ``ngram:`` is refused, naming ``prior``.
    """
    allowed = _ALLOWED_CONTEXTUAL if contextual else _ALLOWED
    if isinstance(spec, Prior):
        return spec
    if not isinstance(spec, str):
        raise InvalidParameterError("prior", type(spec).__name__, allowed)
    kind, _, arg = spec.partition(":")
    if kind == "ngram":
        _check_ngram(spec, arg, contextual)
        return spec
    if kind == "uniform" and not arg:
        return spec
    if kind == "zipf":
        try:
            exponent = float(arg) if arg else 1.0
        except ValueError:
            raise InvalidParameterError("prior", spec, "zipf:S with a number S in [0, 10]") from None
        if not 0 <= exponent <= 10:
            raise InvalidParameterError("prior", spec, "zipf:S with a number S in [0, 10]")
        return spec
    if kind == "counts" and arg:
        if not Path(arg).is_file():
            raise InvalidParameterError("prior", spec, "counts:PATH with PATH an existing text file")
        return spec
    raise InvalidParameterError("prior", spec, allowed)


def _check_ngram(spec: str, arg: str, contextual: bool) -> None:
    """``ngram:PATH``: where it is decoded, and PATH a prepared model (not its text)."""
    from ..ngram import is_model_path

    if not contextual:
        raise InvalidParameterError(
            "prior", spec, f"{_ALLOWED} (the contextual ngram:PATH prior decodes madlib and mahalanobis only)"
        )
    if not arg:
        raise InvalidParameterError("prior", spec, "ngram:PATH with PATH a model of `deniable prepare --ngram FILE`")
    path = Path(arg)
    if is_model_path(path):
        return
    if path.is_file():
        raise InvalidParameterError(
            "prior",
            spec,
            "ngram:PATH with PATH a prepared n-gram model, not a text file: run `deniable prepare --ngram FILE` "
            "on the public text and give the folder it prints",
        )
    raise InvalidParameterError(
        "prior", spec, "ngram:PATH with PATH an existing model folder of `deniable prepare --ngram FILE` (or a .npz)"
    )


def is_uniform(spec: str | Prior) -> bool:
    """Whether ``spec`` is the uniform prior (the nearest-neighbour decode)."""
    return (spec == "uniform") if isinstance(spec, str) else bool(np.all(spec.probs == spec.probs[0]))


def is_contextual(spec: str | Prior) -> bool:
    """Whether ``spec`` is a contextual prior (``ngram:PATH``: a joint decode of each text)."""
    return isinstance(spec, str) and spec.startswith("ngram:")


def load_prior(spec: str | Prior, vocab: Any) -> Prior:
    """The :class:`Prior` ``spec`` names over ``vocab`` (reads a counts file); a contextual one has none."""
    return make_prior(spec, vocab)


def load_contextual(spec: str, vocab: Any) -> Any:
    """The :class:`~deniable.ngram.NgramModel` of ``ngram:PATH`` over ``vocab`` (verified, memory-mapped)."""
    from .._errors import DataError
    from ..ngram import load_ngram

    try:
        return load_ngram(spec.partition(":")[2], vocab)
    except InvalidParameterError as exc:  # the vocabulary check names "ngram": here the option is prior
        raise InvalidParameterError("prior", spec, exc.allowed) from None
    except DataError as exc:
        raise InvalidParameterError("prior", spec, f"a readable prepared n-gram model ({exc})") from None


def ngram_record(model: Any) -> dict[str, str]:
    """A manifest's record of an n-gram prior: the training text's name and the model's sha256 (never a path)."""
    return {"prior": f"ngram:{model.source or 'model'}", "prior_sha256": model.digest()}


def prior_record(spec: str | Prior) -> dict[str, str]:
    """What a manifest records of the prior: its source and, for a counts file, the file's name and sha256
    (for ``ngram:PATH``: the training text's name and the model's sha256, :meth:`NgramModel.digest`)."""
    if isinstance(spec, Prior):
        digest = hashlib.sha256(np.ascontiguousarray(spec.probs).tobytes()).hexdigest()
        return {"prior": spec.source, "prior_sha256": digest}
    kind, _, arg = spec.partition(":")
    if kind == "ngram":
        from ..ngram import load_ngram

        return ngram_record(load_ngram(arg))
    if kind != "counts":
        return {"prior": spec}
    return {"prior": f"counts:{Path(arg).name}", "prior_sha256": file_sha256(arg)}


def _penalty(prior: Prior, epsilon: float) -> npt.NDArray[np.float64]:
    """``(max log prior - log prior(y)) / epsilon`` >= 0: the prior's cost in distance units."""
    logp = prior.log()
    return (logp.max() - logp) / float(epsilon)


class PosteriorDecoder:
    """``argmin_y ||W (v - phi(y))|| + (max log prior - log prior(y)) / eps``: the posterior mode.

    ``transform``: ``W`` (Mahalanobis's ``Sigma^-1/2``, symmetric) or None (Euclidean, madlib).
    The score is the "prior-penalised distance" ``s(y) = d(y) + pen(y)`` (>= the distance;
    equal to it under a uniform prior). :meth:`top` returns the best ``k`` (1 or 2) ids and scores.

    Exact, by a full scan with a proof of what it skips. The columns are held in increasing
    penalty, cut into segments (``_HEAD`` words, then doubling widths up to a vocabulary block,
    then one segment per block). Pass 1 is the nearest decode's work: per vocabulary block one GEMM
    of squared distances and its argmin (one per segment in the first block): each segment's
    smallest distance ``dmin_h`` at its column ``j_h``; the first segment (the most probable words)
    is scored exactly there, from the same distances. ``S_h = sqrt(dmin_h) + pen(j_h)`` is a real
    score (the best of them and the head's the first answer ``U``) and ``LB_h = sqrt(dmin_h) +
    pen(a_h)`` (``a_h`` the segment's first column) a bound no word of ``h`` beats. Pass 2 scores
    exactly, per row, only the segments with ``LB_h <= U``, and of those only the columns before
    ``j_h`` (every later column has a distance >= ``dmin_h`` and a penalty >= ``pen(j_h)``: it
    cannot beat ``S_h``); ``k = 2`` scans such segments whole. Ties go to the lowest column
    (penalty order, then vocabulary order); a tolerance keeps float32 rounding on the safe side.
    Rows are split across :func:`deniable._threads.decode_workers` threads of one BLAS thread
    each, as the exact index does. Memory: ``query_block * vocab_block`` floats and ``rows x
    segments`` per chunk of rows. ``bench/bench_prior_decode.py``: 0.85-0.86x of the nearest
    decode's tokens/s at 50k and 336k words, 0.67x at 5k (one thread, same run, idle machine).
    """

    #: the most probable words: the first segment, scored exactly in pass 1 (then doubling widths)
    _HEAD = 256
    #: rows decoded together (pass 1 then pass 2: numpy's per-call cost amortised), at most
    _SCAN_ROWS = 8192
    #: rows x segments held per chunk of rows, at most (the chunk shrinks for a large vocabulary)
    _CHUNK_CELLS = 1 << 21

    def __init__(
        self,
        vectors: npt.ArrayLike,
        prior: Prior,
        epsilon: float,
        *,
        transform: npt.NDArray[np.float64] | None = None,
        vocab_block: int = 8192,
        query_block: int = 256,
    ) -> None:
        x: np.ndarray = np.asarray(vectors, dtype=np.float64 if transform is not None else np.float32)
        if transform is not None:
            x = x @ np.asarray(transform, dtype=np.float64).T
        if prior.size != x.shape[0]:
            raise InvalidParameterError("prior", prior.source, f"a prior over the {x.shape[0]:,} vocabulary words")
        self.transform = None if transform is None else np.asarray(transform, dtype=np.float64)
        self.penalty64 = _penalty(prior, epsilon)
        # columns in increasing penalty (stable: equal penalties keep the vocabulary order)
        self._order = np.argsort(self.penalty64, kind="stable").astype(np.int64)
        x32 = np.ascontiguousarray(np.asarray(x, dtype=np.float32)[self._order])
        self.d = int(x32.shape[1])
        self.ntotal = int(x32.shape[0])
        self.query_block = int(query_block)
        self.vocab_block = min(int(vocab_block), self.ntotal)
        sq = np.einsum("ij,ij->i", x32, x32, dtype=np.float32)
        # [-2 y; |y|^2; 1] so that [q, 1, |q|^2] @ aug = |q - y|^2 in one product
        self._aug = np.empty((self.d + 2, self.ntotal), dtype=np.float32)
        self._aug[: self.d] = -2.0 * x32.T
        self._aug[self.d] = sq
        self._aug[self.d + 1] = 1.0
        big = np.finfo(np.float32).max
        self._penalty = np.minimum(self.penalty64[self._order], big).astype(np.float32)  # sorted
        # segments: _HEAD columns, then doubling widths up to a vocabulary block, then one per block
        # (no segment straddles two blocks)
        bounds = set(range(0, self.ntotal, self.vocab_block)) | {self.ntotal}
        width = min(self._HEAD, self.vocab_block)
        while width < self.vocab_block:
            bounds.add(min(width, self.ntotal))
            width *= 2
        self._segments = np.asarray(sorted(bounds), dtype=np.int64)

    def _prepare(self, noisy: npt.ArrayLike) -> npt.NDArray[np.float32]:
        q: np.ndarray = np.asarray(noisy, dtype=np.float64 if self.transform is not None else np.float32)
        if q.ndim != 2 or q.shape[1] != self.d:
            raise InvalidParameterError("noisy vectors", f"shape {q.shape}", f"(n, {self.d}) rows")
        if self.transform is not None:
            q = q @ self.transform.T
        return np.ascontiguousarray(q, dtype=np.float32)

    def top(self, noisy: npt.ArrayLike, k: int = 1) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """The ``k`` (1 or 2) best ids per row, best first, and their penalised distances."""
        from concurrent.futures import ThreadPoolExecutor

        from .._threads import decode_workers, one_blas_thread

        q = self._prepare(noisy)
        n = q.shape[0]
        kk = min(k, self.ntotal)
        out_s = np.empty((n, kk), dtype=np.float32)
        out_i = np.empty((n, kk), dtype=np.int64)
        qa = np.empty((n, self.d + 2), dtype=np.float32)
        qa[:, : self.d] = q
        qa[:, self.d] = 1.0
        qa[:, self.d + 1] = np.einsum("ij,ij->i", q, q, dtype=np.float32)
        groups = len(self._segments) - 1
        chunk = max(self.query_block, min(self._SCAN_ROWS, self._CHUNK_CELLS // groups))
        chunk -= chunk % self.query_block
        if n > chunk:  # at least two chunks per worker when there are several workers
            chunk = max(self.query_block, min(chunk, -(-n // (2 * decode_workers()))))

        def one(s: int) -> None:
            sc, col = self._decode_rows(qa[s : s + chunk], kk)
            out_s[s : s + chunk], out_i[s : s + chunk] = sc, self._order[col]

        starts = range(0, n, chunk)
        workers = min(decode_workers(), len(starts))
        if workers <= 1:
            for s in starts:
                one(s)
            return out_s, out_i
        with one_blas_thread() as single:  # the exact index's thread policy (deniable._threads)
            if not single:
                for s in starts:
                    one(s)
                return out_s, out_i
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(one, starts))
        return out_s, out_i

    def decode(self, noisy: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The posterior mode of each row of ``noisy`` (float32 distances; see :meth:`decode_far`)."""
        return self.top(noisy, 1)[1][:, 0]

    def decode_far(self, noisy: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """The posterior mode of rows too large for float32 distances, in float64 (a plain full scan).

        ``||v - y|| - ||v|| = (|y|^2 - 2 v.y) / (||v - y|| + ||v||)``: every term finite and the
        differences between words kept whatever ``||v||`` (epsilon down to 1e-300).
        """
        v = np.asarray(noisy, dtype=np.float64)
        if self.transform is not None:
            v = v @ self.transform.T
        scale = np.abs(v).max(axis=1, keepdims=True)
        scale[scale == 0] = 1.0
        u = v / scale
        usq = np.einsum("ij,ij->i", u, u)[:, None]
        vnorm = scale * np.sqrt(usq)
        best = np.full(v.shape[0], np.inf)
        out = np.zeros(v.shape[0], dtype=np.int64)
        pen = self.penalty64[self._order]
        for a in range(0, self.ntotal, 32768):
            b = a + 32768
            y = -0.5 * self._aug[: self.d, a:b].T.astype(np.float64)  # the (sorted) vectors
            ysq = np.einsum("ij,ij->i", y, y)[None, :]
            for r in range(0, v.shape[0], 64):
                uy = u[r : r + 64] @ y.T
                sc = scale[r : r + 64]
                dist = sc * np.sqrt(np.maximum(usq[r : r + 64] - 2.0 * uy / sc + ysq / sc / sc, 0.0))
                score = (ysq - 2.0 * sc * uy) / (dist + vnorm[r : r + 64]) + pen[a:b]
                arg = np.argmin(score, axis=1)
                val = score[np.arange(arg.size), arg]
                better = val < best[r : r + 64]
                best[r : r + 64][better] = val[better]
                out[r : r + 64][better] = arg[better] + a
        return self._order[out]

    def _decode_rows(self, qa: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` (scores, sorted columns) of the augmented rows ``qa``, exactly."""
        seg_d, seg_j, head_s, head_c = self._pass1(qa, k)
        segs = self._segments
        starts = segs[:-1]
        root = np.sqrt(np.maximum(seg_d, 0.0))
        lower = root + self._penalty[starts][None, :]  # no word of segment h scores below it
        cand = root + self._penalty[starts[None, :] + seg_j]  # the score of segment h's nearest word
        nq = qa.shape[0]
        rows = np.arange(nq)
        if k == 1:
            cand[:, 0] = head_s[:, 0]  # the first segment is scored already
            seg_j[:, 0] = head_c[:, 0]
            h = np.argmin(cand, axis=1)  # the lowest segment on ties: the lowest column
            best_s = cand[rows, h]
            best_c = starts[h] + seg_j[rows, h]
            bound = best_s
        else:
            both = np.concatenate([head_s, cand[:, 1:]], axis=1)  # distinct words: k-th best is a bound
            bound = np.partition(both, k - 1, axis=1)[:, k - 1]
            best_s, best_c = head_s.copy(), head_c.copy()
        tol = np.float32(1e-4) * (np.abs(bound) + 1.0)
        active = lower <= (bound + tol)[:, None]
        active[:, 0] = False
        if k == 1:
            active &= seg_j > 0  # only the columns before j_h can beat S_h
        for g in np.flatnonzero(active.any(axis=0)):
            sel = rows[active[:, g]]
            if k == 1:  # the answer may have improved since: the bound again
                sel = sel[lower[sel, g] <= best_s[sel] + tol[sel]]
                if sel.size == 0:
                    continue
            a = int(starts[g])
            b = a + int(seg_j[sel, g].max()) if k == 1 else int(segs[g + 1])
            sc = self._scores_range(qa[sel], a, b)
            cs, cc = _smallest(sc, min(k, b - a))
            cc += a
            if k == 1:
                s1, c1 = cs[:, 0], cc[:, 0]
                cur_s, cur_c = best_s[sel], best_c[sel]
                better = (s1 < cur_s) | ((s1 == cur_s) & (c1 < cur_c))
                best_s[sel[better]] = s1[better]
                best_c[sel[better]] = c1[better]
                continue
            both_s = np.concatenate([best_s[sel], cs], axis=1)
            both_c = np.concatenate([best_c[sel], cc], axis=1)
            pick = np.lexsort((both_c, both_s), axis=1)[:, :k]
            best_s[sel] = np.take_along_axis(both_s, pick, axis=1)
            best_c[sel] = np.take_along_axis(both_c, pick, axis=1)
        if k == 1:
            return best_s[:, None], best_c[:, None]
        return best_s, best_c

    def _pass1(self, qa: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each segment's smallest squared distance and its column in the segment (``(rows, segments)``),
        and the first segment's best ``k`` exact (scores, columns).

        Per vocabulary block: one GEMM into a contiguous buffer and one argmin per segment in it
        (one for every block past the first): the nearest decode's work."""
        n = qa.shape[0]
        segs = self._segments
        groups = len(segs) - 1
        vb = self.vocab_block
        head = int(segs[1])
        seg_d = np.empty((groups, n), dtype=np.float32)
        seg_j = np.empty((groups, n), dtype=np.intp)
        head_s = np.empty((n, k), dtype=np.float32)
        head_c = np.empty((n, k), dtype=np.int64)
        qmax = min(self.query_block, n)
        buf = np.empty(qmax * vb, dtype=np.float32)
        flat = np.empty(qmax, dtype=np.intp)
        rows = np.arange(qmax, dtype=np.intp)
        for s in range(0, n, self.query_block):
            qb = qa[s : s + self.query_block]
            nq = qb.shape[0]
            for v0 in range(0, self.ntotal, vb):
                blk = self._aug[:, v0 : v0 + vb]
                wb = blk.shape[1]
                dist = buf[: nq * wb].reshape(nq, wb)
                np.matmul(qb, blk, out=dist)
                off = rows[:nq] * wb
                g0 = int(np.searchsorted(segs, v0, side="right")) - 1
                g1 = int(np.searchsorted(segs, v0 + wb, side="left"))
                for g in range(g0, g1):
                    a, b = int(segs[g]) - v0, int(segs[g + 1]) - v0
                    jg = seg_j[g, s : s + nq]
                    np.argmin(dist[:, a:b], axis=1, out=jg)
                    np.add(jg, off, out=flat[:nq])
                    if a:
                        flat[:nq] += a
                    np.take(buf, flat[:nq], out=seg_d[g, s : s + nq])
                if v0 == 0:  # the most probable words, scored exactly from the same distances
                    sc = np.maximum(dist[:, :head], 0.0)
                    np.sqrt(sc, out=sc)
                    sc += self._penalty[:head]
                    hs, hc = _smallest(sc, min(k, head))
                    head_s[s : s + nq, : hs.shape[1]], head_c[s : s + nq, : hs.shape[1]] = hs, hc
                    if hs.shape[1] < k:  # a one-column first segment: no second word in it
                        head_s[s : s + nq, hs.shape[1] :], head_c[s : s + nq, hs.shape[1] :] = np.inf, 0
        return seg_d.T, seg_j.T, head_s, head_c

    def _scores_range(self, qa: np.ndarray, a: int, b: int) -> np.ndarray:
        """Exact penalised distances of rows ``qa`` (augmented) to the sorted columns ``a:b``."""
        sc = qa @ self._aug[:, a:b]
        np.maximum(sc, 0.0, out=sc)
        np.sqrt(sc, out=sc)
        sc += self._penalty[a:b]
        return sc


def _smallest(sc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` (1 or 2) smallest entries of each row and their columns, smallest first (lowest column on ties)."""
    rows = np.arange(sc.shape[0])
    j = np.argmin(sc, axis=1)
    s1 = sc[rows, j]
    if k == 1:
        return s1[:, None], j[:, None]
    sc = np.array(sc, copy=True)
    sc[rows, j] = np.inf
    j2 = np.argmin(sc, axis=1)
    return np.stack([s1, sc[rows, j2]], axis=1), np.stack([j, j2], axis=1)


def second_neighbour_probability(d1: npt.ArrayLike, d2: npt.ArrayLike, t: float) -> npt.NDArray[np.float64]:
    """``t d1 / (t d1 + (1 - t) d2)`` (Vickrey's rule, :mod:`.vickrey`); ``t`` where both distances are 0."""
    a = t * np.asarray(d1, dtype=np.float64)
    b = (1.0 - t) * np.asarray(d2, dtype=np.float64)
    den = a + b
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, a / np.where(den > 0, den, 1.0), t)


def vickrey_choice(
    scores: npt.NDArray[np.floating], ids: npt.NDArray[np.int64], t: float, u: npt.NDArray[np.float64]
) -> npt.NDArray[np.int64]:
    """Vickrey's mixing on the two most probable words: the second with ``t s1 / (t s1 + (1 - t) s2)``.

    ``s1 <= s2``: their prior-penalised distances (the distances under a uniform prior, where
    this is the paper's rule on the two nearest words).
    """
    if ids.shape[1] < 2:
        return ids[:, 0].astype(np.int64)
    s = scores.astype(np.float64)
    p2 = second_neighbour_probability(s[:, 0], s[:, 1], t)
    return np.where(u < p2, ids[:, 1], ids[:, 0]).astype(np.int64)


class CodePosteriorDecoder:
    """``argmax_y log prior(y) - eps * hamming(b_hat, c(y))``: BRR's posterior mode, exactly.

    Per distinct code ``g``: its most probable word (lowest id on ties) and the penalty
    ``pen_g = (max log prior - log prior(best word of g)) / eps`` in flips; the decode is
    ``argmin_g hamming(b_hat, c_g) + pen_g``. The codes are held in increasing penalty, cut into
    segments (``_HEAD`` codes, then doubling widths up to ``_MAX_CHUNK``), each searched by
    faiss's exact ``IndexBinaryFlat`` (one popcount pass over all the codes, as the nearest
    decode's): each segment's nearest code gives ``LB_h = dmin_h + pen(first of h)`` (no code of
    ``h`` scores less) and a real score. A row scores a segment's codes exactly (``+-1`` codes,
    one GEMM: ``hamming = (m - q.c) / 2``, exact integers) only where ``LB_h`` is below its best.
    """

    _HEAD = 64
    _MAX_CHUNK = 4096
    _SCAN_ROWS = 2048

    def __init__(
        self,
        unique_codes: npt.NDArray[np.uint8],
        members: npt.NDArray[np.int64],
        starts: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64],
        prior: Prior,
        epsilon: float,
    ) -> None:
        from ..index.binary import BinaryFlatIndex

        logp = prior.log()
        g = unique_codes.shape[0]
        # the best word of each code: highest prior, lowest id on ties (members are sorted by id)
        member_logp = logp[members]
        order = np.lexsort((members, -member_logp, np.repeat(np.arange(g), counts)))
        first = order[starts]
        best_word = members[first]
        pen = (member_logp.max() - member_logp[first]) / float(epsilon)
        self._order = np.argsort(pen, kind="stable").astype(np.int64)  # codes in increasing penalty
        self.best_word = best_word[self._order]
        self._pen = pen[self._order]
        codes = np.ascontiguousarray(unique_codes[self._order])
        self.bits = int(codes.shape[1] * 8)
        self._signs_t = np.ascontiguousarray((np.unpackbits(codes, axis=1).astype(np.float32) * 2.0 - 1.0).T)
        bounds, width = [0], self._HEAD
        while bounds[-1] < g:
            bounds.append(min(bounds[-1] + width, g))
            width = min(width * 2, self._MAX_CHUNK)
        self._segments = np.asarray(bounds, dtype=np.int64)
        self._flat = [BinaryFlatIndex(codes[a:b]) for a, b in itertools.pairwise(bounds)]

    def decode(self, noisy: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Word ids: the posterior mode of each packed noisy code."""
        q = np.ascontiguousarray(np.asarray(noisy, dtype=np.uint8))
        if q.ndim != 2 or q.shape[1] * 8 != self.bits:
            raise InvalidParameterError("noisy codes", f"{q.shape[-1] * 8}-bit codes", f"{self.bits}-bit codes")
        out = np.empty(q.shape[0], dtype=np.int64)
        for s in range(0, q.shape[0], self._SCAN_ROWS):
            out[s : s + self._SCAN_ROWS] = self.best_word[self._scan(q[s : s + self._SCAN_ROWS])]
        return out

    def _scan(self, q: np.ndarray) -> npt.NDArray[np.int64]:
        n = q.shape[0]
        segs = self._segments
        h_count = len(segs) - 1
        seg_d = np.empty((n, h_count), dtype=np.float64)
        seg_j = np.empty((n, h_count), dtype=np.int64)
        for h, index in enumerate(self._flat):  # one exact popcount pass over all the codes
            d, j = index.search(q, 1)
            seg_d[:, h], seg_j[:, h] = d[:, 0], j[:, 0] + segs[h]
        lower = seg_d + self._pen[segs[:-1]][None, :]
        cand = seg_d + self._pen[seg_j]
        pick = np.argmin(cand, axis=1)
        rows = np.arange(n)
        best_s, best_c = cand[rows, pick], seg_j[rows, pick]
        signs_q: np.ndarray | None = None
        for h in range(h_count):
            active = rows[lower[:, h] < best_s - 1e-9]  # only a strictly better code can change the answer
            if active.size == 0:
                continue
            if signs_q is None:
                signs_q = np.unpackbits(q, axis=1).astype(np.float32) * 2.0 - 1.0
            a, b = int(segs[h]), int(segs[h + 1])
            dot = signs_q[active] @ self._signs_t[:, a:b]  # exact integers
            sc = (self.bits - dot.astype(np.float64)) * 0.5 + self._pen[a:b]
            j = np.argmin(sc, axis=1)
            sj = sc[np.arange(active.size), j]
            better = sj < best_s[active]
            best_s[active[better]] = sj[better]
            best_c[active[better]] = j[better] + a
        return best_c
