"""Benchmark: the truncated exponential mechanism (TEM) on GloVe 6B 50-d.

For each vocabulary size and epsilon (gamma from Theorem 3, beta = 1e-3), on IMDb
training tokens: the first run (tables built lazily for the distinct words, in memory:
build time included), a second run in the same process (tables in memory); the share of
distinct words with a ball table and with (only) a k-NN table, |L_w| over 100 of the
distinct words (exact, from ``compact_distribution``), what privatizing wrote to the
cache (must be 0 MB), and peak memory. Then a realistic corpus run: IMDb reviews through
the Privatizer in batches, from an empty cache.
Usage:

    python bench/bench_tem.py [--tokens 20000] [--epsilons 1,5,10,20] [--vocab 400000,50000]
                              [--reviews 2000] [--corpus-epsilons 10] [--metric euclidean]
                              [--precompute 50000 --precompute-epsilons 10,20 --big-tokens 1000000]

``--precompute V`` / ``--knn-all V`` add the prepared set-up: the k-NN tables of ALL V
most frequent words built once (``deniable.prepare``, module ``deniable.preparation``), then the throughput of a fresh
mechanism (and of a history-free one) reading them, on a big batch of IMDb tokens
(restricted to that vocabulary).

No column here compares with MLDP: a ratio to a peer must measure the peer in the same run
(``bench/bench_tem_warm.py`` runs MLDP's TEM beside deniable's, round by round). The
"x MLDP (4/s)" columns of earlier docs divided by a constant and are no longer produced.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import corpus_ids, imdb_texts, peak_rss_mb, table


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed(fn):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    res = fn()
    return res, time.perf_counter() - t0


def privatize_seconds(mech, ids: np.ndarray) -> float:  # type: ignore[no-untyped-def]
    """Seconds of one ``mech.privatize(ids)`` with a fresh secure generator."""
    import deniable

    return float(timed(lambda: mech.privatize(ids, deniable.secure_generator()))[1])


def fresh_run_columns(fresh, ids: np.ndarray, first: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Tokens per second of a fresh mechanism over ``ids``: its first run (column ``first``), then warm."""
    t_first = privatize_seconds(fresh, ids)
    t_again = privatize_seconds(fresh, ids)
    return {"tokens": len(ids), first: len(ids) / t_first, "tok/s (warm)": len(ids) / t_again}


@contextlib.contextmanager
def fresh_cache() -> Iterator[str]:
    """An empty temporary DENIABLE_CACHE folder for the block (its size is what privatizing wrote)."""
    with tempfile.TemporaryDirectory(prefix="tem-bench-") as cache:
        os.environ["DENIABLE_CACHE"] = cache
        yield cache


def add_row(rows: list[dict[str, object]], row: dict[str, object]) -> None:
    """Append ``row`` and print it at once (long runs show progress)."""
    rows.append(row)
    print(table(rows[-1:]), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--epsilons", default="1,5,10,20")
    ap.add_argument("--vocab", default="400000,50000")
    ap.add_argument("--reviews", type=int, default=2000, help="IMDb reviews for the corpus run (0: skip)")
    ap.add_argument("--corpus-epsilons", default="10")
    ap.add_argument("--metric", default="euclidean")
    ap.add_argument("--precompute", type=int, default=0, help="vocabulary size for the full pre-computation (0: skip)")
    ap.add_argument("--precompute-epsilons", default="10,20")
    ap.add_argument("--big-tokens", type=int, default=1000000)
    ap.add_argument("--skip-main", action="store_true", help="only the --precompute / --knn-all sections")
    ap.add_argument("--knn-all", type=int, default=0, help="V: pre-compute its k-NN tables, then --epsilons")
    args = ap.parse_args()
    if args.skip_main:
        args.vocab, args.reviews = "", 0

    import deniable
    from deniable.mechanisms.tem import TruncatedExponential

    full = deniable.load_embedding()
    rows = []
    for vocab in [int(v) for v in args.vocab.split(",") if v]:
        emb = full.subset(vocab)
        ids, source = corpus_ids(emb, args.tokens)
        distinct = np.unique(ids)
        for eps in [float(e) for e in args.epsilons.split(",")]:
            with fresh_cache() as cache:
                mech = TruncatedExponential(emb, eps, metric=args.metric)
                t_first = privatize_seconds(mech, ids)
                t_second = privatize_seconds(mech, ids)
                tables = mech._store.get_many(distinct)  # type: ignore[attr-defined]
                n_tab = sum(t is not None for t in tables)
                knns = mech._knn.get_many(distinct)  # type: ignore[attr-defined]
                n_knn = sum(e is not None and t is None for e, t in zip(knns, tables, strict=True))
                sample = np.random.default_rng(0).choice(distinct, min(100, distinct.size), replace=False)
                balls = [mech.compact_distribution(int(w)).ids.size for w in sample]
                add_row(
                    rows,
                    {
                        "V": emb.size,
                        "eps": eps,
                        "gamma": float(mech.gamma),  # type: ignore[arg-type]
                        "distinct": int(distinct.size),
                        "ball table %": 100.0 * n_tab / distinct.size,
                        "k-NN table %": 100.0 * n_knn / distinct.size,
                        "size of L_w, median (100 words)": float(np.median(balls)),
                        "size of L_w, mean": float(np.mean(balls)),
                        "1st run tok/s (build incl.)": len(ids) / t_first,
                        "build s": t_first,
                        "2nd run tok/s": len(ids) / t_second,
                        "written MB": dir_size(Path(cache)) / 2**20,
                        "peak RSS MB": peak_rss_mb(),
                    },
                )
    if rows:
        print(f"\nGloVe 6B 50-d; {args.tokens:,} tokens ({source}); metric {args.metric}; gamma from beta=1e-3")
        print(table(rows))
    for vocab, section in ((args.precompute, precompute_section), (args.knn_all, knn_section)):
        if vocab:  # the first V words and a large corpus in them
            emb = full.subset(vocab)
            section(args, emb, *corpus_ids(emb, args.big_tokens))

    if args.reviews:
        texts = imdb_texts(args.reviews)
        if texts is None:
            print("IMDb data not found: corpus run skipped")
            return
        crow = []
        for eps in [float(e) for e in args.corpus_epsilons.split(",")]:
            with fresh_cache() as cache:
                mech = TruncatedExponential(full, eps, metric=args.metric)
                priv = deniable.Privatizer(mech)
                t0 = time.perf_counter()
                tokens = 0
                for s in range(0, len(texts), 1000):
                    _, st = priv.privatize_batch_with_stats(texts[s : s + 1000], deniable.secure_generator())
                    tokens += st.tokens - st.oov
                dt = time.perf_counter() - t0
                add_row(
                    crow,
                    {
                        "eps": eps,
                        "reviews": len(texts),
                        "in-vocab tokens": tokens,
                        "seconds (build incl.)": dt,
                        "tok/s": tokens / dt,
                        "written MB": dir_size(Path(cache)) / 2**20,
                        "peak RSS MB": peak_rss_mb(),
                    },
                )
        print(f"\nIMDb train, first {len(texts):,} reviews, Privatizer batches of 1000 texts, V={full.size:,}")
        print(table(crow))


def precompute_section(args: argparse.Namespace, emb: Any, ids: np.ndarray, source: str) -> None:
    from deniable.mechanisms.tem import TruncatedExponential

    prow = []
    for eps in [float(e) for e in args.precompute_epsilons.split(",")]:
        with fresh_cache() as cache:
            mech = TruncatedExponential(emb, eps, metric=args.metric)
            stats, t_build = timed(mech.precompute)
            fresh = TruncatedExponential(emb, eps, metric=args.metric)  # a new process would see this
            sampling = fresh_run_columns(fresh, ids, "tok/s (fresh, prepared)")
            hf = TruncatedExponential(emb, eps, metric=args.metric, history_free=True)
            hf.cache_info()  # read the prepared tables into memory (not timed)
            t_hf = privatize_seconds(hf, ids)
            add_row(
                prow,
                {
                    "V": emb.size,
                    "eps": eps,
                    "gamma": float(mech.gamma),  # type: ignore[arg-type]
                    "build s": t_build,
                    "k-NN tables": int(stats["built"]),
                    "disk MB": dir_size(Path(cache)) / 2**20,
                    **sampling,
                    "tok/s (history-free)": len(ids) / t_hf,
                    "peak RSS MB": peak_rss_mb(),
                },
            )
    print(f"\nPrepared k-NN tables, V={emb.size:,}; sampling {len(ids):,} tokens ({source})")
    print(table(prow))


def knn_section(args: argparse.Namespace, emb: Any, ids: np.ndarray, source: str) -> None:
    """One pre-computation of the k-NN tables (they do not depend on eps), then every eps from them."""
    from deniable.mechanisms.tem import TruncatedExponential

    epsilons = [float(e) for e in args.epsilons.split(",")]
    krow = []
    with fresh_cache() as cache:
        builder = TruncatedExponential(emb, 2.0, metric=args.metric)
        _, t_build = timed(builder.precompute)
        size = dir_size(Path(cache)) / 2**20
        print(f"k-NN tables for {emb.size:,} words: {t_build:.0f} s, {size:.0f} MB, peak RSS {peak_rss_mb():.0f} MB")
        for eps in epsilons:
            sampling = fresh_run_columns(TruncatedExponential(emb, eps, metric=args.metric), ids, "tok/s (from disk)")
            add_row(
                krow,
                {
                    "V": emb.size,
                    "eps": eps,
                    "k-NN build s (once)": t_build,
                    "disk MB": size,
                    **sampling,
                    "peak RSS MB": peak_rss_mb(),
                },
            )
    print(f"\nk-NN tables pre-computed once, V={emb.size:,}; sampling {len(ids):,} tokens ({source})")
    print(table(krow))


if __name__ == "__main__":
    main()
