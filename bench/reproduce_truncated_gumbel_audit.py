"""The exact privacy check of truncated_gumbel (docs/mechanisms/truncated_gumbel.md, "What it guarantees").

For synthetic embeddings (``n`` random normal words in ``dim`` dimensions, as tests/conftest.py
makes them) and an epsilon grid, every exact output distribution is computed
(``TruncatedGumbel.distribution``) and every ordered pair (w, w') compared on every output y:

- ``inf pairs``: share of ordered pairs with an output y that w can produce and w' cannot
  (log-ratio infinite: no epsilon covers them);
- ``eff. eps (finite)``: max over pairs of ``max_y log p(y|w)/p(y|w') / d(w, w')`` over the
  outputs both can produce (what epsilon would be needed if the infinite pairs did not exist);
- ``b``: the noise scale of the reference formula.

Then ``deniable.experiments.audit.audit_mechanism`` (the ``deniable audit`` check, exact method)
on the first ``--glove`` words of the default GloVe. Usage:

    nice -n 10 python bench/reproduce_truncated_gumbel_audit.py [--sizes 30,100,200] [--glove 2000]
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np

from deniable import Embedding, NotPrivateWarning
from deniable.mechanisms import make_mechanism


def exact_check(emb: Embedding, eps: float) -> dict[str, float]:
    mech = make_mechanism("truncated_gumbel", emb, eps)
    v = emb.size
    p = np.zeros((v, v))
    for w in range(v):
        ids, probs = mech.distribution(w)
        p[w, ids] = probs
    x = np.asarray(emb.vectors, dtype=np.float64)
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    inf_pairs, eff = 0, 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.log(p)
    for w in range(v):
        for w2 in range(v):
            if w == w2:
                continue
            live = p[w] > 0
            if np.any(live & (p[w2] == 0)):
                inf_pairs += 1
            both = live & (p[w2] > 0)
            eff = max(eff, float(np.max(logp[w, both] - logp[w2, both])) / d[w, w2])
    return {"b": mech.scale, "inf_share": inf_pairs / (v * (v - 1)), "eff_eps_finite": eff}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="30,100,200")
    parser.add_argument("--dim", type=int, default=3)
    parser.add_argument("--epsilons", default="0.5,1,5,10,50,200")
    parser.add_argument("--glove", type=int, default=2000, help="GloVe slice for the audit (0: skip)")
    parser.add_argument("--pairs", type=int, default=50)
    args = parser.parse_args()
    warnings.simplefilter("ignore", NotPrivateWarning)
    print("| words | epsilon | b | inf pairs | eff. eps (finite) |\n|---:|---:|---:|---:|---:|")
    for n in [int(s) for s in args.sizes.split(",") if s]:
        vec = np.random.default_rng(0).normal(size=(n, args.dim)).astype(np.float32)
        emb = Embedding([f"w{i}" for i in range(n)], vec, name=f"normal-{n}x{args.dim}")
        for eps in [float(e) for e in args.epsilons.split(",") if e]:
            try:
                r = exact_check(emb, eps)
            except ValueError as exc:  # the reference formula's scale is not positive here
                print(f"| {n} | {eps:g} | error: {str(exc)[:80]} | | |", flush=True)
                continue
            print(f"| {n} | {eps:g} | {r['b']:.4g} | {r['inf_share']:.1%} | {r['eff_eps_finite']:.4g} |", flush=True)
    if args.glove:
        from deniable import load_embedding
        from deniable.experiments.audit import audit_mechanism

        emb = load_embedding().subset(args.glove)
        for eps in (1.0, 10.0):
            t0 = time.perf_counter()
            mech = make_mechanism("truncated_gumbel", emb, eps)
            res = audit_mechanism(mech, pairs=args.pairs, method="exact", random_state=0)
            inf_rows = sum(math.isinf(r["log_ratio"]) for r in res.rows)
            print(
                f"GloVe[:{args.glove}] eps={eps:g}: b={mech.scale:.4g}, inter-word {mech.inter_word}, "
                f"{res.violations}/{len(res.rows)} directed pairs violate eps*d ({inf_rows} infinite), "
                f"worst ratio {res.worst_ratio:.4g}, {time.perf_counter() - t0:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
