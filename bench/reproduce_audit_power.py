"""How much power the guarantee audit has: the smallest violation factor it detects (docs/audit.md).

For each mechanism, a mechanism that samples with ``f * eps`` is audited against the claim
``eps`` (``audit_mechanism(..., claimed_epsilon=eps)``) for a grid of factors f; the table
gives the worst (certified) ratio and whether it was flagged. f = 1 is the correct mechanism.

    python bench/reproduce_audit_power.py --out results/audit-power            # GloVe 50-d, first 10k words
    python bench/reproduce_audit_power.py --toy --out results/audit-power-toy  # the 1-d line a, b, c

The toy embedding is where the black-box check is strongest (madlib and 4-bit randomized
response are close to tight there); on GloVe the sampled pairs are far from tight.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from deniable import Embedding, load_embedding
from deniable.experiments.audit import audit_mechanism
from deniable.experiments.results import write_files
from deniable.mechanisms import make_mechanism


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--toy", action="store_true", help="the 1-d line embedding instead of GloVe")
    ap.add_argument("--vocab-size", type=int, default=10_000)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--draws", type=int, default=20_000)
    ap.add_argument("--factors", default="1,1.5,2,3,5")
    ap.add_argument("--mechanisms", default="madlib,brr,tem")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    factors = [float(f) for f in args.factors.split(",")]
    embs: dict[str, Embedding] = {}
    pair_of: dict[str, int | list[tuple[str, str]]] = {}
    if args.toy:
        line = Embedding(["a", "b", "c"], np.array([[0.0], [1.0], [2.0]], dtype=np.float32), name="line")
        # brr: all 16 4-bit codes (the word-level channel is 4-bit randomized response, tight)
        nibbles = (np.arange(16, dtype=np.uint8) << 4).reshape(16, 1)
        codes = Embedding([f"w{i}" for i in range(16)], np.zeros((16, 2), dtype=np.float32), name="nibbles")
        emb = line
        embs = {"madlib": line, "tem": line, "brr": codes}
        eps = {"madlib": 1.0, "brr": 1.0, "tem": 1.0}
        opts: dict[str, dict[str, object]] = {"brr": {"binarizer": nibbles}, "tem": {"cache": False}}
        pair_of = {"brr": [("w0", "w1"), ("w3", "w7"), ("w5", "w12")]}
        pairs: int | list[tuple[str, str]] = [("a", "b"), ("b", "c"), ("a", "c")]
    else:
        emb = load_embedding(vocab_size=args.vocab_size)
        # epsilons in the range the calibration docs use for GloVe 50-d
        eps = {"madlib": 10.0, "brr": 0.1, "tem": 10.0}
        opts = {"brr": {"binarizer": "simhash", "bits": 256}, "tem": {}}
        pairs = args.pairs
    rows = []
    for name in args.mechanisms.split(","):
        for f in factors:
            t0 = time.perf_counter()
            e = embs.get(name, emb)
            mech = make_mechanism(name, e, eps[name] * f, **opts.get(name, {}))
            res = audit_mechanism(
                mech,
                pairs=pair_of.get(name, pairs),
                draws=args.draws,
                claimed_epsilon=eps[name],
                random_state=args.seed,
            )
            rows.append(
                {
                    "embedding": f"{e.name} ({e.size} words)",
                    "mechanism": name,
                    "epsilon": eps[name],
                    "factor": f,
                    "method": res.method,
                    "draws": args.draws if res.method == "black-box" else "",
                    "worst_ratio": res.worst_ratio,
                    "violations": res.violations,
                    "flagged": not res.passed,
                    "seconds": time.perf_counter() - t0,
                }
            )
            print(rows[-1], flush=True)
    cols = list(rows[0])
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += [
        "| " + " | ".join(f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |" for r in rows
    ]
    write_files(
        args.out,
        tables={"power.csv": (rows, cols)},
        texts={"power.md": "\n".join(md)},
        json_files={"settings.json": vars(args)},
    )


if __name__ == "__main__":
    main()
