"""Benchmark: tokens/s of every word mechanism on the default GloVe vocabulary, in one run.

All mechanisms are built (and their lazy artefacts made: index, covariance, output-set tables,
TEM tables for the words used) before timing; then ``--rounds`` interleaved rounds time
``privatize`` on the same real tokens (IMDb when the shared data are present, else Zipf ids)
for each mechanism in turn, so a busy machine slows all of them alike. Reported: median and
min-max tokens/s over the rounds, and the one-off setup time. Full-vocabulary exponential
mechanisms (exponential, santext, santext_plus) cost O(V) per distinct word of a call by
default and O(V) per token history-free (the service's mode, its own row here): they get
``--em-tokens`` tokens per round instead of ``--tokens``. Usage:

    python bench/bench_mechanisms.py [--tokens 4000] [--em-tokens 300] [--rounds 5] [--epsilon 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import corpus_ids, peak_rss_mb, table

#: name -> (registry name, options, uses the O(V)-per-token token count)
CONFIGS: dict[str, tuple[str, dict[str, object], bool]] = {
    "madlib": ("madlib", {"index": "flat"}, False),
    "tem": ("tem", {}, False),
    "brr (simhash 256)": ("brr", {"binarizer": "random"}, False),
    "mahalanobis": ("mahalanobis", {"index": "flat", "lam": 0.2}, False),
    "vickrey (madlib noise)": ("vickrey", {"index": "flat", "t": 0.5}, False),
    "vickrey (mahalanobis)": ("vickrey", {"index": "flat", "t": 0.5, "lam": 0.2}, False),
    "custext (k=20)": ("custext", {"k": 20}, False),
    "custext_plus (k=20)": ("custext_plus", {"k": 20}, False),
    "exponential": ("exponential", {}, True),
    "exponential (history-free)": ("exponential", {"history_free": True}, True),
    "santext": ("santext", {}, True),
    "santext_plus": ("santext_plus", {}, True),
    "truncated_gumbel": ("truncated_gumbel", {}, False),
    "diffractor (geometric)": ("diffractor", {}, False),
    "diffractor (tem gamma 5)": ("diffractor", {"noise": "tem", "gamma": 5.0}, False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--em-tokens", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args()

    from deniable import load_embedding
    from deniable.mechanisms import make_mechanism

    warnings.simplefilter("ignore")
    emb = load_embedding()
    ids, source = corpus_ids(emb, args.tokens)
    em_ids = ids[: args.em_tokens]
    names = [c for c in args.configs.split(",") if c]
    mechs, setup = {}, {}
    for name in names:
        reg, opts, _ = CONFIGS[name]
        t0 = time.perf_counter()
        mech = make_mechanism(reg, emb, args.epsilon, **opts)
        mech.privatize(ids[:50], np.random.default_rng(0))  # builds the lazy artefacts
        setup[name] = time.perf_counter() - t0
        mechs[name] = mech
        print(f"built {name} in {setup[name]:.1f} s", file=sys.stderr, flush=True)
    if "tem" in mechs:  # TEM builds a table per distinct word on first sight: warm them all
        mechs["tem"].privatize(ids, np.random.default_rng(0))
    rates: dict[str, list[float]] = {n: [] for n in names}
    gen = np.random.default_rng()
    for r in range(args.rounds):
        for name in names:
            batch = em_ids if CONFIGS[name][2] else ids
            t0 = time.perf_counter()
            mechs[name].privatize(batch, gen)
            rates[name].append(batch.size / (time.perf_counter() - t0))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    rows = []
    for name in names:
        rs = rates[name]
        rows.append(
            {
                "mechanism": name,
                "tokens/round": int((em_ids if CONFIGS[name][2] else ids).size),
                "tokens/s (median)": statistics.median(rs),
                "min": min(rs),
                "max": max(rs),
                "setup s": setup[name],
            }
        )
    print(
        f"GloVe {emb.size:,} words x {emb.dim}d, epsilon {args.epsilon:g}, {source}, {args.rounds} interleaved rounds, "
        f"peak RSS {peak_rss_mb():,.0f} MB"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
