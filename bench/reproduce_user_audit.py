"""User-level provenance audit (seed 003 Tables 3-4), full runs (docs/audit.md, "User-level provenance audit").

Runs ``deniable evaluate --attack user-audit`` on the shared 20 Newsgroups senders and the six
Enron mailboxes. Usage (DENIABLE_DATA points at the shared data, default ../shared/data):

    python bench/reproduce_user_audit.py --out results/user-audit [--quick]

``--quick`` keeps the 100 most prolific senders (all six mailboxes), cuts texts to 100 words, one repeat.
Out-of-vocabulary words are replaced (``--oov random``): kept verbatim they identify users (docs/audit.md).
"""

from __future__ import annotations

import argparse
import sys

from _common import DATA
from deniable.cli import main as cli


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mechanism", default="madlib")
    ap.add_argument("--epsilon", default="1,2,5,10,20")
    args, extra = ap.parse_known_args()
    size = ["--max-users", "100", "--max-words", "100", "--repeats", "1"] if args.quick else ["--repeats", "3"]
    for task, folder in (("20newsgroups", "20newsgroups"), ("enron", "enron_spam")):
        argv = [
            "evaluate", "--attack", "user-audit", "--task", task, "--data", str(DATA / folder),
            "--out", f"{args.out}/{task}", "-m", args.mechanism, "-e", args.epsilon, "--seed", "0",
            "--index", "hnsw", "--oov", "random", "--quiet", *size, *extra,
        ]  # fmt: skip
        print("deniable " + " ".join(argv), file=sys.stderr)
        try:
            cli(argv)
        except SystemExit as exc:
            if exc.code:
                raise


if __name__ == "__main__":
    main()
