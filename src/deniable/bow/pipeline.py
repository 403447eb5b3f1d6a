"""The streaming bag-of-words privatization pipeline: vectorize -> compress -> noise.

Memory: the input is sparse and read in batches, but the *output* is not sparse —
every coordinate of every released row receives noise, so the noisy matrix has
``rows x k`` entries (about 8 bytes each stored as CSR int32). With no horizontal
compression and a 20,000-word vocabulary that is 160 kB per document, 1.6 GB for
10,000 documents: this is why compression matters. The pipeline estimates the size
before it grows and raises :class:`~deniable.ResourceLimitError` beyond
``max_memory``.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from .._errors import InvalidParameterError, ResourceLimitError
from .._random import check_random_state
from .._validation import check_int
from .compress import BinMap, group_rows, identity_bin_map
from .noise import TwoSidedGeometric
from .release import BowRelease, NoiseReport
from .vectorize import BowVectorizer

__all__ = ["BYTES_PER_ENTRY", "DEFAULT_MAX_MEMORY", "BowPrivatizer", "estimate_release_bytes"]

#: Bytes per released entry in memory and in the CSR ``.npz`` (int32 value + int32 column).
BYTES_PER_ENTRY = 8
#: Default ``max_memory``: 2 GiB.
DEFAULT_MAX_MEMORY = 2 * 2**30


def estimate_release_bytes(n_documents: int, n_bins: int, group: int = 1) -> int:
    """Worst-case bytes of the noisy matrix: ``ceil(n / g) * k * 8`` (every entry non-zero)."""
    n = check_int("n_documents", n_documents, minimum=0)
    k = check_int("n_bins", n_bins, minimum=1)
    g = check_int("group", group, minimum=1)
    return -(-n // g) * k * BYTES_PER_ENTRY


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


@dataclass(eq=False)
class BowPrivatizer:
    """Documents -> ``(N, eps)``-LPLP noisy compressed count matrix.

    Parameters
    ----------
    vectorizer
        Tokenizer + public vocabulary.
    mechanism
        The two-sided geometric mechanism (epsilon, precision N, clamping).
    bin_map
        Horizontal compression (``None``: none, one bin per word).
    group
        Vertical compression: sum ``group`` consecutive documents per released row.
    max_memory
        Refuse (``ResourceLimitError``) when the noisy matrix would exceed this many bytes.
    params
        Extra JSON-serialisable metadata saved with the release.
    """

    vectorizer: BowVectorizer
    mechanism: TwoSidedGeometric
    bin_map: BinMap | None = None
    group: int = 1
    max_memory: int = DEFAULT_MAX_MEMORY
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.bin_map is None:
            self.bin_map = identity_bin_map(self.vectorizer.n_features)
        if self.bin_map.n_features != self.vectorizer.n_features:
            raise InvalidParameterError(
                "bin_map",
                f"{self.bin_map.n_features} features",
                f"one bin per vocabulary word ({self.vectorizer.n_features})",
            )
        self.group = check_int("group", self.group, minimum=1)
        self.max_memory = check_int("max_memory", self.max_memory, minimum=1)

    @property
    def n_bins(self) -> int:
        """Columns of the release."""
        assert self.bin_map is not None  # noqa: S101 - set in __post_init__
        return self.bin_map.n_bins

    def check_memory(self, n_documents: int, batch_size: int = 0) -> int:
        """Raise ResourceLimitError if ``n_documents`` (plus one batch's dense buffers) would not fit."""
        need = estimate_release_bytes(n_documents, self.n_bins, self.group)
        # the dense buffers of one chunk of rows: counts, two geometric draws, result (int64 each)
        need_batch = 4 * 8 * self.n_bins * min(max(batch_size, 1), self._rows_per_chunk())
        if need + need_batch > self.max_memory:
            per_row = self.n_bins * BYTES_PER_ENTRY
            raise ResourceLimitError(
                f"the noisy matrix for {n_documents:,} documents would need about {_gb(need + need_batch)} "
                f"(limit max_memory={_gb(self.max_memory)}): every one of the k={self.n_bins:,} columns of "
                f"every row receives noise, so the output is dense ({per_row:,} bytes per row). "
                "Compress horizontally (fewer bins), group documents vertically, use a smaller "
                "batch size, or raise the memory limit."
            )
        return need

    # -- core ----------------------------------------------------------------
    def _noise_rows(self, compressed: sp.csr_matrix, rng: np.random.Generator, report: NoiseReport) -> sp.csr_matrix:
        dense = compressed.toarray().astype(np.int64)
        noise = self.mechanism.noise(dense.shape, rng)
        noisy = dense + noise
        report.signal_l1 += int(dense.sum())
        report.noise_l1 += int(np.abs(noise).sum())
        report.noise_sum += int(noise.sum())
        report.noise_sq += float(np.square(noise, dtype=np.float64).sum())
        if self.mechanism.clamp:
            neg = noisy < 0
            report.clamped += int(neg.sum())
            noisy[neg] = 0
        info = np.iinfo(np.int32)
        if noisy.size and (noisy.max() > info.max or noisy.min() < info.min):
            out = sp.csr_matrix(noisy)
        else:
            out = sp.csr_matrix(noisy.astype(np.int32))
        report.released_nonzero += int(out.nnz)
        report.rows += int(out.shape[0])
        return out

    def privatize_counts(
        self, counts: sp.spmatrix | npt.ArrayLike, rng: np.random.Generator | None = None
    ) -> tuple[sp.csr_matrix, NoiseReport]:
        """Compress and noise an uncompressed ``(n, vocabulary)`` count matrix held in memory."""
        assert self.bin_map is not None  # noqa: S101
        x = sp.csr_matrix(counts)
        if x.dtype.kind not in "iu":
            raise InvalidParameterError("counts", f"dtype {x.dtype}", "integer counts")
        gen = check_random_state(rng)
        self.check_memory(x.shape[0])
        report = self._new_report()
        report.documents = int(x.shape[0])
        compressed = group_rows(self.bin_map.apply(x), self.group)
        chunks = []
        step = self._rows_per_chunk()
        for start in range(0, compressed.shape[0], step):
            chunks.append(self._noise_rows(compressed[start : start + step], gen, report))
        out = sp.vstack(chunks, format="csr") if chunks else sp.csr_matrix((0, self.n_bins), dtype=np.int32)
        return out, report

    def _rows_per_chunk(self) -> int:
        # keep each dense buffer at ~ 64 MB
        return max(1, (64 * 2**20) // (8 * self.n_bins))

    def _new_report(self) -> NoiseReport:
        return NoiseReport(bins=self.n_bins, expected_abs_noise=self.mechanism.expected_abs_noise)

    def privatize_batches(
        self,
        batches: Iterable[Sequence[str | None]],
        rng: np.random.Generator | None = None,
        *,
        batch_size_hint: int = 1000,
    ) -> tuple[sp.csr_matrix, NoiseReport]:
        """Stream batches of documents through vectorize -> compress -> group -> noise.

        Returns the noisy matrix (rows in input order) and the (private) noise report.
        Groups of ``group`` documents may straddle batches; the last group may be smaller.
        """
        assert self.bin_map is not None  # noqa: S101
        gen = check_random_state(rng)
        report = self._new_report()
        self.check_memory(0, batch_size_hint)
        g = self.group
        pending: sp.csr_matrix | None = None
        chunks: list[sp.csr_matrix] = []

        def emit(block: sp.csr_matrix) -> None:
            grouped = group_rows(block, g)
            self.check_memory(report.documents, grouped.shape[0] * g)
            step = self._rows_per_chunk()
            for start in range(0, grouped.shape[0], step):
                chunks.append(self._noise_rows(grouped[start : start + step], gen, report))

        for batch in batches:
            x, tokens, counted = self.vectorizer.transform_with_stats(batch)
            report.tokens += tokens
            report.tokens_counted += counted
            report.documents += len(batch)
            c = self.bin_map.apply(x)
            if pending is not None and pending.shape[0]:
                c = sp.vstack([pending, c], format="csr")
            full = (c.shape[0] // g) * g
            pending = c[full:]
            if full:
                emit(c[:full])
        if pending is not None and pending.shape[0]:
            emit(pending)
        out = sp.vstack(chunks, format="csr") if chunks else sp.csr_matrix((0, self.n_bins), dtype=np.int32)
        return out, report

    def release(
        self,
        batches: Iterable[Sequence[str | None]],
        rng: np.random.Generator | None = None,
        *,
        seeded: bool = False,
        batch_size_hint: int = 1000,
    ) -> tuple[BowRelease, NoiseReport]:
        """:meth:`privatize_batches` wrapped as a :class:`BowRelease` with its parameters.

        ``seeded=True`` records that the noise came from a seed (NOT private).
        """
        assert self.bin_map is not None  # noqa: S101
        matrix, report = self.privatize_batches(batches, rng, batch_size_hint=batch_size_hint)
        return BowRelease(matrix, self.bin_map, self.vectorizer.vocabulary, self.release_params(seeded)), report

    def release_params(self, seeded: bool = False) -> dict[str, Any]:
        """The data-independent parameters saved with a release."""
        mech = self.mechanism
        try:
            version = importlib.metadata.version("deniable")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover
            version = "unknown"
        params: dict[str, Any] = {
            "mechanism": "two-sided geometric (LPLP, seed 002)",
            "guarantee": f"(N={mech.precision:g}, eps={mech.epsilon:g})-limited-precision local privacy "
            "per document: count vectors within l1 distance N are eps-indistinguishable",
            "epsilon": mech.epsilon,
            "precision_N": mech.precision,
            "alpha": mech.alpha,
            "noise_std_per_entry": mech.noise_std,
            "clamp_at_zero": mech.clamp,
            "group": self.group,
            "rows": "row j = document j"
            if self.group == 1
            else f"row j = sum of documents j*{self.group} .. j*{self.group}+{self.group - 1} "
            "(the last group may be smaller)",
            "tokenizer": "lower-cased, deniable.text.WORD_PATTERN (runs of Unicode letters/digits); "
            "words outside the vocabulary are not counted",
            "noise_generator": "seeded (NOT private: the noise can be recomputed)"
            if seeded
            else "ChaCha20 keyed from os.urandom",
            "deniable_version": version,
        }
        params.update(self.params)
        return params
