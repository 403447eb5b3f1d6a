"""The attacks of docs/audit.md, full runs: authorship attribution and the user-level audit.

Runs ``deniable evaluate --attack authorship|user-audit`` on the shared 20 Newsgroups senders
and the six Enron mailboxes. Usage (DENIABLE_DATA points at the shared data, default
../shared/data):

    python bench/reproduce_attacks.py --attack authorship --out results/authorship [--quick]
    python bench/reproduce_attacks.py --attack user-audit --out results/user-audit [--quick]

``--quick`` keeps the most prolific senders (30 for authorship, 100 for the user audit), cuts
texts to 100 words and runs one repeat. Extra arguments go to ``deniable evaluate``.

**Units, resumable** (``--units``): each unit (a mechanism, or a few sharing a grid) runs in its
own folder ``<out>/<task>/<unit>`` (one ``--out`` per attack: a folder holding the other attack's
run is refused) on the same split (same ``--seed``); a unit whose
``results.csv`` exists with the same command recorded in ``settings.json`` is skipped, so an
interrupted run continues where it stopped (``--force`` reruns). BRR runs at the epsilons
times the seed-001 privacy ratio to madlib (0.047 on GloVe 6B 50-d, 256-bit codes), and
1-Diffractor on its own grid (its ratio, 5.4e-5 on 336k positions, would put it at chance).
The decisive run of docs/audit.md::

    python bench/reproduce_attacks.py --attack authorship --tasks 20newsgroups --out docs/figures/decisive/attacks \\
        --units madlib-hnsw,tem,vickrey-hnsw,mahalanobis-hnsw,custext,brr-hnsw,diffractor,whole-vocabulary \\
        -e 2,5,10 --max-users 30 --max-words 50 --repeats 5
    python bench/reproduce_attacks.py --attack user-audit --tasks 20newsgroups --out docs/figures/decisive/user-audit \\
        --units madlib-hnsw,tem,custext,vickrey-hnsw,mahalanobis-hnsw,brr-hnsw,diffractor,whole-vocabulary \\
        -e 1,5,10 --max-users 100 --max-words 100 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from _common import DATA
from deniable.cli import main as cli

#: attack -> (default epsilons, users kept by --quick, extra evaluate arguments)
ATTACKS = {
    "authorship": ("5,10,20,40", "30", []),
    "user-audit": ("1,2,5,10,20", "100", ["--oov", "random"]),
}
#: task -> folder of the shared data
TASKS = {"20newsgroups": "20newsgroups", "enron": "enron_spam"}
#: unit -> (mechanisms, epsilon rule, extra evaluate flags): the rule is None (the given epsilons),
#: a float (the given epsilons times this privacy ratio) or a fixed grid
UNITS: dict[str, tuple[str, float | str | None, tuple[str, ...]]] = {
    "madlib-hnsw": ("madlib", None, ("--index", "hnsw")),
    "tem": ("tem", None, ()),
    "vickrey-hnsw": ("vickrey", None, ("--index", "hnsw")),
    "mahalanobis-hnsw": ("mahalanobis", None, ("--index", "hnsw")),
    "custext": ("custext,custext_plus", None, ()),
    "brr-hnsw": ("brr", 0.047, ("--index", "hnsw")),
    "diffractor": ("diffractor", "0.1,1,3", ()),
    # O(V d) per distinct word of a call (each side is one call); santext is exponential with its
    # euclidean default (the same class and law: tests/test_mech_exact.py), so it is not run twice
    "whole-vocabulary": ("exponential,santext_plus", None, ()),
}


def _epsilons(rule: float | str | None, given: str) -> str:
    if rule is None:
        return given
    if isinstance(rule, str):
        return rule
    return ",".join(f"{float(e) * rule:.3g}" for e in given.split(","))


def _done(folder: Path, argv: list[str]) -> bool:
    """A unit is complete when its results.csv exists and its settings record the same command."""
    try:
        recorded = json.loads((folder / "settings.json").read_text(encoding="utf-8")).get("command", "")
    except (OSError, ValueError):
        return False
    return (folder / "results.csv").is_file() and str(recorded).endswith(shlex.join(argv))


def _other_attack(folder: Path, attack: str) -> str:
    """The attack a folder's settings record when it is not ``attack`` (else ""): never overwrite it."""
    try:
        recorded = json.loads((folder / "settings.json").read_text(encoding="utf-8")).get("attack", attack)
    except (OSError, ValueError):
        return ""
    return "" if recorded == attack else str(recorded)


def _run(argv: list[str]) -> None:
    print("deniable " + shlex.join(argv), file=sys.stderr, flush=True)
    sys.argv = ["deniable", *argv]  # recorded as the command in settings.json
    try:
        cli(argv)
    except SystemExit as exc:
        if exc.code:
            raise


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attack", required=True, choices=sorted(ATTACKS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mechanism", default="madlib")
    ap.add_argument("--epsilon", "-e", default=None)
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated: " + ", ".join(TASKS))
    ap.add_argument("--units", default="", help="comma-separated units (see UNITS), resumable; replaces --mechanism")
    ap.add_argument("--repeats", default=None, help="repeats (default 3; 1 with --quick)")
    ap.add_argument("--force", action="store_true", help="rerun units that are already complete")
    args, extra = ap.parse_known_args()
    epsilons, quick_users, attack_args = ATTACKS[args.attack]
    size = ["--max-users", quick_users, "--max-words", "100"] if args.quick else []
    size += ["--repeats", args.repeats or ("1" if args.quick else "3")]
    for task in args.tasks.split(","):
        common = ["evaluate", "--attack", args.attack, "--task", task, "--data", str(DATA / TASKS[task])]
        tail = ["--seed", "0", *attack_args, "--quiet", *size, *extra]
        if not args.units:
            _run([*common, "--out", f"{args.out}/{task}", "-m", args.mechanism, "-e", args.epsilon or epsilons,
                  "--index", "hnsw", *tail])  # fmt: skip
            continue
        for unit in args.units.split(","):
            mechs, rule, flags = UNITS[unit]
            folder = Path(args.out) / task / unit
            argv = [*common, "--out", str(folder), "-m", mechs, "-e", _epsilons(rule, args.epsilon or epsilons),
                    *flags, *tail]  # fmt: skip
            other = _other_attack(folder, args.attack)
            if other:
                sys.exit(f"{folder} holds a {other} run: give --attack {args.attack} another --out")
            if _done(folder, argv) and not args.force:
                print(f"== {task} {unit}: complete, skipped", file=sys.stderr, flush=True)
                continue
            t0 = time.perf_counter()
            _run(argv)
            print(f"== {task} {unit}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
