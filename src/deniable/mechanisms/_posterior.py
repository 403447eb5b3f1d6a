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

Everything is a full scan (exact): blocked GEMMs (``[q, 1] @ [-2 y; |y|^2]``, the nearest decode's
product, then ``+ |q|^2``), a square root and one bias vector where a word can still win;
memory stays at ``query_block * vocab_block`` floats.

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
    penalty, cut into segments (``_HEAD`` words, then up to ``_DOUBLINGS`` doubling widths, then
    equal segments of at most a vocabulary block). Pass 1 is the nearest decode's work
    (:class:`~deniable.index.ExactIndex`: the same product ``[q, 1] @ [-2 y; |y|^2]`` on blocks
    of the same shape, 1,024 rows x 2,048 words, and one argmin per segment): each segment's
    smallest squared distance ``dmin_h`` at its column ``j_h``; the first segment (the most
    probable words) is scored exactly there, from the same distances. ``S_h = sqrt(dmin_h) +
    pen(j_h)`` is a real score (the best of them and the head's the first answer ``U``) and a
    column ``c`` of ``h`` scores at least ``sqrt(dmin_h) + pen(c)``. Pass 2 (``k = 1``) scores
    exactly, per row, only the columns of a segment with ``pen(c) <= U - sqrt(dmin_h)`` (a prefix:
    the penalties increase) and before ``j_h`` (every later column has a distance >= ``dmin_h``
    and a penalty >= ``pen(j_h)``: it cannot beat ``S_h``), the rows of a segment grouped by the
    columns they need (``_PASS2_GROUPS`` products); ``k = 2`` scans segments whose bound
    ``sqrt(dmin_h) + pen(a_h)`` is below the second best whole. Ties go to the lowest column
    (penalty order, then vocabulary order); a tolerance keeps float32 rounding on the safe side,
    and every score is the same arithmetic (the product, ``+ |q|^2``, a square root, the
    penalty). Rows are split across :func:`deniable._threads.decode_workers` threads of one
    BLAS thread each, as the exact index does. Memory: ``query_block * vocab_block`` floats and
    ``rows x segments`` per chunk of rows. ``bench/bench_prior_decode.py`` (one thread, same run,
    2026-11-29, idle): 0.94x of the nearest decode's tokens/s at 50k words, 0.98x at 336k, 0.79x
    at 5k.
    """

    #: the most probable words: the first segment, scored exactly in pass 1 (then doubling widths)
    _HEAD = 256
    #: segments of doubling widths after the head, at most (then equal segments of a vocabulary block)
    _DOUBLINGS = 3
    #: pass 2 (k = 1): the rows of a segment scored in this many products (by the columns they need)
    _PASS2_GROUPS = 4
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
        vocab_block: int = 2048,
        query_block: int = 1024,
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
        # [-2 y; |y|^2]: [q, 1] @ aug = |y|^2 - 2 q.y, the nearest decode's product (ExactIndex)
        self._aug = np.empty((self.d + 1, self.ntotal), dtype=np.float32)
        self._aug[: self.d] = -2.0 * x32.T
        self._aug[self.d] = sq
        big = np.finfo(np.float32).max
        self._penalty = np.minimum(self.penalty64[self._order], big).astype(np.float32)  # sorted
        # segments: _HEAD columns, then doubling widths up to a vocabulary block (at most _DOUBLINGS
        # of them), then equal segments of at most a vocabulary block (5,000 words: 256, 256, 512, 1,988
        # and 1,988)
        bounds = [0]
        width = min(self._HEAD, self.vocab_block)
        while bounds[-1] + width < self.vocab_block and len(bounds) <= self._DOUBLINGS:
            bounds.append(bounds[-1] + width)
            width = bounds[-1]
        rest = self.ntotal - bounds[-1]
        parts = max(1, -(-rest // self.vocab_block))
        bounds += [bounds[-1] + -(-rest * i // parts) for i in range(1, parts + 1)]
        self._segments = np.asarray(bounds, dtype=np.int64)

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
        from ..index.exact import row_block

        q = self._prepare(noisy)
        n = q.shape[0]
        kk = min(k, self.ntotal)
        out_s = np.empty((n, kk), dtype=np.float32)
        out_i = np.empty((n, kk), dtype=np.int64)
        qa = np.empty((n, self.d + 1), dtype=np.float32)
        qa[:, : self.d] = q
        qa[:, self.d] = 1.0
        qsq = np.einsum("ij,ij->i", q, q, dtype=np.float32)
        groups = len(self._segments) - 1
        workers = decode_workers()
        chunk = row_block(n, max(self.query_block, min(self._SCAN_ROWS, self._CHUNK_CELLS // groups)), workers)

        def one(s: int) -> None:
            sc, col = self._decode_rows(qa[s : s + chunk], qsq[s : s + chunk], kk)
            out_s[s : s + chunk], out_i[s : s + chunk] = sc, self._order[col]

        starts = range(0, n, chunk)
        workers = min(workers, len(starts))
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

    def _decode_rows(self, qa: np.ndarray, qsq: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` (scores, sorted columns) of the augmented rows ``qa`` (``|q|^2``: ``qsq``), exactly."""
        seg_d, seg_j, head_s, head_c = self._pass1(qa, qsq, k)
        segs = self._segments
        starts = segs[:-1]
        root = np.sqrt(np.maximum(seg_d, 0.0))
        cand = root + self._penalty[starts[None, :] + seg_j]  # the score of segment h's nearest word
        nq = qa.shape[0]
        rows = np.arange(nq)
        if k == 1:
            return self._pass2_nearest(qa, qsq, root, cand, seg_j, head_s, head_c)
        # k = 2 (vickrey): pass 2 scores whole segments whose bound is below the second best
        lower = root + self._penalty[starts][None, :]  # no word of segment h scores below it
        both = np.concatenate([head_s, cand[:, 1:]], axis=1)  # distinct words: k-th best is a bound
        bound = np.partition(both, k - 1, axis=1)[:, k - 1]
        best_s, best_c = head_s.copy(), head_c.copy()
        tol = _TOL * (np.abs(bound) + 1.0)
        active = lower <= (bound + tol)[:, None]
        active[:, 0] = False
        for g in np.flatnonzero(active.any(axis=0)):
            sel = rows[active[:, g]]
            a, b = int(starts[g]), int(segs[g + 1])
            sc = self._scores_range(qa[sel], qsq[sel], a, b)
            cs, cc = _smallest(sc, min(k, b - a))
            cc += a
            both_s = np.concatenate([best_s[sel], cs], axis=1)
            both_c = np.concatenate([best_c[sel], cc], axis=1)
            pick = np.lexsort((both_c, both_s), axis=1)[:, :k]
            best_s[sel] = np.take_along_axis(both_s, pick, axis=1)
            best_c[sel] = np.take_along_axis(both_c, pick, axis=1)
        return best_s, best_c

    def _pass2_nearest(
        self,
        qa: np.ndarray,
        qsq: np.ndarray,
        root: np.ndarray,
        cand: np.ndarray,
        seg_j: np.ndarray,
        head_s: np.ndarray,
        head_c: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``k = 1``: the best of pass 1 (the head's exact best, each segment's nearest word), then
        pass 2 on what could beat it. A column ``c`` of segment ``h`` can beat the best ``U`` only
        if ``sqrt(dmin_h) + pen(c) <= U`` (its distance is >= the segment's smallest): as the
        penalties increase along the columns, only the columns before the first with
        ``pen(c) > U - sqrt(dmin_h)``, and before ``j_h`` (a later column scores >= ``S_h``)."""
        segs = self._segments
        starts = segs[:-1]
        cand[:, 0] = head_s[:, 0]  # the first segment is scored already
        seg_j[:, 0] = head_c[:, 0]
        rows = np.arange(qa.shape[0])
        h = np.argmin(cand, axis=1)  # the lowest segment on ties: the lowest column
        best_s = cand[rows, h]
        by_seg = seg_j.T  # pass 1's (segments, rows) table: one flat take (a fancy index of the view is slow)
        best_c = starts[h] + np.take(by_seg.reshape(-1), h * by_seg.shape[1] + rows)
        reach = best_s + _TOL * (np.abs(best_s) + 1.0)
        slack = reach[:, None] - root  # pen(c) <= slack: the columns of each segment that can beat U
        slack[:, 0] = -np.inf
        lower = self._penalty[starts][None, :]
        active = (lower <= slack) & (seg_j > 0)
        for g in np.flatnonzero(active.any(axis=0)):
            sel = rows[active[:, g]]
            a, b = int(starts[g]), int(segs[g + 1])
            # the answer may have improved since: the reach again
            upto = np.searchsorted(self._penalty[a:b], reach[sel] - root[sel, g], side="right")
            np.minimum(upto, seg_j[sel, g], out=upto)
            keep = upto > 0
            sel, upto = sel[keep], upto[keep]
            if sel.size == 0:
                continue
            order = np.argsort(upto, kind="stable")  # rows by columns needed: a few products, each as wide
            sel, upto = sel[order], upto[order]  # as its rows need (one far row widens only its group)
            for part in np.array_split(np.arange(sel.size), min(self._PASS2_GROUPS, sel.size)):
                rs = sel[part]
                sc = self._scores_range(qa[rs], qsq[rs], a, a + int(upto[part[-1]]))
                cs, cc = _smallest(sc, 1)
                s1, c1 = cs[:, 0], cc[:, 0] + a
                cur_s, cur_c = best_s[rs], best_c[rs]
                better = (s1 < cur_s) | ((s1 == cur_s) & (c1 < cur_c))
                best_s[rs[better]] = s1[better]
                best_c[rs[better]] = c1[better]
        return best_s[:, None], best_c[:, None]

    def _pass1(self, qa: np.ndarray, qsq: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each segment's smallest squared distance and its column in the segment (``(rows, segments)``),
        and the first segment's best ``k`` exact (scores, columns).

        The nearest decode's work (:class:`~deniable.index.ExactIndex`): per block of rows and
        segment, one product ``[q, 1] @ [-2 y; |y|^2]`` of the same shape (1,024 x 51 x 2,048 past the
        head), its argmin and the distance there (``+ |q|^2`` once at the end); the first segment
        (the head) is scored exactly instead, from the same product (a square root and the penalty)."""
        from ..index.exact import row_block

        n = qa.shape[0]
        segs = self._segments
        groups = len(segs) - 1
        head = int(segs[1])
        seg_d = np.empty((groups, n), dtype=np.float32)
        seg_j = np.empty((groups, n), dtype=np.intp)
        seg_d[0] = 0.0  # the head's raw distance is never read (its exact scores are)
        seg_j[0] = 0
        head_s = np.empty((n, k), dtype=np.float32)
        head_c = np.empty((n, k), dtype=np.int64)
        size = row_block(n, self.query_block, 1)
        qmax = min(size, n)
        widest = int(np.diff(segs).max())
        buf = np.empty(qmax * widest, dtype=np.float32)
        flat = np.empty(qmax, dtype=np.intp)
        off = np.arange(qmax, dtype=np.intp)
        for s in range(0, n, size):
            qb = qa[s : s + size]
            nq = qb.shape[0]
            q2 = qsq[s : s + nq]
            for g in range(groups):
                a, b = int(segs[g]), int(segs[g + 1])
                w = b - a
                dist = buf[: nq * w].reshape(nq, w)
                np.matmul(qb, self._aug[:, a:b], out=dist)
                if g == 0:  # the most probable words, scored exactly from the same distances
                    hs, hc = _smallest(self._scores(dist, q2, 0, head), min(k, head))
                    head_s[s : s + nq, : hs.shape[1]], head_c[s : s + nq, : hs.shape[1]] = hs, hc
                    if hs.shape[1] < k:  # a one-column first segment: no second word in it
                        head_s[s : s + nq, hs.shape[1] :], head_c[s : s + nq, hs.shape[1] :] = np.inf, 0
                    continue
                jg = seg_j[g, s : s + nq]
                dg = seg_d[g, s : s + nq]
                np.argmin(dist, axis=1, out=jg)
                np.multiply(off[:nq], w, out=flat[:nq])
                flat[:nq] += jg
                np.take(buf, flat[:nq], out=dg)
        seg_d += qsq[None, :]
        return seg_d.T, seg_j.T, head_s, head_c

    def _scores_range(self, qa: np.ndarray, qsq: np.ndarray, a: int, b: int) -> np.ndarray:
        """Exact penalised distances of rows ``qa`` (augmented; ``|q|^2``: ``qsq``) to the sorted columns
        ``a:b``: the same arithmetic as pass 1 (the same product, then ``+ |q|^2``, a square root)."""
        return self._scores(qa @ self._aug[:, a:b], qsq, a, b)

    def _scores(self, prod: np.ndarray, qsq: np.ndarray, a: int, b: int) -> np.ndarray:
        """The penalised distances from the product ``[q, 1] @ aug[:, a:b]`` (``|y|^2 - 2 q.y``), in place:
        ``+ |q|^2``, a square root, the penalty: THE arithmetic of every score (pass 1's head, pass 2)."""
        prod += qsq[:, None]
        np.maximum(prod, 0.0, out=prod)
        np.sqrt(prod, out=prod)
        prod += self._penalty[a:b]
        return prod


#: The relative tolerance of the bounds (float32 rounding kept on the safe side: a bound within it is scanned).
_TOL = np.float32(1e-4)


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
