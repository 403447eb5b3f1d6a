"""Tokens/s privatizing IMDb training reviews on each engine: single process, Spark, Ray, datasets.

For TEM (epsilon 10, prepared k-NN tables) and the default Laplace mechanism with the
exact decode (``madlib``, epsilon 10), on the first ``--reviews`` IMDb training reviews
(read from ``--data``/imdb/train.jsonl.gz, written to a temporary Parquet file, never
into the repository), each engine runs in its own fresh Python process (bounded by
``--timeout`` seconds):

* ``single``: :func:`deniable.api.privatize_file` (Parquet in, Parquet out)
* ``spark[1]`` / ``spark[2]``: :func:`deniable.spark.privatize` on ``local[1]`` / ``local[2]``
* ``ray[2]``: :func:`deniable.integrations.ray.privatize`, ``ray.init(num_cpus=2)``
* ``hf[2]``: :func:`deniable.integrations.hf.privatize`, ``num_proc=2``

Start-up is reported apart from steady state: ``session s`` creates the engine (Spark
session, Ray cluster; 0 for the others), ``first batch s`` privatizes ONE batch on the
fresh session (worker start, embedding load, first batch), then ``steady tok/s`` is the
full run's tokens over its wall time in that warmed session (median of ``--rounds``).
``per worker`` divides it by the engine's workers. ``peak RSS/worker MB`` is the largest
VmHWM among the engine's worker processes (sampled from /proc; the process itself for
``single``); memory-mapped pages shared between workers count in each.

``deniable.prepare(emb, ["tem"])`` builds TEM's tables once first, for the ``--vocab-size``
most frequent words (default 50,000 to keep the run short; the whole 336k vocabulary takes
about 4 minutes to prepare). Usage::

    python bench/bench_engines.py --reviews 2000 --vocab-size 50000 --timeout 300
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import DATA, imdb_texts, load_average, peak_rss_mb, table

ENGINES = ("single", "spark[1]", "spark[2]", "ray[2]", "hf[2]")
WORKERS = {"single": 1, "spark[1]": 1, "spark[2]": 2, "ray[2]": 2, "hf[2]": 2}
#: cmdline fragments naming each engine's worker processes (for the RSS sampler)
WORKER_MARK = {"spark": ("pyspark",), "ray": ("default_worker", "ray::"), "hf": ("python",)}
BATCH = 100  # reviews per batch on every engine


# ----------------------------------------------------------------------- worker-RSS sampler
def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def _descendants(root: int) -> list[int]:
    kids, out, todo = _children(), [], [root]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


class RssSampler(threading.Thread):
    """Every 0.2 s: VmHWM (kB) of every descendant process whose cmdline has one of ``marks``."""

    def __init__(self, marks: tuple[str, ...]) -> None:
        super().__init__(daemon=True)
        self.marks, self.peak, self.pids, self._halt = marks, 0, set(), threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.2):
            for pid in _descendants(os.getpid()):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    if not any(m in cmd for m in self.marks) or "java" in cmd.split(" ", 1)[0]:
                        continue
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            self.peak = max(self.peak, int(line.split()[1]))
                            self.pids.add(pid)
                except OSError:
                    continue

    def stop(self) -> None:
        self._halt.set()
        self.join()


# ------------------------------------------------------------------------------- engines
def run_engine(engine: str, mech: str, src: str, small: str, tmp: str, vocab: int, rounds: int) -> dict[str, object]:
    """In a fresh process: session, first batch, then ``rounds`` full runs; returns the timings."""
    import pandas as pd

    params: dict[str, object] = {"vocab_size": vocab} if vocab else {}
    kind = engine.split("[")[0]
    n_full = len(pd.read_parquet(src))
    sampler = RssSampler(WORKER_MARK.get(kind, ()))
    sampler.start()
    t0 = time.perf_counter()
    if kind == "single":
        from deniable import Privatizer, load_embedding, make_mechanism
        from deniable.api import privatize_file

        emb = load_embedding(None, vocab_size=vocab or None)
        priv = Privatizer(make_mechanism(mech, emb, 10.0))
        session_s = 0.0
        counter = iter(range(10**6))

        def go(path: str) -> None:
            dst = os.path.join(tmp, f"out-{next(counter)}.parquet")
            privatize_file(path, dst, priv, columns=["text"], batch_size=BATCH, manifest=False, show_progress=False)

        # the embedding load belongs to the start-up: time from t0
        first = go
    elif kind == "spark":
        from deniable.integrations.spark import session
        from deniable.spark import privatize

        spark, _ = session(f"local[{WORKERS[engine]}]")
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH))
        session_s = time.perf_counter() - t0

        def go(path: str) -> None:
            df = spark.read.parquet(path).repartition(WORKERS[engine] * 4 if path == src else 1)
            privatize(df, "text", mech, 10.0, **params).write.format("noop").mode("overwrite").save()

        first = go
    elif kind == "ray":
        import ray
        import ray.data

        from deniable.integrations.ray import privatize

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        ray.data.DataContext.get_current().enable_progress_bars = False
        session_s = time.perf_counter() - t0

        def go(path: str) -> None:
            ds = ray.data.read_parquet(path)
            privatize(ds, "text", mech, 10.0, batch_size=BATCH, **params).materialize()

        first = go
    else:
        import datasets

        from deniable.integrations.hf import privatize

        datasets.disable_progress_bars()
        session_s = 0.0

        def go(path: str) -> None:
            ds = datasets.Dataset.from_parquet(path, cache_dir=os.path.join(tmp, "hf-cache"))
            privatize(ds, "text", mech, 10.0, num_proc=WORKERS[engine], batch_size=BATCH, **params)

        first = go
    t1 = time.perf_counter()
    first(small)
    first_s = time.perf_counter() - t1
    if kind == "single":
        first_s = time.perf_counter() - t0  # embedding and mechanism load + one batch
    walls = []
    for _ in range(rounds):
        t = time.perf_counter()
        go(src)
        walls.append(time.perf_counter() - t)
    sampler.stop()
    peak_kb = sampler.peak if kind != "single" else int(peak_rss_mb() * 1024)
    if kind == "ray":
        import ray

        ray.shutdown()
    return {"session_s": session_s, "first_s": first_s, "walls": walls, "rows": n_full, "peak_kb": peak_kb}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--reviews", type=int, default=2000)
    ap.add_argument("--vocab-size", type=int, default=50_000, help="N most frequent words (0: the whole default)")
    ap.add_argument("--rounds", type=int, default=1, help="full runs per engine (median reported)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per engine and mechanism")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--mechanisms", default="tem,madlib")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args._child:  # one engine in a fresh process: prints its timings as JSON
        engine, mech, src, small, tmp = json.loads(args._child)
        print(json.dumps(run_engine(engine, mech, src, small, tmp, args.vocab_size, args.rounds)))
        return

    import pandas as pd

    from deniable import load_embedding, prepare
    from deniable.text import words

    texts = imdb_texts(args.reviews, data=args.data)
    if texts is None:
        raise SystemExit(f"{args.data / 'imdb' / 'train.jsonl.gz'} not found (IMDb as JSON lines; see --data)")
    tokens = sum(len(words(t)) for t in texts)
    print(f"{len(texts):,} IMDb train reviews, {tokens:,} word tokens; vocabulary {args.vocab_size:,}")
    print(f"load before: {load_average()}")
    t = time.perf_counter()
    prepare(load_embedding(None, vocab_size=args.vocab_size or None), ["tem"], show_progress=False)
    print(f"deniable.prepare(emb, ['tem']): {time.perf_counter() - t:.1f} s (0 when already prepared)")
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="deniable-bench-engines-") as tmp:
        src, small = os.path.join(tmp, "reviews.parquet"), os.path.join(tmp, "first-batch.parquet")
        pd.DataFrame({"text": texts}).to_parquet(src)
        pd.DataFrame({"text": texts[:BATCH]}).to_parquet(small)
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this interpreter
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
        for mech in args.mechanisms.split(","):
            for engine in args.engines.split(","):
                work = tempfile.mkdtemp(dir=tmp)
                child = json.dumps([engine, mech, src, small, work])
                cmd = [sys.executable, __file__, "--_child", child, "--vocab-size", str(args.vocab_size)]
                cmd += ["--rounds", str(args.rounds)]
                row: dict[str, object] = {"mechanism": mech, "engine": engine}
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
                except subprocess.TimeoutExpired:
                    stop = f"timeout {args.timeout:.0f} s"
                    rows.append({**row, "session s": "-", "first batch s": "-", "steady tok/s": stop})
                    print(f"{mech} {engine}: timed out", flush=True)
                    continue
                last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
                if p.returncode != 0 or not last.startswith("{"):
                    print(f"{mech} {engine}: failed\n{p.stderr[-3000:]}", flush=True)
                    rows.append({**row, "session s": "-", "first batch s": "-", "steady tok/s": "failed"})
                    continue
                r = json.loads(last)
                rate = tokens / statistics.median(r["walls"])
                rows.append(
                    {
                        **row,
                        "session s": r["session_s"],
                        "first batch s": r["first_s"],
                        "steady tok/s": rate,
                        "per worker tok/s": rate / WORKERS[engine],
                        "peak RSS/worker MB": r["peak_kb"] / 1024,
                    }
                )
                print(f"{mech} {engine}: {rate:,.0f} tok/s (walls {r['walls']})", flush=True)
    for r in rows:
        for c in ("per worker tok/s", "peak RSS/worker MB"):
            r.setdefault(c, "-")
    print(f"load after: {load_average()}")
    print(table(rows))


if __name__ == "__main__":
    main()
