"""Throughput of ``deniable serve`` on loopback: requests/s and p50/p99 latency for 1, 8, 32 clients.

Starts the service (uvicorn, ``--workers N``) on 127.0.0.1 at a free port, waits for
``/readyz``, then for each mechanism (TEM, the Laplace mechanism with the faiss exact
decode) and each number of concurrent clients (httpx async) sends requests of three short
review-like texts for at most ``--seconds`` or ``--requests`` each (bounded). Usage::

    python bench/bench_service.py --vocab-size 50000 --workers 2
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

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: one request: three short review-like texts (the issue's "3 short texts" request)
TEXTS = [
    "The movie was a great surprise and the actors were funny.",
    "The story moved fast and the music was lovely.",
    "I would watch it again with my family next weekend.",
]


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
        "clients": clients,
        "requests": len(latencies),
        "non_200": errors,
        "rps": len(latencies) / wall,
        "p50_ms": float(np.percentile(lat, 50)) if lat.size else float("nan"),
        "p99_ms": float(np.percentile(lat, 99)) if lat.size else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embedding", default=None)
    ap.add_argument("--vocab-size", type=int, default=50_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=8.0, help="per mechanism and level (bound)")
    ap.add_argument("--requests", type=int, default=2000, help="per mechanism and level (bound)")
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--clients", default="1,8,32")
    args = ap.parse_args()

    port = free_port()
    config = {
        "max_concurrency": 64,
        "mechanisms": {
            "madlib": {"epsilons": [args.epsilon], "client": {"index": ["flat"]}},
            "tem": {"epsilons": [args.epsilon]},
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "service.json"
        path.write_text(json.dumps(config))
        cmd = [sys.executable, "-c", "from deniable.cli import main; main()", "serve", "--config", str(path)]
        cmd += ["--port", str(port), "--workers", str(args.workers), "--vocab-size", str(args.vocab_size)]
        if args.embedding:
            cmd += ["--embedding", args.embedding]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
        proc = subprocess.Popen(cmd, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 600:
                try:
                    if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None:
                    raise SystemExit("the server exited")
                time.sleep(0.5)
            print(f"ready after {time.monotonic() - t0:.1f} s ({args.workers} workers, vocabulary {args.vocab_size:,})")
            print("| mechanism | clients | requests | req/s | p50 ms | p99 ms | non-200 |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for mech in ("tem", "madlib"):
                body = {"texts": TEXTS, "epsilon": args.epsilon, "mechanism": mech}
                asyncio.run(level(url, body, 1, 1.0, 20))  # warm-up
                for clients in (int(c) for c in args.clients.split(",")):
                    r = asyncio.run(level(url, body, clients, args.seconds, args.requests))
                    print(
                        f"| {mech} | {clients} | {r['requests']:.0f} | {r['rps']:.1f} | {r['p50_ms']:.1f} | "
                        f"{r['p99_ms']:.1f} | {r['non_200']:.0f} |",
                        flush=True,
                    )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
