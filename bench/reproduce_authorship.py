"""Authorship attribution against privatized text, full runs (docs/audit.md, "Authorship attribution").

Runs ``deniable evaluate --attack authorship`` on the shared 20 Newsgroups senders and the six
Enron mailboxes. Usage (DENIABLE_DATA points at the shared data, default ../shared/data):

    python bench/reproduce_authorship.py --out results/authorship [--quick]

``--quick`` keeps the 30 most prolific senders, cuts texts to 100 words and runs one repeat.
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
    ap.add_argument("--epsilon", default="5,10,20,40")
    args, extra = ap.parse_known_args()
    size = ["--max-users", "30", "--max-words", "100", "--repeats", "1"] if args.quick else ["--repeats", "3"]
    for task, folder in (("20newsgroups", "20newsgroups"), ("enron", "enron_spam")):
        argv = [
            "evaluate", "--attack", "authorship", "--task", task, "--data", str(DATA / folder),
            "--out", f"{args.out}/{task}", "-m", args.mechanism, "-e", args.epsilon, "--seed", "0",
            "--index", "hnsw", "--quiet", *size, *extra,
        ]  # fmt: skip
        print("deniable " + " ".join(argv), file=sys.stderr)
        try:
            cli(argv)
        except SystemExit as exc:
            if exc.code:
                raise


if __name__ == "__main__":
    main()
