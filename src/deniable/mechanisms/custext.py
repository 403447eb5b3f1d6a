"""CusText and CusText+ (Chen et al., Findings of ACL 2023), docs/mechanisms/custext.md.

1. Customized mapping (from the public embedding only): walk the vocabulary in frequency order
   (row order); each word not yet mapped takes the ``k`` words most similar to it by cosine
   (itself first) among the words not yet mapped; those words form one output set and all of
   them map to it. The sets partition the vocabulary (the last one may be smaller).
2. For input x with output set Y: score ``u(x, y) = (cos(x, y) - min_Y cos(x, .)) /
   (max_Y cos(x, .) - min_Y cos(x, .))`` in [0, 1] (1 where all are equal), and
   ``Pr[M(x) = y] ∝ exp(epsilon * u(x, y) / 2)`` for y in Y.

Guarantee: epsilon-DP between any two words of the same output set (the score has
sensitivity 1); words of different sets have disjoint outputs, so nothing at all holds
between them. It is not metric DP. CusText+ additionally releases stopwords unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from .._validation import check_bool, check_epsilon
from ..embedding import Embedding
from ..metrics import unit_rows
from ._options import Option
from .base import Mechanism

__all__ = ["K_MAX", "CusText", "CusTextPlus", "customized_mapping"]

#: The largest output set: the tables are ``(V, k)`` (about 3 GB of float64 and int64 tables at
#: k = 256 on the default 336k-word vocabulary, and a mapping that takes minutes to build).
K_MAX = 256
_K = Option(
    "k",
    int,
    20,
    low=1,
    high=K_MAX,
    at_most_vocabulary=True,
    client=True,
    flag="--custext-k",
    help="size of each customized output set",
)


def customized_mapping(
    vectors: npt.ArrayLike,
    k: int,
    *,
    leaders_per_block: int = 1024,
    advance: Callable[[int], None] | None = None,
) -> npt.NDArray[np.int64]:
    """``(G, k)`` output sets partitioning the rows (padded with -1), most similar to their leader first.

    Greedy in row order: a leader takes the ``k`` unmapped rows of largest cosine similarity
    to it (itself first). Blocks of candidate leaders share one top-``4k`` search (faiss inner
    product on unit rows) against the rows still unmapped at the start of the block; a leader
    whose candidates were taken by an earlier leader of the block is recomputed exactly
    against every unmapped row, so the result is the sequential greedy's. ``advance(n)`` is told
    after each block how many more words were placed (a progress bar: public work only).
    """
    import faiss

    u = unit_rows(vectors, np.float32)
    v = u.shape[0]
    k = min(k, v)
    mapped = np.zeros(v, dtype=bool)
    groups: list[np.ndarray] = []
    m = 4 * k + 8
    placed = 0
    while not mapped.all():
        free = np.flatnonzero(~mapped)
        if advance is not None and v - free.size > placed:
            advance(v - free.size - placed)
            placed = v - free.size
        leaders = free[:leaders_per_block]
        mm = min(m, free.size)
        index = faiss.IndexFlatIP(u.shape[1])
        index.add(u[free])
        _, pos = index.search(u[leaders], mm)
        cands = free[np.maximum(pos, 0)]
        remaining = free.size
        for i, leader in enumerate(leaders.tolist()):
            if mapped[leader]:
                continue
            need = min(k, remaining)
            row = cands[i][(cands[i] != leader) & ~mapped[cands[i]]]
            if row.size < need - 1:  # taken by earlier leaders of the block: recompute exactly
                rest = np.flatnonzero(~mapped)
                rest = rest[rest != leader]
                s = u[rest] @ u[leader]
                top = np.argpartition(-s, need - 2)[: need - 1] if need >= 2 else np.empty(0, dtype=np.int64)
                row = rest[top[np.argsort(-s[top], kind="stable")]]
            group = np.concatenate([[leader], row[: need - 1]]).astype(np.int64)
            mapped[group] = True
            remaining -= group.size
            groups.append(group)
    if advance is not None and v > placed:
        advance(v - placed)
    out = np.full((len(groups), k), -1, dtype=np.int64)
    for g, members in enumerate(groups):
        out[g, : members.size] = members
    return out


@dataclass(frozen=True)
class _Tables:
    outputs: npt.NDArray[np.int64]  # (V, k) output set of each word (-1 padded)
    cum: npt.NDArray[np.float64]  # (V, k) cumulative probabilities (padded with 1)
    group_of: npt.NDArray[np.int64]  # (V,) output-set number


@dataclass(frozen=True, eq=False)
class CusText(Mechanism):
    """CusText: exponential mechanism on normalised cosine similarity within customized output sets.

    Parameters
    ----------
    embedding, epsilon
        The vocabulary (frequency-ordered rows) and the privacy parameter.
    k
        Size of each output set (the paper's K): 1 to :data:`K_MAX`, and at most the vocabulary size
        (the default, 20, becomes the vocabulary size on a smaller vocabulary).

    Guarantee: ``Pr[M(x)=y] <= e^epsilon Pr[M(x')=y]`` for x, x' in the same output set;
    no bound between words of different sets (``guarantee`` returns infinity there).
    The mapping and probability tables are built on first use, once, under a lock.
    """

    name: ClassVar[str] = "custext"
    metric: ClassVar[str] = "output-set"  # type: ignore[misc]
    has_distribution: ClassVar[bool] = True
    guarantee_form: ClassVar[str] = "epsilon-DP only within each customized output set; no bound across sets"
    #: release stopwords unchanged (CusText+)
    keep_stopwords: ClassVar[bool] = False

    embedding: Embedding
    epsilon: float
    k: int = 20
    cache: bool = True

    options: ClassVar[tuple[Option, ...]] = (
        _K,
        Option("cache", bool, True, cli=False, help="keep the mapping on disk (public: built from the embedding)"),
    )

    def __post_init__(self) -> None:
        Embedding.check(self.embedding)  # a device vocabulary: "holds binary codes only"
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        k = int(_K.check(self.k))
        if k == _K.default:  # the default on a vocabulary smaller than it: the whole vocabulary (one set)
            k = min(k, self.embedding.size)
        object.__setattr__(self, "k", int(_K.check_vocabulary(k, self.embedding.size)))
        check_bool("cache", self.cache)
        _ = self.embedding.vectors
        stop = np.zeros(self.embedding.size, dtype=bool)
        if self.keep_stopwords:
            from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

            for w in ENGLISH_STOP_WORDS:
                i = self.embedding.index_of.get(w)
                if i is not None:
                    stop[i] = True
        object.__setattr__(self, "_stop", stop)

    @property
    def tables(self) -> _Tables:
        return self._artefact("_tables", self._build)

    def _mapping(self) -> npt.NDArray[np.int64]:
        """The customized mapping, cached on disk beside the embedding's other public artefacts."""
        path = self.embedding.cache_path("custext", f"mapping-k{self.k}-v1.npy") if self.cache else None
        if path is not None and path.is_file():
            groups = np.load(path, allow_pickle=False)
            if groups.ndim == 2 and groups.shape[1] == min(self.k, self.embedding.size):
                return np.asarray(groups, dtype=np.int64)
        from .._progress import building, progress

        v = self.embedding.size
        with (
            building(
                f"deniable: building {self.name}'s output sets of {self.k} words for {v:,} words: once per "
                "embedding and k (public vectors only), then reused from the cache"
            ),
            progress(v, f"{self.name}: words placed in output sets") as advance,
        ):
            groups = customized_mapping(self.embedding.vectors, self.k, advance=advance)
        if path is not None:
            from .._cache import atomic_path

            def write(tmp: Path) -> None:
                with open(tmp, "wb") as fh:
                    np.save(fh, groups, allow_pickle=False)

            atomic_path(path, write)
        return groups

    def _build(self) -> _Tables:
        groups = self._mapping()
        v = self.embedding.size
        group_of = np.empty(v, dtype=np.int64)
        valid_g = groups >= 0
        group_of[groups[valid_g]] = np.nonzero(valid_g)[0]
        outputs = groups[group_of]  # (V, k)
        valid = outputs >= 0
        vec = self.embedding.vectors
        cos = np.empty(outputs.shape, dtype=np.float64)
        for s in range(0, v, 8192):  # blocked: never a (V, k, d) array
            rows = slice(s, s + 8192)
            u = unit_rows(vec[s : s + 8192], np.float64)
            cos[rows] = np.einsum("vd,vkd->vk", u, unit_rows(vec[np.where(valid[rows], outputs[rows], 0)], np.float64))
        cos = np.where(valid, cos, np.nan)
        lo, hi = np.nanmin(cos, axis=1, keepdims=True), np.nanmax(cos, axis=1, keepdims=True)
        span = hi - lo
        score = np.where(span > 0, (cos - lo) / np.where(span > 0, span, 1.0), 1.0)
        w = np.where(valid, np.exp(self.epsilon / 2.0 * (score - 1.0)), 0.0)
        # capped at 1: a rounded-up partial sum would give distribution() a negative last probability
        # (the sampler, which compares a uniform in [0, 1) with it, draws the same either way)
        cum = np.minimum(np.cumsum(w / w.sum(axis=1, keepdims=True), axis=1), 1.0)
        cum[:, -1] = 1.0
        return _Tables(outputs=outputs, cum=cum, group_of=group_of)

    def output_set(self, w: int | str) -> npt.NDArray[np.int64]:
        """The ids of ``w``'s customized output set, most similar to the set's leader first."""
        row = self.tables.outputs[self._id(w)]
        return row[row >= 0]

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        tab = self.tables
        cum = tab.cum[ids]
        j = np.count_nonzero(cum <= rng.random(ids.size)[:, None], axis=1)
        drawn = tab.outputs[ids, np.minimum(j, cum.shape[1] - 1)]
        return np.where(self._stop[ids], ids, drawn)  # type: ignore[attr-defined]

    def distribution(self, w: int | str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        wid = self._id(w)
        if self._stop[wid]:  # type: ignore[attr-defined]
            return np.array([wid], dtype=np.int64), np.ones(1)
        tab = self.tables
        valid = tab.outputs[wid] >= 0
        probs = np.diff(tab.cum[wid], prepend=0.0)
        return tab.outputs[wid][valid], probs[valid]

    def distance(self, w: int, w2: int) -> float:
        """0 for the same word, 1 within an output set (the bound is epsilon), infinity across sets."""
        if w == w2:
            return 0.0
        if self._stop[w] or self._stop[w2]:  # type: ignore[attr-defined]
            return math.inf
        g = self.tables.group_of
        return 1.0 if g[w] == g[w2] else math.inf

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update(k=int(self.k), guarantee="epsilon-DP within each output set; none across sets")
        if self.keep_stopwords:
            d["not_protected"] = "stopwords are released unchanged"
        return d


@dataclass(frozen=True, eq=False)
class CusTextPlus(CusText):
    """CusText+: CusText that releases stopwords (scikit-learn's English list) unchanged."""

    name: ClassVar[str] = "custext_plus"
    guarantee_form: ClassVar[str] = CusText.guarantee_form + "; stopwords are released unchanged"
    keep_stopwords: ClassVar[bool] = True
