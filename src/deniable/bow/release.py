"""The released data set: noisy matrix + bin map + parameters, written and read as a folder.

A release folder holds exactly what may be given to analysts:

- ``matrix.npz`` — the noisy ``(rows, k)`` integer matrix in scipy's sparse CSR
  ``.npz`` format (``scipy.sparse.load_npz``). Row ``j`` is document ``j`` (or, with
  vertical grouping ``g``, the sum of documents ``j*g .. j*g+g-1``), in input order;
  column ``b`` is bin ``b``. Without clamping it is dense in practice (every entry got
  noise) even though it is stored sparse.
- ``bins.parquet`` — one row per vocabulary word: ``feature`` (column of the
  uncompressed count vector), ``word``, ``bin`` (``-1``: dropped) and ``weight`` (the
  public frequency prior, used to read bins back as words).
- ``params.json`` — the mechanism and every parameter needed to interpret the data
  (epsilon, N, alpha, clamping, strategy, k, g, seeds of the map, vocabulary source,
  tokenizer, whether the noise was seeded — i.e. NOT private).

The :class:`NoiseReport` (signal vs noise) is computed from the private counts and
is therefore *not* part of the release: it is returned to the data owner (and printed
by the CLI) but never written into the folder.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._errors import DataError, InvalidParameterError
from .compress import BinMap
from .vectorize import Vocabulary

__all__ = ["FORMAT_VERSION", "BowRelease", "NoiseReport", "load_release"]

FORMAT_VERSION = 1
_MATRIX = "matrix.npz"
_BINS = "bins.parquet"
_PARAMS = "params.json"


@dataclass
class NoiseReport:
    """How much noise was added compared with the signal (private: do not publish as is).

    ``signal_l1`` is the total of the true (compressed) counts, ``noise_l1`` the total
    absolute noise; their ratio is the signal-to-noise ratio of the release.
    """

    documents: int = 0
    rows: int = 0
    bins: int = 0
    tokens: int = 0
    tokens_counted: int = 0
    signal_l1: int = 0
    noise_l1: int = 0
    noise_sum: int = 0
    noise_sq: float = 0.0
    clamped: int = 0
    released_nonzero: int = 0
    expected_abs_noise: float = 0.0

    @property
    def entries(self) -> int:
        """Number of released matrix entries (rows x bins)."""
        return self.rows * self.bins

    @property
    def snr(self) -> float:
        """signal_l1 / noise_l1 (inf without noise)."""
        return self.signal_l1 / self.noise_l1 if self.noise_l1 else math.inf

    @property
    def coverage(self) -> float:
        """Fraction of word tokens that are in the vocabulary (and were counted)."""
        return self.tokens_counted / self.tokens if self.tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain dict with the derived ratios."""
        d = asdict(self)
        d.update(entries=self.entries, snr=self.snr, coverage=self.coverage)
        return d

    def summary(self) -> str:
        """A few human-readable lines (numbers only, no text)."""
        per_row_signal = self.signal_l1 / self.rows if self.rows else 0.0
        per_row_noise = self.noise_l1 / self.rows if self.rows else 0.0
        lines = [
            f"{self.documents:,} documents -> {self.rows:,} rows x {self.bins:,} bins "
            f"({self.entries:,} noisy entries, {self.released_nonzero:,} non-zero after post-processing)",
            f"word tokens {self.tokens:,}, counted (in vocabulary) {self.tokens_counted:,} ({self.coverage:.1%})",
            f"signal l1 {self.signal_l1:,} ({per_row_signal:,.1f} per row); noise l1 {self.noise_l1:,} "
            f"({per_row_noise:,.1f} per row, expected {self.expected_abs_noise * self.bins:,.1f}); "
            f"signal/noise {self.snr:.3g}",
        ]
        if self.clamped:
            lines.append(f"{self.clamped:,} negative noisy counts clamped to 0")
        return "\n".join(lines)


@dataclass(eq=False)
class BowRelease:
    """A privatized bag-of-words data set: what an analyst receives.

    Attributes
    ----------
    matrix
        Noisy ``(rows, k)`` CSR integer matrix.
    bin_map
        Feature -> bin map (identity when there was no horizontal compression).
    vocabulary
        The words of the features (public) and their public frequency prior.
    params
        Mechanism and pipeline parameters (JSON-serialisable, data-independent).
    """

    matrix: sp.csr_matrix
    bin_map: BinMap
    vocabulary: Vocabulary
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.matrix.shape[1] != self.bin_map.n_bins:
            raise DataError(
                f"the matrix has {self.matrix.shape[1]} columns but the bin map has {self.bin_map.n_bins} bins"
            )
        if self.bin_map.n_features != self.vocabulary.size:
            raise DataError(
                f"the bin map has {self.bin_map.n_features} features but the vocabulary has "
                f"{self.vocabulary.size} words"
            )

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, bins)."""
        return (int(self.matrix.shape[0]), int(self.matrix.shape[1]))

    def bin_words(self, b: int, top: int | None = None) -> list[str]:
        """Words of bin ``b``, most frequent (public prior) first."""
        feats = np.flatnonzero(self.bin_map.bins == b)
        order = feats[np.argsort(-self.vocabulary.frequencies[feats], kind="stable")]
        if top is not None:
            order = order[:top]
        return [self.vocabulary.words[i] for i in order.tolist()]

    # -- persistence ----------------------------------------------------------
    def save(self, folder: str | Path, *, overwrite: bool = False) -> Path:
        """Write the release folder atomically (all three files appear, or none)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        dst = Path(folder)
        if dst.exists() and not overwrite:
            if not dst.is_dir() or any(dst.iterdir()):
                raise InvalidParameterError(
                    "output", str(dst), "a new or empty folder (pass overwrite=True / --overwrite to replace it)"
                )
        parent = dst.parent if str(dst.parent) else Path(".")
        if not parent.exists():
            raise DataError(f"output folder {parent} does not exist")
        tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".partial", dir=parent))
        try:
            sp.save_npz(tmp / _MATRIX, sp.csr_matrix(self.matrix), compressed=True)
            table = pa.table(
                {
                    "feature": pa.array(np.arange(self.vocabulary.size, dtype=np.int64)),
                    "word": pa.array(list(self.vocabulary.words), type=pa.string()),
                    "bin": pa.array(np.asarray(self.bin_map.bins, dtype=np.int64)),
                    "weight": pa.array(np.asarray(self.vocabulary.frequencies, dtype=np.float64)),
                }
            )
            pq.write_table(table, tmp / _BINS)
            meta = dict(self.params)
            meta.update(
                format_version=FORMAT_VERSION,
                shape=list(self.shape),
                bin_map={
                    "strategy": self.bin_map.strategy,
                    "n_bins": self.bin_map.n_bins,
                    "n_features": self.bin_map.n_features,
                    **self.bin_map.info,
                },
                vocabulary_source=self.vocabulary.source,
            )
            (tmp / _PARAMS).write_text(json.dumps(meta, indent=2, sort_keys=True, default=_json_default) + "\n")
            if dst.exists():
                shutil.rmtree(dst)
            os.replace(tmp, dst)
        except BaseException:
            with contextlib.suppress(OSError):
                shutil.rmtree(tmp)
            raise
        return dst

    @classmethod
    def load(cls, folder: str | Path) -> BowRelease:
        """Read a release folder written by :meth:`save`."""
        import pyarrow.parquet as pq

        src = Path(folder)
        for name in (_MATRIX, _BINS, _PARAMS):
            if not (src / name).is_file():
                raise DataError(f"{src} is not a bag-of-words release: {name} is missing")
        try:
            params = json.loads((src / _PARAMS).read_text())
        except json.JSONDecodeError as exc:
            raise DataError(f"{src / _PARAMS} is not valid JSON ({exc.msg})") from None
        if params.get("format_version") != FORMAT_VERSION:
            raise DataError(f"{src} has format_version {params.get('format_version')!r}, expected {FORMAT_VERSION}")
        matrix = sp.load_npz(src / _MATRIX).tocsr()
        table = pq.read_table(src / _BINS)
        feature = table.column("feature").to_numpy()
        if not np.array_equal(feature, np.arange(len(feature))):
            raise DataError(f"{src / _BINS}: features are not 0..m-1 in order")
        info = dict(params.get("bin_map", {}))
        strategy = info.pop("strategy", "user")
        n_bins = int(info.pop("n_bins", matrix.shape[1]))
        info.pop("n_features", None)
        bin_map = BinMap(table.column("bin").to_numpy().astype(np.int64), n_bins, strategy, info)
        vocab = Vocabulary(
            tuple(table.column("word").to_pylist()),
            table.column("weight").to_numpy().astype(np.float64),
            source=str(params.get("vocabulary_source", "release")),
        )
        return cls(matrix, bin_map, vocab, params)


def load_release(folder: str | Path) -> BowRelease:
    """Shorthand for :meth:`BowRelease.load`."""
    return BowRelease.load(folder)


def _json_default(obj: object) -> object:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
