"""Benchmark: history-free TEM (the data-oblivious sampler) against the default TEM sampler, same run.

Issue 43's target: history-free >= 0.5x the default sampler's tokens/s at eps 1-5. For each
epsilon, on a GloVe slice (``--vocab``) with its prepared tables (``deniable prepare -m tem
-e EPS``: built first into ``$DENIABLE_CACHE`` when missing, not timed), IMDb tokens restricted
to that vocabulary; both samplers open their tables before timing (start-up excluded); rounds
interleaved (default, history-free, default, ...); one BLAS / faiss thread; tokens per second
as median (min-max) and the ratio of the medians, with the load average before and after.

``--costliest``: also both samplers on as many tokens drawn uniformly from the 5% of the
vocabulary with the most estimated proposals per token (the words the history-free budget is
planned for; public, from the k-NN tables): the history-free rate should not move (its work
does not depend on the words), the default's shows what the data-dependent sampler pays on
such input. ``--cpu``: rates per CPU-second of this process (``time.process_time``) instead of
per wall-clock second, for a machine whose cores are shared. ``--phases``: where the
history-free sampler's microseconds a token go (one extra call per epsilon, not in the rates):
the chunks' k-NN rows, their envelopes (E's weights, with the far bounds the far layouts), the
proposals of the budget, and the rest.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_tem_history_free.py \
        [--vocab 50000] [--epsilons 1,2,3,5] [--tokens 200000] [--rounds 5] [--costliest] [--cpu] [--phases]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import corpus_ids, interleaved_rounds, load_average, pin_threads, summarise, table  # noqa: E402


def _costliest(mech: Any, n_tokens: int) -> np.ndarray:
    """``n_tokens`` ids drawn uniformly (fixed seed) from the 5% of words with the most estimated proposals a token."""
    from deniable.mechanisms.tem import _oblivious as oblivious

    far = oblivious.oblivious_plan(mech)[1]
    knn = mech._prepared_knn()
    v = mech.embedding.size
    est = np.empty(v)
    for s in range(0, v, 2048):
        words = np.arange(s, min(s + 2048, v))
        est[words] = oblivious._envelopes(mech, knn.rows(words), words, far).est
    est[~np.isfinite(est)] = 0.0
    top = np.argsort(est, kind="stable")[-max(1, v // 20) :]
    return np.random.default_rng(0).choice(top, n_tokens)


def _phases(mech: Any, ids: np.ndarray) -> dict[str, float]:
    """Microseconds a token of one history-free call in: rows, envelopes, proposals, the rest (wall clock)."""
    import deniable
    from deniable.mechanisms.tem import _oblivious as oblivious

    spent = {"rows": 0.0, "envelopes": 0.0, "proposals": 0.0}
    originals = {
        "rows": (oblivious, "_gather_rows"),
        "envelopes": (oblivious, "_envelopes"),
        "proposals": (oblivious._Chunk, "first_accepted"),
    }

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t0

        return wrapper

    saved = {name: getattr(owner, attr) for name, (owner, attr) in originals.items()}
    try:
        for name, (owner, attr) in originals.items():
            setattr(owner, attr, timed(name, saved[name]))
        t0 = time.perf_counter()
        mech.privatize(ids, deniable.secure_generator())
        total = time.perf_counter() - t0
    finally:
        for name, (owner, attr) in originals.items():
            setattr(owner, attr, saved[name])
    out = {k: 1e6 * v / ids.size for k, v in spent.items()}
    out["rest"] = 1e6 * total / ids.size - sum(out.values())
    out["total"] = 1e6 * total / ids.size
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=50000)
    ap.add_argument("--epsilons", default="1,2,3,5")
    ap.add_argument("--tokens", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--costliest", action="store_true", help="also time tokens of the costliest 5%% of words")
    ap.add_argument("--cpu", action="store_true", help="rates per CPU-second of this process, not per wall second")
    ap.add_argument("--phases", action="store_true", help="also print where history-free's us a token go")
    args = ap.parse_args()

    import deniable
    from deniable.mechanisms.tem import TruncatedExponential
    from deniable.mechanisms.tem import _oblivious as oblivious

    emb = deniable.load_embedding().subset(args.vocab)
    ids, source = corpus_ids(emb, args.tokens)
    pin_threads(1)
    clock = time.process_time if args.cpu else time.perf_counter
    unit = "tok/CPU-s" if args.cpu else "tok/s"
    print(f"V={emb.size:,}; {ids.size:,} tokens ({source}); load before: {load_average()}", flush=True)
    rows, phases = [], []
    for eps in [float(e) for e in args.epsilons.split(",")]:
        deniable.prepare(emb, ["tem"], options={"epsilon": eps})  # the prepared tables at eps (not timed)
        mechs = {
            "default": TruncatedExponential(emb, eps),
            "history-free": TruncatedExponential(emb, eps, history_free=True),
        }
        for m in mechs.values():
            m.cache_info()
            m.privatize(ids[:2048], deniable.secure_generator())  # open and warm (start-up excluded)
        inputs = {"": ids}
        if args.costliest:
            inputs[" (costliest)"] = _costliest(mechs["history-free"], ids.size)

        def run(m: TruncatedExponential, tokens: np.ndarray) -> Callable[[], int]:
            return lambda: int(m.privatize(tokens, deniable.secure_generator()).size)

        rates = interleaved_rounds(
            {f"{k}{tag}": run(m, tokens) for tag, tokens in inputs.items() for k, m in mechs.items()},
            args.rounds,
            clock,
        )
        plan = oblivious.oblivious_plan(mechs["history-free"])
        row: dict[str, object] = {"eps": eps, "plan (R, far)": f"{plan[0]}, {'far' if plan[1] else 'plain'}"}
        for tag in inputs:
            d, h = rates[f"default{tag}"], rates[f"history-free{tag}"]
            row[f"default {unit}{tag}"] = summarise(d)
            row[f"history-free {unit}{tag}"] = summarise(h)
            row[f"ratio (medians){tag}"] = f"{statistics.median(h) / statistics.median(d):.2f}"
        rows.append(row)
        print(table(rows[-1:]), flush=True)
        if args.phases:
            got = _phases(mechs["history-free"], ids)
            phases.append({"eps": eps, **{f"{k} (us/token)": f"{v:.2f}" for k, v in got.items()}})
    print(f"\nload after: {load_average()}")
    print(table(rows))
    if phases:
        print("\nhistory-free, where the time goes (one call, wall clock):")
        print(table(phases))


if __name__ == "__main__":
    main()
