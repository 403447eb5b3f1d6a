"""Issue 44, measure then decide: held-out utility against attacker recovery, per decoder (``prior``).

For each task (``--tasks``: built-in recipes read from ``--data``), each perturb-then-decode
mechanism (``--mechanisms``) and each decoder prior (``--priors``: ``uniform`` is today's
nearest-neighbour decode), at every epsilon of the mechanism's grid (``--epsilons
madlib:5,7,10,14;brr:...``):

- **utility**: ``run_evaluation`` (train on privatized training text, test on clean test text,
  ``--repeats`` repeats, mean and 95% interval), the harness of ``deniable evaluate``;
- **recovery**: the unigram Bayes attacker of ``deniable evaluate --attack reconstruction``
  (sampled guess table fitted and scored on independent draws: ``recovered`` is held out),
  scored on ``--attack-texts`` training texts, with the attacker's public prior
  ``--attacker-prior`` (zipf by default). The attacker knows the decoder: its guess table is
  fitted on the mechanism's own outputs, decode included;
- **unchanged** share beside it.

Then, per task and mechanism, the decoders are lined up at **matched recovery**
(:func:`deniable.experiments.fair.epsilon_at_level`, the fair report's matching): each
decoder's epsilon at a recovery level is read off its isotonic recovery curve, and its utility
(mean and interval bounds) interpolated there in log epsilon, at the levels every decoder reaches. A decoder
*dominates* uniform at a level when the lower bound of its utility interval is above the upper
bound of uniform's there. The verdict line per mechanism says on how many tasks a prior
dominates at every common level (issue 44: a default changes only with >= 3).

Writes ``OUT/<task>.csv`` (one row per mechanism, decoder, epsilon) and prints Markdown
tables. Unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for speed figures (not needed here: it
prints no times but the total).

Usage (the tables of docs/madlib.md, "Measured, then decided")::

    python bench/decode_prior_tradeoff.py --data ../shared/data --tasks imdb,sst2,20newsgroups \\
        --mechanisms madlib --priors uniform,zipf --out out/decode_prior
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_GRID = {
    "madlib": "4,6,8,11,15",
    "mahalanobis": "4,6,8,11,15",
    "vickrey": "4,6,8,11,15",
    "brr": "0.5,1,2,3,4",
}


def _grid(spec: str | None, mechanisms: list[str]) -> dict[str, list[float]]:
    grid = {m: [float(x) for x in DEFAULT_GRID.get(m, "4,8,16").split(",")] for m in mechanisms}
    for part in (spec or "").split(";"):
        if part.strip():
            name, _, values = part.partition(":")
            grid[name.strip()] = [float(x) for x in values.split(",")]
    return grid


def _summary(results: Any, metric: str, **match: Any) -> dict[tuple[str, float], dict[str, Any]]:
    out = {}
    for s in results.summary():
        if s["metric"] == metric and all(s.get(k) == v for k, v in match.items()):
            out[(s["mechanism"], float(s["epsilon"]))] = s
    return out


def run_task(task_name: str, args: argparse.Namespace, emb: Any) -> list[dict[str, Any]]:
    from deniable.experiments import EvaluationConfig, run_evaluation
    from deniable.experiments.harness import RegisteredMechanism
    from deniable.experiments.reconstruction import attack_texts, reconstruction_evaluation
    from deniable.experiments.tasks import load_task_data
    from deniable.mechanisms import validate_options

    data = load_task_data(task_name, str(Path(args.data) / _folder(task_name)))
    mechanisms = args.mechanisms.split(",")
    grid = _grid(args.epsilons, mechanisms)
    rows: list[dict[str, Any]] = []
    for mech in mechanisms:
        factories = {
            f"{mech}[{prior}]": RegisteredMechanism(mech, validate_options(mech, {"prior": prior}))
            for prior in args.priors.split(",")
        }
        config = EvaluationConfig(
            mechanisms=factories,
            epsilons=grid[mech],
            repeats=args.repeats,
            models=(args.model,),
            modes=("train",),
            membership=False,
            train_size=args.train_size,
            test_size=args.test_size,
            random_state=args.seed,
        )
        utility = run_evaluation(data, emb, config, show_progress=False)
        texts = attack_texts(data, size=args.attack_texts, max_words=args.max_words, seed=args.seed)
        attack = reconstruction_evaluation(
            texts, emb, factories, grid[mech], prior=args.attacker_prior, draws=args.draws, random_state=args.seed
        )
        acc = _summary(utility, args.metric, mode="train")
        rec = {k: v for k, v in _recovery(attack).items()}
        for (label, eps), u in sorted(acc.items()):
            r = rec.get((label, eps), {})
            rows.append(
                {
                    "task": task_name,
                    "mechanism": mech,
                    "prior": label[len(mech) + 1 : -1],
                    "epsilon": eps,
                    "utility": u["mean"],
                    "utility_low": u["ci_low"],
                    "utility_high": u["ci_high"],
                    **r,
                }
            )
    return rows


def _recovery(attack: Any) -> dict[tuple[str, float], dict[str, float]]:
    out: dict[tuple[str, float], dict[str, float]] = {}
    for s in attack.summary():
        if s.get("group") != "all" or s["metric"] not in ("recovered", "unchanged"):
            continue
        d = out.setdefault((s["mechanism"], float(s["epsilon"])), {})
        d[s["metric"]] = s["mean"]
        d[f"{s['metric']}_low"] = s["ci_low"]
        d[f"{s['metric']}_high"] = s["ci_high"]
    return out


def _folder(task: str) -> str:
    return {"sst2": "sst", "sst5": "sst"}.get(task, task)


def matched(rows: list[dict[str, Any]], levels: int) -> list[dict[str, Any]]:
    """Each decoder's utility at recovery levels all decoders of a (task, mechanism) reach."""
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        for mech in dict.fromkeys(r["mechanism"] for r in rows if r["task"] == task):
            curves = {}
            for r in rows:
                if r["task"] == task and r["mechanism"] == mech:
                    curves.setdefault(r["prior"], []).append(r)
            lo = max(min(r["recovered"] for r in c) for c in curves.values())
            hi = min(max(r["recovered"] for r in c) for c in curves.values())
            if not lo < hi:
                continue
            for i in range(levels):
                level = lo + (hi - lo) * (i + 0.5) / levels
                cells = {p: _utility_at_recovery(c, level) for p, c in curves.items()}
                out.append({"task": task, "mechanism": mech, "recovered": level, **_flat(cells)})
    return out


def _utility_at_recovery(curve: list[dict[str, Any]], level: float) -> tuple[float, float, float, float]:
    """(epsilon, utility, low, high) of one decoder's curve at recovery ``level`` (the fair report's rule)."""
    from deniable.experiments.fair import _at, epsilon_at_level

    eps = epsilon_at_level([r["epsilon"] for r in curve], [r["recovered"] for r in curve], level, what="recovered")
    points = [{"epsilon": r["epsilon"], "mean": r["utility"], "ci_low": r["utility_low"], "ci_high": r["utility_high"]}
              for r in curve]  # fmt: skip
    mean, low, high, _ = _at(sorted(points, key=lambda p: p["epsilon"]), eps)
    return eps, mean, low, high


def _flat(cells: dict[str, tuple[float, float, float, float]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for p, (eps, mean, low, high) in cells.items():
        d[f"{p}:epsilon"], d[f"{p}:utility"], d[f"{p}:low"], d[f"{p}:high"] = eps, mean, low, high
    return d


def _pct(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def print_tables(rows: list[dict[str, Any]], at: list[dict[str, Any]], priors: list[str]) -> None:
    print("| task | mechanism | decoder | epsilon | utility (95% CI) | recovered % (95% CI) | unchanged % |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['task']} | {r['mechanism']} | {r['prior']} | {r['epsilon']:g} | {r['utility']:.3f} "
            f"[{r['utility_low']:.3f}, {r['utility_high']:.3f}] | {_pct(r.get('recovered'))} "
            f"[{_pct(r.get('recovered_low'))}, {_pct(r.get('recovered_high'))}] | {_pct(r.get('unchanged'))} |"
        )
    print()
    head = " | ".join(f"{p}: eps, utility [CI]" for p in priors)
    print(f"| task | mechanism | recovered % | {head} | dominates uniform |")
    print("|---|---|---|" + "---|" * len(priors) + "---|")
    for a in at:
        cells = " | ".join(
            f"{a[f'{p}:epsilon']:.2f}, {a[f'{p}:utility']:.3f} [{a[f'{p}:low']:.3f}, {a[f'{p}:high']:.3f}]"
            for p in priors
        )
        dom = [p for p in priors if p != "uniform" and a[f"{p}:low"] > a["uniform:high"]]
        print(f"| {a['task']} | {a['mechanism']} | {100 * a['recovered']:.1f} | {cells} | {', '.join(dom) or '-'} |")
    print()
    for mech in dict.fromkeys(a["mechanism"] for a in at):
        for p in priors:
            if p == "uniform":
                continue
            tasks = {a["task"] for a in at if a["mechanism"] == mech}
            wins = [t for t in tasks if all(a[f"{p}:low"] > a["uniform:high"] for a in at if a["task"] == t)]
            print(f"verdict {mech} prior={p}: dominates uniform at every matched level on {len(wins)} of "
                  f"{len(tasks)} tasks ({', '.join(sorted(wins)) or 'none'})")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="the folder holding imdb/, sst/, 20newsgroups/")
    ap.add_argument("--tasks", default="imdb,sst2,20newsgroups")
    ap.add_argument("--mechanisms", default="madlib")
    ap.add_argument("--priors", default="uniform,zipf")
    ap.add_argument("--epsilons", default=None, help="per mechanism: 'madlib:5,7,10;brr:1,2'")
    ap.add_argument("--vocab-size", type=int, default=20_000)
    ap.add_argument("--train-size", type=int, default=2000)
    ap.add_argument("--test-size", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="tfidf")
    ap.add_argument("--metric", default="accuracy")
    ap.add_argument("--attack-texts", type=int, default=300)
    ap.add_argument("--max-words", type=int, default=100)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--attacker-prior", default="zipf")
    ap.add_argument("--levels", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out/decode_prior")
    args = ap.parse_args(argv)

    from deniable.embedding import load_embedding

    t0 = time.perf_counter()
    emb = load_embedding(None, vocab_size=args.vocab_size)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for task in args.tasks.split(","):
        task_rows = run_task(task, args, emb)
        with open(out / f"{task}.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=sorted({k for r in task_rows for k in r}))
            w.writeheader()
            w.writerows(task_rows)
        rows += task_rows
        print(f"# {task} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    print_tables(rows, matched(rows, args.levels), args.priors.split(","))
    print(f"\n{len(rows)} settings, {time.perf_counter() - t0:.0f} s; command: python {' '.join(sys.argv)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
