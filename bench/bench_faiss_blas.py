"""faiss's BLAS threshold: tokens/s of the mechanisms that search with faiss, on calls of
``--tokens`` tokens, with faiss's own default (queries x dim >= 128,000 since faiss 1.15) and
with deniable's (:data:`deniable.index.faiss_index.BLAS_THRESHOLD`), in one run (issue 32).

The setting is process-wide, so both are timed in the same process on the same mechanism
objects and tokens, alternating call by call over ``--rounds`` interleaved rounds (a busy
machine slows both alike). Median and min-max tokens/s; ``--threads 1`` pins faiss's OpenMP.

    python bench/bench_faiss_blas.py --tokens 300 --rounds 5
    python bench/bench_faiss_blas.py --tokens 300 --rounds 5 --threads 1
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
from _common import corpus_ids

CONFIGS: dict[str, tuple[str, dict[str, object]]] = {
    "truncated_gumbel": ("truncated_gumbel", {}),
    "madlib --index flat": ("madlib", {"index": "flat"}),
    "mahalanobis --index flat": ("mahalanobis", {"index": "flat", "lam": 0.2}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="calls per setting per round")
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=0, help="faiss OpenMP threads (0: faiss's default)")
    args = parser.parse_args()

    import faiss

    from deniable import load_embedding
    from deniable.index.faiss_index import BLAS_THRESHOLD, load_faiss
    from deniable.mechanisms import make_mechanism

    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    load_faiss()
    settings = {"faiss default (128,000)": 128_000, f"deniable ({BLAS_THRESHOLD})": BLAS_THRESHOLD}
    emb = load_embedding()
    ids, source = corpus_ids(emb, args.tokens * args.calls, seed=1)
    calls = np.array_split(ids, args.calls)
    rng = np.random.default_rng(0)
    mechs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, (name, options) in CONFIGS.items():
            mechs[label] = make_mechanism(name, emb, args.epsilon, **options)
            mechs[label].privatize(calls[0], rng)  # indexes and tables built before timing
    rates: dict[tuple[str, str], list[float]] = {(m, s): [] for m in mechs for s in settings}
    for _ in range(args.rounds):
        for label, mech in mechs.items():
            for setting, value in settings.items():
                faiss.cvar.distance_compute_blas_threshold = value
                t0 = time.perf_counter()
                for c in calls:
                    mech.privatize(c, rng)
                rates[(label, setting)].append(ids.size / (time.perf_counter() - t0))
    faiss.cvar.distance_compute_blas_threshold = BLAS_THRESHOLD
    threads = args.threads or faiss.omp_get_max_threads()
    head = f"{emb.size:,} words, {source}; calls of {args.tokens} tokens, {args.rounds} rounds"
    print(f"{head}, faiss {faiss.__version__}, {threads} thread(s)")
    print(f"{'mechanism':<26}{'BLAS threshold':<26}{'tok/s median':>14}{'min-max':>20}")
    for (label, setting), r in rates.items():
        print(f"{label:<26}{setting:<26}{statistics.median(r):>14,.0f}{f'{min(r):,.0f}-{max(r):,.0f}':>20}")


if __name__ == "__main__":
    main()
