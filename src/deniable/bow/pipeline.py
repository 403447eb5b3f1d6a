"""The bag-of-words privatization pipeline: vectorize -> compress -> noise.

What streams and what does not: the *input* is read, counted, compressed and noised
in batches, but the *output* is not sparse — every coordinate of every released row
receives noise, zeros included — so the noisy matrix has ``rows x k`` entries (about
8 bytes each stored as CSR int32) and is held in memory until it is saved. With no
horizontal compression and a 20,000-word vocabulary that is 160 kB per document,
1.6 GB for 10,000 documents: this is why compression matters. The pipeline checks the
size as it grows and raises :class:`~deniable.ResourceLimitError` beyond
``max_memory``. The released rows are written straight into one set of CSR arrays
grown in place (no second copy of the matrix is made at the end), so the peak is one
copy of the release plus the buffers of one chunk of rows.
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


_INT32 = np.iinfo(np.int32)


class _RowBuffer:
    """CSR rows appended chunk by chunk into one set of arrays, grown in place.

    ``ndarray.resize`` reallocates (``realloc``; ``mremap`` for large blocks on Linux,
    no copy) by 1.25x at a time, capped at ``max_entries`` when possible, and the
    arrays are trimmed to size at the end: the matrix is never held twice.
    """

    def __init__(self, n_cols: int, max_entries: int) -> None:
        self.n_cols = n_cols
        self.max_entries = max(int(max_entries), 1)
        self.data: npt.NDArray[np.integer[Any]] = np.empty(0, dtype=np.int32)
        self.indices: npt.NDArray[np.int32] = np.empty(0, dtype=np.int32)
        self.indptr: npt.NDArray[np.int64] = np.zeros(1, dtype=np.int64)
        self.nnz = 0
        self.rows = 0

    @staticmethod
    def _room(arr: npt.NDArray[Any], need: int, cap: int | None = None) -> None:
        if arr.size < need:
            grown = arr.size + arr.size // 4 + 1024
            arr.resize(max(need, grown if cap is None else min(grown, cap)), refcheck=False)

    def append_dense(self, noisy: npt.NDArray[np.int64]) -> int:
        """Append the non-zero entries of a dense block of rows; returns how many."""
        mask = noisy != 0
        per_row = mask.sum(axis=1, dtype=np.int64)
        n, r = int(per_row.sum()), int(noisy.shape[0])
        if noisy.size and (noisy.max() > _INT32.max or noisy.min() < _INT32.min) and self.data.dtype != np.int64:
            self.data = self.data.astype(np.int64)  # counts beyond int32: rare, one conversion
        self._room(self.data, self.nnz + n, self.max_entries)
        self._room(self.indices, self.nnz + n, self.max_entries)
        self._room(self.indptr, self.rows + r + 1)
        self.data[self.nnz : self.nnz + n] = noisy[mask]
        columns = np.broadcast_to(np.arange(noisy.shape[1], dtype=np.int32), noisy.shape)
        self.indices[self.nnz : self.nnz + n] = columns[mask]
        np.cumsum(per_row, out=per_row)
        self.indptr[self.rows + 1 : self.rows + r + 1] = per_row + self.nnz
        self.nnz += n
        self.rows += r
        return n

    def matrix(self) -> sp.csr_matrix:
        """The rows as a CSR matrix sharing the (trimmed) arrays; the buffer is spent."""
        for arr, size in ((self.data, self.nnz), (self.indices, self.nnz), (self.indptr, self.rows + 1)):
            arr.resize(size, refcheck=False)
        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=(self.rows, self.n_cols), copy=False)


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
        need_batch = self._batch_bytes(batch_size)
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

    def _batch_bytes(self, batch_size: int) -> int:
        # the dense buffers of one chunk of rows: counts, two geometric draws, result (int64 each);
        # the released matrix itself is built in place, one copy (see _RowBuffer)
        return 4 * 8 * self.n_bins * min(max(batch_size, 1), self._rows_per_chunk())

    def _buffer(self, batch_size: int) -> _RowBuffer:
        return _RowBuffer(self.n_bins, (self.max_memory - self._batch_bytes(batch_size)) // BYTES_PER_ENTRY)

    # -- core ----------------------------------------------------------------
    def _noise_rows(
        self, compressed: sp.csr_matrix, rng: np.random.Generator, report: NoiseReport, out: _RowBuffer
    ) -> None:
        # peak: the counts, two geometric draws and their difference, int64 each (see _batch_bytes)
        noisy = compressed.toarray().astype(np.int64, copy=False)
        report.signal_l1 += int(noisy.sum())
        noise = self.mechanism.noise(noisy.shape, rng)
        report.noise_l1 += int(np.abs(noise).sum())
        report.noise_sum += int(noise.sum())
        report.noise_sq += float(np.square(noise, dtype=np.float64).sum())
        noisy += noise
        del noise
        if self.mechanism.clamp:
            neg = noisy < 0
            report.clamped += int(neg.sum())
            noisy[neg] = 0
            del neg
        report.released_nonzero += out.append_dense(noisy)
        report.rows += int(noisy.shape[0])

    def privatize_counts(
        self, counts: sp.spmatrix | npt.ArrayLike, rng: np.random.Generator | None = None
    ) -> tuple[sp.csr_matrix, NoiseReport]:
        """Compress and noise an uncompressed ``(n, vocabulary)`` count matrix held in memory."""
        assert self.bin_map is not None  # noqa: S101
        x = sp.csr_matrix(counts)
        if x.dtype.kind not in "iu":
            raise InvalidParameterError("counts", f"dtype {x.dtype}", "integer counts")
        gen = check_random_state(rng)
        self.check_memory(x.shape[0], x.shape[0])
        report = self._new_report()
        report.documents = int(x.shape[0])
        compressed = group_rows(self.bin_map.apply(x), self.group)
        step = self._rows_per_chunk()
        out = self._buffer(compressed.shape[0])
        for start in range(0, compressed.shape[0], step):
            self._noise_rows(compressed[start : start + step], gen, report, out)
        return out.matrix(), report

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
        out = self._buffer(batch_size_hint)

        def emit(block: sp.csr_matrix) -> None:
            grouped = group_rows(block, g)
            self.check_memory(report.documents, grouped.shape[0] * g)
            step = self._rows_per_chunk()
            for start in range(0, grouped.shape[0], step):
                self._noise_rows(grouped[start : start + step], gen, report, out)

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
        return out.matrix(), report

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
        version = release_version()
        params: dict[str, Any] = {
            "mechanism": "two-sided geometric (LPLP, seed 002)",
            "guarantee": f"(N={mech.precision:g}, eps={mech.epsilon:g})-limited-precision local privacy "
            "per document: count vectors within l1 distance N are eps-indistinguishable"
            + (
                ""
                if self.group == 1
                else f"; with group={self.group} it covers any change to the documents of one group "
                "totalling l1 <= N (their counts are summed before noise, so a group is the unit)"
            ),
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
            "tokenizer": self.vectorizer.tokenizer,
            "noise_generator": "seeded (NOT private: the noise can be recomputed)"
            if seeded
            else "ChaCha20 keyed from os.urandom",
            "deniable_version": version,
        }
        params.update(self.params)
        return params


def release_version() -> str:
    """The installed deniable version, as a release's ``params.json`` records it."""
    try:
        return importlib.metadata.version("deniable")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"
