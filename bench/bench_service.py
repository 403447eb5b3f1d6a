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
- ``madlib-exact``, ``madlib-exact-unpadded``: madlib with the exact numpy decode (the
  previous default offer), padded or not;
- ``tem``: TEM at ``--epsilon`` from prepared tables (minutes to prepare for the whole
  vocabulary on a fresh cache).

``--baseline SRC`` also serves every offer from another copy of the package (``SRC``: a
``src`` folder, e.g. of a checkout of an earlier commit) as ``NAME@baseline``, in the same
interleaved rounds: before/after comparisons on a shared machine.

Needs the service and httpx: ``python3 -m pip install -e '.[dev]'``.

Usage::

    python bench/bench_service.py --offers default,default-unpadded,madlib-exact-unpadded --clients 1,8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
}
OFFERS: dict[str, dict[str, Any]] = {
    "default": {},
    "default-unpadded": {"pad_responses": False},
    "madlib-exact": {"mechanisms": {"madlib": {"client": {"index": ["exact"]}}}},
    "madlib-exact-unpadded": {"mechanisms": {"madlib": {"client": {"index": ["exact"]}}}, "pad_responses": False},
    "tem": {"mechanisms": {"tem": {}}},
}


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
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(cmd, env=env), f"http://127.0.0.1:{port}"


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
    args = ap.parse_args()
    offers = [o for o in args.offers.split(",") if o]
    unknown = set(offers) - set(OFFERS)
    if args.baseline:
        offers = [x for o in offers for x in (o, f"{o}@baseline")]
    if unknown:
        raise SystemExit(f"unknown offers: {', '.join(sorted(unknown))} (known: {', '.join(OFFERS)})")
    levels = [int(c) for c in args.clients.split(",")]
    texts = REQUESTS[args.request]
    body: dict[str, object] = {"texts": texts, "epsilon": args.epsilon}
    words = sum(len(t.split()) for t in texts)
    with tempfile.TemporaryDirectory() as tmp:
        procs = {name: start(name, args, Path(tmp)) for name in offers}
        try:
            wait_ready(procs)
            results: dict[tuple[str, int], list[dict[str, float]]] = {}
            for name in offers:  # warm-up
                asyncio.run(level(procs[name][1], body, 1, 1.0, 20))
            for _ in range(args.rounds):
                for clients in levels:
                    for name in offers:  # interleaved: every offer at this level, then the next level
                        r = asyncio.run(level(procs[name][1], body, clients, args.seconds, args.requests))
                        results.setdefault((name, clients), []).append(r)
            print(
                f"\nrequest: {args.request} ({len(texts)} texts, ~{words} words), epsilon {args.epsilon:g}; "
                f"{args.workers} workers; {args.rounds} rounds of <= {args.seconds:g} s; median (min-max) over rounds"
            )
            print("| offer | clients | requests | req/s | p50 ms | p99 ms | non-200 |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for name in offers:
                for clients in levels:
                    rs = results[(name, clients)]
                    print(
                        f"| {name} | {clients} | {sum(r['requests'] for r in rs):.0f} | "
                        f"{span([r['rps'] for r in rs])} | {span([r['p50_ms'] for r in rs])} | "
                        f"{span([r['p99_ms'] for r in rs])} | {sum(r['non_200'] for r in rs):.0f} |",
                        flush=True,
                    )
        finally:
            for proc, _ in procs.values():
                proc.send_signal(signal.SIGTERM)
            for proc, _ in procs.values():
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()


if __name__ == "__main__":
    main()
