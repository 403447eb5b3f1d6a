"""Timing leaks: can a call's latency tell what the input was? AUC of latency classifiers, per mechanism.

For each mechanism (built as the service builds it: ``history_free=True`` where the
mechanism declares it; ``--fast`` builds the library's default, fastest path instead), three
experiments, each with its two classes interleaved at random (so load drift hits both):

(a) kept vs changed: single-token calls on random words; label = whether the output is the
    input word (the output is what the mechanism releases; the time must add nothing);
(b) one vs many distinct words: ``--tokens`` tokens of one random word vs ``--tokens``
    distinct random words;
(c) frequent vs rare words: ``--small`` tokens drawn from the 1,000 most frequent words vs
    from the 10,000 rarest.

Words are taken among the vocabulary's alphabetic words of one length (5 letters), so that
over HTTP every class sends texts of the same length. For each, the Mann-Whitney AUC of the
latency (0.5: no information; 1 or 0: perfect), with a 95% interval (Hanley-McNeil), and the
AUC of a drift-corrected latency (each call's latency over the median of its 20 neighbours in
time): the better of the two is the one to read on a loaded machine. ``--http`` runs the same
against ``deniable serve`` on 127.0.0.1 (one worker, one client, bounded request loops).

    DENIABLE_CACHE=/tmp/h2-cache python bench/bench_timing.py --vocab-size 50000 --epsilon 10
    DENIABLE_CACHE=/tmp/h2-cache python bench/bench_timing.py --vocab-size 50000 --epsilon 10 --fast
    DENIABLE_CACHE=/tmp/h2-cache python bench/bench_timing.py --vocab-size 50000 --epsilon 10 --http
    DENIABLE_CACHE=/tmp/h2-cache python bench/bench_timing.py --vocab-size 50000 --epsilon 10 --padded
    python bench/bench_timing.py --vocab-size 50000 --mechanisms tem,truncated_gumbel --throughput 10000

Target (issue 27): every AUC within 0.5 +/- 0.05 (history-free mode, and the service).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: mechanisms measured by default (every registered one is accepted by --mechanisms)
DEFAULT = ("tem", "madlib", "truncated_gumbel", "vickrey", "mahalanobis", "santext", "custext")
#: options that make a mechanism cheap to build here (public; as an operator would fix them)
BUILD_OPTIONS: dict[str, dict[str, Any]] = {"brr": {"binarizer": "simhash"}}


# -- statistics ------------------------------------------------------------------------------------
def auc(neg: np.ndarray, pos: np.ndarray) -> float:
    """Mann-Whitney AUC: P(pos > neg) + P(pos = neg) / 2."""
    from scipy.stats import mannwhitneyu

    if not neg.size or not pos.size:
        return math.nan
    u = mannwhitneyu(pos, neg, alternative="two-sided").statistic
    return float(u) / (neg.size * pos.size)


def hanley_mcneil(a: float, n_neg: int, n_pos: int) -> tuple[float, float]:
    """95% interval of an AUC (Hanley & McNeil 1982)."""
    if not (n_neg and n_pos) or math.isnan(a):
        return math.nan, math.nan
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n_pos - 1) * (q1 - a * a) + (n_neg - 1) * (q2 - a * a)) / (n_neg * n_pos)
    se = math.sqrt(max(var, 0.0))
    return max(0.0, a - 1.96 * se), min(1.0, a + 1.96 * se)


def drift_corrected(lat: np.ndarray, window: int = 10) -> np.ndarray:
    """Each latency over the median of the latencies of its ``2 window`` neighbours in time (itself excluded)."""
    out = np.empty_like(lat)
    for i in range(lat.size):
        lo, hi = max(0, i - window), min(lat.size, i + window + 1)
        near = np.concatenate([lat[lo:i], lat[i + 1 : hi]])
        out[i] = lat[i] / np.median(near) if near.size else 1.0
    return out


def summarize(lat: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """AUCs (raw and drift-corrected) of latency for label 1 vs 0, with intervals and N."""
    neg, pos = labels == 0, labels == 1
    a_raw = auc(lat[neg], lat[pos])
    corr = drift_corrected(lat)
    a_cor = auc(corr[neg], corr[pos])
    worst = a_raw if abs(a_raw - 0.5) >= abs(a_cor - 0.5) else a_cor
    lo, hi = hanley_mcneil(worst, int(neg.sum()), int(pos.sum()))
    return {
        "n0": int(neg.sum()),
        "n1": int(pos.sum()),
        "auc_raw": a_raw,
        "auc_drift": a_cor,
        "auc": worst,
        "lo": lo,
        "hi": hi,
        "ms0": float(np.median(lat[neg]) * 1e3) if neg.any() else math.nan,
        "ms1": float(np.median(lat[pos]) * 1e3) if pos.any() else math.nan,
    }


# -- word pools -----------------------------------------------------------------------------------
def word_pools(emb: Any, length: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(all, frequent, rare) ids of alphabetic words of ``length`` letters (frequency-ordered vocabulary)."""
    words = emb.words(np.arange(emb.size))
    ok = np.array([len(w) == length and w.isalpha() and w.isascii() for w in words])
    ids = np.flatnonzero(ok).astype(np.int64)
    frequent = ids[ids < 1000]
    rare = ids[ids >= emb.size - 10_000]
    return ids, frequent, rare


# -- one experiment --------------------------------------------------------------------------------
def run_experiments(
    call: Callable[[np.ndarray], tuple[float, np.ndarray]],
    pools: tuple[np.ndarray, np.ndarray, np.ndarray],
    args: argparse.Namespace,
    rng: np.random.Generator,
) -> dict[str, dict[str, float]]:
    """``call(ids) -> (seconds, output ids)``; returns the three experiments' summaries."""
    every, frequent, rare = pools
    out: dict[str, dict[str, float]] = {}
    for _ in range(5):  # warm-up (not measured)
        call(rng.choice(every, size=args.tokens))
    # (a) kept vs changed, single tokens
    lat, lab = [], []
    for _ in range(args.single if "a" in args.experiments else 0):
        w = rng.choice(every, size=1)
        t, y = call(w)
        lat.append(t)
        lab.append(int(y[0] == w[0]))
    if lat:
        out["a kept(1) vs changed(0)"] = summarize(np.array(lat), np.array(lab))
    # (b) one word vs distinct words
    lat, lab = [], []
    for label in rng.permutation(np.repeat([0, 1], args.batches if "b" in args.experiments else 0)):
        ids = np.repeat(rng.choice(every), args.tokens) if label == 0 else rng.choice(every, args.tokens, replace=False)
        lat.append(call(ids)[0])
        lab.append(label)
    if lat:
        out["b one(0) vs distinct(1)"] = summarize(np.array(lat), np.array(lab))
    # (c) frequent vs rare
    lat, lab = [], []
    for label in rng.permutation(np.repeat([0, 1], args.batches * 4 if "c" in args.experiments else 0)):
        ids = rng.choice(frequent if label == 0 else rare, args.small)
        lat.append(call(ids)[0])
        lab.append(label)
    if lat:
        out["c frequent(0) vs rare(1)"] = summarize(np.array(lat), np.array(lab))
    return out


HEADER = (
    "| mechanism | experiment | N (0/1) | median ms (0/1) | AUC raw | AUC drift-corr. | AUC [95% CI] | ok |\n"
    "|---|---|---:|---:|---:|---:|---:|:-:|"
)


def print_rows(name: str, exps: dict[str, dict[str, float]]) -> None:
    """One mechanism's rows of the table (printed as soon as measured)."""
    for exp, r in exps.items():
        ok = "yes" if abs(r["auc"] - 0.5) <= 0.05 else ("n/a" if math.isnan(r["auc"]) else "NO")
        print(
            f"| {name} | {exp} | {r['n0']}/{r['n1']} | {r['ms0']:.3f}/{r['ms1']:.3f} | {r['auc_raw']:.3f} | "
            f"{r['auc_drift']:.3f} | {r['auc']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] | {ok} |",
            flush=True,
        )


# -- library ---------------------------------------------------------------------------------------
def mechanism_options(name: str, decode: str | None) -> dict[str, Any]:
    """The fixed options of ``name`` in this bench (``decode``: the ``index`` of mechanisms that decode)."""
    from deniable.mechanisms import options_of

    opts = dict(BUILD_OPTIONS.get(name, {}))
    if decode and any(o.name == "index" and o.client for o in options_of(name)):
        opts["index"] = decode
    return opts


def build(name: str, emb: Any, eps: float, fast: bool, decode: str | None = None) -> Any:
    from deniable import NotPrivateWarning
    from deniable.mechanisms import make_mechanism, options_of

    opts = mechanism_options(name, decode)
    if not fast and any(o.name == "history_free" for o in options_of(name)):
        opts["history_free"] = True  # as the service builds it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return make_mechanism(name, emb, eps, **opts)


def library(args: argparse.Namespace, emb: Any, pools: Any) -> dict[str, dict[str, dict[str, float]]]:
    from deniable._random import secure_generator

    results = {}
    for name in args.mechanisms:
        mech = build(name, emb, args.epsilon, args.fast, args.decode)
        if name == "tem":
            from deniable.preparation import prepare

            prepare(emb, ["tem"], options={"epsilon": args.epsilon}, show_progress=False)
        gen = secure_generator()

        def call(ids: np.ndarray, mech: Any = mech, gen: Any = gen) -> tuple[float, np.ndarray]:
            t0 = time.perf_counter()
            y = mech.privatize(ids, gen)
            return time.perf_counter() - t0, y

        if args.padded:  # the library's padded mode: a Privatizer that holds each call (text in, text out)
            from deniable import Privatizer

            priv = Privatizer(mech, pad_time=True)
            priv.privatize(" ".join(emb.words(pools[0][:3])))  # the schedule's calibration (public words)

            def call(ids: np.ndarray, priv: Any = priv) -> tuple[float, np.ndarray]:
                text = " ".join(emb.words(ids))
                t0 = time.perf_counter()
                out = priv.privatize(text)
                took = time.perf_counter() - t0
                return took, emb.tokenizer.tokenize([out]).ids

        results[name] = run_experiments(call, pools, args, np.random.default_rng(args.seed))
        print_rows(name, results[name])
    return results


# -- HTTP ------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(args: argparse.Namespace, emb: Any, pools: Any) -> dict[str, dict[str, dict[str, float]]]:
    import httpx

    port = free_port()
    offer: dict[str, Any] = {}
    for name in args.mechanisms:
        offer[name] = {"epsilons": [args.epsilon]}
        opts = mechanism_options(name, args.decode)
        if opts:
            offer[name]["options"] = opts
    # allow_non_metric: truncated_gumbel and others are measured too (a bench, not an offer to recommend);
    # --unpadded: the service's deadline padding (pad_responses) off, to see what the mechanisms alone leak
    config = {"max_concurrency": 4, "mechanisms": offer, "allow_non_metric": True, "pad_responses": not args.unpadded}
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "service.json"
        path.write_text(json.dumps(config))
        cmd = [sys.executable, "-c", "from deniable.cli import main; main()", "serve", "--config", str(path)]
        cmd += ["--port", str(port), "--workers", "1", "--vocab-size", str(args.vocab_size)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 900:
                try:
                    if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None:
                    raise SystemExit("the server exited")
                time.sleep(0.5)
            print(f"service ready after {time.monotonic() - t0:.1f} s", flush=True)
            nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
            with httpx.Client(timeout=60, transport=httpx.HTTPTransport(socket_options=nodelay)) as client:
                for name in args.mechanisms:

                    def call(ids: np.ndarray, name: str = name) -> tuple[float, np.ndarray]:
                        text = " ".join(emb.words(ids))
                        body = {"texts": [text], "epsilon": args.epsilon, "mechanism": name, "case": "lower"}
                        t0 = time.perf_counter()
                        r = client.post(url + "/v1/privatize", json=body)
                        t = time.perf_counter() - t0
                        if r.status_code != 200:
                            raise SystemExit(f"{name}: HTTP {r.status_code}: {r.text[:200]}")
                        y = emb.ids(r.json()["texts"][0].split())
                        return t, y

                    results[name] = run_experiments(call, pools, args, np.random.default_rng(args.seed))
                    print_rows(name, results[name])
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    return results


def throughput(args: argparse.Namespace, emb: Any) -> None:
    """tok/s of the history-free (oblivious) path against the fast one, interleaved rounds, same tokens."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import corpus_ids
    from deniable._random import secure_generator
    from deniable.preparation import prepare

    ids, source = corpus_ids(emb, args.throughput)
    print(f"\nThroughput: {ids.size:,} tokens ({source}), {args.rounds} interleaved rounds: median [min-max] tok/s\n")
    print("| mechanism | eps | fast path tok/s | history-free tok/s | cost |")
    print("|---|---:|---:|---:|---:|")
    for name in args.mechanisms:
        for eps in [float(e) for e in args.epsilons.split(",")]:
            if name == "tem":
                prepare(emb, ["tem"], options={"epsilon": eps}, show_progress=False)
            mechs = {key: build(name, emb, eps, key == "fast", args.decode) for key in ("fast", "free")}
            gen = secure_generator()
            rates: dict[str, list[float]] = {k: [] for k in mechs}
            for m in mechs.values():
                m.privatize(ids[:1000], gen)  # open the tables, warm up
            for _ in range(args.rounds):
                for key in np.random.default_rng().permutation(list(mechs)).tolist():
                    t0 = time.perf_counter()
                    mechs[key].privatize(ids, gen)
                    rates[key].append(ids.size / (time.perf_counter() - t0))

            def cell(r: list[float]) -> str:
                return f"{np.median(r):,.0f} [{min(r):,.0f}-{max(r):,.0f}]"

            cost = np.median(rates["fast"]) / np.median(rates["free"])
            print(f"| {name} | {eps:g} | {cell(rates['fast'])} | {cell(rates['free'])} | {cost:.1f}x |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab-size", type=int, default=50_000)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--mechanisms", default=",".join(DEFAULT))
    ap.add_argument("--experiments", default="abc", help="which of (a), (b), (c) to run, e.g. 'b'")
    ap.add_argument("--single", type=int, default=600, help="single-token calls of (a)")
    ap.add_argument("--batches", type=int, default=40, help="calls per class of (b); (c) makes 4x as many")
    ap.add_argument("--tokens", type=int, default=2000, help="tokens per call of (b)")
    ap.add_argument("--small", type=int, default=50, help="tokens per call of (c)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the word choices (not of the mechanism)")
    ap.add_argument("--fast", action="store_true", help="the library's fast (not oblivious) path")
    ap.add_argument("--http", action="store_true", help="over HTTP (deniable serve) instead of the library")
    ap.add_argument("--decode", default=None, help="index of the mechanisms that decode (flat, exact, hnsw, auto)")
    ap.add_argument("--unpadded", action="store_true", help="--http with pad_responses = false")
    ap.add_argument("--padded", action="store_true", help="the library through Privatizer(pad_time=True)")
    ap.add_argument("--throughput", type=int, default=0, help="instead: tok/s fast vs history-free on N tokens")
    ap.add_argument("--epsilons", default="3,5,10,20", help="epsilons of --throughput")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of --throughput")
    args = ap.parse_args()
    args.mechanisms = [m.strip() for m in args.mechanisms.split(",") if m.strip()]

    from deniable.embedding import load_embedding

    emb = load_embedding(None, vocab_size=args.vocab_size)
    if args.throughput:
        throughput(args, emb)
        return
    pools = word_pools(emb)
    if args.http:
        where = f"HTTP (deniable serve, 1 worker, {'unpadded' if args.unpadded else 'padded'})"
    else:
        where = "library, fast path" if args.fast else "library"
    if args.decode:
        where += f", decode {args.decode}"
    print(f"{where}; GloVe 6B 50-d, {emb.size:,} words; eps {args.epsilon:g}; cache {os.environ.get('DENIABLE_CACHE')}")
    print(f"\nTiming AUCs ({where}, eps {args.epsilon:g})\n\n{HEADER}", flush=True)
    if args.http:
        http(args, emb, pools)
    else:
        library(args, emb, pools)


if __name__ == "__main__":
    main()
