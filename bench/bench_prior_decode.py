"""Decode speed: nearest neighbour vs the posterior mode of a public prior (issue 44), same noisy rows.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_prior_decode.py [--vocab 5000 50000]

For each vocabulary size: madlib at epsilon 5, the noisy vectors of IMDb training tokens
decoded by the exact nearest-neighbour index (``index="exact"``, the full scan the posterior
decode is compared with) and by ``prior="zipf"`` (the exact posterior mode: the same GEMM plus
a square root and one bias vector); brr (256-bit SimHash codes, epsilon 1): faiss's exact
Hamming search vs the posterior GEMM. Interleaved rounds (A B A B) at one BLAS / faiss thread and
one decode worker for both (``deniable._threads.set_decode_workers(1)``: the exact index would
otherwise split its batch over two threads while being compared per thread); tokens per second
(wall) and tokens per CPU-second of the decoding thread (``time.thread_time``: what a shared
machine disturbs least), median (min-max), the ratios of medians, and the load average.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_prior_decode.py --unchanged

The share of tokens released unchanged (issue 44's table): IMDb training tokens (in the
vocabulary), the 5,000-word GloVe vocabulary, madlib at epsilon 5 and 10, the same noisy
vectors decoded with ``prior="uniform"`` (nearest), ``"zipf"`` and ``"counts:"`` IMDb's *test*
reviews (written to a temporary text file), with a 95% interval over tokens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import corpus_ids, load_average, pin_threads, summarise, table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, nargs="+", default=[5000, 50000])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--skip-brr", action="store_true")
    ap.add_argument("--unchanged", action="store_true", help="the unchanged-share table instead of speed")
    ap.add_argument("--unchanged-tokens", type=int, default=200_000)
    args = ap.parse_args()
    if args.unchanged:
        unchanged(args.unchanged_tokens)
        return

    from deniable import _threads, load_embedding
    from deniable.mechanisms import make_mechanism

    _limiter = pin_threads(1)
    _threads.set_decode_workers(1)
    rows = []
    for v in args.vocab:
        emb = load_embedding(vocab_size=v)
        ids, source = corpus_ids(emb, args.tokens)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            near = make_mechanism("madlib", emb, 5.0, index="exact").prepare()
            post = make_mechanism("madlib", emb, 5.0, index="exact", prior="zipf").prepare()
        noisy = near.noise(ids.size, np.random.default_rng(0)) + emb.vectors[ids]
        same = float(np.mean(near._decode_noisy(noisy) == post._decode_noisy(noisy)))
        contenders = {
            "nearest": lambda n=near, x=noisy: int(n._decode_noisy(x).size),
            "posterior": lambda p=post, x=noisy: int(p._decode_noisy(x).size),
        }
        rates, cpu = _rounds(contenders, args.rounds)
        ratio = statistics.median(rates["posterior"]) / statistics.median(rates["nearest"])
        cpu_ratio = statistics.median(cpu["posterior"]) / statistics.median(cpu["nearest"])
        rows.append(
            {
                "mechanism": "madlib eps 5",
                "vocab": v,
                "dim": emb.dim,
                "nearest tok/s": summarise(rates["nearest"]),
                "posterior(zipf) tok/s": summarise(rates["posterior"]),
                "ratio": f"{ratio:.2f}x",
                "nearest tok/CPU-s": summarise(cpu["nearest"]),
                "posterior tok/CPU-s": summarise(cpu["posterior"]),
                "CPU ratio": f"{cpu_ratio:.2f}x",
                "same word": f"{same:.1%}",
            }
        )
        if args.skip_brr:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bn = make_mechanism("brr", emb, 1.0, bits=256, binarizer="simhash", show_progress=False).prepare()
            bp = make_mechanism("brr", emb, 1.0, bits=256, binarizer="simhash", prior="zipf", show_progress=False)
            bp.prepare()
            _ = bp.posterior
        codes = bn.noisy_codes(ids, np.random.default_rng(0))
        draws = np.random.default_rng(1).random((ids.size, 3))
        contenders = {
            "nearest": lambda m=bn, c=codes, u=draws: int(m.decode_codes(c, u).size),
            "posterior": lambda m=bp, c=codes, u=draws: int(m.decode_codes(c, u).size),
        }
        rates, cpu = _rounds(contenders, args.rounds)
        ratio = statistics.median(rates["posterior"]) / statistics.median(rates["nearest"])
        cpu_ratio = statistics.median(cpu["posterior"]) / statistics.median(cpu["nearest"])
        rows.append(
            {
                "mechanism": "brr eps 1 (256 bits)",
                "vocab": v,
                "dim": 256,
                "nearest tok/s": summarise(rates["nearest"]),
                "posterior(zipf) tok/s": summarise(rates["posterior"]),
                "ratio": f"{ratio:.2f}x",
                "nearest tok/CPU-s": summarise(cpu["nearest"]),
                "posterior tok/CPU-s": summarise(cpu["posterior"]),
                "CPU ratio": f"{cpu_ratio:.2f}x",
                "same word": "",
            }
        )
    print(f"{args.tokens:,} {source}; {args.rounds} interleaved rounds; 1 thread; load {load_average()}")
    print(table(rows))


def _rounds(
    contenders: dict[str, Callable[[], int]], rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Interleaved rounds (A B A B ...): items per wall second and per CPU-second of this thread."""
    wall: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    for fn in contenders.values():
        fn()  # warm: built decoders, caches
    for _ in range(rounds):
        for name, fn in contenders.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            n = fn()
            c1, t1 = time.thread_time(), time.perf_counter()
            wall[name].append(n / (t1 - t0))
            cpu[name].append(n / max(c1 - c0, 1e-9))
    return wall, cpu


def unchanged(n_tokens: int) -> None:
    import tempfile

    from _common import imdb_texts
    from deniable import load_embedding
    from deniable.mechanisms import make_mechanism

    emb = load_embedding(vocab_size=5000)
    ids, source = corpus_ids(emb, n_tokens)
    test = imdb_texts(10**9, split="test")
    assert test is not None, "needs /work/shared/data/imdb"
    with tempfile.TemporaryDirectory() as tmp:
        counts = Path(tmp) / "imdb_test.txt"
        counts.write_text("\n".join(t.replace("\n", " ") for t in test) + "\n", encoding="utf-8")
        rows = []
        for eps in (5.0, 10.0):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mechs = {p: make_mechanism("madlib", emb, eps, index="exact", prior=p) for p in ("uniform", "zipf")}
                mechs["counts(IMDb test)"] = make_mechanism("madlib", emb, eps, index="exact", prior=f"counts:{counts}")
            noisy = mechs["uniform"].noise(ids.size, np.random.default_rng(44)) + emb.vectors[ids]
            row: dict[str, object] = {"epsilon": f"{eps:g}"}
            for name, m in mechs.items():
                same = m._decode_noisy(noisy) == ids
                p = float(same.mean())
                half = 1.96 * (p * (1 - p) / same.size) ** 0.5
                row[name if name != "uniform" else "nearest (uniform)"] = f"{p:.1%} ± {half:.1%}"
            rows.append(row)
    print(f"unchanged share: {ids.size:,} {source}, GloVe 6B 50d top 5,000 words, madlib, exact decode")
    print(table(rows))


if __name__ == "__main__":
    main()
