"""Benchmark: how close can ANY exact TEM sampler come to issue 32's limit? A measured ceiling.

Issue 32's limit (``bench_tem_warm.py``, forms "row scan" and "binary search") draws from
each word's table of 257 entries: its k = 256 nearest words, then ONE entry for the outside
mass ``(V - k) exp(-a min(d_env, gamma))``. When the outside entry is drawn it returns -1:
it never chooses the outside word. TEM must choose it, with its exact probability, among the
other V - 256 words. This script measures, in one run, what that costs at the least:

1. **Where the mass is** (exact, float64, over every one of the V words, on a token-weighted
   sample of IMDb training tokens): ``q`` = the share of TEM's probability outside the
   table's k words (how often an exact draw lands outside), and ``c`` = the table's total
   over TEM's true total (the expected rounds of rejection sampling with the table itself as
   the envelope: the limit's draw is then exactly one round's proposal), and the same for
   TEM's own envelope (the prepared totals at that epsilon).
2. **What one step costs** (one thread, the same tokens and CSPRNG, interleaved rounds, the
   limit's tables built as ``bench_tem_warm.py`` builds them): ``t_limit``, the limit's draw a
   token (each of its two forms), and ``t_prop``, the cheapest conceivable step toward
   an outside word: ONE proposal a token -- a uniform word, its vector gathered, the distance
   to the token's vector, the exponential and one uniform for the acceptance. No membership
   test, no envelope layout, no second proposal: cheaper than any real sampler's step.
3. **The ceilings of TEM / limit** these imply, against each form of the limit (the row
   scan is the issue's, the binary search the stricter). An exact sampler with an envelope
   of total ``T >= Z`` (TEM's true total) makes ``c = T / Z`` rounds a token on average; a
   round costs at least one draw from a table (``t_draw``: the cheaper of the limit's two
   forms), and the ``c - 1 + q`` rounds that land outside at least one proposal more:
   ``TEM / limit <= t_limit / (c t_draw + (c - 1 + q) t_prop)``, with the tokens' mean cost
   (the default sampler) or the costliest sampled token's (the history-free sampler, whose
   work may not depend on the words or the draws: every token pays what the costliest word
   needs; the sample's, so an optimistic ceiling). Three envelopes:

   - *perfect* (``c = 1``: every proposal accepted; no sampler has it);
   - *TEM's* (``c`` = the prepared envelope totals at this epsilon over the true totals: the
     far-bound envelope, the tightest TEM has, with its per-token layout taken as free);
   - *plain* (the limit's own table as the envelope).

   A ceiling under 0.6x means issue 32's target cannot be met at that epsilon by any exact
   sampler with that envelope, however its other work is done.

Usage::

    deniable prepare -m tem -e 1,2,3,5,10     # once: the k-NN tables the limit reads
    python bench/bench_tem_floor.py [--epsilons 1,2,3,5,10] [--sample 1500] [--tokens 50000]
        [--rounds 5] [--busy]

``--busy`` also times every step while 2 spinning processes keep both cores busy (the
issue's "busy" case), interleaved with the idle rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

import numpy as np

from _common import busy_cores, corpus_ids, interleaved_rounds, load_average, pin_threads, summarise, table
from bench_tem_warm import limit_scan, limit_search, limit_tables

#: tokens whose exact distances to every word are computed at a time (float64: 50 x V x 8 bytes)
_MASS_BLOCK = 50


def mass(mech, sample: np.ndarray, cum: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """``(q, z)`` of every sampled token: the share of its exact mass outside the table's k words, its true total."""
    emb = mech.embedding
    x = np.asarray(emb.vectors, dtype=np.float64)
    sq = np.einsum("ij,ij->i", x, x)
    a, gamma = float(mech._a), float(mech.gamma)
    k = cum.shape[1] - 1
    q, z = np.empty(sample.size), np.empty(sample.size)
    for s in range(0, sample.size, _MASS_BLOCK):
        w = sample[s : s + _MASS_BLOCK]
        d = np.sqrt(np.maximum(sq[w, None] - 2.0 * (x[w] @ x.T) + sq[None, :], 0.0))
        d[np.arange(w.size), w] = 0.0
        true_total = np.exp(-a * np.minimum(d, gamma)).sum(axis=1)
        q[s : s + w.size] = 1.0 - cum[w, k - 1] / true_total
        z[s : s + w.size] = true_total
    return q, z


def one_proposal(vectors: np.ndarray, tokens: np.ndarray, a: float, rng: np.random.Generator) -> int:
    """The cheapest step toward an outside word, for every token at once; returns the token count."""
    y = rng.integers(0, vectors.shape[0], tokens.size)
    diff = np.take(vectors, tokens, axis=0) - np.take(vectors, y, axis=0)
    d = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    accepted = rng.random(tokens.size) < np.exp(-a * d)
    return int(accepted.size)


def ceiling(c: np.ndarray, q: np.ndarray, t: dict[str, float], worst: bool) -> str:
    """``TEM / limit`` at most, against each form: a token makes ``c`` rounds, ``c - 1 + q`` of them outside.

    ``t``: seconds a token of each form of the limit and of one proposal. A round costs at
    least the cheaper form's draw, an outside one a proposal more; the tokens' mean cost
    (``worst``: the costliest token's, which a history-free sampler pays for every token).
    """
    cost = c * min(t["scan"], t["search"]) + (c - 1.0 + q) * t["proposal"]
    per_token = float(cost.max() if worst else cost.mean())
    return " / ".join(f"{t[form] / per_token:.2f}" for form in ("scan", "search"))


def one_epsilon(  # type: ignore[no-untyped-def]
    mech, tokens: np.ndarray, sample: np.ndarray, vectors: np.ndarray, args: argparse.Namespace
) -> tuple[dict[str, object], list[dict[str, object]]]:
    """The mass row and the timing rows (one per load) of one epsilon."""
    import deniable
    from deniable.mechanisms.tem._totals import token_totals

    eps, rng = float(mech.epsilon), deniable.secure_generator()
    try:
        cum, words = limit_tables(mech, tokens)  # (the sample is drawn from the tokens)
    except Exception as exc:  # noqa: BLE001 - the tables are not prepared: say how
        raise SystemExit(f"eps {eps:g}: {exc}\nrun `deniable prepare -m tem -e {eps:g}` first") from exc
    t0 = time.perf_counter()
    q, z = mass(mech, sample, cum)
    c = cum[sample, -1] / z  # the limit's table as the envelope
    envelope = token_totals(mech, sample)  # TEM's own envelope totals (prepared at this epsilon), or None
    c_tem = np.full(z.size, np.nan) if envelope is None else np.where(envelope > 0, envelope / z, np.nan)
    print(f"eps {eps:g}: exact mass of {sample.size} tokens in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    mass_row: dict[str, object] = {
        "eps": f"{eps:g}",
        "mass outside k = 256: mean": float(q.mean()),
        "median": float(np.median(q)),
        "max": float(q.max()),
        "plain envelope c: mean": float(c.mean()),
        "max of plain c": float(c.max()),
        "TEM's envelope c: mean": float(np.nanmean(c_tem)),
        "max of TEM's c": float(np.nanmax(c_tem)),
    }
    a = float(mech._a)
    contenders = {
        "scan": lambda: limit_scan(cum, words, tokens, rng).size,
        "search": lambda: limit_search(cum, words, tokens, rng).size,
        "proposal": lambda: one_proposal(vectors, tokens, a, rng),
    }
    rows: list[dict[str, object]] = []
    for load in ("idle", "busy") if args.busy else ("idle",):
        with busy_cores(2) if load == "busy" else contextlib.nullcontext():
            rates = interleaved_rounds(contenders, args.rounds)
        t = {name: 1.0 / float(np.median(rate)) for name, rate in rates.items()}  # seconds a token
        ones, known = np.ones_like(q), ~np.isnan(c_tem)
        rows.append(
            {
                "eps": f"{eps:g}",
                "cores": load,
                "limit, row scan tok/s": summarise(rates["scan"]),
                "limit, binary search tok/s": summarise(rates["search"]),
                "one proposal tok/s": summarise(rates["proposal"]),
                "perfect envelope, default": ceiling(ones, q, t, False),
                "perfect envelope, history-free": ceiling(ones, q, t, True),
                "TEM's envelope, default": ceiling(c_tem[known], q[known], t, False),
                "TEM's envelope, history-free": ceiling(c_tem[known], q[known], t, True),
                "plain envelope, default": ceiling(c, q, t, False),
            }
        )
    return mass_row, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epsilons", default="1,2,3,5,10")
    ap.add_argument("--sample", type=int, default=1500, help="IMDb tokens whose exact mass is computed")
    ap.add_argument("--tokens", type=int, default=50_000, help="IMDb tokens each timed step draws for")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--busy", action="store_true", help="also time beside 2 spinning processes")
    args = ap.parse_args()
    limiter = pin_threads(1)
    import deniable
    from deniable.mechanisms.tem import TruncatedExponential

    emb = deniable.load_embedding()
    tokens, source = corpus_ids(emb, args.tokens)
    sample = np.random.default_rng(0).choice(tokens, min(args.sample, tokens.size), replace=False)
    vectors = np.ascontiguousarray(np.asarray(emb.vectors, dtype=np.float32))
    loads = [load_average()]
    mass_rows, time_rows = [], []
    for eps in (float(e) for e in args.epsilons.split(",")):
        mass_row, rows = one_epsilon(TruncatedExponential(emb, eps), tokens, sample, vectors, args)
        mass_rows.append(mass_row)
        time_rows.extend(rows)
        loads.append(load_average())
    del limiter
    print(
        f"# TEM's exact mass against the limit's support: {sample.size} of {tokens.size:,} {source}, "
        f"V = {emb.size:,}, k = 256\n"
    )
    print(table(mass_rows))
    print(
        f"\n# Ceilings of TEM / limit: {tokens.size:,} tokens a step, {args.rounds} interleaved rounds, "
        "one thread, median (min-max)\n"
    )
    print(table(time_rows))
    print(f"\nload average (1/5/15 min) before and after each epsilon: {'; '.join(loads)}")


if __name__ == "__main__":
    main()
