"""Code quality of the binarizers: Spearman correlation on word-similarity benchmarks.

As in Tissier et al. (AAAI 2019): for each benchmark pair, the similarity of the float
vectors (cosine) or of the binary codes (Hamming similarity, ``1 - d / m``) is
correlated (Spearman's rho) with the human scores. Benchmarks: SimLex-999,
WordSim353, MEN (from ``$DENIABLE_DATA/w2v_gnews_bolukbasi/benchmark``); embeddings:
GloVe 6B 50-d (built in) and word2vec GoogleNews 300-d (26k-word subset). Training
times are printed too (codes are cached: a second run shows the cache load time,
so clear the cache, or read the first run's log, for training times). Usage:

    python bench/binarize_quality.py [--bits 64,128,256,512] [--methods autoencoder,itq,simhash]
                                     [--embeddings glove,w2v]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, table

BENCH = DATA / "w2v_gnews_bolukbasi" / "benchmark"
SETS = {"SimLex-999": "SimLex-999.tsv", "WordSim353": "wordsim353.tsv", "MEN": "MEN_dataset_natural_form_full.tsv"}


def read_pairs(path: Path) -> list[tuple[str, str, float]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        out.append((parts[0], parts[1], float(parts[2])))
    return out


def lookup(emb, pairs):  # type: ignore[no-untyped-def]
    """Ids of the pairs found in the vocabulary (as written, else lower case) and their scores."""
    idx = emb.index_of
    a, b, s = [], [], []
    for w1, w2, score in pairs:
        i = idx.get(w1, idx.get(w1.lower(), -1))
        j = idx.get(w2, idx.get(w2.lower(), -1))
        if i >= 0 and j >= 0:
            a.append(i)
            b.append(j)
            s.append(score)
    return np.array(a), np.array(b), np.array(s)


def main() -> None:
    from scipy.stats import spearmanr

    import deniable
    from deniable.binarize import binarize
    from deniable.metrics import hamming

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bits", default="64,128,256,512")
    ap.add_argument("--methods", default="autoencoder,itq,simhash")
    ap.add_argument("--embeddings", default="glove,w2v")
    args = ap.parse_args()
    bits_list = [int(b) for b in args.bits.split(",")]
    methods = args.methods.split(",")
    pairs = {name: read_pairs(BENCH / f) for name, f in SETS.items()}
    rows = []
    for ename in args.embeddings.split(","):
        if ename == "glove":
            emb = deniable.load_embedding()
            label = "GloVe 6B 50-d"
        else:
            w2v = DATA / "w2v_gnews_bolukbasi" / "GoogleNews-vectors-negative300-bolukbasi.bin.gz"
            emb = deniable.load_embedding(w2v)
            label = "word2vec GNews 300-d (26k)"
        found = {name: lookup(emb, p) for name, p in pairs.items()}
        vec = np.asarray(emb.vectors, dtype=np.float64)
        unit = vec / np.linalg.norm(vec, axis=1, keepdims=True)
        cover = "/".join(str(len(s)) for _, _, s in found.values())
        row: dict[str, object] = {"embedding": label, "codes": "float (cosine)", "train s": "-"}
        for name, (a, b, s) in found.items():
            row[name] = float(spearmanr((unit[a] * unit[b]).sum(1), s)[0])
        row["pairs found"] = cover
        rows.append(row)
        for method in methods:
            for bits in bits_list:
                t0 = time.perf_counter()
                codes = binarize(emb, bits, method, seed=0, show_progress=False)
                dt = time.perf_counter() - t0
                row = {"embedding": label, "codes": f"{method} {bits}", "train s": dt}
                for name, (a, b, s) in found.items():
                    sim = 1 - hamming(codes[a], codes[b]) / bits
                    row[name] = float(spearmanr(sim, s)[0])
                row["pairs found"] = cover
                rows.append(row)
                print(row, flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
