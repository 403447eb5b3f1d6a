"""The exact decode against this CPU's float32 GEMM peak, one thread (issue 43: >= 0.85x).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_exact_peak.py [--tokens 3000] [--rounds 7]

``--tokens`` noisy IMDb tokens (GloVe 6B 50d, all 336k words) decoded by :class:`ExactIndex`
(``k=1``, the madlib decode) at its default block shape and at a smaller block (256 x 2,048),
beside plain ``np.matmul`` float32 products in the same process, interleaved round by round
(A B C ... A B C ...), each timed by the CPU time of its thread (``time.thread_time``: a shared
machine's time slicing does not count; BLAS, faiss and the decode all pinned to one thread):

- ``sgemm, decode's block``: the decode's own product, ``[q, 1]`` (query block x 51) times one
  vocabulary block of the augmented matrix (51 x vocab block), on real rows;
- ``sgemm, 256 x 51 x 2,048``: the same at the smaller block;
- ``sgemm, 512 x 51 x 1,024`` and ``sgemm, 1,024^3``: the fastest 51-wide shape measured here and a
  square product: the CPU's peak, the figure the issue's ratio is taken against;
- ``exact decode`` (default) and ``exact decode 256 x 2,048``; ``faiss IndexFlatL2``;
- ``numba fused`` (bench/_fused.py) when numba is importable (not a dependency).

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
    args = ap.parse_args()

    import faiss

    import deniable
    from deniable import _threads
    from deniable.index.exact import ExactIndex

    _limiter = pin_threads(1)
    _threads.set_decode_workers(1)
    emb = deniable.load_embedding()
    x = np.ascontiguousarray(emb.vectors, dtype=np.float32)
    v, d = x.shape
    ids, source = corpus_ids(emb, args.tokens)
    q = x[ids] + np.random.default_rng(0).normal(0, 0.3, (len(ids), d)).astype(np.float32)
    flops = 2.0 * len(q) * (d + 1) * v
    index = ExactIndex(x)
    previous = ExactIndex(x, vocab_block=2048, query_block=256)  # the smaller block, for comparison
    want = index.search(q, 1)[1]
    assert np.array_equal(previous.search(q, 1)[1], want)
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

    block = f"{index.query_block} x 51 x {index.vocab_block:,}"
    refs = {
        f"sgemm, decode's block ({block})": sgemm(index.query_block, d + 1, index.vocab_block, True),
        "sgemm, 256 x 51 x 2,048": sgemm(256, d + 1, 2048, True),
        "sgemm, 512 x 51 x 1,024": sgemm(512, d + 1, 1024, False),
        "sgemm, 1,024^3": sgemm(1024, 1024, 1024, False),
    }
    contenders: dict[str, Callable[[], float]] = dict(refs)
    contenders[f"exact decode ({block})"] = decode(lambda: index.search(q, 1))
    contenders["exact decode (256 x 51 x 2,048)"] = decode(lambda: previous.search(q, 1))
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


if __name__ == "__main__":
    main()
