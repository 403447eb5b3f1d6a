"""The thread policy (src/deniable/_threads.py) measured: madlib's exact decode on 1 vs 2 workers.

1. **Workers**: madlib, eps 10, exact decode, ``--tokens`` IMDb tokens (the shared data). Contenders,
   in interleaved rounds (A B C A B C ...), idle and with 1 and 2 other processes spinning:
   ``1 worker`` (1 thread, 1 BLAS thread), ``2 workers`` (the policy: 2 threads of 1 BLAS thread
   over blocks of the batch), ``2 BLAS threads`` (the old default: one thread, BLAS on 2).
   tok/s and tok/CPU-s (this process's CPU time, all threads), median (min-max).
2. **GEMM peak** (``--gemm``): one thread; the exact decode's GFLOP/s against a plain sgemm of the
   same shape (the query block x the augmented vocabulary block) and faiss's ``IndexFlatL2``.

Run with the machine's BLAS tuning unset (users do not have it)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_threads.py [--tokens 3000] [--rounds 5]
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_threads.py --gemm
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import busy_cores, corpus_ids, load_average  # noqa: E402


def _fmt(rates: list[float]) -> str:
    return f"{statistics.median(rates):>9,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


def workers_section(args: argparse.Namespace) -> None:
    import faiss
    from threadpoolctl import threadpool_limits

    import deniable
    from deniable import _threads
    from deniable.mechanisms import make_mechanism

    emb = deniable.load_embedding()
    ids, source = corpus_ids(emb, args.tokens)
    mech = make_mechanism("madlib", emb, args.epsilon, index="exact")
    rng = np.random.default_rng(0)
    noisy = mech.noisy_vectors(ids, rng)
    faiss.omp_set_num_threads(1)
    ref = mech.decode(noisy)  # builds the index (not timed); the words every contender must give

    def contender(workers: int, blas: int):  # type: ignore[no-untyped-def]
        def run() -> tuple[float, float]:
            _threads.set_decode_workers(workers)
            with threadpool_limits(blas, user_api="blas"):
                t0, c0 = time.perf_counter(), time.process_time()
                out = mech.decode(noisy)
                t1, c1 = time.perf_counter(), time.process_time()
            assert np.array_equal(out, ref), "a contender decoded other words"
            return len(ids) / (t1 - t0), len(ids) / max(c1 - c0, 1e-9)

        return run

    contenders = {"1 worker": contender(1, 1), "2 workers": contender(2, 1), "2 BLAS threads": contender(1, 2)}
    print(f"madlib eps {args.epsilon}, exact decode, {len(ids)} {source}; {args.rounds} interleaved rounds")
    for busy in args.busy:
        with busy_cores(busy):
            wall: dict[str, list[float]] = {k: [] for k in contenders}
            cpu: dict[str, list[float]] = {k: [] for k in contenders}
            for _ in range(args.rounds):
                for name, fn in contenders.items():
                    w, c = fn()
                    wall[name].append(w)
                    cpu[name].append(c)
            print(f"\n{busy} other process(es) spinning; load {load_average()}")
            print(f"  {'contender':<16} {'tok/s median (min-max)':>28} {'tok/CPU-s median (min-max)':>32}")
            for name in contenders:
                print(f"  {name:<16} {_fmt(wall[name]):>28} {_fmt(cpu[name]):>32}")
    _threads.set_decode_workers(None)


def gemm_section(args: argparse.Namespace) -> None:
    import faiss
    from threadpoolctl import threadpool_limits

    import deniable
    from deniable import _threads
    from deniable.index.exact import ExactIndex

    emb = deniable.load_embedding()
    x = np.ascontiguousarray(emb.vectors, dtype=np.float32)
    v, d = x.shape
    ids, _ = corpus_ids(emb, args.tokens)
    q = x[ids] + np.random.default_rng(0).normal(0, 0.3, (len(ids), d)).astype(np.float32)
    idx = ExactIndex(x)
    flat = faiss.IndexFlatL2(d)
    flat.add(x)
    qa = np.ones((idx.query_block, d + 1), dtype=np.float32)
    aug = np.ascontiguousarray(idx._aug[:, : idx.vocab_block])
    buf = np.empty((idx.query_block, idx.vocab_block), dtype=np.float32)
    n_gemm = max(1, len(q) // idx.query_block) * max(1, v // idx.vocab_block)
    flops = 2.0 * len(q) * (d + 1) * v  # the decode's useful work (the augmented product)

    def sgemm() -> float:
        t0 = time.perf_counter()
        for _ in range(n_gemm):
            np.matmul(qa, aug, out=buf)
        dt = time.perf_counter() - t0
        return 2.0 * idx.query_block * (d + 1) * idx.vocab_block * n_gemm / dt / 1e9

    def exact() -> float:
        t0 = time.perf_counter()
        idx.search(q, 1)
        return flops / (time.perf_counter() - t0) / 1e9

    def faiss_flat() -> float:
        t0 = time.perf_counter()
        flat.search(q, 1)
        return flops / (time.perf_counter() - t0) / 1e9

    _threads.set_decode_workers(1)
    faiss.omp_set_num_threads(1)
    rates: dict[str, list[float]] = {"sgemm (same shape)": [], "exact decode": [], "faiss IndexFlatL2": []}
    with threadpool_limits(1, user_api="blas"):
        exact()
        for _ in range(args.rounds):
            rates["sgemm (same shape)"].append(sgemm())
            rates["exact decode"].append(exact())
            rates["faiss IndexFlatL2"].append(faiss_flat())
    print(f"one thread, {len(q)} queries x {v} x {d}; load {load_average()}; GFLOP/s median (min-max)")
    peak = statistics.median(rates["sgemm (same shape)"])
    for name, r in rates.items():
        print(
            f"  {name:<20} {statistics.median(r):6.1f} ({min(r):.1f}-{max(r):.1f})  {statistics.median(r) / peak:.2f}x"
        )
    _threads.set_decode_workers(None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2], help="other spinning processes per cell")
    ap.add_argument("--gemm", action="store_true", help="the GEMM-peak section instead")
    args = ap.parse_args()
    if args.gemm:
        gemm_section(args)
    else:
        workers_section(args)


if __name__ == "__main__":
    main()
