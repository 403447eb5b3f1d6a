"""Binary embeddings + randomized response + Hamming nearest neighbour ("BRR", SPEC section 4, seed 001).

For each token ``w``:

1. ``b = b(w)``, the word's m-bit code (:mod:`deniable.binarize`);
2. randomized response on every bit: flip it independently with probability
   ``p = 1 / (1 + e^eps)`` (keep it with probability ``e^eps / (1 + e^eps)``);
3. decode the noisy code ``b_hat`` to a nearest vocabulary code in Hamming distance,
   ties between codes broken uniformly at random, then to a word: uniformly among
   the words that share that code.

Guarantee: ``Pr[M(w) = y] <= exp(eps * hamming(b(w), b(w'))) Pr[M(w') = y]``. The bit
channel gives ``P(b_hat | b) / P(b_hat | b') = ((1 - p) / p)^(d(b', b_hat) - d(b, b_hat))
<= e^(eps * d(b, b'))`` (triangle inequality), and step 3 uses only ``b_hat``, public
codes and fresh randomness (post-processing). See docs/brr.md.

``prior`` (not ``"uniform"``, the decode above): step 3 returns the posterior mode instead,
``argmax_y log prior(y) + hamming(b_hat, c(y)) log(p / (1 - p))`` with ``log(p / (1 - p)) =
-eps`` (fewer flips are more likely, p < 1/2), the most probable word of the best code (lowest
id on ties, no draw): still post-processing of ``b_hat`` (:mod:`._posterior`).
"""

from __future__ import annotations

import math
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._validation import check_choice, check_epsilon, check_int
from ..artefacts import MANIFEST, artefact_path
from ..binarize import (
    ALIASES,
    BINARIZERS,
    BITS,
    CODES_KIND,
    binarize,
    check_binarizer,
    check_binarizer_options,
    check_bits,
    check_codes,
    codes_artefact_params,
    codes_cache_path,
)
from ..binarize.device import CodeVocabulary, load_device_artefact, save_device_artefact
from ..embedding import Embedding, Vocabulary
from ..index.binary import (
    BINARY_HNSW_KIND,
    BinaryExactIndex,
    BinaryFlatIndex,
    CodeIndex,
    binary_hnsw_params,
    distinct_codes,
    make_code_index,
)
from ..metrics import hamming
from ..priors import Prior
from ._options import Option
from ._posterior import PRIOR_OPTION, CodePosteriorDecoder, check_prior, is_uniform, load_prior, prior_record
from .base import Mechanism

__all__ = [
    "DECODERS",
    "BinaryRandomizedResponse",
    "HammingDecoder",
    "SharedCodesWarning",
    "channel_log_prob",
    "flip_probability",
    "randomized_response",
    "sample_flip_masks",
]

#: Decoders: exact brute-force Hamming search (faiss ``IndexBinaryFlat``) or approximate HNSW.
DECODERS = ("flat", "hnsw")


class SharedCodesWarning(UserWarning):
    """Issued when two or more vocabulary words have the same binary code.

    Such words are at Hamming distance 0, so BRR cannot tell them apart: a word is
    released as any word of its code, uniformly (privacy holds; fidelity suffers).
    More bits, or another binarizer, usually separate them.
    """


def flip_probability(epsilon: float) -> float:
    """``1 / (1 + e^eps)``, computed without overflow."""
    eps = check_epsilon(epsilon)
    t = math.exp(-eps)
    return t / (1.0 + t)


def channel_log_prob(noisy: npt.ArrayLike, codes: npt.ArrayLike, epsilon: float, bits: int) -> npt.NDArray[np.float64]:
    """``log P(b_hat | b)`` of the bit channel: ``d log p + (m - d) log(1 - p)``, ``d = hamming(b_hat, b)``."""
    eps = check_epsilon(epsilon)
    d = hamming(noisy, codes).astype(np.float64)
    log_p = -eps - math.log1p(math.exp(-eps))  # log(1 / (1 + e^eps))
    log_q = -math.log1p(math.exp(-eps))  # log(e^eps / (1 + e^eps))
    return d * log_p + (bits - d) * log_q


def sample_flip_masks(count: int, bits: int, p: float, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
    """``(count, ceil(bits / 8))`` packed masks whose ``bits`` leading bits are i.i.d. Bernoulli(p).

    One float64 uniform per bit (``u < p``), so the flip probability is ``p`` up to 2^-53.
    """
    return np.packbits(rng.random((count, bits)) < p, axis=1)


def randomized_response(
    codes: npt.ArrayLike, epsilon: float, rng: np.random.Generator, bits: int | None = None
) -> npt.NDArray[np.uint8]:
    """Flip every bit of the packed ``codes`` independently with probability ``1 / (1 + e^eps)``."""
    arr = check_codes(codes)
    m = arr.shape[1] * 8 if bits is None else int(bits)
    return np.bitwise_xor(arr, sample_flip_masks(arr.shape[0], m, flip_probability(epsilon), rng))


class HammingDecoder:
    """Nearest vocabulary code in Hamming distance, ties uniform, then a uniform word of that code.

    The distinct codes are searched through a binary index of :mod:`deniable.index`
    (``flat``: faiss ``IndexBinaryFlat``, exact; ``hnsw``: faiss ``IndexBinaryHNSW``,
    approximate, a prepared artefact of ``owner``, the vocabulary the codes belong to,
    named by ``codes_key``: see :meth:`~deniable.index.BinaryHNSWIndex.cached`; tiny code
    sets: the numpy ``exact`` index). The index is built on first use (thread-safe), or by
    :meth:`build_index`, so constructing a decoder only groups the codes. Words sharing a
    code are stored as groups (CSR):
    ``members[starts[g] : starts[g] + counts[g]]`` are the word ids of distinct code ``g``.

    Exact uniform tie-breaking (exact indexes): a k-NN search returns the k smallest
    distances exactly. If fewer than k of them equal the minimum ``D0``, the (k)-th
    result is farther than ``D0``, so every code at ``D0`` is among the results.
    Otherwise a range search with radius ``D0 + 1`` (distances ``< radius``) lists all of
    them. One of the tied codes is then drawn with ``rng.integers(0, count)``. Tiny
    vocabularies (``NUMPY_MAX_BYTES``) use the numpy index instead of faiss (``backend``
    forces one or the other).

    HNSW can return no result at all for a query (ids all -1, e.g. a query far from
    every code the greedy graph search reaches); such rows are decoded by the exact
    flat search instead. Either way the decode uses only the noisy code and public
    codes, so it is post-processing and the guarantee is unchanged.
    """

    #: Vocabularies with at most this many code bytes in all are searched with numpy (no faiss call).
    NUMPY_MAX_BYTES: ClassVar[int] = 4096

    def __init__(
        self,
        codes: npt.ArrayLike,
        *,
        index: str = "flat",
        tie_k: int = 16,
        backend: str = "auto",
        index_options: dict[str, Any] | None = None,
        owner: Vocabulary | None = None,
        codes_key: dict[str, Any] | None = None,
    ) -> None:
        arr = np.ascontiguousarray(check_codes(codes))
        self.index_kind = check_choice("index", index, DECODERS)
        check_choice("backend", backend, ("auto", "faiss", "numpy"))
        self.tie_k = check_int("tie_k", tie_k, minimum=1)
        self.bits = arr.shape[1] * 8
        self.unique_codes, first, inverse = distinct_codes(arr)
        self.code_of_word = inverse.astype(np.int64)
        self.counts = np.bincount(inverse, minlength=len(first)).astype(np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)
        self.members = np.argsort(inverse, kind="stable").astype(np.int64)
        small = self.unique_codes.nbytes <= self.NUMPY_MAX_BYTES
        self.backend = "numpy" if backend == "numpy" or (backend == "auto" and small and index == "flat") else "faiss"
        self._index_options = dict(index_options or {})
        self._owner, self._codes_key = owner, codes_key
        self._lock = threading.Lock()
        self._search: CodeIndex | None = None
        self._exact: BinaryExactIndex | BinaryFlatIndex | None = None  # exact fallback of the HNSW decoder

    @property
    def _index(self) -> CodeIndex:
        """The index searched first (built once, on first use)."""
        return self._search if self._search is not None else self.build_index()

    def build_index(self, notice: bool = True) -> CodeIndex:
        """Build or load the index searched first, once (thread-safe); ``notice``: say so on stderr
        when the HNSW index must be built (see :meth:`~deniable.index.BinaryHNSWIndex.cached`)."""
        with self._lock:
            if self._search is None:
                kind = "exact" if self.backend == "numpy" else self.index_kind
                opts = dict(self._index_options)
                if kind == "hnsw":
                    opts.update(owner=self._owner, codes_key=self._codes_key, notice=notice)
                self._search = make_code_index(self.unique_codes, kind, **opts)
            return self._search

    def _exact_index(self) -> BinaryExactIndex | BinaryFlatIndex:
        """An exact index over the distinct codes (the main one unless it is HNSW)."""
        index = self._index
        if isinstance(index, BinaryExactIndex | BinaryFlatIndex):
            return index
        if self._exact is None:
            with self._lock:
                if self._exact is None:
                    self._exact = BinaryFlatIndex(self.unique_codes)
        return self._exact

    @property
    def n_codes(self) -> int:
        """Number of distinct codes."""
        return len(self.unique_codes)

    @property
    def shared_codes(self) -> int:
        """Number of codes that two or more words share."""
        return int((self.counts > 1).sum())

    @property
    def words_sharing(self) -> int:
        """Number of words whose code is shared with another word."""
        return int(self.counts[self.counts > 1].sum())

    def nearest_codes(self, noisy: npt.ArrayLike, rng: np.random.Generator | np.ndarray) -> npt.NDArray[np.int64]:
        """For each packed query, a distinct-code id at minimum Hamming distance (ties uniform).

        ``rng``: a generator, or per-query uniform draws (an ``(n, 3)`` array: keyed records
        draw theirs from their own streams; see :func:`_integers`).
        """
        q = np.ascontiguousarray(check_codes(noisy, name="noisy codes"))
        if q.shape[1] * 8 != self.bits:
            raise InvalidParameterError("noisy codes", f"{q.shape[1] * 8}-bit codes", f"{self.bits}-bit codes")
        index = self._index
        exact = isinstance(index, BinaryExactIndex | BinaryFlatIndex)
        out, found = self._nearest(index, q, rng, exact=exact)
        lost = np.nonzero(~found)[0]
        if lost.size:  # HNSW found no code at all for these rows: exact search (still post-processing)
            out[lost], _ = self._nearest(self._exact_index(), q[lost], rng, exact=True, rows=lost)
        return out

    def _nearest(
        self,
        index: CodeIndex,
        q: np.ndarray,
        rng: np.random.Generator | np.ndarray,
        *,
        exact: bool,
        rows: npt.NDArray[np.int64] | None = None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Code ids at the smallest distance found (ties uniform) and which rows found any code.

        ``exact``: ``index`` is exact and has ``range_search``; ties beyond the k results
        are completed with a range search (exactly uniform). Rows where the index
        returned no id at all (only -1: possible with HNSW) get id -1 and ``found`` False.
        """
        n = q.shape[0]
        k = min(self.tie_k, self.n_codes)
        dist, ids = index.search(q, k)
        valid = ids >= 0
        d0 = np.where(valid, dist, np.iinfo(dist.dtype).max).min(axis=1, keepdims=True)
        ties = (dist == d0) & valid
        count = ties.sum(axis=1)
        found = count > 0
        where = np.arange(n) if rows is None else rows  # q's rows among the draws
        pick = _integers(rng, np.maximum(count, 1), where, 0)
        col = np.argmax(np.cumsum(ties, axis=1) > pick[:, None], axis=1)
        out = np.where(found, ids[np.arange(n), col], -1).astype(np.int64)
        if exact and k < self.n_codes:
            assert isinstance(index, BinaryExactIndex | BinaryFlatIndex)
            full = np.nonzero(count == k)[0]
            if full.size:
                radii = d0[full, 0]
                for r in np.unique(radii).tolist():
                    tied = full[radii == r]
                    lims, _, rid = index.range_search(q[tied], int(r) + 1)
                    out[tied] = rid[lims[:-1] + _integers(rng, np.diff(lims), where[tied], 1)]
        return out, found

    def decode(self, noisy: npt.ArrayLike, rng: np.random.Generator | np.ndarray) -> npt.NDArray[np.int64]:
        """Word ids: a nearest code (ties uniform), then a uniform word among those sharing it."""
        g = self.nearest_codes(noisy, rng)
        return self.members[self.starts[g] + _integers(rng, self.counts[g], np.arange(g.size), 2)]


#: uniform draws a keyed record makes per token for the decode's ties (:func:`_integers`)
DECODE_DRAWS = 3


def _integers(
    rng: np.random.Generator | np.ndarray, high: npt.NDArray[np.integer], rows: npt.NDArray[np.int64], col: int
) -> npt.NDArray[np.int64]:
    """Uniform integers in ``[0, high)``: from ``rng``, or from pre-drawn uniforms ``rng[rows, col]``."""
    if isinstance(rng, np.random.Generator):
        return np.asarray(rng.integers(0, high), dtype=np.int64)
    h = np.asarray(high, dtype=np.int64)
    return np.minimum((rng[rows, col] * h).astype(np.int64), np.maximum(h - 1, 0))


@dataclass(frozen=True, eq=False)
class BinaryRandomizedResponse(Mechanism):
    """Randomized response on the bits of a binary word code, decoded to the nearest code.

    ``Pr[M(w)=y] <= exp(epsilon * hamming(b(w), b(w'))) Pr[M(w')=y]`` for all w, w', y.

    Parameters
    ----------
    embedding
        A float :class:`~deniable.Embedding` (binarized with ``binarizer``), a
        :class:`~deniable.binarize.device.CodeVocabulary` (a loaded device artefact: its
        codes are used; see :meth:`from_device`), or any
        :class:`~deniable.embedding.Vocabulary` with the codes given as ``binarizer``.
    epsilon
        Privacy parameter (> 0), per bit of Hamming distance. Compare it with other
        mechanisms' epsilon through :func:`deniable.calibrate.privacy_ratio`.
    bits
        Code length m in {64, 128, 256, 512}; default 256 (or the artefact's).
    binarizer
        ``"autoencoder"`` (default; Tissier et al. 2019), ``"simhash"`` (alias
        ``"random"``), ``"itq"``, or a ``(V, bits // 8)`` uint8 array of packed codes.
    seed
        Seed of the binarizer's training (public, not privacy noise; codes are cached by it).
    index
        ``"flat"`` (exact Hamming search, exactly uniform ties; default) or ``"hnsw"``
        (approximate, faster; same guarantee, lower fidelity; cached on disk).
    batch_size
        Tokens per block (bounds memory).
    binarizer_options
        Hyper-parameters for :func:`deniable.binarize.binarize`.
    show_progress
        Progress bar while training codes (default: when stderr is a terminal).
    prior
        The decode's public prior: ``"uniform"`` (default, the nearest-code decode), ``"zipf"``,
        ``"zipf:S"``, ``"counts:PATH"`` or a :class:`~deniable.priors.Prior`: the exact posterior
        mode by a full scan (``index`` then unused).
    """

    name: ClassVar[str] = "brr"
    metric: ClassVar[str] = "hamming"  # type: ignore[misc]

    embedding: Vocabulary
    epsilon: float
    bits: int | None = None
    binarizer: str | np.ndarray | None = None
    seed: int = 0
    index: str = "flat"
    batch_size: int = 8192
    binarizer_options: dict[str, Any] = field(default_factory=dict, repr=False)
    show_progress: bool | None = field(default=None, repr=False)
    prior: str | Prior = "uniform"

    options: ClassVar[tuple[Option, ...]] = (
        Option("bits", int, None, choices=BITS, help="code length (default 256 or the artefact's)"),
        Option(
            "binarizer",
            str,
            None,
            choices=(*BINARIZERS, *ALIASES),
            objects=True,
            help="how codes are made (random = simhash)",
        ),
        Option(
            "seed",
            int,
            0,
            low=0,
            high=2**63 - 1,
            flag="--binarizer-seed",
            help="seed of the binarizer's training (public)",
        ),
        Option(
            "index",
            str,
            "flat",
            choices=DECODERS,
            client=True,
            help="Hamming search, exact (flat) or approximate (hnsw)",
        ),
        Option("batch_size", int, 8192, low=1, high=1 << 24, cli=False, help="tokens per block (bounds memory)"),
        Option("binarizer_options", dict, None, cli=False, help="hyper-parameters of the binarizer"),
        Option("show_progress", bool, None, cli=False, help="progress bar while training codes"),
        PRIOR_OPTION,
    )

    @classmethod
    def prepared_artefacts(cls, embedding: Vocabulary, options: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """``(kind, params)`` of the codes BRR trains from float vectors (:mod:`deniable.artefacts`)
        and, with ``index="hnsw"``, of their binary HNSW index.

        ``options``: ``bits`` (256), ``binarizer`` (autoencoder), ``seed`` (0),
        ``binarizer_options``, ``index`` (flat). A device artefact's codes are given:
        nothing to prepare (its HNSW index is kept in the store when first built).
        """
        if not isinstance(embedding, Vocabulary):
            raise InvalidParameterError("embedding", type(embedding).__name__, "a deniable.Embedding")
        if not isinstance(embedding, Embedding):
            return []
        bits = options.get("bits")
        method = check_binarizer(options.get("binarizer") or "autoencoder")
        seed = check_int("seed", options.get("seed", 0), minimum=0)
        opts = check_binarizer_options(method, dict(options.get("binarizer_options") or {}))
        codes = codes_artefact_params(method, check_bits(256 if bits is None else bits), seed, opts)
        out = [(CODES_KIND, codes)]
        if check_choice("index", options.get("index") or "flat", DECODERS) == "hnsw":
            out.append((BINARY_HNSW_KIND, binary_hnsw_params({"kind": CODES_KIND, "params": codes})))
        return out

    def __post_init__(self) -> None:
        """Validate and record the parameters; no training, no index (see :meth:`prepare`)."""
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "batch_size", check_int("batch_size", self.batch_size, minimum=1))
        object.__setattr__(self, "seed", check_int("seed", self.seed, minimum=0))
        check_choice("index", self.index, DECODERS)
        object.__setattr__(self, "prior", check_prior(self.prior))
        emb = self.embedding
        if not isinstance(emb, Vocabulary):
            raise InvalidParameterError("embedding", type(emb).__name__, "a deniable.Embedding or a device artefact")
        codes: npt.NDArray[np.uint8] | None = None
        if isinstance(emb, CodeVocabulary):
            codes = emb.codes
            method = str(emb.params.get("binarizer", "precomputed"))
            if self.bits is not None and self.bits != emb.bits:
                raise InvalidParameterError("bits", self.bits, f"{emb.bits} (the bits of the device artefact) or None")
            if self.binarizer is not None and (
                not isinstance(self.binarizer, str) or check_binarizer(self.binarizer) != method
            ):
                raise InvalidParameterError(
                    "binarizer", _short(self.binarizer), f"{method!r} (the artefact's binarizer) or None"
                )
            if self.binarizer_options:
                raise InvalidParameterError(
                    "binarizer_options", self.binarizer_options, "empty: the artefact's codes are already trained"
                )
        elif isinstance(self.binarizer, np.ndarray):
            codes = check_codes(self.binarizer, rows=emb.size, name="binarizer")
            method = "precomputed"
            if self.bits is not None and self.bits != codes.shape[1] * 8:
                allowed = f"{codes.shape[1] * 8} (the given codes' length) or None"
                raise InvalidParameterError("bits", self.bits, allowed)
        else:  # codes trained from float vectors
            emb = Embedding.check(emb)
            method = check_binarizer("autoencoder" if self.binarizer is None else self.binarizer)
            object.__setattr__(self, "bits", check_bits(256 if self.bits is None else self.bits))
            check_binarizer_options(method, self.binarizer_options)
        object.__setattr__(self, "binarizer", method)
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_decoder", None)
        if codes is not None:  # given codes: group them now (cheap; shared codes are reported at once)
            object.__setattr__(self, "bits", int(codes.shape[1] * 8))
            self._install(codes, stacklevel=4)

    def _codes_key(self) -> dict[str, Any] | None:
        """How the store names the codes: their ``binary-codes`` artefact when trained, else None (their sha256)."""
        if not isinstance(self.embedding, Embedding) or not isinstance(self.binarizer, str):
            return None
        if self.binarizer == "precomputed":
            return None
        method = str(self.binarizer)
        opts = check_binarizer_options(method, self.binarizer_options)
        return {"kind": CODES_KIND, "params": codes_artefact_params(method, int(self.bits or 0), self.seed, opts)}

    def _install(self, codes: npt.NDArray[np.uint8], stacklevel: int) -> None:
        decoder = HammingDecoder(codes, index=self.index, owner=self.embedding, codes_key=self._codes_key())
        object.__setattr__(self, "_codes", codes)
        object.__setattr__(self, "_decoder", decoder)
        if decoder.shared_codes:
            warnings.warn(_shared_codes_message(decoder, self.embedding), SharedCodesWarning, stacklevel=stacklevel)

    @property
    def prepared(self) -> bool:
        """True once the codes are known (given, loaded or trained)."""
        return self._decoder is not None  # type: ignore[attr-defined]

    def prepare(self, show_progress: bool | None = None) -> BinaryRandomizedResponse:
        """Obtain the codes (train them, or read them from the prepared-artefact store) and, with
        ``index="hnsw"``, their binary HNSW index, once; return ``self``.

        Both are functions of public data only (the embedding, ``bits``, ``binarizer``,
        ``seed``, ``binarizer_options``) and kept as prepared artefacts
        (:mod:`deniable.artefacts`; ``deniable prepare -m brr [--index hnsw]`` builds them
        ahead). :meth:`privatize` calls this itself (with one notice on stderr when
        something must be built); call it ahead to choose when the cost is paid.
        Thread-safe: concurrent callers build once.
        """
        show = self.show_progress if show_progress is None else show_progress
        notice = self._ensure_codes(show)
        if self.index == "hnsw":
            self._decoder.build_index(notice=notice and show is not False)  # type: ignore[attr-defined]
        return self

    def _ensure_codes(self, show: bool | None = None) -> bool:
        """Obtain the codes once; False when a notice already said what is being built."""
        if self._decoder is not None:  # type: ignore[attr-defined]
            return True
        with self._lock:  # type: ignore[attr-defined]
            if self._decoder is not None:  # type: ignore[attr-defined]
                return True
            emb = self.embedding
            emb = Embedding.check(emb)  # for the type checker: __post_init__ checked it
            show = self.show_progress if show is None else show
            method, bits = str(self.binarizer), int(self.bits or 0)
            opts = check_binarizer_options(method, self.binarizer_options)
            key = self._codes_key()
            hnsw_prepared = (
                key is not None and (artefact_path(emb, BINARY_HNSW_KIND, binary_hnsw_params(key)) / MANIFEST).is_file()
            )
            if codes_cache_path(emb, method, bits, self.seed, opts).is_file():
                codes = binarize(emb, bits, method, seed=self.seed, show_progress=show, **self.binarizer_options)
                self._install(codes, stacklevel=4)
                return True
            if show is not False:
                also = " and their binary HNSW index" if self.index == "hnsw" and not hnsw_prepared else ""
                print(
                    f"deniable: brr needs {bits}-bit {method} codes of {emb.size:,} words; computing them{also} "
                    "once (then kept as prepared artefacts)",
                    file=sys.stderr,
                    flush=True,
                )
            codes = binarize(emb, bits, method, seed=self.seed, show_progress=show, **self.binarizer_options)
            self._install(codes, stacklevel=4)
            return False

    # -- construction from the on-device artefact --------------------------------------------
    @classmethod
    def from_device(cls, path: str | Path, epsilon: float, **options: Any) -> BinaryRandomizedResponse:
        """Build the mechanism from a device artefact folder alone (codes + words, memory-mapped)."""
        return cls(load_device_artefact(path), epsilon, **options)

    def export_device(self, folder: str | Path) -> dict[str, int]:
        """Write the device artefact (packed codes + words + params); return the file sizes in bytes."""
        params = {
            "binarizer": self.binarizer,
            "seed": self.seed,
            "source_embedding": self.embedding.name,
            "source_fingerprint": self.embedding.fingerprint[:20],
            "shared_codes": self.decoder.shared_codes,
            "words_sharing_a_code": self.decoder.words_sharing,
        }
        if isinstance(self.embedding, CodeVocabulary):
            params = {**self.embedding.params, "source_embedding": self.embedding.params.get("source_embedding")}
        return save_device_artefact(folder, self.embedding._words, self.codes, params)

    # -- the mechanism -------------------------------------------------------------------------
    @property
    def codes(self) -> npt.NDArray[np.uint8]:
        """The packed codes of every word, ``(V, bits // 8)`` uint8 (obtained once, see :meth:`prepare`)."""
        self._ensure_codes()
        return self._codes  # type: ignore[attr-defined]

    @property
    def decoder(self) -> HammingDecoder:
        """The Hamming nearest-code decoder (its codes obtained once; its index built on first search)."""
        self._ensure_codes()
        return self._decoder  # type: ignore[attr-defined]

    @property
    def flip_probability(self) -> float:
        """``1 / (1 + e^epsilon)``."""
        return flip_probability(self.epsilon)

    def noisy_codes(self, ids: npt.ArrayLike, rng: np.random.Generator) -> npt.NDArray[np.uint8]:
        """The randomized-response codes ``b_hat`` of each id, before decoding."""
        return self._noisy(self.embedding.check_ids(ids).ravel(), rng)

    def _noisy(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.uint8]:
        return np.bitwise_xor(
            self.codes[ids], sample_flip_masks(ids.size, int(self.bits or 0), self.flip_probability, rng)
        )

    @property
    def posterior(self) -> CodePosteriorDecoder:
        """The exact posterior-mode decoder of a non-uniform ``prior`` (built on first use, thread-safe)."""
        return self._artefact("_posterior", self._build_posterior)

    def _build_posterior(self) -> CodePosteriorDecoder:
        d = self.decoder
        prior = load_prior(self.prior, self.embedding)
        return CodePosteriorDecoder(d.unique_codes, d.members, d.starts, d.counts, prior, self.epsilon)

    def decode_codes(self, noisy: npt.ArrayLike, rng: np.random.Generator | np.ndarray) -> npt.NDArray[np.int64]:
        """Word ids of noisy codes: the nearest code (ties from ``rng``) or, under a non-uniform
        ``prior``, the posterior mode (no draw). Reads only the noisy codes and public data."""
        if is_uniform(self.prior):
            return self.decoder.decode(noisy, rng)
        return self.posterior.decode(check_codes(noisy, name="noisy codes"))

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        self.prepare()  # codes and index: one notice when something must be built
        return np.concatenate(
            [
                self.decode_codes(self._noisy(ids[s : s + self.batch_size], rng), rng)
                for s in range(0, ids.size, self.batch_size)
            ]
        )

    def _privatize_records(
        self, records: list[npt.NDArray[np.int64]], generators: list[np.random.Generator]
    ) -> list[npt.NDArray[np.int64]]:
        """Each record's flips and tie draws from its own stream; one batched decode for them all."""
        self.prepare()
        noisy = np.concatenate([self._noisy(r, g) for r, g in zip(records, generators, strict=True)])
        draws = np.concatenate([g.random((r.size, DECODE_DRAWS)) for r, g in zip(records, generators, strict=True)])
        out = np.concatenate(
            [
                self.decode_codes(noisy[s : s + self.batch_size], draws[s : s + self.batch_size])
                for s in range(0, noisy.shape[0], self.batch_size)
            ]
        )
        return list(np.split(out, np.cumsum([r.size for r in records])[:-1]))

    def distance(self, w: int, w2: int) -> float:
        return float(hamming(self.codes[w], self.codes[w2]))

    def pair_distances(self, a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Vectorized ``distance``: Hamming distances of the codes of ids ``a[i]``, ``b[i]``."""
        ia = self.embedding.check_ids(a, "a")
        ib = self.embedding.check_ids(b, "b")
        return hamming(self.codes[ia], self.codes[ib]).astype(np.float64)

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update(
            bits=self.bits,
            binarizer=self.binarizer,
            index=self.index,
            flip_probability=self.flip_probability,
            distinct_codes=self.decoder.n_codes,
            shared_codes=self.decoder.shared_codes,
            words_sharing_a_code=self.decoder.words_sharing,
        )
        d.update(self._artefact("_prior_rec", lambda: prior_record(self.prior)))
        return d


def _shared_codes_message(decoder: HammingDecoder, embedding: Vocabulary, groups: int = 3, per_group: int = 5) -> str:
    """The :class:`SharedCodesWarning` text: counts, and the (public) vocabulary words of the largest groups."""
    shared = np.nonzero(decoder.counts > 1)[0]
    largest = shared[np.argsort(-decoder.counts[shared], kind="stable")[:groups]]
    shown = []
    for g in largest.tolist():
        ids = decoder.members[decoder.starts[g] : decoder.starts[g] + decoder.counts[g]]
        names = [_clip(w) for w in embedding.words(ids[:per_group])]
        more = f" and {ids.size - per_group} more" if ids.size > per_group else ""
        shown.append("{" + ", ".join(names) + more + "}")
    return (
        f"brr: {decoder.shared_codes} binary code(s) are shared by {decoder.words_sharing} of the "
        f"{len(decoder.code_of_word)} vocabulary words ({decoder.bits}-bit codes). Words with the same code "
        "are indistinguishable: each is released as a uniformly random word of its code, "
        f"e.g. {'; '.join(shown)}. More bits or another binarizer usually separate them."
    )


def _clip(word: str, limit: int = 40) -> str:
    return word if len(word) <= limit else word[: limit - 3] + "..."


def _short(value: object) -> object:
    return f"array of shape {value.shape}" if isinstance(value, np.ndarray) else value
