"""A text-task evaluation's files: runs and summary (CSV), a markdown table, JSON settings, PNG plots.

The files are written by the shared writer of :mod:`deniable.experiments.results`; this
module holds what is particular to text tasks (the table layout and the plots).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .results import Results, format_interval, write_files

__all__ = ["markdown_table", "plot_metric", "read_results", "write_results"]

_METRIC_LABEL = {"accuracy": "accuracy", "mia_auc": "MIA AUC", "map": "MAP", "mrr": "MRR"}
_MODE_LABEL = {"train": "training time", "test": "test time", "clean": "clean"}
_COLORS = ("#4C72B0", "#C44E52", "#55A868", "#8172B2", "#CCB974", "#64B5CD")


def markdown_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """One row per (model, mechanism, epsilon); one column per (mode, metric): ``mean [95% CI]``."""
    cols: list[tuple[str, str]] = []
    rows: dict[tuple[str, str, float], dict[tuple[str, str], str]] = {}
    for s in summary:
        mode = "clean" if s["mechanism"] == "none" else s["mode"]
        col = (s["metric"], mode if s["metric"] != "mia_auc" else "train")
        if col not in cols:
            cols.append(col)
        key = (s["model"], "clean" if s["mechanism"] == "none" else s["mechanism"], s["epsilon"])
        rows.setdefault(key, {})[col] = format_interval(s["mean"], s["ci_low"], s["ci_high"])
    order = {"accuracy": 0, "map": 0, "mrr": 1, "mia_auc": 2}
    mode_order = {"clean": 0, "train": 1, "test": 2}
    cols.sort(key=lambda c: (order.get(c[0], 9), mode_order.get(c[1], 9)))
    header_cols = []
    for metric, mode in cols:
        label = _METRIC_LABEL.get(metric, metric)
        if metric != "mia_auc":
            label += (
                " ("
                + (
                    "train private, test clean"
                    if mode == "train"
                    else "train clean, test private"
                    if mode == "test"
                    else "clean"
                )
                + ")"
            )
        header_cols.append(label)
    # merge clean columns into the private ones: the baseline row shows its value under every column of its metric
    merged: list[tuple[str, str]] = [c for c in cols if c[1] != "clean"] or cols
    head = ["model", "mechanism", "ε"] + [header_cols[cols.index(c)] for c in merged]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, mech, eps), vals in sorted(
        rows.items(), key=lambda kv: (kv[0][0], kv[0][1] != "clean", kv[0][1], 0 if math.isnan(kv[0][2]) else kv[0][2])
    ):
        cells = []
        for metric, mode in merged:
            v = vals.get((metric, mode)) or (vals.get((metric, "clean"), "") if mech == "clean" else "")
            if mech == "clean" and metric == "mia_auc":
                v = vals.get((metric, "train"), "")
            cells.append(v)
        lines.append("| " + " | ".join([model, mech, "—" if math.isnan(eps) else f"{eps:g}", *cells]) + " |")
    return "\n".join(lines) + "\n"


def plot_metric(summary: Sequence[Mapping[str, Any]], metric: str, path: str | Path, *, title: str = "") -> Path | None:
    """``metric`` against epsilon (log scale), one panel per model, a line (with 95% band) per mechanism and
    mode, the clean baseline as a horizontal line with its band. None when there is nothing to plot."""
    from ..report import new_figure, save_figure

    rows = [s for s in summary if s["metric"] == metric]
    if not rows:
        return None
    models = sorted({s["model"] for s in rows})
    fig = new_figure(4.6 * len(models) + 0.4, 3.6)
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        mine = [s for s in rows if s["model"] == model]
        lines = sorted({(s["mechanism"], s["mode"]) for s in mine if s["mechanism"] != "none"})
        eps_all = sorted({s["epsilon"] for s in mine if s["mechanism"] != "none"})
        for mech, mode in lines:
            pts = sorted((s for s in mine if s["mechanism"] == mech and s["mode"] == mode), key=lambda s: s["epsilon"])
            x = np.array([s["epsilon"] for s in pts])
            y = np.array([s["mean"] for s in pts])
            lo = np.clip(np.array([s["ci_low"] for s in pts], dtype=float), 0.0, 1.0)
            hi = np.clip(np.array([s["ci_high"] for s in pts], dtype=float), 0.0, 1.0)
            color = _COLORS[sorted({m for m, _ in lines}).index(mech) % len(_COLORS)]
            style = "o-" if mode == "train" else "s--"
            label = mech if metric == "mia_auc" else f"{mech}, {_MODE_LABEL[mode]}"
            ax.plot(x, y, style, color=color, label=label)
            if np.isfinite(lo).any():
                ax.fill_between(x, lo, hi, color=color, alpha=0.15 if mode == "train" else 0.08)
        base = [s for s in mine if s["mechanism"] == "none"]
        if base and eps_all:
            b = base[0]
            ax.axhline(b["mean"], color="black", lw=1.2, label="clean baseline")
            if not math.isnan(b["ci_low"]):
                ax.axhspan(max(b["ci_low"], 0.0), min(b["ci_high"], 1.0), color="black", alpha=0.08)
        if metric == "mia_auc":
            ax.axhline(0.5, color="grey", ls=":", lw=1, label="chance (0.5)")
        if eps_all and min(eps_all) > 0 and max(eps_all) / min(eps_all) >= 4:
            ax.set_xscale("log", base=2)
            ax.set_xticks(eps_all, [f"{e:g}" for e in eps_all])
        ax.set_xlabel("epsilon")
        ax.set_ylabel(_METRIC_LABEL.get(metric, metric))
        ax.set_title(model, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def write_results(result: Results, folder: str | Path, *, plots: bool = True, command: str = "") -> dict[str, Path]:
    """Write ``runs.csv`` (one row per repeat and metric), ``results.csv`` (summary), ``results.md``,
    ``settings.json`` and, with ``plots``, ``<metric>.png`` files. Returns the paths by name."""
    out = Path(folder)
    summary = result.summary()
    st = result.settings
    settings = {**st, "command": command, "notes": result.notes}
    md = [f"# Evaluation: {result.name} with {st.get('embedding', '')}", ""]
    if command:
        md += ["```", command, "```", ""]
    n_train = max((int(r["n_train"]) for r in result.rows), default=0)
    n_test = max((int(r["n_test"]) for r in result.rows), default=0)
    md += [
        f"- mechanisms: {', '.join(st['mechanisms'])}; epsilons: {', '.join(f'{e:g}' for e in st['epsilons'])}",
        f"- repeats: {st['repeats']}; seed: {st['seed']} (evaluation only: nothing is released)",
        f"- rows per repeat: {n_train:,} training (TR1), {n_test:,} test (TE1)"
        + ("; membership inference with TR2 / TE2 of the same sizes" if st["membership"] else ""),
        "- cells: mean [95% CI]; CI = Student-t over repeats, clipped to [0, 1] (with one repeat: Hanley-McNeil "
        "for the AUC, none for accuracy)",
        *(f"- note: {n}" for n in result.notes),
        "",
        markdown_table(summary),
    ]
    md += _speed_table(result.rows)
    paths: dict[str, Path] = {}
    if plots:
        for metric in ("accuracy", "map", "mrr", "mia_auc"):
            p = plot_metric(
                summary,
                metric,
                out / f"{metric}.png",
                title=f"{result.name}: {_METRIC_LABEL[metric]} against epsilon ({st.get('embedding', '')})",
            )
            if p is not None:
                paths[metric] = p
                md += ["", f"![{_METRIC_LABEL[metric]} against epsilon]({p.name})"]
    written = write_files(
        out,
        tables={"runs.csv": (result.rows, None), "results.csv": (summary, None)},
        texts={"results.md": "\n".join(md)},
        json_files={"settings.json": settings},
    )
    names = {"runs": "runs.csv", "results": "results.csv", "markdown": "results.md", "settings": "settings.json"}
    return {key: written[name] for key, name in names.items()} | paths


def _speed_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Privatization speed per (mechanism, epsilon), each privatized batch counted once."""
    tok = [r for r in rows if r["tokens"]]
    if not tok:
        return []
    md = ["", "Privatization speed (tokens / s, all repeats) and peak memory (the largest resident-memory", ""]
    md[1] += " increase while one set was privatized, MiB; artefacts built on first use included):"
    md += ["| mechanism | ε | tokens | changed | OOV | tokens/s | peak MiB |", "|---|---|---|---|---|---|---|"]
    seen: dict[tuple[str, float], list[Mapping[str, Any]]] = {}
    done: set[tuple[str, float, int, float]] = set()
    for r in tok:
        key = (r["mechanism"], r["epsilon"], r["repeat"], r["privatize_seconds"])
        if key in done:
            continue
        done.add(key)
        seen.setdefault((r["mechanism"], r["epsilon"]), []).append(r)
    for (mech, eps), rs in seen.items():
        n = sum(int(r["tokens"]) for r in rs)
        sec = sum(float(r["privatize_seconds"]) for r in rs)
        ch = float(np.mean([r["changed_rate"] for r in rs]))
        oov = float(np.mean([r["oov_rate"] for r in rs]))
        mem = [float(r.get("privatize_peak_mb", math.nan)) for r in rs]
        peak = max((m for m in mem if not math.isnan(m)), default=math.nan)
        speed = n / sec if sec else math.nan
        md.append(f"| {mech} | {eps:g} | {n:,} | {ch:.1%} | {oov:.1%} | {speed:,.0f} | {peak:,.0f} |")
    return md


_INT_COLUMNS = ("repeat", "n_train", "n_test", "tokens")
_TEXT_COLUMNS = ("task", "model", "mechanism", "mode", "metric")


def read_results(folder: str | Path) -> Results:
    """The inverse of :func:`write_results`: the :class:`Results` of ``folder``'s ``runs.csv`` and ``settings.json``."""
    import csv
    import json

    from .._errors import DataError
    from .harness import _results

    out = Path(folder)
    runs, settings_file = out / "runs.csv", out / "settings.json"
    if not runs.is_file() or not settings_file.is_file():
        raise DataError(f"{out}: no runs.csv and settings.json of `deniable evaluate` there")
    rows: list[dict[str, Any]] = []
    with open(runs, newline="", encoding="utf-8") as fh:
        for i, raw in enumerate(csv.DictReader(fh), start=2):
            row: dict[str, Any] = {}
            try:
                for k, v in raw.items():
                    if k in _TEXT_COLUMNS:
                        row[k] = v
                    elif k in _INT_COLUMNS:
                        row[k] = int(v) if v else 0
                    else:
                        row[k] = float(v) if v else math.nan
            except ValueError:
                raise DataError(f"{runs}: line {i}, column {k!r} is not a number") from None
            rows.append(row)
    settings = json.loads(settings_file.read_text(encoding="utf-8"))
    notes = list(settings.pop("notes", []) or [])
    settings.pop("command", None)
    return _results(str(settings.get("task", "")), rows, settings=settings, notes=notes)
