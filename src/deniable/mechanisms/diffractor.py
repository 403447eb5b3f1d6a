"""1-Diffractor (Meisenbacher et al., 2024): noise on a word's position in a 1-d list, docs/mechanisms/diffractor.md.

**The lists.** The vocabulary is ordered into a one-dimensional list by a greedy
nearest-neighbour walk over the embedding: start at a word, repeatedly step to the nearest
word not visited yet among its ``neighbours`` (50) nearest; when all of them are visited,
jump to the unvisited word of smallest id. A word's coordinate is its position in the
list. The list is a function of the public embedding only: it is built once per embedding
(and start word) as a prepared artefact (:data:`LIST_KIND`, ``deniable prepare -m
diffractor``), the nearest neighbours of every word found in blocks by the index code
(:func:`deniable.index.make_index`), the walk itself a loop over the precomputed table.

**The noise**, on the position ``x = pos(w)`` in a list of ``n`` words:

- ``"geometric"``: ``j = clip(x + G1 - G2, 0, n - 1)`` with ``G1, G2`` i.i.d. geometric
  (``Pr[G = k] = (1 - a) a^k``, ``a = exp(-epsilon)``; the paper's ``p = 1 - exp(-eps)``),
  i.e. two-sided geometric (discrete Laplace) noise, clipped to the list's ends.
  ``Pr[j] = (1-a)/(1+a) a^|j-x|`` inside, ``a^x/(1+a)`` at ``j = 0`` and
  ``a^(n-1-x)/(1+a)`` at ``j = n-1``. Sampled as the magnitude and sign of ``G1 - G2``
  (:func:`two_sided_geometric`), the magnitude capped at ``n``, which clipping makes exact.
- ``"tem"``: the truncated exponential mechanism on the index distance with a window of
  ``gamma`` positions: ``Pr[j] ∝ exp(-epsilon/2 * min(|j - x|, gamma))`` (positions within
  ``gamma`` scored by their distance, every other one through the ⊥ element, as in seed 004).

**Several lists** (``lists = L``): list ``l`` starts at word ``floor(l V / L)``; each token
picks one list uniformly at random and draws its output there (the mixture of the paper's
"one candidate per list, pick one uniformly").

**Guarantee**: ``epsilon * d(w, w')`` with ``d(w, w') = max_l |pos_l(w) - pos_l(w')|``
(:attr:`metric` ``"list_position"``). For one list: the clipped geometric is the discrete
Laplace mechanism on an integer of sensitivity ``|x - x'|`` followed by post-processing
(clipping, then reading the word at the position); the TEM variant is the exponential
mechanism with score ``-min(|j - x|, gamma)``, of sensitivity ``|x - x'|``. For a mixture,
``Pr[M(w) = y] = (1/L) sum_l P_l(w, y) <= exp(epsilon max_l d_l) Pr[M(w') = y]``. Both are
checked exactly (:meth:`distribution`) in tests/test_mech_diffractor.py.

**Time**: the sampler does the same work for every token (one list choice; two exponential
draws and a uniform, or a fixed window of ``2 min(gamma, n - 1) + 1`` weights and two uniform
draws, the tokens taken in blocks of bounded size), with no per-word state between calls: its
time depends on the number of tokens (and the public parameters) only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._validation import check_choice, check_epsilon, check_int
from ..artefacts import register_kind
from ..embedding import Embedding
from ._options import Option
from .base import Mechanism

if TYPE_CHECKING:
    from ..embedding import Vocabulary

__all__ = [
    "LIST_KIND",
    "NOISES",
    "Diffractor",
    "build_list_artefact",
    "geometric_zero_threshold",
    "greedy_walk",
    "list_params",
    "two_sided_geometric",
]

#: The prepared-artefact kind of one list (``order.npy``: word ids in list order; ``position.npy``).
LIST_KIND = "diffractor-list"
NOISES = ("geometric", "tem")
WALK_INDEXES = ("auto", "exact", "flat", "hnsw")
#: ``index="auto"``: exact faiss flat search up to this many words, the prepared HNSW index above.
AUTO_FLAT_MAX = 60_000
_QUERY_BLOCK = 4096
#: TEM noise: at most this many window cells (tokens x (2 gamma + 1)) at a time
_WINDOW_BLOCK = 1 << 21


def geometric_zero_threshold(epsilon: float) -> float:
    """``t`` with ``Pr[E < t] = (1 - a) / (1 + a) = tanh(epsilon / 2)`` for ``E`` standard exponential.

    ``t = log((1 + e^epsilon) / 2)``, computed without cancellation at either end.
    """
    if epsilon < 1.0:
        return -math.log1p(-math.tanh(epsilon / 2.0))
    return epsilon - math.log(2.0) + math.log1p(math.exp(-epsilon))


def two_sided_geometric(epsilon: float, cap: int, size: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """``size`` draws of ``D``, ``Pr[D = d] = (1 - a)/(1 + a) a^|d|`` (``a = exp(-epsilon)``), ``|D| <= cap``.

    The law of ``G1 - G2`` for ``G1, G2`` i.i.d. geometric, drawn as a magnitude and a sign:
    ``|D| = 0`` with probability ``tanh(epsilon/2)`` (an exponential below
    :func:`geometric_zero_threshold`), else ``|D| = 1 + floor(E / epsilon)`` (``Pr[|D| >= k | |D| >= 1]
    = a^(k-1)``) with a fair sign. Capping ``|D|`` at ``cap`` (the list's length ``n``) is exact
    after clipping ``x + D`` to ``[0, n - 1]``: every ``|D| >= n`` lands on the same end. (Capping
    ``G1`` and ``G2`` each before the difference is not: it turns two large draws into a small
    difference, issue 40.) Three draws per value, whatever the value: the same work for every token.
    """
    e = rng.standard_exponential((2, size))
    sign = rng.random(size) < 0.5
    mag = np.minimum(np.floor(np.minimum(e[1] / epsilon, float(cap))) + 1.0, float(cap)).astype(np.int64)
    mag = np.where(e[0] < geometric_zero_threshold(epsilon), 0, mag)
    return np.where(sign, mag, -mag)


def _check_gamma(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidParameterError("gamma", "<not a number>", "a number in [0, 100000]")
    g = float(value)
    if not 0.0 <= g <= 100_000:
        raise InvalidParameterError("gamma", g, "a number in [0, 100000]")
    return g


def list_params(start: int, neighbours: int, index: str) -> dict[str, Any]:
    """The store parameters of one list (its start word, the walk's k, the k-NN search used)."""
    return {"start": int(start), "neighbours": int(neighbours), "index": str(index), "metric": "euclidean"}


def _resolved_index(index: str, size: int) -> str:
    return ("flat" if size <= AUTO_FLAT_MAX else "hnsw") if index == "auto" else index


def _knn_table(embedding: Embedding, k: int, index: str) -> npt.NDArray[np.int64]:
    """``(V, k)`` ids of every word's ``k`` nearest words (itself usually first), searched in blocks."""
    from ..index import make_index

    v = embedding.size
    k = min(k, v)
    idx = make_index(embedding, index)
    vec = embedding.vectors
    out = np.empty((v, k), dtype=np.int64)
    for s in range(0, v, _QUERY_BLOCK):
        _, ids = idx.search(np.ascontiguousarray(vec[s : s + _QUERY_BLOCK], dtype=np.float32), k)
        out[s : s + ids.shape[0]] = ids
    return out


def greedy_walk(knn: npt.NDArray[np.int64], start: int = 0) -> npt.NDArray[np.int64]:
    """The list order of the greedy nearest-neighbour walk over the table ``knn`` (``(V, k)`` ids).

    From ``start``, step to the first not-yet-visited id of the current word's row (rows are
    nearest first; ``-1`` entries are ignored); when none is left, to the unvisited id of
    smallest value. Returns a permutation of ``range(V)``.
    """
    v = knn.shape[0]
    table = np.asarray(knn, dtype=np.int64)
    visited = np.zeros(v + 1, dtype=bool)
    visited[v] = True  # -1 entries map here: never a candidate
    table = np.where(table < 0, v, table)
    order = np.empty(v, dtype=np.int64)
    cur, low = int(start), 0
    for t in range(v):
        order[t] = cur
        visited[cur] = True
        row = table[cur]
        free = np.flatnonzero(~visited[row])
        if free.size:
            cur = int(row[free[0]])
            continue
        while low < v and visited[low]:
            low += 1
        if low >= v:
            break
        cur = low
    return order


def build_list_artefact(
    embedding: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None
) -> dict[str, str]:
    """Write ``order.npy`` and ``position.npy`` of one Diffractor list (a registered artefact builder)."""
    from .._progress import progress

    embedding = Embedding.check(embedding)
    v = embedding.size
    with progress(2, f"1-Diffractor: list of {v:,} words", enabled=show_progress) as advance:
        knn = _knn_table(embedding, int(params["neighbours"]) + 1, str(params["index"]))
        advance(1)
        order = greedy_walk(knn, int(params["start"]))
        advance(1)
    position = np.empty(v, dtype=np.int64)
    position[order] = np.arange(v, dtype=np.int64)
    np.save(folder / "order.npy", order.astype(np.int32))
    np.save(folder / "position.npy", position.astype(np.int32))
    return {}


@dataclass(frozen=True)
class _Lists:
    order: npt.NDArray[np.int64]  # (L, V): the word at each position
    position: npt.NDArray[np.int64]  # (L, V): each word's position


@dataclass(frozen=True, eq=False)
class Diffractor(Mechanism):
    """1-Diffractor: geometric or truncated-exponential noise on list positions (``epsilon * d_list``).

    Parameters
    ----------
    embedding
        The vocabulary and vectors (only the lists' build reads the vectors).
    epsilon
        Privacy parameter (> 0), per list position.
    noise
        ``"geometric"`` (two-sided geometric, clipped to the list's ends) or ``"tem"``.
    gamma
        The TEM window, in positions (``noise="tem"`` only).
    lists
        How many lists (walks from different start words); each token uses one at random.
    neighbours
        The walk's k (the paper's 50).
    index
        The k-NN search of the list build: ``"auto"`` (exact flat search up to 60,000 words,
        the prepared HNSW index above), ``"exact"``, ``"flat"`` or ``"hnsw"``. Any list is a
        function of public data: the choice changes the list, never the guarantee's form.
    """

    name: ClassVar[str] = "diffractor"
    has_distribution: ClassVar[bool] = True
    #: the guarantee's metric: ``max_l |pos_l(w) - pos_l(w')|`` (positions in the lists)
    metric: ClassVar[str] = "list_position"  # type: ignore[misc]

    embedding: Embedding
    epsilon: float
    noise: str = "geometric"
    gamma: float = 5.0
    lists: int = 1
    neighbours: int = 50
    index: str = "auto"

    options: ClassVar[tuple[Option, ...]] = (
        Option("noise", str, "geometric", choices=NOISES, client=True, help="noise on the list position"),
        Option("gamma", float, 5.0, low=0, high=100_000, client=True, help="TEM window in positions (noise=tem)"),
        Option("lists", int, 1, low=1, high=16, help="number of lists (walks from different start words)"),
        Option("neighbours", int, 50, low=1, high=1000, help="nearest neighbours the walk looks at per step"),
        Option("index", str, "auto", choices=WALK_INDEXES, help="k-NN search used to build the lists"),
    )

    def __post_init__(self) -> None:
        Embedding.check(self.embedding)  # a device vocabulary: "holds binary codes only"
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "noise", check_choice("noise", self.noise, NOISES))
        object.__setattr__(self, "gamma", _check_gamma(self.gamma))
        object.__setattr__(self, "lists", check_int("lists", self.lists, minimum=1, maximum=16))
        object.__setattr__(self, "neighbours", check_int("neighbours", self.neighbours, minimum=1, maximum=1000))
        object.__setattr__(self, "index", check_choice("index", self.index, WALK_INDEXES))
        if self.lists > self.embedding.size:
            raise InvalidParameterError("lists", self.lists, f"at most the vocabulary size ({self.embedding.size})")

    # -- the lists (prepared artefacts) ---------------------------------------------------------
    @staticmethod
    def _starts(size: int, lists: int) -> list[int]:
        return [(l_ * size) // lists for l_ in range(lists)]

    @classmethod
    def prepared_artefacts(cls, embedding: Vocabulary, options: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """``(kind, params)`` of the lists (``options``: ``lists``, ``neighbours``, ``index``)."""
        embedding = Embedding.check(embedding)
        lists = check_int("lists", options.get("lists") or 1, minimum=1, maximum=16)
        k = check_int("neighbours", options.get("neighbours") or 50, minimum=1, maximum=1000)
        index = _resolved_index(check_choice("index", options.get("index") or "auto", WALK_INDEXES), embedding.size)
        return [(LIST_KIND, list_params(s, k, index)) for s in cls._starts(embedding.size, lists)]

    def _load_lists(self) -> _Lists:
        from ..artefacts import obtain_artefact

        index = _resolved_index(self.index, self.embedding.size)
        orders, positions = [], []
        for s in self._starts(self.embedding.size, self.lists):
            info = obtain_artefact(
                self.embedding,
                LIST_KIND,
                list_params(s, self.neighbours, index),
                notice=f"deniable: building a 1-Diffractor list of this embedding ({self.embedding.size:,} words; "
                "once, then kept as a prepared artefact)",
            )
            orders.append(np.load(info.file("order.npy"), mmap_mode="r"))
            positions.append(np.load(info.file("position.npy"), mmap_mode="r"))
        return _Lists(np.asarray(np.stack(orders), dtype=np.int64), np.asarray(np.stack(positions), dtype=np.int64))

    @property
    def tables(self) -> _Lists:
        """The lists: ``order`` (``(L, V)``, the word at each position) and ``position`` (``(L, V)``)."""
        return self._artefact("_lists", self._load_lists)

    # -- the noise ----------------------------------------------------------------------------
    def _position_log_probabilities(self, x: int) -> npt.NDArray[np.float64]:
        """The exact law of the output position for input position ``x``, as log-probabilities (length V).

        In log space, so that positions far from ``x`` (``exp(-epsilon |j - x|)`` below float64's
        range on a large vocabulary) keep their exact, finite log-probability.
        """
        from scipy.special import logsumexp  # here: the CLI imports every mechanism class

        n = self.embedding.size
        if n == 1:
            return np.zeros(1)
        dist = np.abs(np.arange(n, dtype=np.float64) - x)
        if self.noise == "geometric":
            log1pa = math.log1p(math.exp(-self.epsilon))
            lp = math.log(-math.expm1(-self.epsilon)) - log1pa - self.epsilon * dist
            lp[0] = -self.epsilon * x - log1pa  # the clipped lower tail: sum_{t >= x} of the two-sided law
            lp[n - 1] = -self.epsilon * (n - 1 - x) - log1pa
            return lp
        score = -0.5 * self.epsilon * np.minimum(dist, self.gamma)
        return np.asarray(score - logsumexp(score), dtype=np.float64)

    def _sample_positions(self, x: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """One output position per input position, the same work for every token."""
        n = self.embedding.size
        m = x.size
        if self.noise == "geometric":
            return np.clip(x + two_sided_geometric(self.epsilon, n, m, rng), 0, n - 1)
        # offsets beyond n - 1 are outside every list: the window's width is at most 2n - 1, and
        # the tokens go through it in blocks of a bounded size (the same work for every token)
        g = min(math.floor(self.gamma), n - 1)
        rows = max(1, _WINDOW_BLOCK // (2 * g + 1))
        if m <= rows:
            return self._sample_window(x, g, rng)
        return np.concatenate([self._sample_window(x[s : s + rows], g, rng) for s in range(0, m, rows)])

    def _sample_window(self, x: npt.NDArray[np.int64], g: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """The TEM noise: inverse CDF over the window of ``2 g + 1`` positions and the ⊥ element."""
        n = self.embedding.size
        m = x.size
        offsets = np.arange(-g, g + 1, dtype=np.int64)
        j = x[:, None] + offsets[None, :]
        inside = (j >= 0) & (j < n)
        w = np.where(inside, np.exp(-0.5 * self.epsilon * np.abs(offsets, dtype=np.float64))[None, :], 0.0)
        cum = np.cumsum(w, axis=1)
        count_in = inside.sum(axis=1)
        total_in = cum[:, -1]
        total_out = (n - count_in) * math.exp(-0.5 * self.epsilon * self.gamma)
        u = rng.random((2, m))
        target = u[0] * (total_in + total_out)
        k = np.minimum(np.count_nonzero(cum <= target[:, None], axis=1), 2 * g)
        in_window = j[np.arange(m), k]
        lo = np.maximum(x - g, 0)
        r = np.minimum((u[1] * np.maximum(n - count_in, 1)).astype(np.int64), np.maximum(n - count_in - 1, 0))
        outside = np.where(r < lo, r, r + count_in)
        return np.where(target < total_in, in_window, outside)

    # -- the mechanism ---------------------------------------------------------------------------
    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        t = self.tables
        which = rng.integers(0, self.lists, ids.size) if self.lists > 1 else np.zeros(ids.size, dtype=np.int64)
        out_pos = self._sample_positions(t.position[which, ids], rng)
        return t.order[which, out_pos]

    def log_distribution(self, w: int | str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """``(ids, log_probs)`` over every word (distinct ids): the exact law in log space."""
        from scipy.special import logsumexp

        wid = self._id(w)
        t = self.tables
        v = self.embedding.size
        per_list = np.empty((self.lists, v), dtype=np.float64)
        for l_ in range(self.lists):
            per_list[l_, t.order[l_]] = self._position_log_probabilities(int(t.position[l_, wid]))
        return np.arange(v, dtype=np.int64), logsumexp(per_list, axis=0) - math.log(self.lists)

    def distribution(self, w: int | str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """``(ids, probs)``: the uniform mixture over the lists of the position law read through each list."""
        ids, logp = self.log_distribution(w)
        return ids, np.exp(logp)

    def distance(self, w: int, w2: int) -> float:
        p = self.tables.position
        return float(np.max(np.abs(p[:, w] - p[:, w2])))

    def pair_distances(self, a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``distance(a[i], b[i])`` for every i (vectorized)."""
        p = self.tables.position
        ia, ib = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        return np.asarray(np.max(np.abs(p[:, ia] - p[:, ib]), axis=0), dtype=np.float64)

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update(noise=self.noise, lists=self.lists, neighbours=self.neighbours)
        if self.noise == "tem":
            d["gamma"] = self.gamma
        return d


# the store's kind, declared where its builder is
register_kind(
    LIST_KIND,
    build_list_artefact,
    about="the sorted word lists 1-Diffractor samples from",
)
