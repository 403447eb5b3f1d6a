"""The full attacker table (issue 41, item 1): every registered mechanism x an epsilon grid, IMDb and 20NG.

The unigram Bayes attacker (:func:`deniable.experiments.reconstruction_evaluation`) on the *training* side of
each data set, its public prior the word counts of the *test* side (a different text; ``--prior zipf`` for
Zipf over the embedding's order). Each mechanism gets its own epsilon grid (their scales differ), chosen so
that recovery spans a few percent to about 60% on a 2,000-word vocabulary. Writes ``grid.csv`` (one row per
data set, mechanism, epsilon, group and metric, appended as each setting finishes) and prints a Markdown
table. Run (nice: the cores are shared)::

    nice -n 10 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/attacker_grid.py \
        --out /tmp/attacker-grid --texts 300 --draws 100

Sampled mechanisms (madlib, Mahalanobis, Vickrey, BRR, truncated Gumbel) are scored held out (a lower bound
on the best attacker; ``recovered_insample`` in the CSV is the optimistic end).
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

from _common import DATA

#: Epsilon grid per mechanism (each in its own units: BRR's is per bit, Diffractor's per list position).
GRIDS: dict[str, tuple[float, ...]] = {
    "tem": (1, 2, 3, 4),
    "exponential": (1, 2, 3, 4),
    "santext": (1, 2, 3, 4),
    "santext_plus": (1, 2, 3, 4),
    "custext": (1, 4, 8, 16),
    "custext_plus": (1, 4, 8, 16),
    "diffractor": (0.25, 0.5, 1),
    "madlib": (4, 6, 8, 12),
    "mahalanobis": (4, 6, 8, 12),
    "vickrey": (4, 8, 12, 20),
    "truncated_gumbel": (0.5, 1, 2, 4),
    "brr": (0.1, 0.2, 0.3, 0.4),
}
TASKS = {"imdb": "imdb", "20newsgroups": "20newsgroups"}
GROUPS = ("all", "content", "rare", "name")


def _cell(row: dict[str, str] | None) -> str:
    if row is None:
        return ""
    return f"{100 * float(row['value']):.1f} [{100 * float(row['ci_low']):.1f}, {100 * float(row['ci_high']):.1f}]"


def markdown(rows: list[dict[str, str]]) -> str:
    """The table: per data set, mechanism and epsilon, recovered (95% interval, N) and unchanged per group."""
    by = {(r["task"], r["mechanism"], r["epsilon"], r["group"], r["metric"]): r for r in rows}
    keys = list(dict.fromkeys((r["task"], r["mechanism"], r["epsilon"]) for r in rows))
    head = "| data | mechanism | eps | method | " + " | ".join(
        f"{g}: recovered % [95%] / unchanged % (N)" for g in GROUPS
    )
    md = [head + " |", "|---|---|---:|---|" + "---|" * len(GROUPS)]
    for task, mech, eps in keys:
        cells = []
        method = ""
        for g in GROUPS:
            rec = by.get((task, mech, eps, g, "recovered"))
            unch = by.get((task, mech, eps, g, "unchanged"))
            if rec is None or int(rec["n_tokens"]) == 0:
                cells.append("—")
                continue
            method = rec["method"]
            cells.append(f"{_cell(rec)} / {100 * float(unch['value']):.1f} ({int(rec['n_tokens']):,})" if unch else "")
        md.append(f"| {task} | {mech} | {float(eps):g} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(md)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for grid.csv and grid.md")
    ap.add_argument("--tasks", default="imdb,20newsgroups")
    ap.add_argument("--mechanisms", default=",".join(GRIDS))
    ap.add_argument("--vocab-size", type=int, default=2000)
    ap.add_argument("--texts", type=int, default=300, help="training texts attacked per data set (first N)")
    ap.add_argument("--draws", type=int, default=100, help="sampled mechanisms: fitting (= scoring) draws per word")
    ap.add_argument("--prior", default="counts", help="counts (the test side's counts) or zipf")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from deniable.embedding import load_embedding
    from deniable.experiments.data import load_task
    from deniable.experiments.reconstruction import attack_texts, reconstruction_evaluation
    from deniable.mechanisms import make_mechanism, mechanism_names

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    emb = load_embedding(vocab_size=args.vocab_size)
    names = [m for m in args.mechanisms.split(",") if m]
    unknown = [m for m in names if m not in GRIDS or m not in mechanism_names()]
    if unknown:
        ap.error(f"--mechanisms: no grid for {', '.join(unknown)}")
    missing = sorted(set(mechanism_names()) - set(GRIDS))
    if missing:
        print(f"note: registered mechanisms without a grid here: {', '.join(missing)}", file=sys.stderr)
    cols = ["task", "prior", "mechanism", "epsilon", "group", "metric", "value", "ci_low", "ci_high", "n_tokens"]
    cols += ["method", "noise_se", "seconds"]
    csv_path = out / "grid.csv"
    rows: list[dict[str, str]] = []
    with open(csv_path, "w", newline="", encoding="utf-8") as fh, tempfile.TemporaryDirectory() as tmp:
        writer = csv.DictWriter(fh, cols, extrasaction="ignore")
        writer.writeheader()
        for task_name in args.tasks.split(","):
            task = load_task(TASKS[task_name], DATA / task_name)
            texts = attack_texts(task)[: args.texts]
            prior = "zipf"
            if args.prior == "counts":
                public = Path(tmp) / f"{task_name}_test.txt"
                public.write_text("\n".join(t.replace("\n", " ") for t in task.test.texts) + "\n", encoding="utf-8")
                prior = f"counts:{public}"
            for i, mech in enumerate(names):
                t0 = time.perf_counter()
                res = reconstruction_evaluation(
                    texts,
                    emb,
                    {mech: lambda e, eps, m=mech: make_mechanism(m, e, eps)},
                    GRIDS[mech],
                    prior=prior,
                    draws=args.draws,
                    corpus=task_name,
                    random_state=args.seed * 1000 + i,
                )
                secs = time.perf_counter() - t0
                for r in res.rows:
                    row = {**r, "task": task_name, "prior": args.prior, "seconds": f"{secs:.1f}"}
                    writer.writerow(row)
                    rows.append({k: str(v) for k, v in row.items()})
                fh.flush()
                rec = [r for r in res.rows if r["group"] == "all" and r["metric"] == "recovered"]
                curve = ", ".join(f"{r['epsilon']:g}: {100 * r['value']:.1f}%" for r in rec)
                print(f"{task_name} {mech} ({secs:.0f} s): recovered {curve}", file=sys.stderr, flush=True)
    md = markdown(rows)
    (out / "grid.md").write_text(md + "\n", encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
