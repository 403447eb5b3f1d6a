"""SynTF (Weggenmann and Kerschbaum, SIGIR 2018): synthetic term-frequency vectors by the exponential mechanism.

A document's count vector ``x`` over a public vocabulary is replaced by a synthetic one:
``length`` terms drawn independently, each by the exponential mechanism

    Pr[t | x] ∝ exp(epsilon_term * u(x, t) / 2),    epsilon_term = epsilon / length,

over every term ``t`` of the vocabulary, and counted. The utility is bounded in ``[0, 1]``:

    w_x(s) = x_s idf_s / max_s' x_s' idf_s'           (the document's tf-idf, max-normalised)
    u(x, t) = max_s w_x(s) * sim(s, t)                (sim: public similarities in [0, 1], sim(t, t) = 1)

so its sensitivity over *any* two documents is ``Delta u = 1`` and each draw is
``epsilon_term``-DP between any two documents (McSherry-Talwar); ``length`` independent draws
compose to ``epsilon``-DP: for every pair of documents ``x, x'`` and every released vector ``y``
(``|y|_1 = length``), ``Pr[y | x] <= exp(epsilon) Pr[y | x']``. The output law is the multinomial
``Mult(length, p(x))``; :meth:`SynTF.log_pmf` states it exactly (tests/test_bow_syntf.py checks
the bound over every output on a tiny vocabulary, with a twin claiming less that must fail).

``idf`` and ``sim`` must be **public** (functions of public data only: the default idf is 1,
the default similarity the identity; :func:`neighbour_similarity` derives one from a public
embedding). An idf computed from the private collection would make every document's release
depend on the others', outside the per-document guarantee (the paper's experiments computed it
from the corpus; see docs/bow.md). The output length is a public parameter: a length taken
from each document would release the document's length unprotected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.special import gammaln, logsumexp

from .._errors import InvalidParameterError
from .._random import check_random_state
from .._validation import check_epsilon, check_int
from ..mechanisms._options import Option
from .vectorize import BowVectorizer, Vocabulary

__all__ = ["SYNTF_OPTIONS", "SynTF", "neighbour_similarity"]

#: SynTF's options, declared once (the type every mechanism declares its options with): the
#: constructor checks ``length`` with it, ``deniable bow privatize --mechanism syntf`` reads
#: its flags through them, and ``neighbours`` builds the public similarity (:func:`neighbour_similarity`).
SYNTF_OPTIONS: tuple[Option, ...] = (
    Option(
        "length",
        int,
        100,
        low=1,
        high=100_000,
        flag="--syntf-length",
        help="terms in every synthetic vector (public: the same for every document)",
    ),
    Option(
        "neighbours",
        int,
        0,
        low=0,
        high=1000,
        flag="--syntf-neighbours",
        help="public similarity: each word's k nearest embedding neighbours (0: the identity)",
    ),
)

#: rows of dense utilities held at once (x vocabulary size float64)
_ROW_BYTES = 64 << 20


def neighbour_similarity(vocabulary: Vocabulary, k: int = 10, embedding: Any = None) -> sp.csr_matrix:
    """A public similarity: ``sim(s, t) = max(cos(s, t), 0)`` for the ``k`` nearest words ``t`` of ``s``.

    Cosines of the default embedding's vectors (or ``embedding``'s) of the vocabulary's words,
    nearest neighbours found by the index code; ``sim(s, s) = 1``; words without a vector get
    only themselves. A function of public data only.
    """
    from ..embedding import load_embedding
    from ..index import FlatIndex
    from ..metrics import unit_rows

    k = check_int("k", k, minimum=1)
    emb = load_embedding() if embedding is None else embedding
    v = vocabulary.size
    rows = [emb.index_of.get(w, -1) for w in vocabulary.words]
    have = np.flatnonzero(np.asarray(rows) >= 0)
    unit = np.ascontiguousarray(unit_rows(emb.vectors[np.asarray(rows)[have]], np.float32))
    kk = min(k + 1, have.size)
    dist, nn = FlatIndex(unit).search(unit, kk)
    cos = np.clip(1.0 - dist.astype(np.float64) / 2.0, 0.0, 1.0)  # unit vectors: |a-b|^2 = 2 - 2 cos
    r = np.repeat(have, kk)
    c = have[nn.ravel()]
    sim = sp.csr_matrix((cos.ravel(), (r, c)), shape=(v, v))
    sim = sim.maximum(sp.identity(v, format="csr"))
    sim.eliminate_zeros()
    return sp.csr_matrix(sim)


@dataclass(frozen=True, eq=False)
class SynTF:
    """SynTF: ``length`` exponential-mechanism draws per document; ``epsilon``-DP between any two documents.

    Parameters
    ----------
    epsilon
        The document-level privacy parameter (> 0); each draw uses ``epsilon / length``.
    length
        Terms in every synthetic vector (public; the same for every document).
    idf
        Public per-term weights (``None``: 1 for every term).
    similarity
        Public ``(V, V)`` similarities in ``[0, 1]`` (``None``: the identity: only a
        document's own terms score above 0).
    """

    epsilon: float
    length: int = 100
    idf: npt.NDArray[np.float64] | None = None
    similarity: sp.csr_matrix | None = None

    options: ClassVar[tuple[Option, ...]] = SYNTF_OPTIONS

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "length", int(SYNTF_OPTIONS[0].check(self.length)))
        if self.idf is not None:
            idf = np.asarray(self.idf, dtype=np.float64).ravel()
            if not np.all(np.isfinite(idf)) or np.any(idf <= 0):
                raise InvalidParameterError("idf", f"{idf.size} weights", "finite positive weights")
            object.__setattr__(self, "idf", idf)
        if self.similarity is not None:
            s = sp.csr_matrix(self.similarity, dtype=np.float64)
            if s.shape[0] != s.shape[1] or (s.nnz and (s.data.min() < 0 or s.data.max() > 1)):
                raise InvalidParameterError("similarity", f"shape {s.shape}", "a square matrix with values in [0, 1]")
            if not np.allclose(s.diagonal(), 1.0):
                raise InvalidParameterError("similarity", "diagonal", "sim(t, t) = 1 for every term")
            object.__setattr__(self, "similarity", s)

    @property
    def epsilon_term(self) -> float:
        """The epsilon of one draw: ``epsilon / length``."""
        return self.epsilon / self.length

    def guarantee(self) -> float:
        """``epsilon``: ``log Pr[y | x] - log Pr[y | x'] <= epsilon`` for any two documents and any output."""
        return float(self.epsilon)

    # -- the law --------------------------------------------------------------------------------
    def utilities(self, counts: sp.spmatrix | npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Dense ``(n, V)`` utilities ``u(x, t)`` in ``[0, 1]`` of the rows of ``counts``."""
        x = sp.csr_matrix(counts, dtype=np.float64)
        v = x.shape[1]
        if self.idf is not None:
            if self.idf.size != v:
                raise InvalidParameterError("idf", f"{self.idf.size} weights", f"one per vocabulary term ({v})")
            x = sp.csr_matrix(x.multiply(self.idf[None, :]))
        top = np.asarray(x.max(axis=1).todense(), dtype=np.float64).ravel()
        w = sp.csr_matrix(sp.diags(np.where(top > 0, 1.0 / np.where(top > 0, top, 1.0), 0.0)) @ x)
        if self.similarity is None:
            return np.asarray(w.toarray(), dtype=np.float64)
        sim = self.similarity
        if sim.shape[0] != v:
            raise InvalidParameterError("similarity", f"shape {sim.shape}", f"({v}, {v})")
        # max_s w(s) sim(s, .) for all documents at once: one scaled similarity row per
        # (document, term) entry of w, then a segment maximum into the document's row
        entries = sp.coo_matrix(sp.diags(w.data) @ sim[w.indices])
        doc_of = np.repeat(np.arange(w.shape[0]), np.diff(w.indptr))
        out = np.zeros(x.shape, dtype=np.float64)
        np.maximum.at(out, (doc_of[entries.row], entries.col), entries.data)
        return out

    def probabilities(self, counts: sp.spmatrix | npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``(n, V)``: the exact law of one draw for each document."""
        logits = 0.5 * self.epsilon_term * self.utilities(counts)
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return np.asarray(p / p.sum(axis=1, keepdims=True), dtype=np.float64)

    def log_pmf(self, y: npt.ArrayLike, counts: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``log Pr[SynTF(x) = y]`` for one document ``x`` (``counts``) and output vectors ``y`` (rows).

        ``y`` is one vector or an ``(m, V)`` array; ``-inf`` where a row does not sum to ``length``.
        """
        yy = np.atleast_2d(np.asarray(y, dtype=np.float64))
        logits = 0.5 * self.epsilon_term * self.utilities(np.atleast_2d(np.asarray(counts)))[0]
        logp = logits - logsumexp(logits)
        out = gammaln(self.length + 1) - gammaln(yy + 1).sum(axis=1) + yy @ logp
        return np.asarray(np.where(yy.sum(axis=1) == self.length, out, -np.inf), dtype=np.float64)

    # -- the release ----------------------------------------------------------------------------
    def privatize(
        self, counts: sp.spmatrix | npt.ArrayLike, rng: np.random.Generator | int | None = None
    ) -> sp.csr_matrix:
        """Synthetic ``(n, V)`` count rows (each summing to ``length``), one per row of ``counts``.

        Empty rows (no counted word) get the uniform law, like any document. ``rng`` follows
        the ``random_state`` rule.
        """
        gen = check_random_state(rng)
        x = sp.csr_matrix(counts)
        n, v = x.shape
        step = max(1, _ROW_BYTES // (8 * max(v, 1)))
        parts = []
        for s in range(0, n, step):
            p = self.probabilities(x[s : s + step])
            parts.append(sp.csr_matrix(gen.multinomial(self.length, p).astype(np.int32)))
        return sp.csr_matrix(sp.vstack(parts, format="csr")) if parts else sp.csr_matrix((0, v), dtype=np.int32)

    def release_texts(
        self, texts: Sequence[str | None], vocabulary: Vocabulary, rng: np.random.Generator | int | None = None
    ) -> sp.csr_matrix:
        """Vectorize ``texts`` over the public ``vocabulary`` and release their synthetic vectors."""
        return self.privatize(BowVectorizer(vocabulary).transform(list(texts)), rng)

    def describe(self) -> dict[str, Any]:
        """Parameters for reports (never any document)."""
        return {
            "mechanism": "syntf",
            "epsilon": float(self.epsilon),
            "length": int(self.length),
            "epsilon_per_term": self.epsilon_term,
            "idf": "public weights" if self.idf is not None else "none (1)",
            "similarity": "public matrix" if self.similarity is not None else "identity",
            "guarantee": "epsilon-DP between any two documents (the whole vector)",
        }
