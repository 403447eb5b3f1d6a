"""Benchmark: the LPLP bag-of-words pipeline (vectorize -> compress -> noise).

Prints documents/s for each stage and end to end (streaming, batches of 1,000),
the released matrix size, and the peak traced memory of the end-to-end run (a
second pass under tracemalloc, so the timings are not slowed by it), on CFPB
complaints (train + test, 13,000) and 20 Newsgroups (19,997, headers removed).
Usage:

    python bench/bench_bow.py [--bins 200,1000] [--vocab-size 20000] [--limit N]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, peak_rss_mb, table  # noqa: E402


def cfpb() -> list[str] | None:
    out: list[str] = []
    for split in ("train", "test"):
        path = DATA / "cfpb" / f"{split}.csv.gz"
        if not path.is_file():
            return None
        with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            col = next(reader).index("Consumer complaint narrative")
            out.extend(row[col] for row in reader)
    return out


def newsgroups() -> list[str] | None:
    path = DATA / "20newsgroups" / "20news-19997.jsonl.gz"
    if not path.is_file():
        return None
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line)["text"].partition("\n\n")[2] for line in fh]


def batches(texts: list[str], size: int = 1000) -> list[list[str]]:
    return [texts[i : i + size] for i in range(0, len(texts), size)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bins", default="200,1000")
    ap.add_argument("--vocab-size", type=int, default=20000)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N documents (0 = all)")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--precision", type=float, default=1.0)
    args = ap.parse_args()

    from deniable import secure_generator
    from deniable.bow import BowPrivatizer, BowVectorizer, TwoSidedGeometric, Vocabulary, make_bin_map

    vocab = Vocabulary.from_embedding(size=args.vocab_size)
    vec = BowVectorizer(vocab)
    mech = TwoSidedGeometric(args.epsilon, args.precision)
    rows = []
    for name, loader in (("CFPB train+test", cfpb), ("20 Newsgroups", newsgroups)):
        texts = loader()
        if texts is None:
            print(f"{name}: data not found under {DATA} (set DENIABLE_DATA); skipped")
            continue
        if args.limit:
            texts = texts[: args.limit]
        n = len(texts)
        t0 = time.perf_counter()
        x = vec.transform(texts)
        t_vec = time.perf_counter() - t0
        for k in [int(v) for v in args.bins.split(",")]:
            bmap = make_bin_map("frequency", vocab, k)
            t0 = time.perf_counter()
            c = bmap.apply(x)
            t_comp = time.perf_counter() - t0
            rng = secure_generator()  # what users get: ChaCha20 keyed from the OS
            t0 = time.perf_counter()
            mech.privatize(c, rng)
            t_noise = time.perf_counter() - t0
            priv = BowPrivatizer(vec, mech, bmap)
            t0 = time.perf_counter()
            noisy, report = priv.privatize_batches(batches(texts), rng)
            t_all = time.perf_counter() - t0
            tracemalloc.start()
            priv.privatize_batches(batches(texts), rng)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            rows.append(
                {
                    "data": name,
                    "docs": n,
                    "k": k,
                    "vectorize docs/s": n / t_vec,
                    "compress docs/s": n / t_comp,
                    "noise docs/s": n / t_noise,
                    "end-to-end docs/s": n / t_all,
                    "release MB (CSR)": (noisy.data.nbytes + noisy.indices.nbytes + noisy.indptr.nbytes) / 2**20,
                    "peak traced MB": peak / 2**20,
                    "signal/noise": report.snr,
                }
            )
    if rows:
        print(
            f"vocabulary {vocab.size:,} words (GloVe order, no stop words); frequency bins; "
            f"eps={args.epsilon:g}, N={args.precision:g} (alpha={mech.alpha:.4g}); ChaCha20 noise; "
            "streaming batches of 1,000"
        )
        print(table(rows))
        print(f"\nprocess peak RSS {peak_rss_mb():,.0f} MB (includes the texts held in memory and the embedding)")


if __name__ == "__main__":
    main()
