"""Benchmark and reproduction for calibration (docs/calibration.md). Not a test: no assertions on time.

Subcommands (GloVe 6B 50-d, V = 400,000):

``tem``      exact TEM statistics (N_w, E[S_w], eta-support, entropies) from the TEM
             formula in BLAS blocks: time for a random sample of query words against the
             whole vocabulary, extrapolated to all 400k words (or ``--all`` to run them all).
``madlib``   sampled statistics of the multivariate Laplace mechanism: ``--draws`` draws
             for each of ``--words`` words (HNSW decode), plus the exact decode on a few
             words, extrapolated to the papers' 1000 draws x 319k words.
``figures``  the TEM panels of the reproduction (exact, on a stated random sample of words)
             and the neighbour-distance geometry, written as PNGs into ``--out``.
``choose``   choose_epsilon for TEM over a random sample of words (exact statistics).
``table``    the calibration table (``deniable prepare --calibration``) built with the ray shortcut of
             madlib's exact decode (deniable/calibrate/_rays.py) and without it, interleaved rounds in
             one process, after one untimed build that prepares the decode choices: the table's own
             work, start-up and decode choices excluded; checks both give the same table.
``pack``/``gpu``  the same TEM statistics for all words, and sampled madlib statistics with an
             exact nearest-neighbour decode, in torch on one GPU (``pack`` writes GloVe
             losslessly into ``out/glove_pack`` for the GPU machine; ``gpu`` needs only
             numpy and torch there).

    python bench/bench_calibrate.py tem --words 2000 --epsilon 9
    python bench/bench_calibrate.py madlib --words 1000 --draws 1000 --epsilon 9
    python bench/bench_calibrate.py figures --out docs/figures/calibration --words 1000
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_calibrate.py table --vocab-size 50000 --index exact
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_calibrate.py table --rounds 2   # 336k words

The TEM parts use the project's TEM (gamma from Theorem 3 with beta = 1e-3, d <= gamma
inside); its statistics come from the bulk TEM formula.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_mb, table

EPSILONS = (5.0, 7.0, 9.0, 11.0, 12.0)
EXAMPLES = ("encryption", "hockey", "spacecraft")


def make_tem(emb: Any, eps: float, beta: float = 1e-3) -> Any:
    """The project's TEM (gamma from Theorem 3 with ``beta``)."""
    from deniable.mechanisms.tem import TruncatedExponential

    return TruncatedExponential(emb, eps, beta=beta)


def cmd_tem(args: argparse.Namespace) -> None:
    import deniable
    from deniable.calibrate import plausible_deniability

    emb = deniable.load_embedding()
    rng = np.random.default_rng(args.seed)
    words: Any = None if args.all else args.words
    rows = []
    for eps in args.epsilon:
        mech = make_tem(emb, eps)
        t0 = time.perf_counter()
        st = plausible_deniability(
            mech, words, random_state=rng, samples=1000, dtype=np.dtype(args.dtype), workers=args.workers
        )
        dt = time.perf_counter() - t0
        n = len(st)
        rows.append(
            {
                "epsilon": eps,
                "workers": args.workers,
                "gamma": round(float(mech.gamma), 3),
                "query words": n,
                "seconds": dt,
                "words/s": n / dt,
                "ns per (word, output) pair": dt / (n * emb.size) * 1e9,
                "all 400k words, min": dt / n * emb.size / 60,
                "median N_w": float(np.median(st.n_w)),
                "max N_w": float(np.max(st.n_w)),
                "median E[S_w]": float(np.median(st.s_w)),
                "min E[S_w]": float(np.min(st.s_w)),
                "median |L_w|": float(np.median(st.ball_size)) if st.ball_size is not None else float("nan"),
                "peak RSS MB": peak_rss_mb(),
            }
        )
    print(f"exact TEM statistics, GloVe 6B 50-d (V={emb.size:,}), {args.dtype} distances, beta=1e-3")
    print(table(rows))


def cmd_madlib(args: argparse.Namespace) -> None:
    import deniable
    from deniable.calibrate import plausible_deniability
    from deniable.mechanisms.laplace import MultivariateLaplace

    emb = deniable.load_embedding()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    MultivariateLaplace(emb, 1.0, index="hnsw")
    build = time.perf_counter() - t0
    rows = []
    for eps in args.epsilon:
        for index, n_words in (("hnsw", args.words), ("exact", args.exact_words)):
            if n_words <= 0:
                continue
            mech = MultivariateLaplace(emb, eps, index=index)
            t0 = time.perf_counter()
            st = plausible_deniability(mech, n_words, samples=args.draws, random_state=rng)
            dt = time.perf_counter() - t0
            tokens = n_words * args.draws
            rows.append(
                {
                    "epsilon": eps,
                    "decode": index,
                    "words x draws": f"{n_words} x {args.draws}",
                    "seconds": dt,
                    "tokens/s": tokens / dt,
                    "319k words x 1000 draws, hours": 319_000 * 1000 / (tokens / dt) / 3600,
                    "mean N_w": float(st.n_w.mean()),
                    "mean S_w": float(st.s_w.mean()),
                    "peak RSS MB": peak_rss_mb(),
                }
            )
    print(
        f"sampled statistics, multivariate Laplace, GloVe 6B 50-d (V={emb.size:,}); "
        f"HNSW index build/load {build:.1f} s (cached on disk after the first build)"
    )
    print(table(rows))


def cmd_figures(args: argparse.Namespace) -> None:
    import deniable
    from deniable.calibrate import example_outputs, neighbour_distances, plausible_deniability
    from deniable.report import plot_averages, plot_histograms, plot_neighbours

    emb = deniable.load_embedding()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    ids = np.sort(rng.choice(emb.size, size=args.words, replace=False))
    stats = []
    for eps in args.epsilon:
        mech = make_tem(emb, eps)
        st = plausible_deniability(mech, ids, samples=1000)
        stats.append(st)
        s = st.summary((0, 5, 50, 95, 100))
        print(
            f"TEM eps={eps:g} gamma={mech.gamma:.3f}: N_w mean {s['N_w']['mean']:.3f} max {s['N_w']['p100']:.3f}; "
            f"E[S_w] mean {s['S_w']['mean']:.1f} min {s['S_w']['p0']:.2f}; "
            f"eta-support median {s['eta_support']['p50']:.0f}; |L_w| median {np.median(st.ball_size):.0f} "
            f"({st.seconds:.1f} s)"
        )
        st.to_csv(out / f"tem_eps{eps:g}.csv") if args.csv else None
    title = f"TEM (exact), GloVe 6B 50-d: {args.words} random words (seed {args.seed}) of {emb.size:,}"
    plot_histograms(stats, out / "tem_histograms.png", title=title)
    plot_averages(stats, out / "tem_averages.png", title=title)
    known = [w for w in EXAMPLES if w in emb.index_of]
    table_ex = example_outputs([make_tem(emb, e) for e in args.epsilon], known, draws=4, random_state=rng)
    for w, row in table_ex.items():
        for e, outs in row.items():
            print(f"  {w} eps={e:g}: {', '.join(outs)}")
    if args.geometry_words:
        geo = neighbour_distances(emb, args.geometry_words, random_state=rng)
        plot_neighbours(geo, out / "neighbours.png", title=f"GloVe 6B 50-d: {geo.describe()}")
        print(geo.describe(), f"({geo.seconds:.0f} s)")
        print(table([{k: round(v, 3) for k, v in r.items()} for r in geo.table()]))


def cmd_choose(args: argparse.Namespace) -> None:
    """One choice per seed (``--seeds K``: seeds ``seed .. seed+K-1``), then the spread over seeds.

    The worst case over a random sample of words depends on which words the sample holds
    (the most isolated one binds): a chosen epsilon is a statistic; report its spread and
    take the smallest (or ``--words 0``: the whole vocabulary, exact for TEM).
    """
    import deniable

    emb = deniable.load_embedding()
    chosen = []
    for seed in range(args.seed, args.seed + args.seeds):
        args_one = argparse.Namespace(**{**vars(args), "seed": seed})
        chosen.append(_choose_one(emb, args_one))
    if len(chosen) > 1:
        ok = [c for c in chosen if c is not None]
        print(
            f"chosen epsilon over {len(chosen)} seeds ({args.words or 'all'} words each): "
            f"min {min(ok):.4g}, median {statistics.median(ok):.4g}, max {max(ok):.4g} "
            f"(conservative choice: the min; {len(chosen) - len(ok)} seeds found none)"
        )


def _choose_one(emb: object, args: argparse.Namespace) -> float | None:
    from deniable.calibrate import choose_epsilon

    t0 = time.perf_counter()
    res = choose_epsilon(
        lambda e: make_tem(emb, e),
        low=args.low,
        high=args.high,
        max_unchanged=args.max_unchanged,
        min_support=args.min_support,
        percentile=args.percentile,
        words=args.words or None,
        samples=1000,
        random_state=args.seed,
    )
    print(f"TEM, GloVe 6B 50-d, {args.words} random words (seed {args.seed}); {time.perf_counter() - t0:.0f} s")
    print(res.summary())
    print(
        table(
            [
                {"epsilon": e.epsilon, "N_w stat": e.unchanged, "S_w stat": e.support, "ok": e.feasible}
                for e in res.evaluations
            ]
        )
    )
    return res.epsilon


# --------------------------------------------------------------------------------------
# GPU: the same statistics with torch on one GPU (no deniable import: the device machine
# has numpy and torch but not this package's dependencies). GloVe travels as 24-bit fixed
# point (value * 1e6) plus the few values that do not round-trip, which is lossless.
# --------------------------------------------------------------------------------------

PACK_SCALE = 1e6


def cmd_pack(args: argparse.Namespace) -> None:
    import deniable

    emb = deniable.load_embedding()
    x = np.ascontiguousarray(emb.vectors, dtype=np.float32)
    k = np.round(x.astype(np.float64) * PACK_SCALE).astype(np.int32)
    assert np.abs(k).max() < 2**23
    back = (k / PACK_SCALE).astype(np.float32)
    bad = np.flatnonzero(back.view(np.int32).ravel() != x.view(np.int32).ravel())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    k.view(np.uint8).reshape(-1, 4)[:, :3].tofile(out / "glove50.i24")
    np.savez(out / "glove50_fix.npz", shape=np.array(x.shape), idx=bad, val=x.ravel()[bad])
    print(f"packed {x.shape} into {out}: {bad.size:,} exceptions")


def _unpack(folder: Path) -> np.ndarray:
    meta = np.load(folder / "glove50_fix.npz")
    raw = np.fromfile(folder / "glove50.i24", dtype=np.uint8).reshape(-1, 3).astype(np.int32)
    k = raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)
    k = np.where(k >= 2**23, k - 2**24, k)
    x = (k / PACK_SCALE).astype(np.float32)
    x[meta["idx"]] = meta["val"]
    return x.reshape(tuple(meta["shape"]))


def _tem_gpu(torch: Any, x: Any, eps: float, samples: int, eta: float, block: int, beta: float) -> dict[str, Any]:
    """Exact TEM statistics for every word (same definitions as deniable.calibrate.tem_statistics)."""
    v = x.shape[0]
    gamma = (2.0 / eps) * math.log((1 - beta) * (v - 1) / beta)
    half = eps / 2.0
    sq = (x * x).sum(1)
    g2 = gamma * gamma
    cols = {k: [] for k in ("n_w", "s_w", "support", "shannon", "min_entropy", "ball_size")}
    for s in range(0, v, block):
        q = torch.arange(s, min(s + block, v), device=x.device)
        d2 = sq[q, None] + sq[None, :] - 2.0 * (x[q] @ x.T)
        d2[torch.arange(q.numel(), device=x.device), q] = 0.0
        cols["ball_size"].append((d2 <= g2).sum(1))
        t = d2.clamp_(0.0, g2).sqrt_().clamp_(max=gamma)
        w = torch.exp(-half * t)
        z = w.sum(1, dtype=torch.float64)
        mean_t = (w * t).sum(1, dtype=torch.float64) / z
        cols["n_w"].append(1.0 / z)
        cols["min_entropy"].append(torch.log2(z))
        cols["shannon"].append((torch.log(z) + half * mean_t) / math.log(2.0))
        p = w / z[:, None].float()
        cols["s_w"].append((-torch.expm1(samples * torch.log1p(-p))).sum(1, dtype=torch.float64))
        ts, _ = torch.sort(t, dim=1)
        cum = torch.cumsum(torch.exp(-half * ts).double(), dim=1)
        target = ((1 - eta) * (1 - 1e-12) * z)[:, None]
        cols["support"].append(torch.searchsorted(cum, target).squeeze(1) + 1)
        del d2, t, w, p, ts, cum
    return {k: torch.cat(c).cpu().numpy() for k, c in cols.items()}


def _madlib_gpu(torch: Any, x: Any, eps: float, ids: Any, draws: int, chunk: int, gen: Any) -> Any:
    """``draws`` outputs for each word in ``ids`` (words x draws): noise on the GPU, exact decode."""
    n = x.shape[1]
    sq = (x * x).sum(1)
    outs = []
    per = max(1, chunk // draws)
    for s in range(0, ids.numel(), per):
        w = ids[s : s + per]
        rep = w.repeat_interleave(draws)
        g = torch.randn(rep.numel(), n, device=x.device, generator=gen)
        # radius ~ Gamma(shape n, scale 1/eps): a sum of n unit exponentials, divided by eps
        r = -torch.log(torch.rand(rep.numel(), n, device=x.device, generator=gen)).sum(1) / eps
        noisy = x[rep] + g / g.norm(dim=1, keepdim=True) * r[:, None]
        score = sq[None, :] - 2.0 * (noisy @ x.T)  # |y|^2 - 2 q.y: the argmin is the nearest word
        outs.append(score.argmin(dim=1).view(w.numel(), draws))
    return torch.cat(outs)


def cmd_gpu(args: argparse.Namespace) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # full float32 products, like the CPU path
    dev = torch.device("cuda")
    x = torch.from_numpy(_unpack(Path(args.data))).to(dev)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name(0)
    rows = []
    for eps in args.tem_epsilon:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = _tem_gpu(torch, x, eps, 1000, args.eta, args.block, 1e-3)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        # all words' percentiles, plus every 400th word in full (small enough to bring back)
        pct = {f"pct_{k}": np.percentile(v, [0, 5, 50, 95, 100]) for k, v in res.items()}
        every = np.arange(0, x.shape[0], 400)
        np.savez(out / f"tem_gpu_eps{eps:g}.npz", ids=every, **{k: v[every] for k, v in res.items()}, **pct)
        rows.append({"what": f"TEM exact, all {x.shape[0]:,} words, eps={eps:g}", "seconds": dt})
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    runs = []
    if args.madlib_ids:
        runs += [(torch.from_numpy(np.load(args.madlib_ids)).to(dev), e, True) for e in args.madlib_epsilon]
    if args.madlib_words:
        n_words = min(args.madlib_words, x.shape[0])
        ids = torch.randperm(x.shape[0], device=dev, generator=gen)[:n_words].sort().values
        runs.append((ids, args.madlib_epsilon[0], False))
    for ids, eps, save in runs:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        draws = _madlib_gpu(torch, x, eps, ids, args.draws, args.chunk, gen)
        self_count = (draws == ids[:, None]).sum(1)
        srt, _ = torch.sort(draws, dim=1)
        distinct = 1 + (srt[:, 1:] != srt[:, :-1]).sum(1)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if save:
            np.savez_compressed(
                out / f"madlib_gpu_eps{eps:g}.npz", ids=ids.cpu().numpy(), draws=draws.int().cpu().numpy()
            )
        tok = ids.numel() * args.draws
        rows.append(
            {
                "what": f"madlib, {ids.numel():,} words x {args.draws} draws, eps={eps:g}, exact NN",
                "seconds": dt,
                "tokens/s": tok / dt,
                "mean N_w": float(self_count.float().mean() / args.draws),
                "mean S_w": float(distinct.float().mean()),
            }
        )
    print(f"{name}, torch {torch.__version__}")
    print(table(rows))


def cmd_gpu_figures(args: argparse.Namespace) -> None:
    """Madlib panels from the GPU draws (exact decode), through the library's own statistics code."""
    import deniable
    from deniable.calibrate import DeniabilityStats
    from deniable.calibrate.stats import statistics_from_draws
    from deniable.report import plot_averages, plot_histograms

    emb = deniable.load_embedding()
    stats = []
    for f in sorted(Path(args.data).glob("madlib_gpu_eps*.npz")):
        eps = float(f.stem.removeprefix("madlib_gpu_eps"))
        d = np.load(f)
        ids, draws = d["ids"].astype(np.int64), d["draws"].astype(np.int64)
        c = statistics_from_draws(ids, draws, vocab_size=emb.size)
        stats.append(
            DeniabilityStats(
                mechanism="madlib",
                epsilon=eps,
                ids=ids,
                words=emb.words(ids),
                exact=False,
                method="sample (GPU, exact decode)",
                samples=draws.shape[1],
                eta=0.05,
                confidence=0.95,
                support=c["support"],
                vocab_size=emb.size,
                **{k: c[k] for k in ("n_w", "n_w_low", "n_w_high", "s_w", "s_w_low", "s_w_high")},
                shannon=c["shannon"],
                min_entropy=c["min_entropy"],
            )
        )
        summ = stats[-1].summary((0, 5, 50, 95, 100))
        print(
            f"madlib eps={eps:g} exact decode: N_w mean {summ['N_w']['mean']:.3f} p95 {summ['N_w']['p95']:.3f} "
            f"max {summ['N_w']['p100']:.3f}; S_w mean {summ['S_w']['mean']:.1f} p5 {summ['S_w']['p5']:.0f} "
            f"min {summ['S_w']['p0']:.0f}; eta-support min {summ['eta_support']['p0']:.0f}"
        )
    stats.sort(key=lambda st: st.epsilon)
    n = len(stats[0])
    title = f"madlib, exact decode (GPU): {n} random words of {emb.size:,}, {stats[0].samples} draws per word"
    out = Path(args.out)
    plot_histograms(stats, out / "madlib_exact_histograms.png", title=title)
    plot_averages(stats, out / "madlib_exact_averages.png", title=title)


def cmd_table(args: argparse.Namespace) -> None:
    """Build the calibration table with and without the ray shortcut, interleaved (A B A B ...)."""
    import atexit
    import os
    import shutil
    import tempfile

    if "DENIABLE_CACHE" not in os.environ:  # a fresh cache (decode choices, HNSW), removed at exit
        os.environ["DENIABLE_CACHE"] = tempfile.mkdtemp(prefix="bench-calibrate-")
        atexit.register(shutil.rmtree, os.environ["DENIABLE_CACHE"], ignore_errors=True)
    import deniable
    from _common import load_average
    from deniable.calibrate import _rays
    from deniable.calibrate.table import build_table

    emb = deniable.load_embedding(vocab_size=args.vocab_size) if args.vocab_size else deniable.load_embedding()
    options = {"index": args.index} if args.index else {}
    made: list[Any] = []

    class Counting(_rays.RayDecodes):
        def __init__(self, ids: np.ndarray) -> None:
            super().__init__(ids)
            made.append(self)

    _rays.RayDecodes = Counting  # type: ignore[misc]
    t0 = time.perf_counter()
    first = build_table(emb, args.mechanism, options, show_progress=False)
    print(f"untimed first build (decode choices, HNSW where chosen): {time.perf_counter() - t0:.1f} s", flush=True)
    contenders = {"ray shortcut": True, "every token decoded": False}
    walls: dict[str, list[float]] = {name: [] for name in contenders}
    cpus: dict[str, list[float]] = {name: [] for name in contenders}
    decoded: dict[str, float] = {}
    same = True
    load0 = load_average()
    for _ in range(args.rounds):
        for name, flag in contenders.items():
            made.clear()
            t0, c0 = time.perf_counter(), time.process_time()
            built = build_table(emb, args.mechanism, options, show_progress=False, ray_shortcut=flag)
            walls[name].append(time.perf_counter() - t0)
            cpus[name].append(time.process_time() - c0)
            same = same and built.to_json() == first.to_json()
            decoded[name] = made[0].decoded / made[0].ids.size if flag and made else float(len(built.points))
    rows = [
        {
            "build": name,
            "wall s median": statistics.median(walls[name]),
            "min - max": f"{min(walls[name]):.1f} - {max(walls[name]):.1f}",
            "CPU s median": statistics.median(cpus[name]),
            "points": len(first.points),
            "full decodes (token-equivalent)": decoded[name],
        }
        for name in contenders
    ]
    print(f"{args.mechanism} on {emb.size:,} words, options {options}, {args.rounds} interleaved rounds")
    print(table(rows))
    ratio = statistics.median(walls["ray shortcut"]) / statistics.median(walls["every token decoded"])
    print(f"ratio of medians (shortcut / full): {ratio:.2f}; same table every build: {same}")
    print(f"load average before: {load0}; after: {load_average()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("tem", help="exact TEM statistics")
    p.add_argument("--words", type=int, default=2000, help="random query words (against all 400k outputs)")
    p.add_argument("--all", action="store_true", help="all 400k words (an hour or more on 2 cores)")
    p.add_argument("--epsilon", type=float, nargs="+", default=[9.0])
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--workers", type=int, default=1, help="threads (blocks of words in parallel)")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("madlib", help="sampled multivariate Laplace statistics")
    p.add_argument("--words", type=int, default=1000)
    p.add_argument("--exact-words", type=int, default=20, help="words for the exact-decode comparison (0: skip)")
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--epsilon", type=float, nargs="+", default=[9.0])
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("figures", help="TEM reproduction panels and geometry")
    p.add_argument("--out", default="docs/figures/calibration")
    p.add_argument("--words", type=int, default=1000)
    p.add_argument("--epsilon", type=float, nargs="+", default=list(EPSILONS))
    p.add_argument("--geometry-words", type=int, default=10000)
    p.add_argument("--csv", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("choose", help="choose_epsilon for TEM (exact) over a random sample of words")
    p.add_argument("--words", type=int, default=1000, help="random words per seed (0: the whole vocabulary)")
    p.add_argument("--seeds", type=int, default=1, help="repeat with this many consecutive seeds")
    p.add_argument("--low", type=float, default=1.0)
    p.add_argument("--high", type=float, default=8.0)
    p.add_argument("--max-unchanged", type=float, default=0.5)
    p.add_argument("--min-support", type=float, default=10.0)
    p.add_argument("--percentile", type=float, default=100.0)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("table", help="calibration table with and without the ray shortcut (interleaved)")
    p.add_argument("--vocab-size", type=int, default=None, help="the N most frequent words (default: all 336k)")
    p.add_argument("--mechanism", default="madlib")
    p.add_argument("--index", default=None, help="madlib's decode (default: auto)")
    p.add_argument("--rounds", type=int, default=3)
    p = sub.add_parser("pack", help="pack GloVe losslessly (< 64 MiB) for the GPU machine")
    p.add_argument("--out", default="out/glove_pack")
    p = sub.add_parser("gpu", help="TEM exact (all words) and madlib sampled statistics with torch on a GPU")
    p.add_argument("--data", default="out/glove_pack")
    p.add_argument("--out", default="out/gpu")
    p.add_argument("--tem-epsilon", type=float, nargs="*", default=[9.0])
    p.add_argument("--eta", type=float, default=0.05)
    p.add_argument("--block", type=int, default=1024, help="query words per block")
    p.add_argument("--madlib-words", type=int, default=1000, help="random words for a throughput run (0: none)")
    p.add_argument("--madlib-ids", default=None, help=".npy of word ids: their draws are saved, one file per eps")
    p.add_argument("--madlib-epsilon", type=float, nargs="+", default=[9.0])
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--chunk", type=int, default=1 << 13, help="tokens per decode chunk")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("gpu-figures", help="madlib panels from the draws `gpu --madlib-ids` saved")
    p.add_argument("--data", default="out/gpu")
    p.add_argument("--out", default="docs/figures/calibration")
    args = ap.parse_args()
    cmds = {"tem": cmd_tem, "madlib": cmd_madlib, "figures": cmd_figures, "choose": cmd_choose, "table": cmd_table}
    cmds.update({"pack": cmd_pack, "gpu": cmd_gpu, "gpu-figures": cmd_gpu_figures})
    cmds[args.cmd](args)


if __name__ == "__main__":
    main()
