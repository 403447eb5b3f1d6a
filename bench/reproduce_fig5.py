"""Seed 003 Fig. 5: utility at training time and at test time on IMDb, Enron and InsuranceQA.

For every task and mechanism, runs ``deniable evaluate --mode train,test --no-membership`` (the
recipes of docs/evaluation.md; out-of-vocabulary words replaced, the private default) on a
documented subsample, then writes one table and one plot per task (docs/reproductions.md)::

    python bench/reproduce_fig5.py --out results/fig5             # ~50 min on the shared 2-core machine
    python bench/reproduce_fig5.py --out results/fig5 --plot-only # tables and plots from finished runs

Runs are resumable: a (task, mechanism) whose ``results.csv`` exists is not run again.
BRR's epsilon is per bit of a 256-bit code; it is run at ``--brr-ratio`` x the madlib grid, the
epsilon at which its mean bound over random word pairs equals madlib's (the privacy ratio of
docs/brr.md, R = 0.0471 on GloVe 6B 50-d), and plotted at the madlib epsilon it matches.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import sys
import time
from pathlib import Path

from _common import DATA
from deniable.cli import run_app

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"

#: task -> (metrics, train rows, test rows or questions)
TASKS: dict[str, tuple[tuple[str, ...], int, int]] = {
    "imdb": (("accuracy",), 800, 400),
    "enron": (("accuracy",), 800, 400),
    "insuranceqa": (("map", "mrr"), 500, 50),
}
#: mechanism -> extra evaluate options
MECH_ARGS = {"madlib": ["--index", "hnsw"], "tem": [], "brr": ["--index", "hnsw"]}
COLOURS = {"madlib": "tab:blue", "tem": "tab:orange", "brr": "tab:green"}
MODES = {"train": "training time (train private, test clean)", "test": "test time (train clean, test private)"}


def _grid(mech: str, epsilons: list[float], ratio: float) -> list[float]:
    return [round(e * ratio, 4) for e in epsilons] if mech == "brr" else epsilons


def _fmt_eps(values: list[float]) -> str:
    return ",".join(f"{v:g}" for v in values)


def run_one(args: argparse.Namespace, task: str, mech: str, out: Path) -> float:
    _, train_size, test_size = TASKS[task]
    argv = [
        "evaluate", "--data", args.data, "--task", task, "--mechanism", mech,
        "--epsilon", _fmt_eps(_grid(mech, args.eps, args.brr_ratio)), "--mode", "train,test",
        "--model", ",".join(args.models), "--train-size", str(args.train_size or train_size),
        "--test-size", str(args.test_size or test_size), "--max-words", str(args.max_words),
        "--repeats", str(args.repeats), "--seed", str(args.seed), "--no-membership", "--oov", "random",
        "--negatives", str(args.negatives), "--no-plots", "-q", *MECH_ARGS[mech], "--out", str(out),
    ]  # fmt: skip
    print("deniable " + " ".join(argv), flush=True)
    t0 = time.perf_counter()
    sys.argv = ["deniable", *argv]  # results.md / settings.json record the real command
    code = run_app(argv)
    took = time.perf_counter() - t0
    print(f"{task} {mech}: exit {code} after {took:.0f} s", flush=True)
    if code:
        raise SystemExit(code)
    return took


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _cell(r: dict[str, str] | None) -> str:
    if r is None:
        return ""
    if r["ci_low"] == "":
        return f"{float(r['mean']):.3f}"
    lo, hi = _clip(r["ci_low"]), _clip(r["ci_high"])
    return f"{float(r['mean']):.3f} [{lo:.3f}, {hi:.3f}]"


def _clip(v: str) -> float:
    """A t-interval end of a metric in [0, 1] (accuracy, MAP, MRR), clipped as the harness's tables are."""
    return min(1.0, max(0.0, float(v)))


def summarise(args: argparse.Namespace, root: Path, dest: Path) -> None:
    """One markdown table and one plot per task from the finished runs; a combined CSV."""
    from deniable.report import new_figure, save_figure

    md = ["# Seed 003 Fig. 5 reproduction: results", ""]
    combined: list[dict[str, str]] = []
    for task in args.tasks:
        metrics = TASKS[task][0]
        rows: dict[str, list[dict[str, str]]] = {}
        folders: dict[str, list[Path]] = {}
        for mech in MECH_ARGS:  # every mechanism with finished runs, whatever --mechanisms ran now
            # the main run and any extension of its grid (--tag), in the order they were made
            found = sorted(root.glob(f"{task}-{mech}/results.csv")) + sorted(root.glob(f"{task}-{mech}+*/results.csv"))
            for k, path in enumerate(found):
                got = [r for r in _read(path) if k == 0 or r["mode"] != "clean"]  # one clean baseline (same seed)
                rows.setdefault(mech, []).extend(got)
                folders.setdefault(mech, []).append(path.parent)
                combined.extend({"task": task, **r} for r in got)
        if not rows:
            continue
        first = next(iter(rows.values()))
        models = list(dict.fromkeys(r["model"] for r in first))
        cmd = [(f / "results.md").read_text(encoding="utf-8").split("```")[1].strip() for m in rows for f in folders[m]]
        md += [f"## {task}", "", "```", *cmd, "```", ""]

        def pick(rs: list[dict[str, str]], model: str, metric: str, mode: str) -> list[dict[str, str]]:
            return [r for r in rs if r["model"] == model and r["metric"] == metric and r["mode"] == mode]

        for model in models:
            for metric in metrics:
                clean = pick(first, model, metric, "clean")[0]
                header = ["ε (madlib, TEM)", "ε (BRR)"] + [f"{m} {mode}" for m in rows for mode in MODES]
                md += [f"**{model}, {metric}** (mean [95% CI] over {clean['n']} repeats); clean: {_cell(clean)}", ""]
                md += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                for e in args.table_eps:
                    cells = [f"{e:g}", f"{e * args.brr_ratio:.4g}"]
                    for m, rs in rows.items():
                        want = _grid(m, [e], args.brr_ratio)[0]
                        for mode in MODES:
                            hit = [
                                r for r in pick(rs, model, metric, mode)
                                if math.isclose(float(r["epsilon"]), want, rel_tol=1e-6)
                            ]  # fmt: skip
                            cells.append(_cell(hit[0] if hit else None))
                    md.append("| " + " | ".join(cells) + " |")
                md.append("")
        model = models[0]  # the plot: the first model (fastText; the ranker for InsuranceQA)
        fig = new_figure(5.2 * len(MODES), 3.4 * len(metrics))
        axes = fig.subplots(len(metrics), len(MODES), squeeze=False)
        for mi, metric in enumerate(metrics):
            clean = pick(first, model, metric, "clean")[0]
            for ci, mode in enumerate(MODES):
                ax = axes[mi][ci]
                c_lo = _clip(clean["ci_low"] or clean["mean"])
                c_hi = _clip(clean["ci_high"] or clean["mean"])
                ax.axhline(float(clean["mean"]), color="black", lw=1.2, label="clean")
                ax.axhspan(c_lo, c_hi, color="black", alpha=0.08)
                for m, rs in rows.items():
                    pts = sorted(
                        ((float(r["epsilon"]) / (args.brr_ratio if m == "brr" else 1.0), r)
                         for r in pick(rs, model, metric, mode)),
                        key=lambda t: t[0],
                    )  # fmt: skip
                    xs = [x for x, _ in pts]
                    ys = [float(r["mean"]) for _, r in pts]
                    lo = [_clip(r["ci_low"] or r["mean"]) for _, r in pts]
                    hi = [_clip(r["ci_high"] or r["mean"]) for _, r in pts]
                    label = f"brr (ε x {args.brr_ratio:g})" if m == "brr" else m
                    ax.plot(xs, ys, marker="o", color=COLOURS.get(m), label=label)
                    ax.fill_between(xs, lo, hi, color=COLOURS.get(m), alpha=0.15)
                ax.set_xscale("log", base=2)
                ax.set_xlabel("ε (madlib / TEM; BRR at the matching per-bit ε)")
                ax.set_ylabel(f"{metric} ({model})")
                ax.set_title(f"{task}: {MODES[mode]}", fontsize=9)
                ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        save_figure(fig, dest / f"fig5-{task}.png")
        md += [f"![{task}](fig5-{task}.png)", ""]
        speeds = []
        for m in rows:
            for f in folders[m]:
                part = (f / "results.md").read_text(encoding="utf-8").split("Privatization speed", 1)[-1].splitlines()
                speeds += [line for line in part if line.startswith(f"| {m} |")]
        md += ["Privatization (all repeats, both modes):", "", "| mechanism | ε | tokens | changed | OOV | tokens/s |",
               "|---|---|---|---|---|---|", *speeds, ""]  # fmt: skip
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "fig5-results.md").write_text("\n".join(md), encoding="utf-8")
    if combined:
        with open(dest / "fig5-results.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(combined[0]))
            w.writeheader()
            w.writerows(combined)
    print(f"tables and plots in {dest}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("DENIABLE_DATA", str(DATA)))
    ap.add_argument("--out", default="/tmp/deniable_fig5", help="folder for the raw runs (one per task, mechanism)")
    ap.add_argument("--tasks", default="imdb,enron,insuranceqa")
    ap.add_argument("--mechanisms", default="madlib,tem,brr")
    ap.add_argument("--epsilon", default="2,4,8,16", help="the madlib / TEM grid")
    ap.add_argument("--brr-ratio", type=float, default=0.0471, help="BRR epsilon = ratio x the grid (docs/brr.md)")
    ap.add_argument("--train-size", type=int, default=None, help="override every task's training rows")
    ap.add_argument("--test-size", type=int, default=None, help="override every task's test rows / questions")
    ap.add_argument("--max-words", type=int, default=50)
    ap.add_argument("--negatives", type=int, default=19, help="InsuranceQA: random negative answers per question")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--models", default="fasttext,tfidf", help="classifiers (InsuranceQA: always the TF-IDF ranker)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--docs", default=str(FIGURES), help="where the tables and plots go")
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--tag", default="", help="extend finished runs: run --epsilon into <task>-<mech>+TAG folders")
    ap.add_argument("--table-epsilon", default=None, help="the grid of the tables (default --epsilon)")
    args = ap.parse_args()
    args.tasks = [t for t in args.tasks.split(",") if t]
    args.mechanisms = [m for m in args.mechanisms.split(",") if m]
    args.eps = [float(e) for e in args.epsilon.split(",")]
    args.models = [m for m in args.models.split(",") if m]
    args.table_eps = [float(e) for e in (args.table_epsilon or args.epsilon).split(",")]
    root = Path(args.out)
    if not args.plot_only:
        for task in args.tasks:
            for mech in args.mechanisms:
                out = root / f"{task}-{mech}{'+' + args.tag if args.tag else ''}"
                if (out / "results.csv").is_file():
                    print(f"{task} {mech}: done already ({out})", flush=True)
                    continue
                if out.exists():
                    shutil.rmtree(out)
                run_one(args, task, mech, out)
    summarise(args, root, Path(args.docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
