"""Benchmark: the multivariate Laplace mechanism on the 400k-word GloVe 50-d vocabulary.

Prints tokens/s and peak memory for each decode backend (numpy exact, faiss exact,
faiss HNSW), the HNSW decode's agreement with exact search on the same noisy
vectors, and index sizes. Peak RSS is the process's peak so far: the backends run in
this order (exact, flat, HNSW) in one process, so each row includes the earlier ones. Usage:

    python bench/bench_madlib.py [--tokens 20000] [--epsilon 10] [--threads N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import corpus_ids, peak_rss_mb, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=0, help="faiss/BLAS threads (0 = default)")
    args = ap.parse_args()

    import faiss

    import deniable
    from deniable.index import make_index
    from deniable.mechanisms.laplace import MultivariateLaplace

    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    emb = deniable.load_embedding()
    ids, source = corpus_ids(emb, args.tokens)
    rng = np.random.default_rng(0)
    rows = []
    decoded: dict[str, np.ndarray] = {}
    base = MultivariateLaplace(emb, epsilon=args.epsilon, index="flat")
    noisy = base.noisy_vectors(ids, rng)  # the same noisy vectors for every backend
    for kind in ["exact", "flat", "hnsw"]:
        t0 = time.perf_counter()
        index = make_index(emb, kind)
        build = time.perf_counter() - t0
        mech = MultivariateLaplace(emb, epsilon=args.epsilon, index=index)
        # end-to-end privatize (noise + decode) throughput
        t0 = time.perf_counter()
        mech.privatize(ids, deniable.secure_generator())
        dt = time.perf_counter() - t0
        _, nn = index.search(noisy, 1)
        decoded[kind] = nn[:, 0]
        size = emb.vectors.nbytes
        if kind == "exact":
            size += index._aug.nbytes  # type: ignore[attr-defined]  # the augmented copy [-2y, |y|^2]
        if kind == "hnsw":
            size = faiss.serialize_index(index.faiss_index).nbytes  # type: ignore[attr-defined]
        rows.append(
            {
                "decode": kind,
                "tokens/s": len(ids) / dt,
                "x MLDP (86/s)": len(ids) / dt / 86,
                "index build/load s": build,
                "index MB": size / 2**20,
                "process peak RSS MB (cumulative)": peak_rss_mb(),
            }
        )
    agree = float(np.mean(decoded["hnsw"] == decoded["exact"]))
    agree_flat = float(np.mean(decoded["flat"] == decoded["exact"]))
    print(
        f"GloVe 6B 50-d, V={emb.size:,}; {len(ids):,} tokens ({source}); epsilon={args.epsilon:g}; "
        f"faiss threads={faiss.omp_get_max_threads()}"
    )
    print(table(rows))
    print(
        f"\nagreement with numpy exact decode on the same noisy vectors: faiss flat {agree_flat:.4%}, HNSW {agree:.4%}"
    )


if __name__ == "__main__":
    main()
