"""The attacks of docs/audit.md, full runs: authorship attribution and the user-level audit.

Runs ``deniable evaluate --attack authorship|user-audit`` on the shared 20 Newsgroups senders
and the six Enron mailboxes. Usage (DENIABLE_DATA points at the shared data, default
../shared/data):

    python bench/reproduce_attacks.py --attack authorship --out results/authorship [--quick]
    python bench/reproduce_attacks.py --attack user-audit --out results/user-audit [--quick]

``--quick`` keeps the most prolific senders (30 for authorship, 100 for the user audit), cuts
texts to 100 words and runs one repeat. Extra arguments go to ``deniable evaluate``.
"""

from __future__ import annotations

import argparse
import sys

from _common import DATA
from deniable.cli import main as cli

#: attack -> (default epsilons, users kept by --quick, extra evaluate arguments)
ATTACKS = {
    "authorship": ("5,10,20,40", "30", []),
    "user-audit": ("1,2,5,10,20", "100", ["--oov", "random"]),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attack", required=True, choices=sorted(ATTACKS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mechanism", default="madlib")
    ap.add_argument("--epsilon", default=None)
    args, extra = ap.parse_known_args()
    epsilons, quick_users, attack_args = ATTACKS[args.attack]
    size = ["--max-users", quick_users, "--max-words", "100", "--repeats", "1"] if args.quick else ["--repeats", "3"]
    for task, folder in (("20newsgroups", "20newsgroups"), ("enron", "enron_spam")):
        argv = [
            "evaluate", "--attack", args.attack, "--task", task, "--data", str(DATA / folder),
            "--out", f"{args.out}/{task}", "-m", args.mechanism, "-e", args.epsilon or epsilons, "--seed", "0",
            "--index", "hnsw", *attack_args, "--quiet", *size, *extra,
        ]  # fmt: skip
        print("deniable " + " ".join(argv), file=sys.stderr)
        try:
            cli(argv)
        except SystemExit as exc:
            if exc.code:
                raise


if __name__ == "__main__":
    main()
