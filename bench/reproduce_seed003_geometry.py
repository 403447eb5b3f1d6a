"""Seed 003 Table 1 (example outputs for 20 Newsgroups topic words) and its neighbour-distance
percentiles (GloVe 6B 50-d against the word2vec GoogleNews 300-d subset), for docs/audit.md.

    python bench/reproduce_seed003_geometry.py --out results/seed003

Table 1: three madlib draws per word and epsilon on GloVe 50-d (``calibrate.example_outputs``).
Percentiles: for 1,000 random words among the 20,000 most frequent of each embedding, the
Euclidean distance to the k-th nearest other word, k in 1, 5, 10, 50, 100; the 5th, 25th, 50th,
75th and 95th percentiles over the words. (The word2vec rows are L2-normalised, GloVe's are not:
the scales differ, which is the point the seed makes about comparing epsilons across embeddings.)
"""

from __future__ import annotations

import argparse

import numpy as np

from _common import DATA
from deniable import Embedding, load_embedding
from deniable.calibrate.explain import example_outputs
from deniable.experiments.results import write_files
from deniable.mechanisms import make_mechanism

WORDS = ("encryption", "hockey", "spacecraft")
EPSILONS = (1.0, 2.0, 5.0, 10.0, 20.0, 40.0)
KS = (1, 5, 10, 50, 100)
PCTS = (5, 25, 50, 75, 95)


def knn_percentiles(emb: Embedding, rng: np.random.Generator, top: int = 20_000, sample: int = 1000) -> list[dict]:
    vec = emb.vectors[: min(top, emb.size)].astype(np.float32)
    q = rng.choice(vec.shape[0], size=sample, replace=False)
    sq = (vec * vec).sum(axis=1)
    d2 = sq[q, None] + sq[None, :] - 2 * vec[q] @ vec.T
    d2[np.arange(sample), q] = np.inf
    kth = np.sqrt(np.maximum(np.sort(d2, axis=1)[:, : max(KS)], 0))
    rows = []
    for k in KS:
        row: dict = {"embedding": emb.name, "k": k}
        row.update({f"p{p}": float(np.percentile(kth[:, k - 1], p)) for p in PCTS})
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    glove = load_embedding()
    mechs = [make_mechanism("madlib", glove, e) for e in EPSILONS]
    table = example_outputs(mechs, list(WORDS), draws=3, random_state=rng)
    md = ["| epsilon | " + " | ".join(WORDS) + " |", "|---:|" + "---|" * len(WORDS)]
    for e in EPSILONS:
        md.append(f"| {e:g} | " + " | ".join(", ".join(table[w][e]) for w in WORDS) + " |")
    rows = knn_percentiles(glove, rng)
    w2v = load_embedding(str(DATA / "w2v_gnews_bolukbasi" / "GoogleNews-vectors-negative300-bolukbasi.bin.gz"))
    rows += knn_percentiles(w2v, rng)
    for r in rows:
        r["embedding"] = "GloVe 6B 50-d" if r["embedding"] == glove.name else "word2vec GNews 300-d subset"
    cols = list(rows[0])
    md += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += [
        "| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |" for r in rows
    ]
    write_files(args.out, tables={"percentiles.csv": (rows, cols)}, texts={"seed003.md": "\n".join(md)})
    print("\n".join(md))


if __name__ == "__main__":
    main()
