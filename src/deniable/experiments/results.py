"""What every experiment shares: its config base, its randomness, its results, its writer and its progress display.

Text-task evaluation (:mod:`deniable.experiments.harness`) and the bag-of-words topic
evaluation (:mod:`deniable.experiments.topics`) both

- take a frozen, validated config deriving from :class:`ExperimentConfig`
  (``epsilons``, ``repeats``, ``random_state``);
- draw every random number from :class:`ExperimentRandomness` (one entropy, recorded;
  independent streams per key). An evaluation releases nothing, so an int
  ``random_state`` is a plain reproducible seed here: no NotPrivateWarning;
- return :class:`Results`: one *long* row per run and metric (the setting columns,
  ``repeat``, ``metric``, ``value`` and optionally the run's own ``ci_low`` / ``ci_high``)
  whose :meth:`Results.summary` gives mean, standard deviation and 95% interval per
  (setting, metric);
- write their files with :func:`write_files` (CSV, markdown, JSON) and draw plots with
  :func:`deniable.report.new_figure` / :func:`deniable.report.save_figure`;
- report progress through :class:`ExperimentProgress` (rich bars on a terminal, log
  lines to a callback). Descriptions and log lines never hold user text.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import DataError, InvalidParameterError
from .._progress import progress
from .._validation import check_epsilon, check_int
from .metrics import t_interval

__all__ = [
    "ExperimentConfig",
    "ExperimentProgress",
    "ExperimentRandomness",
    "Results",
    "format_cell",
    "format_interval",
    "summarize_runs",
    "write_csv",
    "write_files",
]


# ----------------------------------------------------------------------------- config
@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """Fields every experiment has; subclasses add theirs and call ``super().__post_init__()``.

    ``random_state``: None draws fresh entropy (recorded in the results); an int makes
    splits, noise and models reproducible (fine: an evaluation releases nothing); a
    :class:`numpy.random.Generator` supplies the entropy.
    """

    epsilons: Sequence[float]
    repeats: int = 1
    random_state: int | np.random.Generator | None = None

    def __post_init__(self) -> None:
        if not self.epsilons:
            raise InvalidParameterError("epsilons", "none", "at least one epsilon")
        object.__setattr__(self, "epsilons", tuple(check_epsilon(e, "epsilon") for e in self.epsilons))
        check_int("repeats", self.repeats)
        rs = self.random_state
        if rs is not None and not isinstance(rs, np.random.Generator):
            if isinstance(rs, bool) or not isinstance(rs, int | np.integer) or rs < 0:
                raise InvalidParameterError("random_state", rs, "None, a non-negative integer or a numpy Generator")

    def randomness(self) -> ExperimentRandomness:
        """The random streams of one run of this experiment (fresh entropy when ``random_state`` is None)."""
        return ExperimentRandomness.from_random_state(self.random_state)

    def describe_random_state(self, entropy: int) -> int | str:
        """What ``random_state`` was, for the settings file: the seed, or the fresh entropy actually used."""
        if isinstance(self.random_state, int | np.integer):
            return int(self.random_state)
        return f"none (fresh entropy {entropy})"


@dataclass(frozen=True)
class ExperimentRandomness:
    """Independent, reproducible streams derived from one recorded entropy (numpy ``SeedSequence``).

    ``generator(*key)`` is the stream for ``key`` (e.g. ``(repeat, mechanism, epsilon)``
    indices); ``seed(*key)`` an int seed for libraries that take one (scikit-learn).
    """

    entropy: int

    @classmethod
    def from_random_state(cls, random_state: int | np.random.Generator | None) -> ExperimentRandomness:
        if isinstance(random_state, np.random.Generator):
            return cls(int(random_state.integers(2**63)))
        ss = np.random.SeedSequence(None if random_state is None else int(random_state))
        return cls(int(ss.entropy))  # type: ignore[arg-type]

    def generator(self, *key: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([self.entropy, *key]))

    def seed(self, *key: int) -> int:
        return int(self.generator(*key).integers(2**31 - 1))


# ----------------------------------------------------------------------------- results
_RUN_FIELDS = ("repeat", "metric", "value", "ci_low", "ci_high")


@dataclass
class Results:
    """One row per run and metric: the ``keys`` columns (the setting), ``repeat``, ``metric``, ``value``,
    optionally the run's own ``ci_low`` / ``ci_high``, and any extra columns (sizes, timings, notes).

    ``settings`` is what produced them (JSON-able); ``notes`` are printed with the tables;
    ``order`` sorts the summary (default: the order settings first appear);
    ``own_interval`` names the interval a single run brings (see :func:`summarize_runs`).
    """

    name: str
    keys: tuple[str, ...]
    rows: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    order: Callable[[Mapping[str, Any]], Any] | None = field(default=None, repr=False, compare=False)
    own_interval: str = "the run's own interval"

    def add(self, **row: Any) -> None:
        """Append one run's value of one metric."""
        self.rows.append(row)

    def metrics(self) -> list[str]:
        """Metric names in the order they first appear."""
        return list(dict.fromkeys(r["metric"] for r in self.rows))

    def summary(self) -> list[dict[str, Any]]:
        """Per (setting, metric): ``n``, ``mean``, ``ci_low``, ``ci_high``, how the interval was made, ``sd``."""
        out = summarize_runs(self.rows, self.keys, own_interval=self.own_interval)
        if self.order is not None:
            out.sort(key=self.order)
        return out

    def wide(self, extra: Sequence[str] = ()) -> list[dict[str, Any]]:
        """One row per (setting, repeat) with a column per metric (and the ``extra`` columns of its first row)."""
        out: dict[tuple[Any, ...], dict[str, Any]] = {}
        for r in self.rows:
            key = (*(_hashable(r[k]) for k in self.keys), r["repeat"])
            row = out.get(key)
            if row is None:
                row = {k: r[k] for k in self.keys}
                row["repeat"] = r["repeat"]
                row.update({c: r[c] for c in extra if c in r})
                out[key] = row
            row[r["metric"]] = r["value"]
        return list(out.values())

    @classmethod
    def from_wide(
        cls, name: str, keys: Sequence[str], rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]
    ) -> Results:
        """The inverse of :meth:`wide`: every column in ``metrics`` becomes one long row."""
        res = cls(name, tuple(keys))
        for r in rows:
            base = {k: v for k, v in r.items() if k not in metrics}
            for m in metrics:
                if m in r:
                    res.add(**base, metric=m, value=r[m])
        return res

    def extend(self, other: Results) -> None:
        """Append another run's rows (same keys); settings become a list of both."""
        if other.keys != self.keys:
            raise InvalidParameterError("results", other.name, f"results with the setting columns {self.keys}")
        self.rows.extend(other.rows)
        self.notes.extend(n for n in other.notes if n not in self.notes)
        if other.settings:
            mine = self.settings.get("runs", [self.settings] if self.settings else [])
            self.settings = {"runs": [*mine, other.settings]}


def _hashable(v: Any) -> Any:
    return "nan" if isinstance(v, float) and math.isnan(v) else v


def summarize_runs(
    rows: Sequence[Mapping[str, Any]], keys: Sequence[str], *, own_interval: str = "the run's own interval"
) -> list[dict[str, Any]]:
    """Mean, sample standard deviation and Student-t 95% interval over the repeats of each (setting, metric).

    With a single run that carries its own interval (``ci_low`` / ``ci_high``, e.g. the
    Hanley-McNeil interval of an AUC) that interval is kept, described as ``own_interval``. NaN values (skipped runs)
    are left out of ``n``. Rows come out in the order their setting first appears.
    """
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    first: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for r in rows:
        key = (*(_hashable(r[k]) for k in keys), r["metric"])
        groups.setdefault(key, []).append(r)
        first.setdefault(key, r)
    out = []
    for key, rs in groups.items():
        vals = [float(r["value"]) for r in rs]
        present = [v for v in vals if not math.isnan(v)]
        finite = [v for v in present if math.isfinite(v)]
        mean, lo, hi = t_interval(finite)
        how = "t over repeats"
        own_lo = float(rs[0].get("ci_low", math.nan))
        if len(vals) == 1 and not math.isnan(own_lo):
            lo, hi, how = own_lo, float(rs[0]["ci_high"]), own_interval
        elif len(finite) < 2:
            how = "none (one run)"
        sd = float(np.std(finite, ddof=1)) if len(finite) > 1 else math.nan
        if len(finite) < len(present):  # an infinite value (e.g. the signal/noise ratio of a noiseless run)
            mean, lo, hi, sd, how = float(np.mean(present)), math.nan, math.nan, math.nan, "none (infinite values)"
        src = first[key]
        row = {k: src[k] for k in keys}
        row.update(
            {"metric": src["metric"], "n": len(present), "mean": mean, "ci_low": lo, "ci_high": hi, "ci": how, "sd": sd}
        )
        out.append(row)
    return out


# ----------------------------------------------------------------------------- writer
def format_cell(v: Any) -> Any:
    """A CSV cell: floats with 6 significant digits, NaN as empty."""
    if isinstance(v, float | np.floating):
        return "" if math.isnan(v) else f"{float(v):.6g}"
    return v


def format_interval(mean: float, lo: float, hi: float, *, clip: tuple[float, float] | None = (0.0, 1.0)) -> str:
    """``mean [lo, hi]`` (interval clipped to ``clip``); ``mean`` alone without an interval; "" for NaN."""
    if math.isnan(mean):
        return ""
    if math.isnan(lo):
        return f"{mean:.3f}"
    if clip is not None:
        lo, hi = max(lo, clip[0]), min(hi, clip[1])
    return f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | Path, columns: Sequence[str] | None = None) -> Path:
    """Rows as CSV (``columns``: the header and order; by default the first row's keys; others are ignored)."""
    if not rows:
        raise DataError("no results to write")
    out = Path(path)
    with open(out, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns or rows[0]), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: format_cell(v) for k, v in r.items()})
    return out


def write_files(
    folder: str | Path,
    *,
    tables: Mapping[str, tuple[Sequence[Mapping[str, Any]], Sequence[str] | None]] | None = None,
    texts: Mapping[str, str] | None = None,
    json_files: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``{file name: (rows, columns)}`` as CSV, ``{file name: text}`` (markdown) and ``{file name: object}``
    as JSON into ``folder`` (created). Returns the paths by file name."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, (rows, columns) in (tables or {}).items():
        paths[name] = write_csv(rows, out / name, columns)
    for name, text in (texts or {}).items():
        p = out / name
        p.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        paths[name] = p
    for name, obj in (json_files or {}).items():
        p = out / name
        p.write_text(json.dumps(obj, indent=2, default=str) + "\n", encoding="utf-8")
        paths[name] = p
    return paths


# ----------------------------------------------------------------------------- progress
@dataclass(frozen=True)
class ExperimentProgress:
    """Progress of an experiment: rich bars on a terminal (``show``: None = only when stderr is one)
    and one-line messages to ``log`` (None = silent). Nothing shown may hold user text."""

    show: bool | None = None
    log: Callable[[str], None] | None = None

    @contextmanager
    def bar(self, total: float | None, description: str) -> Iterator[Callable[[float], None]]:
        with progress(total, description, enabled=self.show) as advance:
            yield advance

    def say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)
