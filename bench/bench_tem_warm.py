"""Benchmark: TEM after ``deniable prepare``, per thread, from a fresh process, beside its
limit and MLDP in the same run, on an idle and on a busy machine.

Issue 32's yardstick (the *limit*): a plain numpy sampler that draws by inverse CDF from
per-word distributions of the same support as TEM's prepared tables -- for EVERY word of
the vocabulary a cumulative table of 257 entries (its k = 256 nearest words at weight
``exp(-eps/2 min(d, gamma))``, then the outside mass ``(V - k) exp(-eps/2 min(d_env,
gamma))``), built in the child from the same memory-mapped k-NN tables TEM reads -- vectorized
over the batch: per token one uniform from the same CSPRNG (``deniable.secure_generator``),
its word's row found in the (V, 257) float64 table, the entry by inverse CDF, and the word
of that entry (the outside entry gives -1: the limit does not draw an outside word, TEM
does). Two plain forms are timed, each drawing the rest of the tokens again and again for
at least a second: "row scan", the issue's own form (the token's whole row gathered and its
entries <= u counted, 2,048 tokens at a time: 257 reads per token; 1.1-2.4M tok/s idle
here, where the issue's limit ran at 1.7-2.1M), and "binary search" (9 gathers per token: the same draws with less
memory traffic, a stricter bound). Both run in the same process right after TEM, on the same
tokens, so ``TEM / limit`` holds across loads.

Each cell runs in a NEW Python process (so nothing is warm but the page cache, exactly what
a new ``deniable privatize`` or a service worker sees), pinned to one thread (faiss, BLAS):
it opens the default embedding and the prepared tables (memory-mapped; "start-up s", which
the other figures EXCLUDE), privatizes the first batch of IMDb training tokens, then the rest,
then times the limit on the rest, then privatizes the rest again (what a warm process gets;
not in history-free mode, which keeps nothing between calls).
The first batch is 10,000 tokens by default (a small call); ``--first 242000`` is the first
batch of ``deniable privatize`` on IMDb (its default ``--batch-size`` of 1,000 reviews).

``--busy`` adds, per epsilon and round, the same cell while 2 spinning processes (started by
this benchmark, ended by their pid after the cell) keep both cores busy: TEM and its limit
then share the cores and the caches with another process, the way they run beside Spark
workers or a busy service. Idle and busy cells are interleaved in the same rounds.

MLDP's TEM (``mldp-text``, the best public implementation) runs right after each epsilon's
cells, in its own fresh process of the Python given by ``--mldp-python`` (an environment
with ``mldp-text``; it pins numpy 1.x, so it does not import deniable: this process writes
the vocabulary, its vectors and the first tokens' words to a temporary folder, and the
child reads them). Its start-up (imports, building its gensim index) is reported apart,
and its rate is the tokens it privatizes in ``--mldp-seconds`` seconds after that start-up
divided by the time they took (at least one token; the IMDb tokens from the first, cycled).

Usage::

    deniable prepare -m tem -e 1,2,3,5,10     # once (a few minutes for the default 336k words)
    python bench/bench_tem_warm.py [--epsilons 1,2,3,5,10] [--tokens 1000000] [--first 10000]
        [--rounds 3] [--modes history-free,prepared,tables] [--busy]
        [--mldp-python /tmp/mldp-venv/bin/python] [--mldp-seconds 20] [--src OLD/src --src src]

Modes per epsilon: "history-free" (the service's data-oblivious sampler, ``history_free=True``,
after ``deniable prepare -m tem -e EPS``: issue 32's target), "prepared" (the default sampler
with the k-NN tables and the envelope totals at that epsilon) and "tables" (the k-NN tables
only: the totals are then memoized per process as words are met).

``--src`` (repeatable) runs every cell once per source folder, put first on the cell's
``PYTHONPATH``, interleaved in the same rounds: another checkout's library against this
one in one run (its tables and MLDP shared), e.g. ``--src /tmp/old/src --src src``.

It refuses to run without the prepared tables (building them inside would time the
build, which ``deniable prepare`` reports itself).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from _common import (  # noqa: E402
    busy_cores,
    corpus_ids,
    load_average,
    mldp_rate,
    peak_rss_mb,
    pin_threads,
    summarise,
    table,
    write_mldp_inputs,
)

MODES = ("history-free", "prepared", "tables")
#: tokens the limit's "search" form draws at a time (TEM's own sampler draws 32,768)
_SEARCH_BLOCK = 1 << 15
#: tokens the limit's "scan" form gathers at a time (2,048 rows of 257 float64: 4 MB)
_SCAN_BLOCK = 1 << 11
#: each form of the limit draws the rest again and again for at least this long (one pass
#: of 50,000 tokens is ~10 ms idle: too short to time beside a busy core's time slices)
_LIMIT_SECONDS = 1.0


# -- the limit ------------------------------------------------------------------------------------


def limit_tables(mech, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """``(cum, words)``: every word's cumulative table over TEM's support at this epsilon.

    ``cum`` (V, k + 1) float64: the k nearest words' weights ``exp(-a min(d, gamma))``
    (a = eps / 2), then the outside mass ``(V - k) exp(-a min(d_env, gamma))``, summed
    along the row; ``words`` (V, k + 1) int64: the words of the entries, -1 for the outside.
    Read from the same prepared k-NN tables TEM maps (public data; not timed). Only the rows
    of the words in ``tokens`` are filled (the others are allocated, never touched: the draws
    read the same addresses as with every row filled, and the set-up takes seconds less).
    """
    knn = mech._prepared_knn()
    k, a, gamma = knn.k, float(mech._a), float(mech.gamma)
    v = knn.dist.shape[0]
    cum = np.empty((v, k + 1), dtype=np.float64)
    words = np.empty((v, k + 1), dtype=np.int32)
    distinct = np.unique(tokens)
    for s in range(0, distinct.size, 1 << 12):
        w = distinct[s : s + (1 << 12)]
        weights = np.exp(-a * np.minimum(np.asarray(knn.dist[w, : k + 1], dtype=np.float64), gamma))
        weights[:, k] *= v - k
        cum[w] = np.cumsum(weights, axis=1)
        words[w, :k] = knn.ids[w, :k]
        words[w, k] = -1
    return cum, words


def limit_search(cum: np.ndarray, words: np.ndarray, tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The limit, "search" form: per token a uniform and a vectorized binary search in its word's row."""
    width = cum.shape[1]
    flat, wflat = cum.reshape(-1), words.reshape(-1)
    out = np.empty(tokens.size, dtype=np.int64)
    top = 1 << ((width - 1).bit_length() - 1)
    n = min(tokens.size, _SEARCH_BLOCK)
    cand, vals, le = np.empty(n, dtype=np.int64), np.empty(n), np.empty(n, dtype=bool)
    for s in range(0, tokens.size, _SEARCH_BLOCK):
        base = tokens[s : s + _SEARCH_BLOCK] * width
        m = base.size
        last = base + (width - 1)
        u = rng.random(m) * np.take(flat, last)
        idx = base - 1  # the flat index of the last entry <= u (base - 1: none)
        step = top
        while step:
            np.add(idx, step, out=cand[:m])
            np.minimum(cand[:m], last, out=cand[:m])
            np.take(flat, cand[:m], out=vals[:m])
            np.less_equal(vals[:m], u, out=le[:m])
            np.copyto(idx, cand[:m], where=le[:m])
            step >>= 1
        np.minimum(idx + 1, last, out=idx)  # the first entry > u: the draw
        out[s : s + m] = np.take(wflat, idx)
    return out


def limit_scan(cum: np.ndarray, words: np.ndarray, tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The limit, "scan" form: per token a uniform, its word's whole row gathered, the entries <= u counted."""
    width = cum.shape[1]
    out = np.empty(tokens.size, dtype=np.int64)
    for s in range(0, tokens.size, _SCAN_BLOCK):
        w = tokens[s : s + _SCAN_BLOCK]
        rows = np.take(cum, w, axis=0)
        u = rng.random(w.size) * rows[:, -1]
        c = np.minimum(np.count_nonzero(rows <= u[:, None], axis=1), width - 1)
        out[s : s + w.size] = words[w, c]
    return out


# -- one deniable cell ----------------------------------------------------------------------------


def child(eps: float, n_tokens: int, first: int, mode: str) -> dict[str, float]:
    """One fresh-process measurement (run with ``--child``): TEM in ``mode``, then its limit."""
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
    mech = TruncatedExponential(emb, eps, history_free=mode == "history-free")
    mech._prepared_knn()  # open (and in history-free mode prefault) the tables: start-up
    rng = deniable.secure_generator()
    t_open = time.perf_counter()
    mech.privatize(ids[:first], rng)
    t1 = time.perf_counter()
    rest = ids[first:]
    mech.privatize(rest, rng)
    t2 = time.perf_counter()
    cum, words = limit_tables(mech, rest)  # not timed: public, built once (a prepared artefact would be)
    times = {}  # seconds per pass over the rest, each form repeated for at least _LIMIT_SECONDS
    for name, fn in (("search", limit_search), ("scan", limit_scan)):
        passes, t = 0, time.perf_counter()
        while not passes or time.perf_counter() - t < _LIMIT_SECONDS:
            fn(cum, words, rest, rng)
            passes += 1
        times[name] = (time.perf_counter() - t) / passes
    t_again = math.nan  # history-free keeps nothing between calls: "again" is "rest" by design
    if mode != "history-free":
        t3 = time.perf_counter()
        mech.privatize(rest, rng)  # the same tokens again: what a warm process gets
        t_again = time.perf_counter() - t3
    del limiter
    best = min(times, key=times.__getitem__)
    return {
        "start-up s": t_open - t_start,
        "first batch tok/s": first / (t1 - t_open),
        "rest tok/s": rest.size / (t2 - t1),
        "again tok/s": rest.size / t_again,
        "limit tok/s": rest.size / times[best],
        "limit search tok/s": rest.size / times["search"],
        "limit scan tok/s": rest.size / times["scan"],
        "peak RSS MB": peak_rss_mb(),
    }


# -- the run --------------------------------------------------------------------------------------


def run_cell(eps: float, mode: str, args: argparse.Namespace, src: str = "") -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", str(eps), "--mode", mode]
    cmd += ["--tokens", str(args.tokens), "--first", str(args.first)]
    env = dict(os.environ)
    if src:  # another checkout's library (A/B): first on the child's path
        env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), env.get("PYTHONPATH", "")])
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    if done.returncode:  # the child's own error, not only its exit status
        raise SystemExit(f"cell {eps:g} {mode} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epsilons", default="1,2,3,5,10")
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--first", type=int, default=10_000, help="tokens in the first batch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="history-free", help="history-free, prepared and/or tables")
    ap.add_argument("--busy", action="store_true", help="also each cell beside 2 spinning processes")
    ap.add_argument("--mode", default="prepared", help=argparse.SUPPRESS)
    ap.add_argument("--mldp-python", default="", help="a Python with mldp-text (empty: skip MLDP)")
    ap.add_argument("--mldp-seconds", type=float, default=20.0, help="MLDP's seconds per round after start-up")
    ap.add_argument("--mldp-timeout", type=float, default=180.0, help="wall limit of one MLDP child")
    ap.add_argument("--mldp-tokens", type=int, default=5000, help="IMDb tokens handed to MLDP (cycled)")
    ap.add_argument(
        "--src", action="append", help="source folder(s) put first on the cells' PYTHONPATH (A/B, interleaved)"
    )
    ap.add_argument("--child", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.tokens, args.first, args.mode)))
        return
    epsilons = [float(e) for e in args.epsilons.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - set(MODES):
        ap.error(f"--modes: some of {', '.join(MODES)}, not {args.modes!r}")
    loads_of = ("idle", "busy") if args.busy else ("idle",)
    cells = [(e, m, b, s) for e in epsilons for m in modes for b in loads_of for s in args.src or [""]]
    runs: dict[tuple[float, str, str, str], list[dict[str, float]]] = {c: [] for c in cells}
    mldp: dict[float, list[dict[str, float]]] = {e: [] for e in epsilons}
    loads = [load_average()]
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-tem-mldp-")))
        if args.mldp_python:
            import deniable

            emb = deniable.load_embedding()
            write_mldp_inputs(folder, emb, corpus_ids(emb, args.mldp_tokens)[0])
            del emb
        for _ in range(args.rounds):
            for eps in epsilons:
                for cell in [c for c in cells if c[0] == eps]:
                    with busy_cores(2) if cell[2] == "busy" else contextlib.nullcontext():
                        runs[cell].append(run_cell(eps, cell[1], args, cell[3]))
                    print(cell, {k: f"{v:.4g}" for k, v in runs[cell][-1].items()}, file=sys.stderr, flush=True)
                if args.mldp_python:
                    mldp[eps].append(
                        mldp_rate(args.mldp_python, "TEM", eps, folder, args.mldp_seconds, args.mldp_timeout)
                    )
                    print(eps, mldp[eps][-1], file=sys.stderr, flush=True)
            loads.append(load_average())
    report(cells, runs, mldp, args, loads)


def report(
    cells: list[tuple[float, str, str, str]],
    runs: dict[tuple[float, str, str, str], list[dict[str, float]]],
    mldp: dict[float, list[dict[str, float]]],
    args: argparse.Namespace,
    loads: list[str],
) -> None:
    """Print the table: per cell, TEM beside both forms of its limit and MLDP, median (min-max) over the rounds."""
    rows = []
    for eps, mode, busy, src in cells:
        rs = runs[(eps, mode, busy, src)]
        ms = mldp[eps] if busy == "idle" else []
        rows.append(
            {
                "eps": eps,
                "mode": mode,
                **({"src": src} if args.src else {}),
                "cores": "idle" if busy == "idle" else "busy (2 spinners)",
                "first batch tok/s *": summarise([r["first batch tok/s"] for r in rs]),
                "rest tok/s *": summarise([r["rest tok/s"] for r in rs]),
                "limit, row scan (the issue's form) *": summarise([r["limit scan tok/s"] for r in rs]),
                "TEM / limit (scan)": summarise([r["rest tok/s"] / r["limit scan tok/s"] for r in rs]),
                "limit, binary search *": summarise([r["limit search tok/s"] for r in rs]),
                "TEM / limit (search)": summarise([r["rest tok/s"] / r["limit search tok/s"] for r in rs]),
                "again tok/s *": "-" if mode == "history-free" else summarise([r["again tok/s"] for r in rs]),
                "MLDP tok/s *": summarise([m["MLDP tok/s"] for m in ms]) if ms else "-",
                "MLDP tokens": summarise([m["MLDP tokens"] for m in ms]) if ms else "-",
                "x MLDP": summarise([r["rest tok/s"] / m["MLDP tok/s"] for r, m in zip(rs, ms, strict=True)])
                if ms
                else "-",
                "start-up s": summarise([r["start-up s"] for r in rs]),
                "MLDP start-up s": summarise([m["MLDP start-up s"] for m in ms]) if ms else "-",
                "peak RSS MB": summarise([r["peak RSS MB"] for r in rs]),
            }
        )
    print(
        f"TEM from the prepared tables, default embedding, 1 thread, a fresh process per cell; "
        f"{args.tokens:,} IMDb tokens (first batch {args.first:,}, rest {args.tokens - args.first:,}); "
        f"{args.rounds} interleaved rounds, median (min-max); MLDP {args.mldp_seconds:g} s per round"
    )
    print("* excludes start-up (imports, loading the embedding, opening and verifying the prepared tables;")
    print("  MLDP: imports and its gensim index), reported in its own columns")
    print("load average before/after each round: " + " | ".join(loads))
    print(table(rows))


if __name__ == "__main__":
    main()
