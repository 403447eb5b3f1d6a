"""Throughput of ``deniable serve`` on loopback: requests/s and p50/p99 latency per offer and number of clients.

Starts one service per offer (``deniable serve --workers N``, each on 127.0.0.1 at a free
port), waits for every ``/readyz``, then runs ``--rounds`` interleaved rounds: in each
round, every offer and every number of concurrent clients (httpx async, ``TCP_NODELAY``)
sends requests for at most ``--seconds`` or ``--requests`` (bounded). Prints one row per
offer and level: the median over rounds of req/s, p50 and p99 latency, with min-max.

The request (``--request``): ``reviews`` (default) holds three short review-like texts, 30
words; ``playground`` one text as the playground page sends it (its example sentence).
Epsilon ``--epsilon`` (10); the offer's default options (no ``options`` sent).

Offers (``--offers``, comma separated):

- ``default``: the service's default configuration (no file: madlib with the prepared HNSW
  decode, deadline-padded responses, ``max_concurrency`` 4 per worker);
- ``default-unpadded``: the same with ``pad_responses = false`` (the cost of padding);
- ``default-recover5``: the same with ``pad_recover_s = 5``;
- ``madlib-exact``, ``madlib-exact-unpadded``: madlib with the exact numpy decode (the
  previous default offer), padded or not;
- ``tem``: TEM at ``--epsilon`` from prepared tables (minutes to prepare for the whole
  vocabulary on a fresh cache).

``--baseline SRC`` also serves every offer from another copy of the package (``SRC``: a
``src`` folder, e.g. of a checkout of an earlier commit) as ``NAME@baseline``, in the same
interleaved rounds: before/after comparisons on a shared machine (or only the offers listed
as ``NAME@baseline`` in ``--offers``, when some are).

Needs the service and httpx: ``python3 -m pip install -e '.[dev]'``.

The last columns come from the workers' padded releases (a ``sitecustomize`` hook, bench only):
how many were released and how many missed their budget, the median budget and the p99 of the
work's time. ``--busy N`` adds N spinning processes during the rounds (a busy machine).

Usage::

    python bench/bench_service.py --offers default,default-unpadded,madlib-exact-unpadded --clients 1,8
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_service.py --offers \\
        default,default-recover5,default@baseline --baseline /tmp/old/src --clients 8 --rounds 3 \\
        --seconds 5 --request twenty [--busy 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

try:
    import httpx
except ImportError:  # pragma: no cover - a bench, run by hand
    sys.exit("bench_service.py needs httpx (and the service): python3 -m pip install -e '.[dev]'")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import busy_cores  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REQUESTS = {
    #: three short review-like texts (the issue's "3 short texts" request), 30 words
    "reviews": [
        "The movie was a great surprise and the actors were funny.",
        "The story moved fast and the music was lovely.",
        "I would watch it again with my family next weekend.",
    ],
    #: what the playground page sends for its example (one text)
    "playground": ["The hockey game was great, and the rocket launch too."],
    #: one review-like text of 20 words (the issue 43 request: "8 clients, 20-word texts")
    "twenty": ["The movie was a great surprise and the actors were funny, so I would watch it again with my family."],
}
OFFERS: dict[str, dict[str, Any]] = {
    "default": {},
    "default-unpadded": {"pad_responses": False},
    "default-recover5": {"pad_recover_s": 5},
    "madlib-exact": {"mechanisms": {"madlib": {"client": {"index": ["exact"]}}}},
    "madlib-exact-unpadded": {"mechanisms": {"madlib": {"client": {"index": ["exact"]}}}, "pad_responses": False},
    "tem": {"mechanisms": {"tem": {}}},
}


#: Imported by every Python process of a served offer (``sitecustomize`` on its PYTHONPATH, the
#: workers included): records each padded release (start, size, seconds of work, budget at start,
#: seconds held to), a line each, to ``$DENIABLE_BENCH_TRACE.<pid>``. A bench
#: probe only: the service itself neither logs nor serves its misses (they may depend on inputs).
TRACE_HOOK = """
import os
_path = os.environ.get("DENIABLE_BENCH_TRACE")
if _path:
    try:
        from deniable import _padding
    except Exception:  # not this package
        _padding = None
    if _padding is not None:
        _orig = _padding.Timing.release_at
        _out = []

        def release_at(self, key, size, start, done):
            budget = self.budget(key, size, start)
            at = _orig(self, key, size, start, done)
            if not _out:  # opened in the process that serves (a worker), line-buffered
                _out.append(open(f"{_path}.{os.getpid()}", "a", buffering=1))
            _out[0].write(f"{start!r} {size} {done - start!r} {budget!r} {at - start!r}\\n")
            return at

        _padding.Timing.release_at = release_at
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def level(url: str, body: dict[str, object], clients: int, seconds: float, requests: int) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    stop = time.monotonic() + seconds

    async def client(c: httpx.AsyncClient) -> None:
        nonlocal errors
        while time.monotonic() < stop and len(latencies) + errors < requests:
            t0 = time.perf_counter()
            r = await c.post(url + "/v1/privatize", json=body)
            if r.status_code == 200:
                latencies.append(time.perf_counter() - t0)
            else:
                errors += 1

    limits = httpx.Limits(max_connections=clients)
    # TCP_NODELAY: without it the client's separate header and body writes meet the server's
    # delayed ACK, and every request waits ~40 ms on loopback (a client artefact, not the service)
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=nodelay)
    async with httpx.AsyncClient(timeout=60, transport=transport) as c:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c) for _ in range(clients)))
        wall = time.perf_counter() - t0
    lat = np.array(latencies) * 1000
    return {
        "requests": len(latencies),
        "non_200": errors,
        "rps": len(latencies) / wall,
        "p50_ms": float(np.percentile(lat, 50)) if lat.size else float("nan"),
        "p99_ms": float(np.percentile(lat, 99)) if lat.size else float("nan"),
    }


def start(name: str, args: argparse.Namespace, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    name, _, baseline = name.partition("@")
    src = str(Path(args.baseline).resolve()) if baseline else str(ROOT / "src")
    config = {**OFFERS[name]}
    if name == "tem":
        config["mechanisms"] = {"tem": {"epsilons": [args.epsilon]}}
    path = tmp / f"{name}{'-baseline' if baseline else ''}.json"
    path.write_text(json.dumps(config))
    cmd = [sys.executable, "-c", "from deniable.cli import main; main()", "serve", "--config", str(path)]
    cmd += ["--port", str(port), "--workers", str(args.workers)]
    if args.vocab_size:
        cmd += ["--vocab-size", str(args.vocab_size)]
    if args.embedding:
        cmd += ["--embedding", args.embedding]
    hook = tmp / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(TRACE_HOOK)
    path_env = os.pathsep.join([str(hook), src, os.environ.get("PYTHONPATH", "")])
    trace = str(tmp / f"trace-{name}{'-baseline' if baseline else ''}")
    env = {**os.environ, "PYTHONPATH": path_env, "DENIABLE_BENCH_TRACE": trace}
    return subprocess.Popen(cmd, env=env), f"http://127.0.0.1:{port}"


def traced(tmp: Path, name: str) -> list[tuple[float, int, float, float, float]]:
    """Every padded release the workers of offer ``name`` recorded (written at their exit)."""
    base, _, baseline = name.partition("@")
    rows: list[tuple[float, int, float, float, float]] = []
    for f in tmp.glob(f"trace-{base}{'-baseline' if baseline else ''}.*"):
        for line in f.read_text().splitlines():
            start, size, took, budget, held = line.split()
            rows.append((float(start), int(size), float(took), float(budget), float(held)))
    return rows


def schedule(rows: list[tuple[float, int, float, float, float]], t0: float, t1: float) -> dict[str, float]:
    """Of the releases that started in [t0, t1): how many, how many missed, their budgets (ms)."""
    sel = [r for r in rows if t0 <= r[0] < t1]
    if not sel:
        return {"released": 0, "missed": 0, "budget_ms": float("nan"), "work_p99_ms": float("nan")}
    return {
        "released": len(sel),
        "missed": sum(1 for r in sel if r[2] > r[3]),
        "budget_ms": float(np.median([r[3] for r in sel])) * 1000,
        "work_p99_ms": float(np.percentile([r[2] for r in sel], 99)) * 1000,
    }


def wait_ready(procs: dict[str, tuple[subprocess.Popen[bytes], str]], limit_s: float = 900) -> None:
    t0 = time.monotonic()
    waiting = set(procs)
    while waiting and time.monotonic() - t0 < limit_s:
        for name in sorted(waiting):
            proc, url = procs[name]
            if proc.poll() is not None:
                raise SystemExit(f"the {name} server exited")
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    waiting.discard(name)
                    print(f"{name}: ready after {time.monotonic() - t0:.1f} s", flush=True)
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    if waiting:
        raise SystemExit(f"not ready after {limit_s:.0f} s: {', '.join(sorted(waiting))}")


def span(values: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(float(np.median(values)))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embedding", default=None)
    ap.add_argument("--vocab-size", type=int, default=None, help="default: the whole vocabulary")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--offers", default="default,default-unpadded,madlib-exact-unpadded")
    ap.add_argument("--request", choices=sorted(REQUESTS), default="reviews")
    ap.add_argument("--seconds", type=float, default=6.0, help="per offer, level and round (bound)")
    ap.add_argument("--requests", type=int, default=2000, help="per offer, level and round (bound)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--baseline", default=None, help="a src folder to serve every offer from too (NAME@baseline)")
    ap.add_argument("--busy", type=int, default=0, help="spinning processes during the rounds (a busy machine)")
    ap.add_argument("--trace-dir", default=None, help="keep the workers' release traces (one line per request) here")
    args = ap.parse_args()
    offers = [o for o in args.offers.split(",") if o]
    unknown = {o.partition("@")[0] for o in offers} - set(OFFERS)
    if args.baseline and not any(o.endswith("@baseline") for o in offers):
        offers = [x for o in offers for x in (o, f"{o}@baseline")]
    if unknown:
        raise SystemExit(f"unknown offers: {', '.join(sorted(unknown))} (known: {', '.join(OFFERS)})")
    levels = [int(c) for c in args.clients.split(",")]
    texts = REQUESTS[args.request]
    body: dict[str, object] = {"texts": texts, "epsilon": args.epsilon}
    words = sum(len(t.split()) for t in texts)
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        procs = {name: start(name, args, Path(tmp)) for name in offers}
        results: dict[tuple[str, int], list[dict[str, float]]] = {}
        windows: dict[tuple[str, int], list[tuple[float, float]]] = {}
        try:
            wait_ready(procs)
            for name in offers:  # warm-up
                asyncio.run(level(procs[name][1], body, 1, 1.0, 20))
            with busy_cores(args.busy):
                for _ in range(args.rounds):
                    loads.append(os.getloadavg()[0])
                    for clients in levels:
                        for name in offers:  # interleaved: every offer at this level, then the next level
                            t0 = time.monotonic()
                            r = asyncio.run(level(procs[name][1], body, clients, args.seconds, args.requests))
                            windows.setdefault((name, clients), []).append((t0, time.monotonic()))
                            results.setdefault((name, clients), []).append(r)
                loads.append(os.getloadavg()[0])
        finally:
            for proc, _ in procs.values():
                proc.send_signal(signal.SIGTERM)
            for proc, _ in procs.values():
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
        traces = {name: traced(Path(tmp), name) for name in offers}
        if args.trace_dir:
            Path(args.trace_dir).mkdir(parents=True, exist_ok=True)
            for f in Path(tmp).glob("trace-*"):
                shutil.copy(f, args.trace_dir)
    print(
        f"\nrequest: {args.request} ({len(texts)} texts, ~{words} words), epsilon {args.epsilon:g}; "
        f"{args.workers} workers; {args.rounds} rounds of <= {args.seconds:g} s; median (min-max) over rounds; "
        f"{args.busy} busy processes; 1-min load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores"
    )
    cols = "offer| clients | requests | req/s | p50 ms | p99 ms | non-200 | released / missed | budget ms | work p99 ms"
    print(f"| {cols} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in offers:
        for clients in levels:
            rs = results[(name, clients)]
            sched = [schedule(traces[name], t0, t1) for t0, t1 in windows[(name, clients)]]
            padded = sum(s["released"] for s in sched) > 0
            hits = f"{sum(s['released'] for s in sched):.0f} / {sum(s['missed'] for s in sched):.0f}"
            print(
                f"| {name} | {clients} | {sum(r['requests'] for r in rs):.0f} | "
                f"{span([r['rps'] for r in rs])} | {span([r['p50_ms'] for r in rs])} | "
                f"{span([r['p99_ms'] for r in rs])} | {sum(r['non_200'] for r in rs):.0f} | "
                f"{hits if padded else '-'} | "
                f"{span([s['budget_ms'] for s in sched]) if padded else '-'} | "
                f"{span([s['work_p99_ms'] for s in sched]) if padded else '-'} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
