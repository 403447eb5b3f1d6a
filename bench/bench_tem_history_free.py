"""Benchmark: history-free TEM (the data-oblivious sampler) against the default TEM sampler, same run.

Issue 43's target: history-free >= 0.5x the default sampler's tokens/s at eps 1-5. For each
epsilon, on a GloVe slice (``--vocab``) with its prepared tables (``deniable prepare -m tem
-e EPS``: built first into ``$DENIABLE_CACHE`` when missing, not timed), IMDb tokens restricted
to that vocabulary; both samplers open their tables before timing (start-up excluded); rounds
interleaved (default, history-free, default, ...); one BLAS / faiss thread; tokens per second
as median (min-max) and the ratio of the medians, with the load average before and after.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_tem_history_free.py \
        [--vocab 50000] [--epsilons 1,2,3,5] [--tokens 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import corpus_ids, interleaved_rounds, load_average, pin_threads, summarise, table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=50000)
    ap.add_argument("--epsilons", default="1,2,3,5")
    ap.add_argument("--tokens", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    import deniable
    from deniable.mechanisms.tem import TruncatedExponential

    emb = deniable.load_embedding().subset(args.vocab)
    ids, source = corpus_ids(emb, args.tokens)
    pin_threads(1)
    print(f"V={emb.size:,}; {ids.size:,} tokens ({source}); load before: {load_average()}", flush=True)
    rows = []
    for eps in [float(e) for e in args.epsilons.split(",")]:
        deniable.prepare(emb, ["tem"], options={"epsilon": eps})  # the prepared tables at eps (not timed)
        mechs = {
            "default": TruncatedExponential(emb, eps),
            "history-free": TruncatedExponential(emb, eps, history_free=True),
        }
        for m in mechs.values():
            m.cache_info()
            m.privatize(ids[:2048], deniable.secure_generator())  # open and warm (start-up excluded)

        def run(m: TruncatedExponential) -> Callable[[], int]:
            return lambda: int(m.privatize(ids, deniable.secure_generator()).size)

        rates = interleaved_rounds({k: run(m) for k, m in mechs.items()}, args.rounds)
        d, h = rates["default"], rates["history-free"]
        rows.append(
            {
                "eps": eps,
                "default tok/s": summarise(d),
                "history-free tok/s": summarise(h),
                "ratio (medians)": f"{statistics.median(h) / statistics.median(d):.2f}",
            }
        )
        print(table(rows[-1:]), flush=True)
    print(f"\nload after: {load_average()}")
    print(table(rows))


if __name__ == "__main__":
    main()
