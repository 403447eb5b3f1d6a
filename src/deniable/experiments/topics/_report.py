"""The report of a topic evaluation: its files, its tables and its plots.

Owns ``results.csv`` (written and read back, so tables and plots can be re-rendered),
``results.md`` (means over seeds), ``summary.md`` (one pivot table per metric) and one
PNG per data set. Imports the config and the chance level of this package, the
experiments' results and file writer, and (inside :func:`plot_results`) the library's
figures and matplotlib.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..._errors import DataError
from ..results import Results, write_files
from ._config import ALL_METRICS, KEYS, METRICS, RUN_COLUMNS, EvalConfig
from ._measures import chance_jaccard

__all__ = ["markdown_table", "plot_results", "read_results", "summary_tables", "write_results"]


#: the columns of results.csv: one row per (condition, seed), a column per metric
_COLUMNS = [
    "dataset",
    "documents",
    "topics",
    "kind",
    "strategy",
    "bins",
    "epsilon",
    "precision",
    "eps_over_n",
    "seed",
    *METRICS[:-2],
    "accuracy",
    "majority",
    "snr",
    "seconds",
    "note",
]


def write_results(
    results: Results,
    folder: str | Path,
    config: EvalConfig | Sequence[EvalConfig] | None = None,
) -> list[Path]:
    """``results.csv`` (one row per fit), ``results.md`` (mean over seeds), ``summary.md`` and ``config.json``
    (the settings of ``results``, or of ``config`` when given)."""
    json_files: dict[str, Any] = {}
    if config is not None:
        configs = [config] if isinstance(config, EvalConfig) else list(config)
        payload: Any = [asdict(c) for c in configs]
        json_files["config.json"] = payload[0] if len(payload) == 1 else payload
    elif results.settings:
        json_files["config.json"] = results.settings
    written = write_files(
        folder,
        tables={"results.csv": (results.wide(extra=RUN_COLUMNS), _COLUMNS)},
        texts={"results.md": markdown_table(results), "summary.md": summary_tables(results)},
        json_files=json_files,
    )
    return list(written.values())


_INT_COLUMNS = ("documents", "topics", "bins", "seed")
_TEXT_COLUMNS = ("dataset", "kind", "strategy", "note")


def read_results(path: str | Path) -> Results:
    """Read a ``results.csv`` written by :func:`write_results` back into results (to re-render tables and plots)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"results file {p} does not exist")
    rows: list[dict[str, Any]] = []
    with open(p, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = {"dataset", "kind", "strategy", "bins", "epsilon", "precision"} - set(reader.fieldnames or ())
        if missing:
            raise DataError(f"{p} is not a results.csv of `deniable bow evaluate` (missing {sorted(missing)})")
        for lineno, raw in enumerate(reader, start=2):
            row: dict[str, Any] = {}
            try:
                for key, value in raw.items():
                    if key in _TEXT_COLUMNS:
                        row[key] = value or ""
                    elif key in _INT_COLUMNS:
                        row[key] = int(value)
                    else:
                        row[key] = float(value) if value not in ("", None) else math.nan
            except ValueError:
                raise DataError(f"{p} line {lineno}: column {key!r} is not a number") from None
            row.setdefault("note", "")
            row["repeat"] = row.get("seed", 0)
            rows.append(row)
    name = rows[0]["dataset"] if rows else p.stem
    return Results.from_wide(name, KEYS, rows, ALL_METRICS)


_SUMMARY_METRICS = (
    ("accuracy", "LSA + random forest accuracy"),
    ("jaccard_bins", "Jaccard of top-10 bins vs the reference topics seen through the same bins"),
    ("jaccard", "Jaccard of top-10 words vs the reference topics"),
    ("npmi", "NPMI coherence of the top-10 words"),
)


def summary_tables(results: Results, metrics: Sequence[str] | None = None) -> str:
    """Compact pivot tables: one per (dataset, metric), rows strategy x bins, columns clean then eps/N.

    Cells are means over seeds. The reference (clean, uncompressed) and the reseeded
    reference (how much LDA itself varies) are the first rows.
    """
    agg = _aggregate(results)
    wanted = [(m, t) for m, t in _SUMMARY_METRICS if metrics is None or m in metrics]
    out: list[str] = []

    def cell(v: float, note: str = "") -> str:
        if note:
            return "skipped"
        return "–" if math.isnan(v) else f"{v:.3f}"

    for dataset in sorted({a["dataset"] for a in agg}):
        ds = [a for a in agg if a["dataset"] == dataset]
        settings = sorted(
            {(a["epsilon"], a["precision"]) for a in ds if a["kind"] == "private"},
            key=lambda ep: (-ep[0] / ep[1], ep),
        )
        lines_ref = [a for a in ds if a["kind"] in ("reference", "reference-reseeded")]
        conditions: list[tuple[str, int]] = []
        for a in ds:
            if a["kind"] in ("clean", "private") and (a["strategy"], a["bins"]) not in conditions:
                conditions.append((a["strategy"], a["bins"]))
        index = {(a["kind"], a["strategy"], a["bins"], a["epsilon"], a["precision"]): a for a in ds}
        for metric, title in wanted:
            out.append(f"**{dataset}: {title}**\n")
            head = ["strategy", "bins", "clean"] + [f"eps/N={e / n:.3g} (eps={e:g}, N={n:g})" for e, n in settings]
            out.append("| " + " | ".join(head) + " |")
            out.append("|" + "---|" * len(head))
            for a in lines_ref:
                label = "reference (uncompressed)" if a["kind"] == "reference" else "reference, LDA reseeded"
                out.append(f"| {label} | {a['bins']} | {cell(a[metric])} |" + " |" * len(settings))
            for strategy, k in conditions:
                # (clean rows have N = NaN, which never compares equal: no dict lookup for them)
                clean = next(
                    (c for c in ds if c["kind"] == "clean" and (c["strategy"], c["bins"]) == (strategy, k)), None
                )
                cells = [cell(clean[metric]) if clean else "–"]
                for e, n in settings:
                    priv = index.get(("private", strategy, k, e, n))
                    cells.append(cell(priv[metric], priv["note"]) if priv else "–")
                out.append(f"| {strategy} | {k} | " + " | ".join(cells) + " |")
            if metric == "accuracy":
                out.append(f"\nmajority-class accuracy: {_majority(agg, dataset):.3f}")
            out.append("")
    return "\n".join(out).rstrip()


def _aggregate(results: Results) -> list[dict[str, Any]]:
    """One dict per setting: each metric's mean over seeds and ``<metric>_sd`` (from :meth:`Results.summary`)."""
    notes: dict[tuple[Any, ...], set[str]] = {}
    for r in results.rows:
        notes.setdefault(tuple(str(r[k]) for k in KEYS), set()).add(r.get("note", ""))
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for s in results.summary():
        key = tuple(str(s[k]) for k in KEYS)
        agg = out.get(key)
        if agg is None:
            agg = {k: s[k] for k in KEYS}
            agg["eps_over_n"] = s["epsilon"] / s["precision"] if s["kind"] == "private" else math.inf
            agg["note"] = "; ".join(sorted(notes.get(key, set()) - {""}))
            agg["seeds"] = 0
            out[key] = agg
        agg[s["metric"]] = s["mean"]
        agg[s["metric"] + "_sd"] = s["sd"]
        agg["seeds"] = max(agg["seeds"], s["n"])
    for agg in out.values():
        for m in ALL_METRICS:
            agg.setdefault(m, math.nan)
            agg.setdefault(m + "_sd", math.nan)
    return list(out.values())


def _majority(agg: Sequence[Mapping[str, Any]], dataset: str) -> float:
    return next((float(a["majority"]) for a in agg if a["dataset"] == dataset), math.nan)


def markdown_table(results: Results) -> str:
    """Mean over seeds (± standard deviation when there are several) as a markdown table."""
    agg = _aggregate(results)
    head = (
        "| dataset | kind | strategy | bins | eps | N | eps/N | Jaccard words | Jaccard bins | "
        "Jaccard vs clean bins | chance (bins) | exclusivity | NPMI | accuracy | signal/noise |"
    )
    lines = [head, "|" + "---|" * 15]

    def f(v: float, sd: float = math.nan) -> str:
        if isinstance(v, float) and math.isnan(v):
            return "–"
        return f"{v:.3f}" + (f" ± {sd:.3f}" if not math.isnan(sd) else "")

    def g(v: float) -> str:
        return "–" if (isinstance(v, float) and (math.isnan(v) or math.isinf(v))) else f"{v:g}"

    def snr(v: float, note: str) -> str:
        if note:
            return note
        return "–" if math.isnan(v) or math.isinf(v) else f"{v:.3g}"

    for a in agg:
        lines.append(
            f"| {a['dataset']} | {a['kind']} | {a['strategy']} | {a['bins']} | {g(a['epsilon'])} | "
            f"{g(a['precision'])} | {g(a['eps_over_n'])} | {f(a['jaccard'], a['jaccard_sd'])} | "
            f"{f(a['jaccard_bins'], a['jaccard_bins_sd'])} | {f(a['jaccard_noise'], a['jaccard_noise_sd'])} | "
            f"{f(a['chance_bins'])} | "
            f"{f(a['exclusivity'], a['exclusivity_sd'])} | {f(a['npmi'], a['npmi_sd'])} | "
            f"{f(a['accuracy'], a['accuracy_sd'])} | {snr(a['snr'], a['note'])} |"
        )
    datasets = dict.fromkeys(a["dataset"] for a in agg)
    notes = [f"{d}: majority-class accuracy {m:.3f}" for d in datasets if not math.isnan(m := _majority(agg, d))]
    return "\n".join(lines + (["", *notes] if notes else []))


_PLOT_LABELS = {
    "jaccard": "Jaccard, top words",
    "jaccard_bins": "Jaccard, top bins",
    "jaccard_noise": "Jaccard vs clean bins",
    "exclusivity": "exclusivity",
    "npmi": "NPMI coherence",
    "accuracy": "LSA + RF accuracy",
}


def plot_results(results: Results, folder: str | Path) -> list[Path]:
    """One PNG per dataset: each metric against eps/N, one panel per k, a line per strategy.

    Dashed lines: the clean compressed baseline of each strategy. Dotted black: the
    clean uncompressed reference — for the Jaccard of top words, the reference refitted
    with another LDA seed (1.0 against itself says nothing); dash-dot grey: chance
    (Jaccard of top bins) or the majority class (accuracy).
    """
    from matplotlib import rcParams
    from matplotlib.ticker import NullFormatter

    from ...report import new_figure, save_figure

    out = Path(folder)
    agg = _aggregate(results)
    paths = []
    metrics = tuple(_PLOT_LABELS)
    colors = rcParams["axes.prop_cycle"].by_key()["color"]
    for dataset in sorted({a["dataset"] for a in agg}):
        ds = [a for a in agg if a["dataset"] == dataset]
        ks = sorted({a["bins"] for a in ds if a["kind"] in ("private", "clean") and a["strategy"] != "none"})
        if not ks:
            continue
        strategies = sorted({a["strategy"] for a in ds if a["kind"] == "private" and a["strategy"] != "none"})
        ref = next((a for a in ds if a["kind"] == "reference"), None)
        reseeded = next((a for a in ds if a["kind"] == "reference-reseeded"), None)
        majority = _majority(agg, dataset)
        ratios = sorted({a["eps_over_n"] for a in ds if a["kind"] == "private"})
        fig = new_figure(3.6 * len(ks), 2.5 * len(metrics))
        axes = fig.subplots(len(metrics), len(ks), squeeze=False)
        for j, k in enumerate(ks):
            for i, metric in enumerate(metrics):
                ax = axes[i][j]
                for si, st in enumerate(strategies):
                    color = colors[si % len(colors)]
                    pts = sorted(
                        (a["eps_over_n"], a[metric])
                        for a in ds
                        if a["kind"] == "private" and a["strategy"] == st and a["bins"] == k
                    )
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, label=st, ms=4)
                    clean = [a[metric] for a in ds if a["kind"] == "clean" and a["strategy"] == st and a["bins"] == k]
                    if clean and not math.isnan(clean[0]):
                        ax.axhline(clean[0], ls="--", lw=1, color=color)
                base = reseeded if metric == "jaccard" else ref
                if (
                    base is not None
                    and metric not in ("jaccard_bins", "jaccard_noise")
                    and not math.isnan(base[metric])
                ):
                    label = "clean, uncompressed" + (" (LDA reseeded)" if metric == "jaccard" else "")
                    ax.axhline(base[metric], ls=":", color="black", lw=1.2, label=label)
                if metric == "jaccard_bins":
                    ax.axhline(chance_jaccard(k, 10), ls="-.", color="grey", lw=1, label="chance")
                if metric == "accuracy" and not math.isnan(majority):
                    ax.axhline(majority, ls="-.", color="grey", lw=1, label="majority class")
                ax.set_xscale("log")
                ax.set_xticks(ratios)
                ax.set_xticklabels([f"{r:.2g}" for r in ratios])
                ax.xaxis.set_minor_formatter(NullFormatter())
                ax.set_title(f"k={k}", fontsize=9)
                ax.set_ylabel(_PLOT_LABELS[metric], fontsize=8)
                ax.tick_params(labelsize=7)
                if i == len(metrics) - 1:
                    ax.set_xlabel("eps / N")
                if j == 0 and i in (0, 1, len(metrics) - 1):
                    ax.legend(fontsize=6)
        fig.suptitle(f"{dataset}: LPLP bag-of-words utility against eps/N (dashed: clean compressed)", fontsize=10)
        paths.append(save_figure(fig, out / f"{dataset}.png", dpi=72))
    return paths
