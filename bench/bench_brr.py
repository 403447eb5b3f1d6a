"""Benchmark: BRR (256-bit codes) vs the multivariate Laplace mechanism on GloVe 6B 50-d (336,158 words).

Each configuration runs in its own subprocess (so peak RSS is its own): tokens/s of
``privatize`` on real IMDb tokens, the time to build / load what it needs, and the size
of what a device would have to hold. BRR's epsilon is converted from madlib's with the
privacy ratio (seed 001): ``eps_brr = P_d(euclidean) / P_d(hamming) * eps_madlib``, measured
on the codes of each code length (256 and 64 bits). Usage:

    python bench/bench_brr.py [--tokens 20000] [--epsilon 10] [--threads 1] [--configs ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import corpus_ids, peak_rss_mb, table


def peak_mb() -> float:
    """This process's peak RSS (VmHWM; unlike ru_maxrss it is not inherited from the parent across exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


#: name[@epsilon]: without @, madlib runs at --epsilon and BRR at the epsilon converted by the privacy ratio
#: brrdev-flat: BRR-256 loaded from the device artefact alone (no float embedding in the process)
CONFIGS = [
    "madlib-exact",
    "madlib-hnsw",
    "brr-flat",
    "brrdev-flat",
    "brr-hnsw",
    "brr64-flat",
    "brr-flat@3",
    "brr-hnsw@3",
]


def run_one(
    config: str,
    tokens: int,
    eps_madlib: float,
    eps_brr: float,
    threads: int,
    embedding: str | None,
    artefact: str,
    eps_brr64: float | None = None,
) -> dict[str, object]:
    name, _, fixed = config.partition("@")
    import faiss

    import deniable
    from deniable import BinaryRandomizedResponse, MultivariateLaplace

    if threads:
        faiss.omp_set_num_threads(threads)
    t0 = time.perf_counter()
    mech: deniable.Mechanism
    if name.startswith("brrdev"):
        mech = BinaryRandomizedResponse.from_device(artefact, float(fixed) if fixed else eps_brr)
        emb = mech.embedding
        ids, source = corpus_ids(emb, tokens)
        eps = mech.epsilon
        from deniable.binarize.device import artefact_size

        device = artefact_size(artefact)["total"]
        return _measure(config, mech, ids, source, eps, device, t0)
    emb = deniable.load_embedding(embedding)
    ids, source = corpus_ids(emb, tokens)
    t0 = time.perf_counter()
    if name.startswith("madlib"):
        kind = name.split("-")[1]
        mech = MultivariateLaplace(emb, eps_madlib, index=kind)
        eps = eps_madlib
        words = sum(len(w.encode()) + 1 for w in emb._words)
        if kind == "exact":
            device = emb.vectors.nbytes + mech.search_index._aug.nbytes + words  # type: ignore[attr-defined]
        else:
            device = faiss.serialize_index(mech.search_index.faiss_index).nbytes + words  # type: ignore[attr-defined]
    else:
        bits = 64 if name.startswith("brr64") else 256
        index = name.split("-")[1]
        if fixed:
            eps = float(fixed)
        elif bits == 64:
            if eps_brr64 is None:
                raise SystemExit(f"{config}: needs --eps-brr64 (the privacy ratio of the 64-bit codes)")
            eps = eps_brr64
        else:
            eps = eps_brr
        mech = BinaryRandomizedResponse(emb, eps, bits=bits, binarizer="autoencoder", index=index).prepare()
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            device = mech.export_device(tmp)["total"]
        if index == "hnsw":
            device += faiss.serialize_index_binary(mech.decoder._index.faiss_index).nbytes  # type: ignore[attr-defined]
    return _measure(config, mech, ids, source, eps, device, t0)


def _measure(config, mech, ids, source, eps, device, t0):  # type: ignore[no-untyped-def]
    import deniable

    build = time.perf_counter() - t0
    rng = deniable.secure_generator()
    mech.privatize(ids[:500], rng)  # warm up
    t0 = time.perf_counter()
    out = mech.privatize(ids, rng)
    dt = time.perf_counter() - t0
    return {
        "mechanism": config,
        "epsilon": eps,
        "tokens/s": len(ids) / dt,
        "unchanged": float(np.mean(out == ids)),
        "build/load s": build,
        "device MB": device / 2**20,
        "peak RSS MB": peak_mb(),
        "source": source,
        "tokens": len(ids),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--epsilon", type=float, default=10.0, help="madlib's epsilon; BRR's is converted")
    ap.add_argument("--threads", type=int, default=1, help="faiss / BLAS threads in each run (0 = default)")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--embedding", default=None, help="embedding path (default: built-in GloVe 6B 50-d)")
    ap.add_argument("--artefact", help=argparse.SUPPRESS)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--eps-brr", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--eps-brr64", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        res = run_one(
            args.one,
            args.tokens,
            args.epsilon,
            args.eps_brr,
            args.threads,
            args.embedding,
            args.artefact,
            args.eps_brr64,
        )
        print(json.dumps(res))
        return

    import tempfile

    import deniable
    from deniable import BinaryRandomizedResponse, MultivariateLaplace
    from deniable.calibrate import privacy_ratio

    emb = deniable.load_embedding(args.embedding)
    t0 = time.perf_counter()
    madlib = MultivariateLaplace(emb, 1.0, index="flat")
    brr = BinaryRandomizedResponse(emb, 1.0)
    ratio = privacy_ratio(madlib, brr, pairs=200000, rng=0)
    artefact = tempfile.mkdtemp(prefix="brr-device-")
    brr.export_device(artefact)
    eps_brr = ratio.epsilon_b(args.epsilon)
    print(f"privacy ratio ({time.perf_counter() - t0:.1f}s): {ratio}")
    print(f"madlib epsilon {args.epsilon:g} <-> BRR-256 epsilon {eps_brr:.4g} (same eps * P_d bound)")
    eps_brr64 = None
    if any(c.startswith("brr64") and "@" not in c for c in args.configs.split(",")):
        # the same codes the brr64 runs use (same binarizer and seed: cached on disk), the same pairs (rng=0)
        t0 = time.perf_counter()
        brr64 = BinaryRandomizedResponse(emb, 1.0, bits=64, binarizer="autoencoder")
        ratio64 = privacy_ratio(madlib, brr64, pairs=200000, rng=0)
        eps_brr64 = ratio64.epsilon_b(args.epsilon)
        print(f"privacy ratio, 64-bit codes ({time.perf_counter() - t0:.1f}s): {ratio64}")
        print(f"madlib epsilon {args.epsilon:g} <-> BRR-64 epsilon {eps_brr64:.4g} (same eps * P_d bound)")
    print("name@eps runs at a fixed epsilon")
    env = dict(os.environ)
    if args.threads:
        env.update(OPENBLAS_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    rows = []
    for config in args.configs.split(","):
        cmd = [sys.executable, __file__, "--one", config, "--tokens", str(args.tokens), "--epsilon", str(args.epsilon)]
        cmd += ["--eps-brr", str(eps_brr), "--threads", str(args.threads), "--artefact", artefact]
        if eps_brr64 is not None:
            cmd += ["--eps-brr64", str(eps_brr64)]
        if args.embedding:
            cmd += ["--embedding", args.embedding]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if res.returncode:
            print(f"{config} failed:\n{res.stderr[-2000:]}")
            continue
        row = json.loads(res.stdout.strip().splitlines()[-1])
        print(row, flush=True)
        rows.append(row)
    import shutil

    shutil.rmtree(artefact, ignore_errors=True)
    if rows:
        src, n = rows[0].pop("source"), rows[0].pop("tokens")
        for r in rows[1:]:
            r.pop("source")
            r.pop("tokens")
        print(f"\n{emb.name}, V={emb.size:,}, n={emb.dim}; {n:,} tokens ({src}); threads={args.threads or 'default'}")
        print(table(rows))


if __name__ == "__main__":
    main()
