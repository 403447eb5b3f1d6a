"""The exponential mechanism over the whole vocabulary (TEM with gamma = infinity), docs/mechanisms/exponential.md.

``Pr[M(w) = y] ∝ exp(-epsilon * d(w, y) / 2)`` for every word y of the output set (the whole
vocabulary by default). The score ``-d(w, y)`` has sensitivity ``d(w, w')`` in w (triangle
inequality), so the mechanism is ``epsilon * d``-private (McSherry and Talwar 2007; the metric
version is Lemma A.1 of seed 004 with gamma = infinity).

Cost: O(V) per distance row, done as blocked matrix products: for a block of words the
distances to every output word are one BLAS product, the weights one ``exp``, and each draw an
inverse-CDF lookup (one uniform per token against the row's cumulative sums). By default a
call computes one row per distinct word and draws all of that word's tokens from it (the same
law: the tokens' draws are independent), so its time counts distinct words; with
``history_free=True`` (the service's mode) it computes one row per token and its time depends
on the number of tokens only. There is no per-word cache between calls in either mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from .._validation import check_bool, check_epsilon, check_int
from ..embedding import Embedding
from ..metrics import angular_from_cos, check_metric, distances_to, euclidean_from_squares, unit_rows
from ._options import Option, history_free_option
from .base import Mechanism

__all__ = ["EM_METRICS", "ExponentialMechanism", "OutputSet", "exponential_probabilities"]

#: Metrics with a BLAS block form (one matrix product per block of tokens).
EM_METRICS = ("euclidean", "angular")


def exponential_probabilities(distances: npt.ArrayLike, half_epsilon: float) -> npt.NDArray[np.float64]:
    """``softmax(-half_epsilon * d)`` over the last axis, in float64 (THE exponential-mechanism arithmetic)."""
    d = np.asarray(distances, dtype=np.float64)
    logits = -half_epsilon * (d - d.min(axis=-1, keepdims=True))
    w = np.exp(logits)
    return np.asarray(w / w.sum(axis=-1, keepdims=True), dtype=np.float64)


def _chunk_sums(w: np.ndarray, c: int) -> npt.NDArray[np.float64]:
    """Float64 sums of each row's consecutive chunks of ``c`` entries (the last may be shorter).

    A strided view, summed pairwise by numpy: 6x faster than ``np.add.reduceat(..., dtype=float64)``.
    """
    r, n = w.shape
    full = n // c
    out = np.empty((r, -(-n // c)), dtype=np.float64)
    row, col = w.strides
    view = np.lib.stride_tricks.as_strided(w, shape=(r, full, c), strides=(row, c * col, col))
    out[:, :full] = view.sum(axis=2, dtype=np.float64)
    if full * c < n:
        out[:, full] = w[:, full * c :].sum(axis=1, dtype=np.float64)
    return out


class OutputSet:
    """The candidate outputs of an exponential mechanism in a form ready for BLAS blocks.

    ``ids`` are the output word ids (``None``: the whole vocabulary). Euclidean blocks use
    ``|y|^2 - 2 q.y + |q|^2``; angular blocks use unit rows and ``arccos(q.y) / pi``.
    """

    def __init__(self, embedding: Embedding, metric: str, ids: npt.NDArray[np.int64] | None = None) -> None:
        vec = embedding.vectors if ids is None else embedding.vectors[ids]
        self.metric = metric
        self.ids = ids
        if metric == "angular":
            self.rows = np.ascontiguousarray(unit_rows(vec, np.float32))
            self.sq = None
        else:
            self.rows = np.ascontiguousarray(np.asarray(vec, dtype=np.float32))
            self.sq = np.einsum("ij,ij->i", self.rows, self.rows, dtype=np.float32)

    @property
    def size(self) -> int:
        return int(self.rows.shape[0])

    def prepare_queries(self, vectors: np.ndarray) -> np.ndarray:
        q = np.asarray(vectors, dtype=np.float32)
        return np.ascontiguousarray(unit_rows(q, np.float32) if self.metric == "angular" else q)

    def distance_block(self, q: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """float32 ``(len(q), size)`` distances from prepared queries ``q`` to every output."""
        prod = np.matmul(q, self.rows.T, out=out)
        if self.metric == "angular":
            return angular_from_cos(prod, out=prod)
        assert self.sq is not None
        prod *= np.float32(-2.0)
        prod += self.sq[None, :]
        prod += np.einsum("ij,ij->i", q, q, dtype=np.float32)[:, None]
        return euclidean_from_squares(prod, out=prod)

    def sample(
        self,
        queries: np.ndarray,
        half_epsilon: float,
        rng: np.random.Generator,
        rows_per_block: int,
        chunk: int = 2048,
        counts: npt.NDArray[np.int64] | None = None,
        draws_per_pass: int = 1024,
    ) -> npt.NDArray[np.int64]:
        """Draws of ``Pr[y] ∝ exp(-half_epsilon * d(q, y))`` (positions in the output set).

        One draw per query row, or ``counts[i]`` draws for row ``i`` (returned row by row: the
        draws of row 0 first). Two-level inverse CDF per row: weights ``exp(-a (d - min d))``
        (float32, so relative weights below ~1e-38 count as 0), their sums over chunks of
        ``chunk`` outputs (float64), one uniform per draw picks the chunk by the cumulative chunk
        sums and then the output by the cumulative sums inside that chunk. Without ``counts``
        the work is the same for every row, whatever the word.
        """
        q_all = self.prepare_queries(queries)
        m, n = q_all.shape[0], self.size
        c = max(1, min(int(chunk), n))
        starts = np.arange(0, n, c)
        lens = np.minimum(c, n - starts)
        span = np.arange(c)
        out: list[npt.NDArray[np.int64]] = []
        buf = np.empty((min(rows_per_block, m), n), dtype=np.float32)
        for s in range(0, m, rows_per_block):
            q = q_all[s : s + rows_per_block]
            r = q.shape[0]
            w = self.distance_block(q, out=buf[:r])
            w -= w.min(axis=1, keepdims=True)
            w *= np.float32(-half_epsilon)
            np.exp(w, out=w)
            cum = np.cumsum(_chunk_sums(w, c), axis=1)
            owner = np.arange(r) if counts is None else np.repeat(np.arange(r), counts[s : s + r])
            step = owner.size if counts is None else max(1, draws_per_pass)
            for d0 in range(0, owner.size, step):
                o = owner[d0 : d0 + step]
                u = rng.random(o.size) * cum[o, -1]
                k = np.minimum(np.count_nonzero(cum[o] <= u[:, None], axis=1), starts.size - 1)
                u -= np.where(k > 0, cum[o, np.maximum(k - 1, 0)], 0.0)
                seg = w[o[:, None], np.minimum(starts[k][:, None] + span, n - 1)].astype(np.float64)
                seg[span[None, :] >= lens[k][:, None]] = 0.0
                j = np.count_nonzero(np.cumsum(seg, axis=1) <= u[:, None], axis=1)
                out.append(starts[k] + np.minimum(j, lens[k] - 1))
        return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class ExponentialMechanism(Mechanism):
    """``Pr[M(w)=y] ∝ exp(-epsilon d(w, y) / 2)`` over the whole vocabulary: ``epsilon * d``-private.

    Parameters
    ----------
    embedding
        The vocabulary and vectors.
    epsilon
        Privacy parameter (> 0), in the unit of ``metric``.
    metric
        ``"euclidean"`` or ``"angular"`` (``arccos(cos) / pi``).
    block_bytes
        Scratch memory for a block of distance rows (bounds memory; O(V) per token whatever it is).
    history_free
        Time a function of the token count only (the service's mode): one distance row per
        token, whatever the words. The default (False) computes one row per distinct word of a
        call and draws all of that word's tokens from it: the same law, faster on real text
        (a word's row is the cost), but a call's time then tells how many distinct words it had.

    The output-set artefacts (float32 rows, squared norms) are built on first use, once, under a lock.
    """

    name: ClassVar[str] = "exponential"
    has_distribution: ClassVar[bool] = True

    embedding: Embedding
    epsilon: float
    metric: str = "euclidean"
    block_bytes: int = 128 << 20
    chunk: int = 2048
    history_free: bool = False

    options: ClassVar[tuple[Option, ...]] = (
        Option(
            "metric", str, "euclidean", choices=EM_METRICS, client=True, help="the distance the guarantee is stated in"
        ),
        Option(
            "block_bytes",
            int,
            128 << 20,
            low=1,
            high=1 << 40,
            cli=False,
            help="scratch memory for a block of distance rows",
        ),
        Option(
            "chunk", int, 2048, low=1, high=1 << 24, cli=False, help="outputs per chunk of the two-level inverse CDF"
        ),
        history_free_option(
            "one distance row per token, no dedup by distinct word: time a function of the token count"
        ),
    )

    def __post_init__(self) -> None:
        Embedding.check(self.embedding)  # a device vocabulary: "holds binary codes only"
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "metric", check_metric(self.metric, EM_METRICS))
        object.__setattr__(self, "block_bytes", check_int("block_bytes", self.block_bytes, minimum=1))
        object.__setattr__(self, "chunk", check_int("chunk", self.chunk, minimum=1))
        check_bool("history_free", self.history_free)
        _ = self.embedding.vectors  # a code-only artefact has none and says so here

    # -- the output set (subclasses restrict it) ---------------------------------------------
    def output_ids(self) -> npt.NDArray[np.int64] | None:
        """The ids of the words the exponential mechanism draws from (``None``: all)."""
        return None

    @property
    def output_set(self) -> OutputSet:
        return self._artefact("_outputs", lambda: OutputSet(self.embedding, self.metric, self.output_ids()))

    def _rows_per_block(self, n: int) -> int:
        return max(1, self.block_bytes // (8 * max(n, 1)))  # the float32 block and as much again of headroom

    def _sample_em(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """One exponential-mechanism draw (a word id of the output set) per input id."""
        outs = self.output_set
        rows = self._rows_per_block(outs.size)
        vec, half = self.embedding.vectors, self.epsilon / 2.0
        if self.history_free:  # one row per token: no dedup whose cost counts distinct words
            pos = outs.sample(vec[ids], half, rng, rows, self.chunk)
        else:  # one row per distinct word; its tokens' draws are independent, so any order serves
            uniq, inv, counts = np.unique(ids, return_inverse=True, return_counts=True)
            drawn = outs.sample(vec[uniq], half, rng, rows, self.chunk, counts=counts)
            pos = np.empty(ids.size, dtype=np.int64)
            pos[np.argsort(inv, kind="stable")] = drawn
        return pos if outs.ids is None else outs.ids[pos]

    def _em_distribution(self, wid: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        ids = self.output_ids()
        vec = self.embedding.vectors
        rows = vec if ids is None else vec[ids]
        d = distances_to(np.asarray(vec[wid], dtype=np.float64), np.asarray(rows, dtype=np.float64), self.metric)
        out = np.arange(self.embedding.size, dtype=np.int64) if ids is None else ids
        return out, exponential_probabilities(d, self.epsilon / 2.0)

    # -- the mechanism ---------------------------------------------------------------------------
    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        return self._sample_em(ids, rng)

    def distribution(self, w: int | str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """``(ids, probs)``: ``softmax(-epsilon d(w, y) / 2)`` over the output set, in float64."""
        return self._em_distribution(self._id(w))

    def distance(self, w: int, w2: int) -> float:
        vec = self.embedding.vectors
        return float(distances_to(np.asarray(vec[w], np.float64), np.asarray(vec[[w2]], np.float64), self.metric)[0])

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d["output_set"] = "vocabulary"
        return d
