"""Reproduce seed 004's TEM vs Madlib comparison on IMDb (utility at training time + membership inference).

Runs ``deniable evaluate`` with the documented subsample and copies the table and the
plots to ``docs/figures/evaluation/<name>/``. Usage::

    python bench/reproduce_tem_vs_madlib.py                     # default GloVe 6B 50-d
    python bench/reproduce_tem_vs_madlib.py --name w2v300 \
        --embedding ../shared/data/w2v_gnews_bolukbasi/GoogleNews-vectors-negative300-bolukbasi.bin.gz

Seed 004 trains on 12,500 full reviews (TR1) with 300-d GloVe; privatizing that many
tokens for 2 mechanisms x 5 epsilons x 5 trials is days of CPU on a laptop, so the
default here is 2,000 reviews per set, each cut to its first 100 words, 3 repeats
(see docs/evaluation.md). Pass ``--train-size`` etc. to change it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from _common import DATA
from deniable.cli import run_app

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("DENIABLE_DATA", str(DATA)))
    ap.add_argument("--embedding", default=None)
    ap.add_argument("--name", default="glove50")
    ap.add_argument("--mechanism", default="tem,madlib")
    ap.add_argument("--epsilon", default="1,2,4,8,16")
    ap.add_argument("--train-size", default="2000")
    ap.add_argument("--test-size", default="2000")
    ap.add_argument("--max-words", default="100")
    ap.add_argument("--repeats", default="3")
    ap.add_argument("--model", default="fasttext,tfidf")
    ap.add_argument("--oov", default="random", help="random (default), keep (NOT private: measures the leak) or drop")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--index", default="hnsw", help="madlib decode (hnsw: ~3x faster than exact)")
    ap.add_argument("--out", default=None, help="results folder (default: a temporary one)")
    args = ap.parse_args()
    if not (Path(args.data) / "imdb").is_dir():
        print(f"IMDb not found under {args.data} (set DENIABLE_DATA)", file=sys.stderr)
        return 1
    out = Path(args.out or f"/tmp/deniable_eval_{args.name}")
    argv = [
        "evaluate", "--data", args.data, "--task", "imdb", "--mechanism", args.mechanism,
        "--epsilon", args.epsilon, "--model", args.model, "--mode", "train",
        "--train-size", args.train_size, "--test-size", args.test_size, "--max-words", args.max_words,
        "--repeats", args.repeats, "--seed", args.seed, "--index", args.index, "--oov", args.oov,
        "--out", str(out), "-q",
    ]  # fmt: skip
    if args.embedding:
        argv += ["--embedding", args.embedding]
    print("deniable " + " ".join(argv), flush=True)
    t0 = time.perf_counter()
    sys.argv = ["deniable", *argv]  # so results.md / settings.json record the real command
    code = run_app(argv)
    print(f"exit {code} after {time.perf_counter() - t0:.0f} s", flush=True)
    if code == 0:
        dst = ROOT / "docs" / "figures" / "evaluation" / args.name
        dst.mkdir(parents=True, exist_ok=True)
        for name in ("accuracy.png", "mia_auc.png", "results.md", "results.csv"):
            if (out / name).exists():
                shutil.copy(out / name, dst / name)
        print(f"copied to {dst}")
    return code


if __name__ == "__main__":
    sys.exit(main())
