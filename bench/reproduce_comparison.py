"""Reproduce the fair comparison of every registered mechanism (docs/mechanisms/comparison.md).

Runs ``deniable evaluate`` on SST-2 and IMDb for every mechanism, in groups that share
the splits (same ``--seed`` and sizes, so the same TR1/TR2/TE1/TE2 and the same clean
baseline) but not the epsilon grid, then ``deniable compare --results`` to put them side
by side at matched privacy. Results land in ``docs/figures/comparison-<task>/``.

Grids: the Euclidean mechanisms (madlib, tem, vickrey, custext, custext_plus) at
epsilon 1, 5, 10, 20; Mahalanobis at 1, 5, 10, 21 (its seed-001 privacy ratio to Madlib
on GloVe 50-d is 1.026, so matching Madlib's 1..20 needs up to 20.5); BRR (256 bits,
Hamming) at 0.04, 0.24, 0.48, 1 (ratio 0.0472: Madlib's 1..20 is BRR's 0.047..0.94);
the whole-vocabulary exponential mechanism and SanText+ (~200 tokens/s on 336k words)
at 5 and 20 only. SanText is the exponential mechanism with the Euclidean metric (the
same class and the same draws), so it is not run twice.

Sizes (chosen so that everything runs in about 45 minutes at ``nice -n 10`` on a shared
2-core machine): 200 rows per set (TR1, TR2, TE1, TE2), every text cut to its first 20
words, 3 repeats, fastText, training-time mode (accuracy + membership inference),
``--oov drop``, ``--seed 0``. Usage::

    python bench/reproduce_comparison.py [--tasks sst2,imdb] [--out docs/figures]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from _common import DATA
from deniable.cli import run_app

ROOT = Path(__file__).resolve().parents[1]

GROUPS = {
    "euclidean": ("madlib,tem,vickrey,custext,custext_plus", "1,5,10,20"),
    "mahalanobis": ("mahalanobis", "1,5,10,21"),
    "brr": ("brr", "0.04,0.24,0.48,1"),
    "whole-vocabulary": ("exponential,santext_plus", "5,20"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("DENIABLE_DATA", str(DATA)))
    ap.add_argument("--tasks", default="sst2,imdb")
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--size", default="200")
    ap.add_argument("--max-words", default="20")
    ap.add_argument("--repeats", default="3")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures"))
    ap.add_argument("--report-only", action="store_true", help="only (re)build the fair report")
    ap.add_argument("--no-report", action="store_true", help="only run the evaluations")
    args = ap.parse_args()
    commands: list[str] = []
    for task in args.tasks.split(","):
        folder = Path(args.out) / f"comparison-{task}"
        runs = []
        for group in args.groups.split(","):
            mechs, eps = GROUPS[group]
            run_dir = folder / group
            runs.append(run_dir)
            argv = [
                "evaluate", "--data", args.data, "--task", task, "--mechanism", mechs, "--epsilon", eps,
                "--model", "fasttext", "--mode", "train", "--train-size", args.size, "--test-size", args.size,
                "--max-words", args.max_words, "--repeats", args.repeats, "--seed", args.seed, "--oov", "drop",
                "--no-plots", "--out", str(run_dir), "-q",
            ]  # fmt: skip
            if args.report_only and (run_dir / "runs.csv").exists():
                continue
            commands.append("deniable " + shlex.join(argv))
            t0 = time.perf_counter()
            print(f"== {task} {group}: {mechs} eps {eps}", file=sys.stderr, flush=True)
            sys.argv = ["deniable", *argv]  # recorded as the command in settings.json / results.md
            if run_app(argv) != 0:
                return 1
            print(f"== {task} {group}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        if args.no_report:
            continue
        argv = ["compare", *(a for r in runs for a in ("--results", str(r))), "--out", str(folder), "--seed", args.seed]
        commands.append("deniable " + shlex.join(argv))
        sys.argv = ["deniable", *argv]
        if run_app(argv) != 0:
            return 1
    print("\n".join(commands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
