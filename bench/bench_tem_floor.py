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
4. **What a larger table would need** (issue 32's first candidate: "store more of each
   word's mass, within a disk budget you state"): for tables of each word's ``k`` nearest
   words, ``k`` from 256 to 131,072 (:data:`LARGER_K`), the disk for every word (an id and
   a distance an entry, as the prepared k-NN tables store them: the same table serves every
   epsilon), the tokens' exact mass outside it, the plain envelope it gives (its words' true
   weights, then the weight at its (k+1)-th distance for every other word) and the
   ceilings of 3. with it (the 256-entry draw time kept: optimistic). The history-free
   ceiling is that of the costliest word of the token sample AND of ``--vocabulary``
   uniform vocabulary words (a data-oblivious sampler pays the costliest word's work for
   every token, and rare words are the costly ones). A second table gives each word the
   smallest ``k`` whose own cost meets ``--target`` (0.6): the disk a table of variable
   size would need for it.

Usage::

    deniable prepare -m tem -e 1,2,3,5,10     # once: the k-NN tables the limit reads
    python bench/bench_tem_floor.py [--epsilons 1,2,3,5,10] [--sample 1500] [--tokens 50000]
        [--rounds 5] [--busy] [--vocabulary 300] [--target 0.6]

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
#: table sizes of the "larger k" rows (issue 32's first candidate: store more of each word's mass)
LARGER_K = (256, 1024, 4096, 16384, 65536, 131072)
#: bytes an entry of such a table takes on disk: the word's id (int32) and its distance (float32),
#: like the prepared k-NN tables; independent of epsilon
_ENTRY_BYTES = 8


def mass(mech, sample: np.ndarray, cum: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """``(q, z, q_k, c_k)`` of every sampled token, all exact (float64 over every word).

    ``q``: the share of its mass outside the limit's k words; ``z``: its true total; ``q_k``
    and ``c_k`` (one column per :data:`LARGER_K`): the same share outside its ``k`` nearest
    words, and the plain envelope of a table of those ``k`` words (their weights, then
    ``(V - k) exp(-a min(d_(k+1), gamma))`` for every other word) over the true total.
    """
    emb = mech.embedding
    x = np.asarray(emb.vectors, dtype=np.float64)
    sq = np.einsum("ij,ij->i", x, x)
    a, gamma = float(mech._a), float(mech.gamma)
    k, v = cum.shape[1] - 1, x.shape[0]
    grid = np.array([g for g in LARGER_K if g < v])
    q, z = np.empty(sample.size), np.empty(sample.size)
    q_k, c_k = np.full((sample.size, len(LARGER_K)), np.nan), np.full((sample.size, len(LARGER_K)), np.nan)
    for s in range(0, sample.size, _MASS_BLOCK):
        w = sample[s : s + _MASS_BLOCK]
        d = np.sqrt(np.maximum(sq[w, None] - 2.0 * (x[w] @ x.T) + sq[None, :], 0.0))
        d[np.arange(w.size), w] = 0.0
        true_total = np.exp(-a * np.minimum(d, gamma)).sum(axis=1)
        q[s : s + w.size] = 1.0 - cum[w, k - 1] / true_total
        z[s : s + w.size] = true_total
        # the k smallest distances lie before position k of the partition (in any order)
        part = np.exp(-a * np.minimum(np.partition(d, grid, axis=1), gamma))
        inside = np.cumsum(part, axis=1)[:, grid - 1]
        outside = (v - grid) * part[:, grid]
        q_k[s : s + w.size, : grid.size] = 1.0 - inside / true_total[:, None]
        c_k[s : s + w.size, : grid.size] = (inside + outside) / true_total[:, None]
    return q, z, q_k, c_k


def one_proposal(vectors: np.ndarray, tokens: np.ndarray, a: float, rng: np.random.Generator) -> int:
    """The cheapest step toward an outside word, for every token at once; returns the token count."""
    y = rng.integers(0, vectors.shape[0], tokens.size)
    diff = np.take(vectors, tokens, axis=0) - np.take(vectors, y, axis=0)
    d = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    accepted = rng.random(tokens.size) < np.exp(-a * d)
    return int(accepted.size)


def token_cost(c: np.ndarray, q: np.ndarray, t: dict[str, float]) -> np.ndarray:
    """Seconds a token at the least: ``c`` rounds of the cheaper table draw, ``c - 1 + q`` of them a proposal more."""
    return c * min(t["scan"], t["search"]) + (c - 1.0 + q) * t["proposal"]


def ceiling(c: np.ndarray, q: np.ndarray, t: dict[str, float], worst: bool) -> str:
    """``TEM / limit`` at most, against each form: a token makes ``c`` rounds, ``c - 1 + q`` of them outside.

    ``t``: seconds a token of each form of the limit and of one proposal. A round costs at
    least the cheaper form's draw, an outside one a proposal more; the tokens' mean cost
    (``worst``: the costliest token's, which a history-free sampler pays for every token).
    """
    cost = token_cost(c, q, t)
    per_token = float(cost.max() if worst else cost.mean())
    return " / ".join(f"{t[form] / per_token:.2f}" for form in ("scan", "search"))


def larger_k(  # noqa: PLR0913 - the two samples' arrays and the idle timings
    eps: float,
    v: int,
    tok: tuple[np.ndarray, np.ndarray],
    voc: tuple[np.ndarray, np.ndarray],
    t: dict[str, float],
    target: float,
) -> tuple[list[dict[str, object]], dict[str, object]]:
    """One row per table size ``k``: its disk, the tokens' mass outside it, and the ceilings with it as the envelope.

    ``tok`` / ``voc``: ``(q_k, c_k)`` of the token sample and of the uniform vocabulary
    sample (:func:`mass`); ``t``: the idle seconds a token of each timed step. The ceilings
    keep the 256-entry table's draw time (a larger table's draw is dearer: optimistic). The
    history-free ceiling takes the costliest word of both samples (every token pays it). The
    second result gives every word the smallest ``k`` of the grid whose own cost meets
    ``target`` (the whole vocabulary when none does): the default sampler then meets it on
    average; its disk is the vocabulary sample's mean ``k``.
    """

    tok_cost, voc_cost = token_cost(tok[1], tok[0], t), token_cost(voc[1], voc[0], t)
    rows: list[dict[str, object]] = []
    for j, k in enumerate(LARGER_K):
        if k >= v:
            break
        worst = max(float(tok_cost[:, j].max()), float(voc_cost[:, j].max()))
        rows.append(
            {
                "eps": f"{eps:g}",
                "k": f"{k:,}",
                "disk, every word": f"{v * k * _ENTRY_BYTES / 1e9:.1f} GB",
                "mass outside k: mean / max (tokens)": f"{tok[0][:, j].mean():.3f} / {tok[0][:, j].max():.3f}",
                "envelope c: mean / max (tokens) / max (vocabulary)": (
                    f"{tok[1][:, j].mean():.2f} / {tok[1][:, j].max():.2f} / {voc[1][:, j].max():.2f}"
                ),
                "ceiling, default": f"{t['scan'] / float(tok_cost[:, j].mean()):.2f}",
                "ceiling, history-free": f"{t['scan'] / worst:.2f}",
            }
        )
    grid = np.array([k for k in LARGER_K if k < v] + [v])

    def needed(cost: np.ndarray) -> np.ndarray:
        meets = t["scan"] / cost[:, : grid.size - 1] >= target
        return np.where(meets.any(axis=1), grid[np.argmax(meets, axis=1)], v)

    k_tok, k_voc = needed(tok_cost), needed(voc_cost)
    col = np.minimum(np.searchsorted(grid, k_tok), grid.size - 2)
    full = min(t["scan"], t["search"])  # a table of every word: one draw, never a proposal
    met = np.where(k_tok < v, tok_cost[np.arange(k_tok.size), col], full)
    per_word = {
        "eps": f"{eps:g}",
        "target": f"{target:g}x",
        "k a word: median / mean (vocabulary)": f"{np.median(k_voc):,.0f} / {k_voc.mean():,.0f}",
        "words that need all V (vocabulary / tokens)": f"{np.mean(k_voc >= v):.1%} / {np.mean(k_tok >= v):.1%}",
        "disk, every word": f"{v * float(k_voc.mean()) * _ENTRY_BYTES / 1e9:.1f} GB",
        "ceiling, default": f"{t['scan'] / float(met.mean()):.2f}",
    }
    return rows, per_word


def one_epsilon(  # type: ignore[no-untyped-def]
    mech, tokens: np.ndarray, sample: np.ndarray, vocabulary: np.ndarray, vectors: np.ndarray, args: argparse.Namespace
) -> tuple[dict[str, object], list[dict[str, object]], tuple[list[dict[str, object]], dict[str, object]]]:
    """The mass row, the timing rows (one per load) and the larger-k rows and per-word row of one epsilon."""
    import deniable
    from deniable.mechanisms.tem._totals import token_totals

    eps, rng = float(mech.epsilon), deniable.secure_generator()
    try:
        # (the sample is drawn from the tokens; the vocabulary sample's rows are filled for :func:`mass`)
        cum, words = limit_tables(mech, np.concatenate([tokens, vocabulary]))
    except Exception as exc:  # noqa: BLE001 - the tables are not prepared: say how
        raise SystemExit(f"eps {eps:g}: {exc}\nrun `deniable prepare -m tem -e {eps:g}` first") from exc
    t0 = time.perf_counter()
    q, z, q_k, c_k = mass(mech, sample, cum)
    voc = mass(mech, vocabulary, cum)[2:]
    c = cum[sample, -1] / z  # the limit's table as the envelope
    envelope = token_totals(mech, sample)  # TEM's own envelope totals (prepared at this epsilon), or None
    if mech._prepared.totals is None:  # a memo of the plain envelope instead: not TEM's envelope after prepare
        raise SystemExit(f"eps {eps:g}: TEM's envelope is not prepared; run `deniable prepare -m tem -e {eps:g}` first")
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
    idle: dict[str, float] = {}
    for load in ("idle", "busy") if args.busy else ("idle",):
        with busy_cores(2) if load == "busy" else contextlib.nullcontext():
            rates = interleaved_rounds(contenders, args.rounds)
        t = {name: 1.0 / float(np.median(rate)) for name, rate in rates.items()}  # seconds a token
        idle = idle or t
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
    return mass_row, rows, larger_k(eps, int(cum.shape[0]), (q_k, c_k), voc, idle, args.target)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epsilons", default="1,2,3,5,10")
    ap.add_argument("--sample", type=int, default=1500, help="IMDb tokens whose exact mass is computed")
    ap.add_argument("--tokens", type=int, default=50_000, help="IMDb tokens each timed step draws for")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--busy", action="store_true", help="also time beside 2 spinning processes")
    ap.add_argument("--vocabulary", type=int, default=300, help="uniform vocabulary words for the larger-k rows")
    ap.add_argument("--target", type=float, default=0.6, help="the ratio the per-word k of the larger-k rows aims at")
    args = ap.parse_args()
    limiter = pin_threads(1)
    import deniable
    from deniable.mechanisms.tem import TruncatedExponential

    emb = deniable.load_embedding()
    tokens, source = corpus_ids(emb, args.tokens)
    sample = np.random.default_rng(0).choice(tokens, min(args.sample, tokens.size), replace=False)
    vocabulary = np.random.default_rng(1).choice(emb.size, min(args.vocabulary, emb.size), replace=False)
    vectors = np.ascontiguousarray(np.asarray(emb.vectors, dtype=np.float32))
    loads = [load_average()]
    mass_rows, time_rows, larger_rows, per_word_rows = [], [], [], []
    for eps in (float(e) for e in args.epsilons.split(",")):
        mech = TruncatedExponential(emb, eps)
        mass_row, rows, (larger, per_word) = one_epsilon(mech, tokens, sample, vocabulary, vectors, args)
        mass_rows.append(mass_row)
        time_rows.extend(rows)
        larger_rows.extend(larger)
        per_word_rows.append(per_word)
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
    print(
        f"\n# Larger k (store more of each word's mass): {sample.size} tokens and {vocabulary.size} uniform "
        f"vocabulary words, ceilings against the row scan, idle timings, {_ENTRY_BYTES} bytes an entry\n"
    )
    print(table(larger_rows))
    print("\n# Each word the smallest k of the grid that meets the target on its own\n")
    print(table(per_word_rows))
    print(f"\nload average (1/5/15 min) before and after each epsilon: {'; '.join(loads)}")


if __name__ == "__main__":
    main()
