"""The multivariate Laplace mechanism with nearest-neighbour decode ("Madlib", SPEC section 2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._random import RandomState, check_random_state
from .._validation import check_choice, check_epsilon, check_int
from ..artefacts import register_kind
from ..binarize.device import QUANTIZED_VOCAB
from ..embedding import Embedding, Vocabulary
from ..index import INDEXES, Index, make_index, tuned
from ..index.exact import ExactIndex
from ..index.faiss_index import HNSW_KIND, hnsw_artefact_params
from ..index.tuned import DECODE_CHOICE_KIND, decode_choice_params, decoded_exactly, measured_exact, tuned_index
from ..metrics import paired_distances
from ..priors import Prior
from ._contextual import ContextualDecoder
from ._options import EPSILON_HUGE, Option
from ._posterior import (
    PRIOR_OPTION,
    PosteriorDecoder,
    check_prior,
    is_contextual,
    is_uniform,
    load_contextual,
    load_prior,
    ngram_record,
    prior_record,
)
from .base import Mechanism
from .registry import mechanism_class

__all__ = ["DECODES", "MultivariateLaplace", "quantized_madlib", "sample_laplace_noise"]

#: ``index=`` values: ``"auto"`` (the default) and the named indexes.
DECODES = ("auto", *INDEXES)
#: Constructor options of the decode (every other option is a parameter of the noise law).
_DECODE_OPTIONS = ("index", "batch_size", "index_options", "prior")

#: The smallest epsilon: below it the noise radius ``Gamma(n, 1/epsilon)`` can overflow 64-bit
#: floats. From it up the decode is exact: see :func:`decode_far`.
MIN_EPSILON = 1e-300
#: The ``"auto"`` decode at ``epsilon >= EPSILON_HUGE`` (not private): exact, nothing built or prepared.
NON_PRIVATE_DECODE = (
    f"exact (epsilon >= {EPSILON_HUGE:g}: not private, the noise is below float precision; no index built)"
)
#: A noisy vector farther than this many times the largest word vector norm (+1) is decoded in
#: float64 by :func:`decode_far`: float32 distances there lose the differences between words.
_FAR = 1e3


def decode_far(noisy: npt.NDArray[np.float64], vectors: npt.NDArray[np.floating]) -> npt.NDArray[np.int64]:
    """The nearest vocabulary vector to each row of ``noisy`` (float64, however large), exactly.

    ``argmin_v ||q - v||^2 = argmin_v (||v||^2 / s - 2 v . q / s)`` for any ``s > 0``; with
    ``s = max|q|`` every term stays finite and precise in float64. As ``||q||`` grows the
    first term vanishes and the decode tends to the word farthest along the noise's
    direction, ``argmax_v v . u``: the limit law as epsilon -> 0.
    """
    n = noisy.shape[0]
    scale = np.abs(noisy).max(axis=1, keepdims=True)
    scale[scale == 0] = 1.0
    unit = noisy / scale
    best = np.full(n, np.inf)
    out = np.zeros(n, dtype=np.int64)
    for a in range(0, vectors.shape[0], 32768):  # vocabulary chunks in float64, 64 rows at a time
        chunk = np.asarray(vectors[a : a + 32768], dtype=np.float64)
        sq = np.einsum("ij,ij->i", chunk, chunk)
        for r in range(0, n, 64):
            score = sq[None, :] / scale[r : r + 64] - 2.0 * (unit[r : r + 64] @ chunk.T)
            arg = np.argmin(score, axis=1)
            val = score[np.arange(arg.size), arg]
            better = val < best[r : r + 64]
            best[r : r + 64][better] = val[better]
            out[r : r + 64][better] = arg[better] + a
    return out


def sample_laplace_noise(count: int, dim: int, epsilon: float, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """``count`` draws from the density ``p(z) ∝ exp(-epsilon * ||z||_2)`` on R^dim.

    Direction: a normalised standard normal vector (uniform on the sphere).
    Magnitude: Gamma(shape=dim, scale=1/epsilon), the radial law of that density.
    (Per-coordinate Laplace noise would be a different mechanism with an L1 guarantee.)
    """
    g = rng.standard_normal((count, dim))
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    r = rng.gamma(shape=dim, scale=1.0 / epsilon, size=(count, 1))
    return g / norms * r


@dataclass(frozen=True, eq=False)
class MultivariateLaplace(Mechanism):
    """Add multivariate Laplace noise to the word's vector, return the nearest word.

    ``Pr[M(w)=y] <= exp(epsilon * ||phi(w) - phi(w')||_2) Pr[M(w')=y]`` for all w, w', y.

    Parameters
    ----------
    embedding
        The vocabulary and vectors.
    epsilon
        Privacy parameter (> 0). Its meaning depends on the embedding's scale: calibrate it.
    index
        Nearest-neighbour decode. ``"auto"`` (the default): faiss HNSW with the smallest
        ``efSearch`` that agrees with exact search on at least 99% of noisy vectors of
        uniformly random vocabulary words at this epsilon (checked once per embedding and
        epsilon on public random words, cached on disk), or exact search where no setting
        does (small epsilons, small vocabularies). ``"exact"`` (numpy, blocked), ``"flat"``
        (faiss exact), ``"hnsw"`` (faiss approximate, ``efSearch`` 128 unless
        ``index_options`` say otherwise) or a ready :class:`~deniable.index.Index`.
        Every decode keeps the guarantee (post-processing of the noisy vector with a
        public index); an approximate one costs fidelity only (docs/madlib.md).
    batch_size
        Tokens decoded per block (bounds memory).
    index_options
        Keyword arguments of the index (e.g. HNSW's ``m``).
    prior
        The public prior the decode assumes (:mod:`deniable.priors`): ``"uniform"`` (the
        default: the nearest-neighbour decode above), ``"zipf"``, ``"zipf:S"``,
        ``"counts:PATH"`` or a :class:`~deniable.priors.Prior`. A non-uniform prior decodes
        to the exact posterior mode ``argmax_y log prior(y) - epsilon ||v - phi(y)||`` by a
        full scan (:mod:`._posterior`; ``index`` is then not used). ``"ngram:PATH"`` (a public
        n-gram model prepared by ``deniable prepare --ngram FILE``) decodes each text's noisy
        vectors jointly (:mod:`._contextual`: Viterbi over each token's best words; a text is
        one record, one ``privatize`` call or one :meth:`privatize_texts` interval).
        Post-processing: the same guarantee (docs/madlib.md, "Decoding with a prior").

    The constructor only validates and records; the index is built (or loaded from the
    cache) on first use, once, under a lock, with a one-line notice on stderr when it must
    be built; :meth:`prepare` does it ahead.
    """

    name: ClassVar[str] = "madlib"
    metric: ClassVar[str] = "euclidean"  # type: ignore[misc]

    embedding: Embedding
    epsilon: float
    index: str | Index = "auto"
    batch_size: int = 8192
    index_options: dict[str, Any] = field(default_factory=dict, repr=False)
    prior: str | Prior = "uniform"

    options: ClassVar[tuple[Option, ...]] = (
        Option(
            "index",
            str,
            "auto",
            choices=DECODES,
            client=True,
            objects=True,
            help="nearest-neighbour decode: auto (HNSW where it agrees with exact decode on >= 99% of words at "
            "this epsilon, else exact), exact (numpy), flat (faiss exact) or hnsw (faiss approximate); all "
            "give the same privacy",
        ),
        Option(
            "batch_size", int, 8192, low=1, high=1 << 24, cli=False, help="tokens decoded per block (bounds memory)"
        ),
        Option("index_options", dict, None, cli=False, help="keyword arguments of the index"),
        PRIOR_OPTION,
    )

    @classmethod
    def prepared_artefacts(cls, embedding: Vocabulary, options: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """``(kind, params)`` of what the ``"hnsw"`` / ``"auto"`` decode reads (:mod:`deniable.artefacts`).

        ``options``: ``index`` (``"auto"`` by default; ``"exact"`` / ``"flat"`` read nothing),
        ``index_options``, and ``epsilon`` (a number or a list): the ``"auto"`` decode's
        choice at each epsilon (a ``decode-choice``; none for vocabularies decoded
        exactly by default, smaller than ``index_options["min_size"]``). Other noise
        parameters (e.g. mahalanobis ``lam``) are read by their option names.
        """
        embedding = Embedding.check(embedding)
        _ = embedding.vectors  # a code-only vocabulary has none and says so here
        index = options.get("index") or "auto"
        if index not in ("auto", "hnsw"):
            check_choice("index", index, DECODES)
            return []
        opts = dict(options.get("index_options") or {})
        graph = opts if index == "hnsw" else dict(opts.get("hnsw_options") or {})
        out = [(HNSW_KIND, hnsw_artefact_params(graph.get("m", 32), graph.get("ef_construction", 100)))]
        epsilons = options.get("epsilon")
        if index == "auto" and epsilons is not None:
            noise = {
                o.name: options[o.name] for o in cls.options if o.name not in _DECODE_OPTIONS and o.name in options
            }
            for eps in [epsilons] if isinstance(epsilons, int | float) else list(epsilons):
                params = cls(embedding, eps, index="auto", index_options=opts, **noise)._decode_choice_params()
                if params is not None:
                    out.append((DECODE_CHOICE_KIND, params))
        return out

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        if self.epsilon < MIN_EPSILON:
            raise InvalidParameterError(
                "epsilon", self.epsilon, f"a number >= {MIN_EPSILON:g} (below it the noise overflows 64-bit floats)"
            )
        object.__setattr__(self, "batch_size", check_int("batch_size", self.batch_size, minimum=1))
        Embedding.check(self.embedding)
        _ = self.embedding.vectors  # cheap; a code-only device artefact has none and says so here
        if isinstance(self.index, str):
            check_choice("index", self.index, DECODES)
        elif not isinstance(self.index, Index):
            raise InvalidParameterError(
                "index", type(self.index).__name__, "'auto', 'exact', 'flat', 'hnsw' or an Index"
            )
        opts = {} if self.index_options is None else self.index_options
        if not isinstance(opts, dict):
            raise InvalidParameterError("index_options", type(opts).__name__, "a dict of index keyword arguments")
        object.__setattr__(self, "index_options", dict(opts))
        object.__setattr__(self, "prior", check_prior(self.prior, contextual=True))
        # a ready index is only checked against the embedding (cheap); a named one is built on first use
        ready = make_index(self.embedding, self.index) if isinstance(self.index, Index) else None
        object.__setattr__(self, "_index", ready)
        object.__setattr__(self, "_decode_description", None if ready is None else type(self.index).__name__)

    @property
    def search_index(self) -> Index:
        """The nearest-neighbour index used for decoding (built on first use, thread-safe)."""
        return self._artefact("_index", self._build_index)

    def _build_index(self) -> Index:
        if self.index == "auto" and self.epsilon >= EPSILON_HUGE:
            # not private (construction warned): the noise is below float precision, every noisy
            # vector decodes to its own word; no decode is worth a multi-minute HNSW build
            object.__setattr__(self, "_decode_description", NON_PRIVATE_DECODE)
            return ExactIndex(self.embedding.vectors)
        if self.index == "auto":
            choice = tuned_index(
                self.embedding,
                self._public_queries,
                self._tuning_key(),
                mechanism=self._noise_spec(),
                **self.index_options,
            )
            found, description = choice.index, choice.description
        else:
            found = make_index(self.embedding, self.index, **self.index_options)
            description = str(self.index)
        object.__setattr__(self, "_decode_description", description)
        return found

    @property
    def uniform_prior(self) -> bool:
        """Whether the decode is the nearest neighbour (``prior="uniform"``)."""
        return is_uniform(self.prior)

    @property
    def posterior(self) -> PosteriorDecoder:
        """The exact posterior-mode decoder of a non-uniform ``prior`` (built on first use, thread-safe)."""
        return self._artefact("_posterior", self._build_posterior)

    def _build_posterior(self) -> PosteriorDecoder:
        prior = load_prior(self.prior, self.embedding)
        return PosteriorDecoder(self.embedding.vectors, prior, self.epsilon, transform=self._decode_transform())

    @property
    def joint_decode(self) -> bool:
        """Whether each text is decoded jointly (a contextual ``prior="ngram:PATH"``): callers holding
        several texts pass their boundaries (:meth:`privatize_texts`, :meth:`privatize_records`)."""
        return is_contextual(self.prior)

    @property
    def contextual(self) -> ContextualDecoder:
        """The joint decoder of a contextual ``prior`` (the n-gram model memory-mapped; built on first use)."""
        return self._artefact("_contextual", self._build_contextual)

    def _build_contextual(self) -> ContextualDecoder:
        model = load_contextual(str(self.prior), self.embedding)
        return ContextualDecoder(self.embedding.vectors, model, self.epsilon, transform=self._decode_transform())

    def _decode_transform(self) -> npt.NDArray[np.float64] | None:
        """The linear map whose Euclidean norm is the noise law's (None: the identity; Mahalanobis: its own)."""
        return None

    def prepare(self) -> MultivariateLaplace:
        """Build or load the decode index now (else the first :meth:`privatize` does); return ``self``."""
        if self.joint_decode:
            _ = self.contextual
        elif self.uniform_prior:
            _ = self.search_index
        else:
            _ = self.posterior
        return self

    @property
    def decode_description(self) -> str:
        """The decode in use, e.g. ``"hnsw efSearch=128 (99.6% agreement ...)"`` (prepares it)."""
        if self.joint_decode:
            dec = self.contextual
            return (
                f"joint decode of each text (prior {self._prior_record()['prior']}: {dec.method} over the "
                f"{dec.k} most probable words of each token; full scan)"
            )
        if not self.uniform_prior:
            return f"exact posterior mode (prior {self._prior_record()['prior']}; full scan)"
        _ = self.search_index
        return str(self._decode_description)  # type: ignore[attr-defined]

    def _prior_record(self) -> dict[str, str]:
        """The manifest's record of the prior (a counts file by name and sha256), computed once."""
        if self.joint_decode:
            return self._artefact("_prior_rec", lambda: ngram_record(self.contextual.model))
        return self._artefact("_prior_rec", lambda: prior_record(self.prior))

    def _tuning_key(self) -> str:
        """What the tuned decode depends on besides the embedding (the noise law's parameters)."""
        return f"{self.name} epsilon={self.epsilon!r}"

    def _noise_spec(self) -> dict[str, Any]:
        """The registered name and the noise law's constructor arguments: what rebuilds :meth:`_public_queries`."""
        noise = {o.name: getattr(self, o.name) for o in self.options if o.name not in _DECODE_OPTIONS}
        return {"name": self.name, "options": {"epsilon": self.epsilon, **noise}}

    def _decode_choice_params(self) -> dict[str, Any] | None:
        """The store parameters of this ``"auto"`` decode's choice (None: decoded exactly, nothing stored:
        a small vocabulary, or a choice known for this embedding, :func:`~deniable.index.tuned.measured_exact`)."""
        opts = dict(self.index_options)
        min_size = opts.pop("min_size", None)
        opts.pop("notice", None)
        if decoded_exactly(self.embedding.size, min_size) or self.epsilon >= EPSILON_HUGE:
            return None
        params = decode_choice_params(self._tuning_key(), mechanism=self._noise_spec(), **opts)
        return None if measured_exact(self.embedding, params) else params

    def _public_queries(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Noisy vectors of ``n`` uniformly random vocabulary words: public queries to tune the decode."""
        return self.noisy_vectors(rng.integers(0, self.embedding.size, n), rng)

    def noise(self, count: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
        """``count`` noise vectors, density ``∝ exp(-epsilon ||z||)`` (subclasses change the law)."""
        return sample_laplace_noise(count, self.embedding.dim, self.epsilon, rng)

    def noisy_vectors(self, ids: npt.ArrayLike, rng: np.random.Generator) -> np.ndarray:
        """``phi(w) + z`` for each id (float32), before decoding."""
        flat = self.embedding.check_ids(ids).ravel()
        noisy = self.noise(flat.size, rng)
        noisy += self.embedding.vectors[flat]
        return noisy.astype(np.float32)

    def decode(self, noisy: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The decode of each row of ``noisy``: the (decode index's) nearest vocabulary vector, or
        the posterior mode under a non-uniform ``prior`` (a contextual one: the rows are one text,
        see :meth:`decode_texts`). Reads only the noisy rows and public data."""
        if self.joint_decode:
            rows = np.asarray(noisy, dtype=np.float64)
            return self.decode_texts(rows, [0, rows.shape[0]])
        if not self.uniform_prior:
            return self._decode_noisy(np.asarray(noisy, dtype=np.float64))
        return self.search_index.search(noisy, 1)[1][:, 0]

    def decode_texts(self, noisy: npt.ArrayLike, offsets: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The decode of several texts' noisy rows, text ``i`` being rows ``offsets[i]:offsets[i + 1]``:
        each text jointly under a contextual ``prior``, row by row otherwise (as :meth:`decode`)."""
        rows = np.asarray(noisy, dtype=np.float64)
        if not self.joint_decode:
            return self._decode_noisy(rows)
        return self.contextual.decode(rows, offsets)

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        # ids were validated once by Mechanism.privatize; no per-block re-validation here
        if self.joint_decode:  # the ids are one text
            return self._privatize_texts(ids, np.array([0, ids.size], dtype=np.int64), rng)
        out = np.empty(ids.size, dtype=np.int64)
        vectors = self.embedding.vectors
        for s in range(0, ids.size, self.batch_size):
            block = ids[s : s + self.batch_size]
            noisy = self.noise(block.size, rng)
            noisy += vectors[block]
            out[s : s + block.size] = self._decode_noisy(noisy)
        return out

    def privatize_texts(self, ids: npt.ArrayLike, offsets: npt.ArrayLike, rng: RandomState = None) -> np.ndarray:
        """Privatize several texts' word ids (concatenated; text ``i`` is ``ids[offsets[i]:offsets[i + 1]]``)
        from one generator: the same draws as :meth:`privatize` of ``ids``, each text decoded on its own
        under a contextual ``prior`` (otherwise exactly :meth:`privatize`)."""
        arr = self.embedding.check_ids(ids).ravel()
        off = np.asarray(offsets, dtype=np.int64)
        if off.ndim != 1 or off.size < 1 or off[0] != 0 or off[-1] != arr.size or np.any(np.diff(off) < 0):
            raise InvalidParameterError("offsets", "invalid", f"non-decreasing text starts from 0 to {arr.size}")
        if not self.joint_decode:
            return self.privatize(arr, rng)
        gen = check_random_state(rng, stacklevel=2)
        return self._privatize_texts(arr, off, gen) if arr.size else np.empty(0, dtype=np.int64)

    def _privatize_texts(
        self, ids: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64], rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """The noise in ``batch_size`` blocks (the draws of the row-by-row path), then each text decoded jointly."""
        return self.contextual.decode(self.batch_noisy(ids, rng), offsets)

    def batch_noisy(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.float64]:
        """``phi(w) + z`` in float64 for each of the (validated) ``ids``, the noise drawn ``batch_size``
        tokens at a time: the very vectors :meth:`privatize` decodes from the same generator state
        (all at once, where :meth:`privatize` decodes block by block)."""
        noisy = np.empty((ids.size, self.embedding.dim), dtype=np.float64)
        vectors = self.embedding.vectors
        for s in range(0, ids.size, self.batch_size):
            block = ids[s : s + self.batch_size]
            noisy[s : s + block.size] = self.noise(block.size, rng)
            noisy[s : s + block.size] += vectors[block]
        return noisy

    def _privatize_records(
        self, records: list[npt.NDArray[np.int64]], generators: list[np.random.Generator]
    ) -> list[npt.NDArray[np.int64]]:
        """Each record's noise from its own stream, then one decode per ``batch_size`` tokens of records
        (a contextual ``prior``: each record decoded jointly, on its own, in that batch)."""
        vectors = self.embedding.vectors
        out: list[npt.NDArray[np.int64]] = []
        group: list[npt.NDArray[np.float64]] = []
        sizes: list[int] = []
        held = 0

        def flush() -> None:
            noisy = np.concatenate(group) if len(group) > 1 else group[0]
            if self.joint_decode:  # each record a text of its own: the decode splits at their boundaries
                ids = self.contextual.decode(noisy, np.r_[0, np.cumsum(sizes)])
            else:
                ids = self._decode_noisy(noisy)
            out.extend(np.split(ids, np.cumsum(sizes)[:-1]))
            group.clear()
            sizes.clear()

        for ids, gen in zip(records, generators, strict=True):
            noisy = self.noise(ids.size, gen)
            noisy += vectors[ids]
            group.append(noisy)
            sizes.append(ids.size)
            held += ids.size
            if held >= self.batch_size:
                flush()
                held = 0
        if group:
            flush()
        return out

    def _decode_noisy(self, noisy: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """The nearest word of each noisy vector (float64 rows): the index, or :func:`decode_far` far out
        (a non-uniform prior: its posterior mode, float64 far out)."""
        if not self.uniform_prior:
            return self._decode_posterior(noisy)
        index = self.search_index
        big = np.abs(noisy).max(axis=1) > self._far_limit()
        if not big.any():
            return np.asarray(index.search(noisy.astype(np.float32), 1)[1][:, 0], dtype=np.int64)
        # tiny epsilon: float32 would lose (or overflow) the differences between words
        out = np.empty(noisy.shape[0], dtype=np.int64)
        out[big] = decode_far(noisy[big], self.embedding.vectors)
        near = ~big
        if near.any():
            out[near] = index.search(noisy[near].astype(np.float32), 1)[1][:, 0]
        return out

    def _decode_posterior(self, noisy: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        post = self.posterior
        big = np.abs(noisy).max(axis=1) > self._far_limit()
        if not big.any():
            return post.decode(noisy)
        out = np.empty(noisy.shape[0], dtype=np.int64)
        out[big] = post.decode_far(noisy[big])
        if (~big).any():
            out[~big] = post.decode(noisy[~big])
        return out

    def _far_limit(self) -> float:
        """The coordinate size above which a noisy vector is decoded by :func:`decode_far`."""
        cached = getattr(self, "_far", None)
        if cached is None:
            norms = np.linalg.norm(self.embedding.vectors, axis=1)
            cached = _FAR * (1.0 + float(norms.max(initial=0.0)))
            object.__setattr__(self, "_far", cached)
        return float(cached)

    def distance(self, w: int, w2: int) -> float:
        vec = self.embedding.vectors
        return float(paired_distances(vec[[w]], vec[[w2]], "euclidean")[0])

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d["index"] = self.index if isinstance(self.index, str) else type(self.index).__name__
        d.update(self._prior_record())
        if self._decode_description is not None:  # type: ignore[attr-defined]
            d["decode"] = self._decode_description  # type: ignore[attr-defined]
        return d


def build_decode_choice_artefact(
    embedding: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None
) -> None:
    """The builder of kind ``decode-choice`` (``deniable prepare -m madlib --epsilon E``).

    It rebuilds the mechanism named in ``params["mechanism"]`` to draw its public queries.
    """
    embedding = Embedding.check(embedding)
    spec = params.get("mechanism")
    if spec is None:
        raise InvalidParameterError(
            "mechanism", None, "a mechanism spec (a choice keyed by a caller's own queries is made by that caller)"
        )
    mech = mechanism_class(spec["name"])(embedding, **spec["options"])  # type: ignore[call-arg]
    if not isinstance(mech, MultivariateLaplace) or mech._tuning_key() != params["key"]:
        raise InvalidParameterError("mechanism", spec["name"], "a mechanism whose decode is tuned with this key")
    tuned.write_choice(embedding, mech._public_queries, params, folder, show_progress)


register_kind(
    DECODE_CHOICE_KIND,
    build_decode_choice_artefact,
    about="madlib's decode choice (HNSW checked against exact search)",
)


def quantized_madlib(mechanism: Any, vocab_size: int = QUANTIZED_VOCAB, *, quantized: Any = None) -> Any:
    """madlib at ``mechanism``'s epsilon and prior over its embedding's first ``vocab_size`` words at 8 bits.

    The mechanism of the small on-device artefact (docs/device.md, "8-bit vectors"):
    ``quantize(embedding.subset(vocab_size))``, decoded exactly (``index="exact"``), so the
    service's split-mode decode and the Python library give the same words as the device.
    ``None`` for anything but a float madlib with a named (string) prior that decodes word by word.
    ``quantized``: that quantized embedding when the caller has it already (the service: one for
    every epsilon).
    """
    from ..embedding import Embedding, QuantizedEmbedding, quantize
    from ._factory import make_mechanism

    emb = getattr(mechanism, "embedding", None)
    prior = getattr(mechanism, "prior", "uniform")
    if (
        getattr(mechanism, "name", None) != "madlib"
        or type(mechanism).__name__ != "MultivariateLaplace"
        or not isinstance(emb, Embedding)
        or isinstance(emb, QuantizedEmbedding)
        or not isinstance(prior, str)
        or getattr(mechanism, "joint_decode", False)
    ):
        return None
    qemb = quantized if quantized is not None else quantize(emb.subset(vocab_size))
    return make_mechanism("madlib", qemb, float(mechanism.epsilon), index="exact", prior=prior)
