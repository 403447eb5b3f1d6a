"""Benchmark: TEM after ``deniable prepare``, per thread, from a fresh process.

Issue 14's target: with the whole-vocabulary k-NN tables prepared, TEM samples at least
1M tokens/s per thread at eps >= 10 and 250k at eps 2-5 on IMDb tokens, and a fresh
process reaches that speed from its first batch.

Each measurement runs in a NEW Python process (so nothing is warm but the page cache,
exactly what a new ``deniable privatize`` or a service worker sees), pinned to one
thread (faiss, BLAS): it opens the default embedding and the prepared tables
(memory-mapped), privatizes the first batch of IMDb training tokens, then the rest.
Beside each run, the same process times the issue's reference, a plain numpy
inverse-CDF draw (one uniform and a binary search in a 256-entry CDF per token), so
the ratio ``TEM / reference`` is comparable across loads. Rounds are interleaved over
the epsilons (eps1 eps2 ... eps1 eps2 ...), and the table
gives median (min-max) over the rounds, with the load average, because this machine is
shared.

Usage::

    deniable prepare -m tem          # once (about 3-4 minutes for the default 336k words)
    python bench/bench_tem_warm.py [--epsilons 2,3,5,10,20] [--tokens 1000000]
                                   [--first 10000] [--rounds 3]

It refuses to run without the prepared tables (building them inside would time the
build, which ``deniable prepare`` reports itself).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from _common import corpus_ids, load_average, peak_rss_mb, pin_threads, summarise, table  # noqa: E402


def child(eps: float, n_tokens: int, first: int) -> dict[str, float]:
    """One fresh-process measurement (run with ``--child``)."""
    t_start = time.perf_counter()
    limiter = pin_threads(1)
    import deniable
    from deniable.artefacts import open_artefact
    from deniable.mechanisms.tem import TruncatedExponential

    emb = deniable.load_embedding()
    ids, _ = corpus_ids(emb, n_tokens)
    planned = TruncatedExponential.prepared_artefacts(emb, {"metric": "euclidean"})
    if any(open_artefact(emb, kind, params) is None for kind, params in planned):
        raise SystemExit("the TEM tables are not prepared: run `deniable prepare -m tem` first")
    t_open = time.perf_counter()
    mech = TruncatedExponential(emb, eps)
    rng = deniable.secure_generator()
    t0 = time.perf_counter()
    mech.privatize(ids[:first], rng)
    t1 = time.perf_counter()
    mech.privatize(ids[first:], rng)
    t2 = time.perf_counter()
    # the reference of the issue: a plain numpy inverse-CDF draw (one random number and a
    # binary search in a 256-entry CDF per token), in the same process, right after
    cdf = np.cumsum(rng.random(256))
    t3 = time.perf_counter()
    np.searchsorted(cdf, rng.random(len(ids)) * cdf[-1])
    t4 = time.perf_counter()
    del limiter
    return {
        "reference draws/s": len(ids) / (t4 - t3),
        "start-up s": t_open - t_start,
        "first batch tok/s": first / (t1 - t0),
        "rest tok/s": (len(ids) - first) / (t2 - t1),
        "peak RSS MB": peak_rss_mb(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epsilons", default="2,3,5,10,20")
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--first", type=int, default=10_000, help="tokens in the first batch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.tokens, args.first)))
        return
    epsilons = [float(e) for e in args.epsilons.split(",")]
    runs: dict[float, list[dict[str, float]]] = {e: [] for e in epsilons}
    loads = [load_average()]
    for _ in range(args.rounds):
        for eps in epsilons:
            cmd = [sys.executable, __file__, "--child", str(eps)]
            cmd += ["--tokens", str(args.tokens), "--first", str(args.first)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            runs[eps].append(json.loads(out.strip().splitlines()[-1]))
        loads.append(load_average())
    rows = []
    for eps in epsilons:
        rs = runs[eps]
        rows.append(
            {
                "eps": eps,
                "first batch tok/s": summarise([r["first batch tok/s"] for r in rs]),
                "rest tok/s": summarise([r["rest tok/s"] for r in rs]),
                "TEM / reference": summarise([r["rest tok/s"] / r["reference draws/s"] for r in rs]),
                "start-up s": summarise([r["start-up s"] for r in rs]),
                "peak RSS MB": summarise([r["peak RSS MB"] for r in rs]),
            }
        )
    print(
        f"TEM from the prepared tables, default embedding, 1 thread, a fresh process per cell; "
        f"{args.tokens:,} IMDb tokens (first batch {args.first:,}); {args.rounds} interleaved rounds, "
        f"median (min-max)"
    )
    print("load average before/after each round: " + " | ".join(loads))
    print(table(rows))


if __name__ == "__main__":
    main()
