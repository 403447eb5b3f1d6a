"""Reproduce the fair comparison of every registered mechanism (docs/mechanisms/comparison.md).

Runs ``deniable evaluate`` per task and per *unit* (one mechanism, or a few sharing a grid)
on the same splits (same ``--seed`` and sizes, so the same TR1/TR2/TE1/TE2 and the same clean
baseline) but not the same epsilon grid, then ``deniable compare --results`` to put them side
by side at matched privacy, and a table at a **matched share of changed words** (the
``changed_rate`` of every run: "the same epsilon" means very different amounts of change
across mechanisms). Results land in ``<out>/comparison-<task>/``.

**Resumable**: each unit writes its own folder; a unit whose ``runs.csv`` exists with the
same settings (``settings.json``) is skipped, so an interrupted run continues where it
stopped (``--force`` reruns). The reports are rebuilt from whatever units are complete.

Grids: the Euclidean mechanisms (madlib, tem, vickrey, custext, custext_plus) at epsilon
1, 5, 10, 20; Mahalanobis at 1, 5, 10, 21 (seed-001 privacy ratio 1.026 to madlib on GloVe
50-d); BRR (256 bits, Hamming) at 0.04, 0.24, 0.48, 1 (ratio 0.0472); the whole-vocabulary
exponential mechanism and SanText+ (one 336k-word distance row per distinct word of a call:
the training side in one call, ``--batch-texts 2000``) at 5 and 20 only;
1-Diffractor (list positions) on a wide grid 0.001 .. 5 (``deniable compare -a madlib -b
diffractor -e 1,5,20 --seed 0``: R = 5.376e-05 on the 336k-word vocabulary, so madlib's 1..20
is diffractor's 5.4e-5..1.1e-3; the larger epsilons show where it recovers, and the
matched-change table compares it at equal amounts of change).

Sizes: the issue's decisive sizes are the defaults (2,000 training rows, the full default
vocabulary, whole texts cut to 50 words, 5 repeats, SST-2, IMDb and CFPB); the earlier
small run (200 rows, 20 words, 3 repeats) is ``--size 200 --max-words 20 --repeats 3``.
fastText, training-time mode (accuracy + membership inference), ``--oov drop``,
``--seed 0``. Usage::

    python bench/reproduce_comparison.py [--tasks sst2,imdb,cfpb] [--units madlib,tem,...] \\
        [--size 2000] [--repeats 5] [--out docs/figures] [--report-only] [--force]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import os
import shlex
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from _common import DATA
from deniable.cli import run_app

ROOT = Path(__file__).resolve().parents[1]

#: unit -> (mechanisms, epsilon grid, extra evaluate flags...); units on the same task share the splits
UNITS: dict[str, tuple[str, ...]] = {
    "tem": ("tem", "1,5,10,20"),
    "diffractor": ("diffractor", "0.001,0.1,1,2,3,5"),
    "custext": ("custext,custext_plus", "1,5,10,20"),
    "madlib": ("madlib", "1,5,10,20"),
    # madlib with the faiss HNSW decode (the service's default offer): same guarantee, ~100x faster than
    # the exact decode that "auto" falls back to at small epsilons (hours at the decisive sizes here)
    "madlib-hnsw": ("madlib", "1,5,10,20", "--index", "hnsw"),
    "vickrey": ("vickrey", "1,5,10,20"),
    "mahalanobis": ("mahalanobis", "1,5,10,21"),
    "brr": ("brr", "0.04,0.24,0.48,1"),
    # one distance row per distinct word of a call: the 2,000 training texts in one call
    # (2.4x fewer rows than batches of 200 on IMDb)
    "whole-vocabulary": ("exponential,santext_plus", "5,20", "--batch-texts", "2000"),
    # SanText = exponential with its euclidean default (same class, same law) at the lower epsilons, so
    # that the matched-AUC table can place it (exponential's 5 and 20 give AUCs above every level); 5
    # again, where the two must agree
    "santext": ("santext", "1,2,5", "--batch-texts", "2000"),
    # the same with the HNSW decode (the decisive sizes: the exact 2-NN / Euclidean / Hamming decodes run at
    # ~500 tokens/s here, 23-67 min per unit and task; HNSW ~3,000). Decoding is post-processing of the noisy
    # vector or code, so the guarantee is the same
    "vickrey-hnsw": ("vickrey", "1,5,10,20", "--index", "hnsw"),
    "mahalanobis-hnsw": ("mahalanobis", "1,5,10,21", "--index", "hnsw"),
    "brr-hnsw": ("brr", "0.04,0.24,0.48,1", "--index", "hnsw"),
}
#: shares of changed words at which the matched-change table compares accuracy
CHANGE_LEVELS = (0.05, 0.1, 0.2, 0.4, 0.6)


def _argv(args: argparse.Namespace, task: str, unit: str, run_dir: Path) -> list[str]:
    mechs, eps, *extra = UNITS[unit]
    argv = [
        "evaluate", "--data", args.data, "--task", task, "--mechanism", mechs, "--epsilon", eps,
        "--model", "fasttext", "--mode", "train", "--train-size", args.size, "--test-size", args.test_size or args.size,
        "--max-words", args.max_words, "--repeats", args.repeats, "--seed", args.seed, "--oov", "drop",
        "--no-plots", "--out", str(run_dir), "-q",
    ]  # fmt: skip
    if args.vocab_size:
        argv += ["--vocab-size", args.vocab_size]
    return argv + list(extra)


def _done(run_dir: Path, argv: list[str]) -> bool:
    """A unit is complete when its runs.csv exists and its settings record the same command."""
    settings = run_dir / "settings.json"
    if not (run_dir / "runs.csv").is_file() or not settings.is_file():
        return False
    try:
        recorded = json.loads(settings.read_text(encoding="utf-8")).get("command", "")
    except (OSError, ValueError):
        return False
    return not recorded or shlex.join(argv[1:]) in str(recorded) or str(recorded).endswith(shlex.join(argv))


def _t_interval(values: list[float]) -> tuple[float, float, float]:
    from scipy import stats

    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.975, n - 1)) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


def changed_share_table(run_dirs: list[Path]) -> str:
    """Accuracy at matched shares of changed words, per mechanism (markdown), from the units' runs.csv.

    Per repeat, accuracy against ``changed_rate`` across the mechanism's epsilons is
    interpolated linearly at each level (nothing extrapolated); the mean over repeats gets a
    Student-t 95% interval. Also the share changed at each epsilon (mean over repeats).
    """
    acc: dict[tuple[str, str, int], float] = {}
    chg: dict[tuple[str, str, int], float] = {}
    clean: dict[int, float] = {}  # by repeat: every unit holds the same clean runs (same splits)
    for d in run_dirs:
        path = d / "runs.csv"
        if not path.is_file():
            continue
        with open(path, encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                if row["metric"] != "accuracy":
                    continue
                if row["mechanism"] == "none":
                    clean[int(row["repeat"])] = float(row["value"])
                    continue
                key = (row["mechanism"], row["epsilon"], int(row["repeat"]))
                acc[key] = float(row["value"])
                if row.get("changed_rate"):
                    chg[key] = float(row["changed_rate"])
    mechs = sorted({k[0] for k in acc})
    lines = ["| mechanism | " + " | ".join(f"{lv:.0%} changed" for lv in CHANGE_LEVELS) + " |"]
    lines.append("|---|" + "---|" * len(CHANGE_LEVELS))
    share_lines = ["| mechanism | epsilon: share of words changed (mean over repeats) |", "|---|---|"]
    for m in mechs:
        repeats = sorted({k[2] for k in acc if k[0] == m})
        eps_list = sorted({k[1] for k in acc if k[0] == m}, key=float)
        cells = []
        for level in CHANGE_LEVELS:
            vals = []
            for r in repeats:
                pts = sorted((chg[(m, e, r)], acc[(m, e, r)]) for e in eps_list if (m, e, r) in chg)
                for (x0, y0), (x1, y1) in itertools.pairwise(pts):
                    if x0 <= level <= x1:
                        vals.append(y0 if x1 == x0 else y0 + (y1 - y0) * (level - x0) / (x1 - x0))
                        break
            if len(vals) == len(repeats) and vals:
                mean, lo, hi = _t_interval(vals)
                cells.append(f"{mean:.3f} [{lo:.3f}, {hi:.3f}]")
            else:
                cells.append("—")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
        shares = []
        for e in eps_list:
            xs = [chg[(m, e, r)] for r in repeats if (m, e, r) in chg]
            if xs:
                shares.append(f"{float(e):g}: {statistics.fmean(xs):.1%}")
        share_lines.append(f"| {m} | " + ", ".join(shares) + " |")
    head = ""
    if clean:
        mean, lo, hi = _t_interval(list(clean.values()))
        head = f"Clean accuracy (no privatization): {mean:.3f} [{lo:.3f}, {hi:.3f}] over {len(clean)} repeats.\n\n"
    return (
        head + "Accuracy (train private, test clean) at a matched share of changed words, mean [95% t-interval] over "
        "repeats (per repeat interpolated linearly in the share between the mechanism's epsilons; "
        "— = outside its range or not in every repeat):\n\n" + "\n".join(lines) + "\n\n" + "\n".join(share_lines) + "\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("DENIABLE_DATA", str(DATA)))
    ap.add_argument("--tasks", default="sst2,imdb,cfpb")
    ap.add_argument("--units", "--groups", default=",".join(UNITS), help="comma-separated units (see UNITS)")
    ap.add_argument("--size", default="2000")
    ap.add_argument("--test-size", default="", help="test rows (default: --size; SST-2 allows at most 910)")
    ap.add_argument("--max-words", default="50")
    ap.add_argument("--repeats", default="5")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--vocab-size", default="", help="restrict the embedding (default: the full default vocabulary)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures"))
    ap.add_argument("--report-only", action="store_true", help="run nothing: rebuild the reports from finished units")
    ap.add_argument("--no-report", action="store_true", help="only run the evaluations")
    ap.add_argument("--force", action="store_true", help="rerun units that are already complete")
    ap.add_argument(
        "--auc",
        default="",
        help="membership-AUC levels of the matched-leakage table (deniable compare --auc; default: its quartiles "
        "of the range every unit spans, which move when units are added)",
    )
    args = ap.parse_args()
    commands: list[str] = []
    timings: dict[str, float] = defaultdict(float)
    for task in args.tasks.split(","):
        folder = Path(args.out) / f"comparison-{task}"
        runs = []
        for unit in args.units.split(","):
            mechs, eps = UNITS[unit][:2]
            run_dir = folder / unit
            argv = _argv(args, task, unit, run_dir)
            commands.append("deniable " + shlex.join(argv))
            if args.report_only or (_done(run_dir, argv) and not args.force):
                if (run_dir / "runs.csv").is_file():
                    runs.append(run_dir)
                    print(f"== {task} {unit}: complete, skipped", file=sys.stderr, flush=True)
                continue
            t0 = time.perf_counter()
            print(f"== {task} {unit}: {mechs} eps {eps}", file=sys.stderr, flush=True)
            sys.argv = ["deniable", *argv]  # recorded as the command in settings.json / results.md
            if run_app(argv) != 0:
                return 1
            runs.append(run_dir)
            timings[f"{task} {unit}"] = time.perf_counter() - t0
            print(f"== {task} {unit}: {timings[f'{task} {unit}']:.0f} s", file=sys.stderr, flush=True)
        if args.no_report or not runs:
            continue
        argv = ["compare", *(a for r in runs for a in ("--results", str(r))), "--out", str(folder), "--seed", args.seed]
        if args.auc:
            argv += ["--auc", args.auc]
        commands.append("deniable " + shlex.join(argv))
        sys.argv = ["deniable", *argv]
        if run_app(argv) != 0:
            return 1
        (folder / "changed-share.md").write_text(changed_share_table(runs), encoding="utf-8")
        print(f"wrote {folder / 'changed-share.md'}", file=sys.stderr)
    print("\n".join(commands))
    for k, v in timings.items():
        print(f"{k}: {v:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
