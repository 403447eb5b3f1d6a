"""The exact decode against this CPU's float32 GEMM peak, one thread (issue 43: >= 0.85x).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_exact_peak.py [--tokens 3000] [--rounds 7]
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_exact_peak.py --grid [--rounds 5]

``--tokens`` noisy IMDb tokens (GloVe 6B 50d, all 336k words) decoded by :class:`ExactIndex`
(``k=1``, the madlib decode) at its default block shape and at the previous default (256 x 8,192),
beside plain ``np.matmul`` float32 products in the same process, interleaved round by round
(A B C ... A B C ...), each timed by the CPU time of its thread (``time.thread_time``: a shared
machine's time slicing does not count; BLAS, faiss and the decode all pinned to one thread):

- ``sgemm, decode's block``: the decode's own product, ``[q, 1]`` (the rows of one query block
  x 51) times one vocabulary block of the augmented matrix (51 x vocab block), on real rows;
- ``sgemm, 256 x 51 x 8,192``: the same at the previous default block;
- ``sgemm, 2,048 x 51 x 512`` and ``sgemm, 1,024^3``: the fastest 51-wide shape measured here and a
  square product: the CPU's peak, the figure the issue's ratio is taken against;
- ``exact decode`` (default) and ``exact decode 256 x 51 x 8,192``; ``faiss IndexFlatL2``;
- ``numba fused`` (bench/_fused.py) when numba is importable (not a dependency).

``--grid``: the decode at every block shape of ``--queries`` x ``--vocab-blocks`` (same words
asserted), beside the square sgemm, interleaved; the ratio of each to the square sgemm.

GFLOP/s counts the decode's useful work, ``2 * tokens * 51 * V``; median (min-max) of the rounds,
each contender's ratio of medians to every sgemm reference, and the load average.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import corpus_ids, load_average, pin_threads  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-fused", action="store_true", help="skip the numba kernel even where numba is installed")
    ap.add_argument("--grid", action="store_true", help="the decode at every block shape, against the square sgemm")
    ap.add_argument("--queries", type=int, nargs="+", default=[256, 512, 1024, 1536, 3000])
    ap.add_argument("--vocab-blocks", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    args = ap.parse_args()

    import faiss

    import deniable
    from deniable import _threads
    from deniable.index.exact import ExactIndex, row_block

    _limiter = pin_threads(1)
    _threads.set_decode_workers(1)
    emb = deniable.load_embedding()
    x = np.ascontiguousarray(emb.vectors, dtype=np.float32)
    v, d = x.shape
    ids, source = corpus_ids(emb, args.tokens)
    q = x[ids] + np.random.default_rng(0).normal(0, 0.3, (len(ids), d)).astype(np.float32)
    flops = 2.0 * len(q) * (d + 1) * v
    index = ExactIndex(x)
    previous = ExactIndex(x, vocab_block=8192, query_block=256)  # the previous default, for comparison
    want = index.search(q, 1)[1]
    assert np.array_equal(previous.search(q, 1)[1], want)
    if args.grid:
        grid(x, q, want, flops, args)
        _threads.set_decode_workers(None)
        return
    flat = faiss.IndexFlatL2(d)
    flat.add(x)

    def sgemm(m: int, k: int, n: int, real: bool) -> Callable[[], float]:
        if real:  # the decode's operands: real query rows, one block of the augmented vocabulary
            a = np.ones((m, k), dtype=np.float32)
            a[:, :d] = q[:m]
            b = np.ascontiguousarray(index._aug[:, :n])
        else:
            rng = np.random.default_rng(1)
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
        c = np.empty((m, n), dtype=np.float32)
        reps = max(1, int(flops // (2.0 * m * k * n)))  # about the decode's work per call

        def run() -> float:
            t0 = time.thread_time()
            for _ in range(reps):
                np.matmul(a, b, out=c)
            return 2.0 * m * k * n * reps / (time.thread_time() - t0) / 1e9

        return run

    def decode(fn: Callable[[], object]) -> Callable[[], float]:
        def run() -> float:
            t0 = time.thread_time()
            fn()
            return flops / (time.thread_time() - t0) / 1e9

        return run

    rows = row_block(len(q), index.query_block, 1)
    block = f"{rows:,} x 51 x {index.vocab_block:,}"
    refs = {
        f"sgemm, decode's block ({block})": sgemm(rows, d + 1, index.vocab_block, True),
        "sgemm, 256 x 51 x 8,192": sgemm(256, d + 1, 8192, True),
        "sgemm, 2,048 x 51 x 512": sgemm(2048, d + 1, 512, False),
        "sgemm, 1,024^3": sgemm(1024, 1024, 1024, False),
    }
    contenders: dict[str, Callable[[], float]] = dict(refs)
    contenders[f"exact decode ({block})"] = decode(lambda: index.search(q, 1))
    contenders["exact decode (256 x 51 x 8,192)"] = decode(lambda: previous.search(q, 1))
    contenders["faiss IndexFlatL2"] = decode(lambda: flat.search(q, 1))
    if not args.no_fused:
        try:
            from _fused import fused_decoder

            fused = fused_decoder(x)
            same = float(np.mean(fused(q) == want[:, 0]))
            contenders[f"numba fused ({same:.1%} same words)"] = decode(lambda: fused(q))
        except ImportError:
            pass
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for fn in contenders.values():
        fn()
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            rates[name].append(fn())
    med = {name: statistics.median(r) for name, r in rates.items()}
    print(
        f"one thread, {len(q):,} {source} x {v:,} words x {d} d; {args.rounds} interleaved rounds;"
        f" load {load_average()}"
    )
    print("GFLOP/s per CPU-second of the thread, median (min-max); ratio of medians to each sgemm")
    head = f"{'contender':<40}{'GFLOP/s':>24}" + "".join(f"{'x ' + r.split(', ')[1].split(' (')[0]:>18}" for r in refs)
    print(head)
    for name, r in rates.items():
        cells = "".join(f"{med[name] / med[ref]:>17.2f}x" for ref in refs)
        print(f"{name:<40}{f'{med[name]:.1f} ({min(r):.1f}-{max(r):.1f})':>24}{cells}")
    _threads.set_decode_workers(None)


def grid(x: np.ndarray, q: np.ndarray, want: np.ndarray, flops: float, args: argparse.Namespace) -> None:
    """The decode at every block shape (rows of a query block x vocabulary block), interleaved with a
    square sgemm; same words asserted."""
    from deniable.index.exact import ExactIndex, row_block

    a = np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32)
    c = np.empty_like(a)

    def square() -> float:
        t0 = time.thread_time()
        for _ in range(max(1, int(flops // 2.0**31))):
            np.matmul(a, a, out=c)
        return 2.0**31 * max(1, int(flops // 2.0**31)) / (time.thread_time() - t0) / 1e9

    contenders: dict[str, Callable[[], float]] = {"sgemm, 1,024^3": square}
    for nq in args.queries:
        for vb in args.vocab_blocks:
            idx = ExactIndex(x, vocab_block=vb, query_block=nq)
            assert np.array_equal(idx.search(q, 1)[1], want), (nq, vb)

            def run(idx: ExactIndex = idx) -> float:
                t0 = time.thread_time()
                idx.search(q, 1)
                return flops / (time.thread_time() - t0) / 1e9

            contenders[f"{row_block(len(q), nq, 1):,} x 51 x {vb:,}"] = run
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            rates[name].append(fn())
    peak = statistics.median(rates["sgemm, 1,024^3"])
    head = f"one thread, {len(q):,} queries x {x.shape[0]:,} words; {args.rounds} interleaved rounds"
    print(f"{head}; load {load_average()}")
    print(f"{'decode block (rows x 51 x words)':<36}{'GFLOP/s':>24}{'x square sgemm':>16}")
    for name, r in rates.items():
        cell = f"{statistics.median(r):.1f} ({min(r):.1f}-{max(r):.1f})"
        print(f"{name:<36}{cell:>24}{statistics.median(r) / peak:>15.2f}x")


if __name__ == "__main__":
    main()
