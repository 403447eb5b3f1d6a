"""On-device privatization (clients/js): artefact sizes, first-load time, and a 30-word message
privatized fully locally (Node and headless Chromium) at 50k and all 336k words, and in split
mode (noisy codes / vectors decoded by POST /v1/decode over loopback).

    python bench/bench_device.py [--rounds 15] [--out /tmp/deniable-bench-device] [--no-browser] [--no-split]
    python bench/bench_device.py --cpu [--rounds 15]   # JS vs the Python library, tokens per CPU-second
    python bench/bench_device.py --only madlib-336k,madlib-q8-250k --no-split   # some artefacts only
    python bench/bench_device.py --agreement [--tokens 4000]   # 8-bit madlib vs float32: decodes, utility

``--agreement``: the playground's 8-bit madlib artefact (the 250,000 most common words, 8 bits per
coordinate: ``quantized_madlib``) against float32 madlib on all 336,158 words, the same noise for
both, on IMDb train tokens (``DENIABLE_DATA``): how often the decoded word differs, the share
released unchanged (utility) by each, and the alternatives measured on the way (float32 on 250k
words: the vocabulary's share; the whole vocabulary at 6 bits, which also fits 16 MB).

``--cpu``: the same 30-word message privatized by the Python library (``deniable.Privatizer``
over the same 50k vocabulary) and by the Node client (its WebAssembly SIMD kernels and its
typed-array ones), in interleaved rounds of one process each (Python in this process, Node in a
long-lived child: start-up excluded), each round timed in CPU seconds (``time.process_time``,
``process.cpuUsage``; BLAS threads counted). Unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE first.

Prints tables: median and min-max over interleaved rounds (every configuration once per
round, in one process: Node, or one Chromium page). Limits: the local decode scans every
vocabulary code (BRR: V x 32 bytes) or vector (madlib: V x d x 4 bytes) once per message
(the message's tokens share the scan), in single-threaded JavaScript.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "clients" / "js"
#: A 30-word message (public text).
TEXT = (
    "The hockey game last night was great, and the crowd loved every minute of it. "
    "My brother said the new coach should stay for another season because the team finally plays well."
)
EPS = {"brr": 1.0, "madlib": 10.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build(out: Path, only: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """Web artefacts for brr (256-bit autoencoder codes) and madlib at 50k and all words, and the
    playground's 8-bit madlib (250k words); ``only``: these names."""
    import deniable
    from deniable.binarize.device import save_web_artefact, web_artefact_id, web_artefact_of
    from deniable.mechanisms import make_mechanism
    from deniable.mechanisms.laplace import quantized_madlib

    found = {}
    for label, size in (("50k", 50_000), ("336k", None)):
        emb = deniable.load_embedding(vocab_size=size)
        for name in ("brr", "madlib"):
            keys = {f"{name}-{label}", *(["madlib-q8-250k"] if name == "madlib" and size is None else [])}
            if only and not keys & only:
                continue
            opts = {"bits": 256, "show_progress": False} if name == "brr" else {"index": "exact"}
            mech = make_mechanism(name, emb, EPS[name], **opts)
            if name == "brr":
                mech.prepare()  # type: ignore[attr-defined]
            variants = [(f"{name}-{label}", mech)]
            if name == "madlib" and size is None:  # the playground's default: 8 bits, 250k words
                variants.append(("madlib-q8-250k", quantized_madlib(mech)))
            for key, m in variants:
                if only and key not in only:
                    continue
                files = web_artefact_of(m)
                folder = out / key
                save_web_artefact(folder, files)
                payload = {"codes.bin", "vectors.bin", "qvectors.bin", "levels.bin"}
                found[key] = {
                    "dir": folder,
                    "id": web_artefact_id(files),
                    "vocab": m.embedding.size,
                    "bytes": sum(len(b) for b in files.values()),
                    "payload": sum(len(b) for n, b in files.items() if n in payload),
                    "mechanism": name,
                }
    return found


def agreement(n_tokens: int, epsilons: tuple[float, ...] = (5.0, 10.0, 20.0)) -> None:
    """8-bit madlib (250k words) vs float32 madlib (336k), the same noise: decodes that differ, utility."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    import deniable
    from _common import corpus_ids, imdb_texts, load_average
    from deniable.binarize.device import QUANTIZED_VOCAB
    from deniable.embedding import Embedding
    from deniable.mechanisms import make_mechanism
    from deniable.mechanisms.laplace import quantized_madlib

    threadpool_limits(1)
    emb = deniable.load_embedding()
    full = make_mechanism("madlib", emb, 10.0, index="exact")
    small = quantized_madlib(full)
    qemb = small.embedding
    sub = emb.subset(QUANTIZED_VOCAB)
    # the whole vocabulary at 6 bits (evenly spaced levels per dimension, as quantize does at 8): fits 16 MB too
    src = np.asarray(emb.vectors, dtype=np.float64)
    lo, hi = src.min(axis=0), src.max(axis=0)
    step = (hi - lo) / 63
    six = Embedding(emb.vocabulary, (lo + step * np.clip(np.rint((src - lo) / step), 0, 63)).astype(np.float32))
    words_mb = {v: sum(len(w.encode()) + 1 for w in emb.vocabulary[:v]) for v in (emb.size, QUANTIZED_VOCAB)}
    print(f"load {load_average()}")
    print("| variant | words | files MB (MiB) | max distance moved |")
    print("|---|---|---|---|")
    sizes = {
        "float32, all words": (emb.size, emb.size * emb.dim * 4 + words_mb[emb.size], 0.0),
        f"8-bit, {QUANTIZED_VOCAB:,} words (the playground's)": (
            QUANTIZED_VOCAB,
            QUANTIZED_VOCAB * emb.dim + emb.dim * 256 * 4 + words_mb[QUANTIZED_VOCAB],
            qemb.max_error,  # type: ignore[attr-defined]
        ),
        "6-bit, all words (not built)": (
            emb.size,
            emb.size * emb.dim * 6 // 8 + emb.dim * 64 * 4 + words_mb[emb.size],
            float(np.linalg.norm(np.asarray(six.vectors) - src, axis=1).max()),
        ),
    }
    for name, (v, b, e) in sizes.items():
        print(f"| {name} | {v:,} | {b / 1e6:.2f} ({b / 2**20:.2f}) | {e:.4f} |")
    ids, source = corpus_ids(emb, n_tokens, seed=3)
    oov = ids >= QUANTIZED_VOCAB
    texts = imdb_texts(5000)
    if texts is not None:  # how many word tokens of real text the 250k words lose (out of all 336k: both lose)
        from deniable.text import words

        every = emb.ids(w.lower() for t in texts for w in words(t))
        known = every[every >= 0]
        print(
            f"\nIMDb train, 5,000 reviews: {len(every):,} word tokens, {np.mean(every < 0):.3%} outside all "
            f"{emb.size:,} words, {np.mean(known >= QUANTIZED_VOCAB):.4%} of the others outside the "
            f"{QUANTIZED_VOCAB:,} most common (the device replaces those by a random word)"
        )
    print(f"\n{len(ids):,} tokens of {source}; {oov.mean():.3%} not among the {QUANTIZED_VOCAB:,} most common words")
    print("| epsilon | float32 unchanged | variant | differs from float32 | variant unchanged |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(20261129)
    for eps in epsilons:
        ref_mech = make_mechanism("madlib", emb, eps, index="exact")
        z = ref_mech.noise(len(ids), rng)  # the same noise for every variant
        ref = ref_mech.decode((emb.vectors[ids] + z).astype(np.float32))
        # the device's OOV policy: a uniformly random word of its vocabulary, then the mechanism
        dev_ids = np.where(oov, rng.integers(0, QUANTIZED_VOCAB, len(ids)), ids)
        rows = {
            "8-bit, 250k words": (qemb, dev_ids),
            "float32, 250k words": (sub, dev_ids),
            "6-bit, all words": (six, ids),
        }
        for name, (e, inp) in rows.items():
            got = make_mechanism("madlib", e, eps, index="exact").decode((e.vectors[inp] + z).astype(np.float32))
            print(
                f"| {eps:g} | {np.mean(ref == ids):.3f} | {name} | {np.mean(got != ref):.2%} "
                f"| {np.mean(got == ids):.3f} |"
            )


def summary(ms: list[float]) -> str:
    return f"{statistics.median(ms):8.1f} ({min(ms):.1f}-{max(ms):.1f})"


def table(title: str, arts: dict[str, dict[str, Any]], res: dict[str, Any]) -> None:
    print(f"\n{title}")
    print("| configuration | words | artefact MB | first load ms | 30-word message ms, median (min-max) | tokens/s |")
    print("|---|---|---|---|---|---|")
    for name, r in res.items():
        a = arts[name.removesuffix("-split")]
        med = statistics.median(r["ms"])
        print(
            f"| {name} | {a['vocab']:,} | {a['bytes'] / 2**20:.1f} | {r['load_ms']:.0f} | {summary(r['ms'])} "
            f"| {r['tokens'] / med * 1000:,.0f} |"
        )


def run_node(configs: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        raise SystemExit("needs node (apt-get install -y nodejs)")
    spec = json.dumps({"configs": configs, "text": TEXT, "rounds": rounds})
    got = subprocess.run([node, str(CLIENT / "tools" / "bench.mjs"), spec], capture_output=True, text=True, check=True)
    return dict(json.loads(got.stdout))


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {  # noqa: RUF012 - the base class's own attribute, extended
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".mjs": "text/javascript",
        ".js": "text/javascript",
    }

    def log_message(self, *args: Any) -> None:
        pass


def run_chromium(arts: dict[str, dict[str, Any]], rounds: int, out: Path) -> dict[str, Any] | None:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        print("(no selenium: Chromium skipped)")
        return None
    chrome, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not chrome or not driver_path:
        print("(no chromium / chromedriver: Chromium skipped)")
        return None
    site = out / "site"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir()
    (site / "client").symlink_to(CLIENT)
    for name, a in arts.items():
        (site / name).symlink_to(a["dir"])
    port = free_port()
    handler = functools.partial(_Handler, directory=str(site))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    try:
        driver.set_script_timeout(600)
        driver.get(base + "/client/README.md")
        configs = [{"name": n, "source": f"{base}/{n}/", "epsilon": EPS[a["mechanism"]]} for n, a in arts.items()]
        script = (
            "const done = arguments[arguments.length - 1];"
            f"import('{base}/client/tools/bench.mjs').then(m => m.runBench(arguments[0], arguments[1]))"
            ".then(r => done(JSON.stringify(r)), e => done(JSON.stringify({error: String(e)})));"
        )
        res = json.loads(driver.execute_async_script(script, configs, {"text": TEXT, "rounds": rounds}))
        if "error" in res:
            raise RuntimeError(res["error"])
        return dict(res)
    finally:
        driver.quit()
        srv.shutdown()


def run_split(arts: dict[str, dict[str, Any]], rounds: int) -> dict[str, Any]:
    """The 50k artefacts in split mode against a real uvicorn service on loopback (Node client)."""
    import httpx

    cfg = {
        "vocab_size": 50_000,
        "mechanisms": {
            "brr": {"epsilons": [EPS["brr"]], "options": {"bits": 256}},
            "madlib": {"epsilons": [EPS["madlib"]], "options": {"index": "flat"}},
        },
    }
    port = free_port()
    cfg_path = arts["brr-50k"]["dir"].parent / "service.json"
    cfg_path.write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-c", "from deniable.cli import main; main()", "serve", "--config", str(cfg_path)]
    proc = subprocess.Popen([*cmd, "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        index = httpx.get(url + "/v1/device", timeout=120).json()
        configs = []
        for a in index["artefacts"]:
            if a.get("vectors") == "uint8":
                continue  # the same 50k words at 8 bits: split mode's decode is the service's either way
            name = f"{a['mechanism']}-50k-split"
            configs.append(
                {
                    "name": name,
                    "source": url + a["url"],
                    "epsilon": EPS[a["mechanism"]],
                    "mode": "split",
                    "decodeUrl": url + index["decode"],
                    "artefactId": a["id"],
                }
            )
        return run_node(configs, rounds)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def cpu_ratio(rounds: int, out: Path, count: int = 40) -> None:
    """Tokens per CPU-second, Python library vs Node (wasm and js kernels), interleaved rounds at 50k words."""
    import warnings

    import deniable
    from deniable.binarize.device import save_web_artefact, web_artefact_of
    from deniable.mechanisms import make_mechanism
    from deniable.text import words

    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        raise SystemExit("needs node (apt-get install -y nodejs)")
    emb = deniable.load_embedding(vocab_size=50_000)
    pys, load = {}, []
    for name in ("brr", "madlib"):
        opts = {"bits": 256, "show_progress": False} if name == "brr" else {"index": "exact"}
        mech = make_mechanism(name, emb, EPS[name], **opts)
        if name == "brr":
            mech.prepare()  # type: ignore[attr-defined]
        folder = out / f"{name}-50k"
        save_web_artefact(folder, web_artefact_of(mech))
        load.append({"name": name, "dir": str(folder), "epsilon": EPS[name]})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pys[name] = deniable.Privatizer(mech, check_strength=False)
    tokens = len(words(TEXT))
    proc = subprocess.Popen(
        [node, str(CLIENT / "tools" / "cpubench.mjs")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )

    def ask(cmd: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(cmd) + "\n")
        proc.stdin.flush()
        return dict(json.loads(proc.stdout.readline()))

    rates: dict[str, list[float]] = {}
    try:
        ask({"load": load})
        for name, p in pys.items():  # warm-up, both sides
            for kern in ("wasm", "js"):
                ask({"kernels": kern})
                ask({"run": name, "text": TEXT, "count": 3})
            for _ in range(3):
                p.privatize(TEXT)
        for _ in range(rounds):
            for name, p in pys.items():
                t = time.process_time()
                for _ in range(count):
                    p.privatize(TEXT)
                rates.setdefault(f"{name} python", []).append(tokens * count / (time.process_time() - t))
                for kern in ("wasm", "js"):
                    ask({"kernels": kern})
                    r = ask({"run": name, "text": TEXT, "count": count})
                    rates.setdefault(f"{name} node {kern}", []).append(r["tokens"] / r["cpu_s"])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)
    loadavg = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nTokens per CPU-second, 50k words, {rounds} interleaved rounds of {count} messages; load {loadavg}")
    print("| configuration | tok/CPU-s median (min-max) | ratio to python (median of per-round ratios) |")
    print("|---|---|---|")
    for key, xs in rates.items():
        base = rates[f"{key.split()[0]} python"]
        ratio = statistics.median(x / b for x, b in zip(xs, base, strict=True))
        print(f"| {key} | {statistics.median(xs):,.0f} ({min(xs):,.0f}-{max(xs):,.0f}) | {ratio:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=Path, default=Path("/tmp/deniable-bench-device"))
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--no-split", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="only the per-CPU-second comparison with the Python library")
    ap.add_argument("--only", default="", help="comma-separated artefact names (e.g. madlib-336k,madlib-q8-250k)")
    ap.add_argument("--agreement", action="store_true", help="only the 8-bit vs float32 madlib decode comparison")
    ap.add_argument("--tokens", type=int, default=4000, help="--agreement: IMDb tokens")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cpu:
        cpu_ratio(args.rounds, args.out)
        return
    if args.agreement:
        agreement(args.tokens)
        return
    arts = build(args.out, set(filter(None, args.only.split(","))) or None)
    loadavg = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load {loadavg} (1/5/15 min) at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| artefact | words | files MB | payload MB | id |")
    print("|---|---|---|---|---|")
    for name, a in arts.items():
        print(f"| {name} | {a['vocab']:,} | {a['bytes'] / 2**20:.1f} | {a['payload'] / 2**20:.1f} | {a['id']} |")
    configs = [{"name": n, "source": str(a["dir"]), "epsilon": EPS[a["mechanism"]]} for n, a in arts.items()]
    table(
        f"Node {subprocess.run(['node', '--version'], capture_output=True, text=True).stdout.strip()}, fully local",
        arts,
        run_node(configs, args.rounds),
    )
    if not args.no_browser:
        res = run_chromium(arts, args.rounds, args.out)
        if res is not None:
            table("headless Chromium, fully local", arts, res)
    if not args.no_split:
        table(
            "Node, split mode (POST /v1/decode on loopback, service decoding with faiss flat)",
            arts,
            run_split(arts, args.rounds * 2),
        )


if __name__ == "__main__":
    main()
