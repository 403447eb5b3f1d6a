"""Time every one-time build (``deniable prepare``, ``--calibration``) on a fresh cache, and print
each build's wall time (median, min - max over ``--rounds``): the figures the README quotes.

Each run is a fresh child process (``deniable prepare ... -q``) with
``DENIABLE_CACHE`` set to a new temporary folder (deleted afterwards), so every artefact
is built from scratch. Wall time, user and system CPU and peak RSS come from the child's
own resource usage (``os.wait4``); the load average is read before and after each run.

    python bench/bench_prepare.py --quick                       # seconds: 5,000 words, each build once
    python bench/bench_prepare.py --vocabulary all              # the issue-14 target
    python bench/bench_prepare.py -m calibration-madlib -m tem-far --vocabulary words  # README figures
    python bench/bench_prepare.py --vocab-size 100000 -m tem --rounds 3
    python bench/bench_prepare.py --src /work/main/src --src src  # A/B, interleaved
    python bench/bench_prepare.py --src /tmp/base/src --src src -m tem --rounds 3  # issue 43: the k-NN build, then/now
    python bench/bench_prepare.py -m tem-far --vocab-size 30000 --workers 1,2 --rounds 3  # TEM: 1 vs 2 workers

``--workers`` (TEM's builds: k-NN tables, far bounds, totals) runs each build once per worker
count in the same round (interleaved), fixed in the child by
``deniable.mechanisms.tem._shared.set_build_workers`` (the outputs are the same bytes whatever
the count: tests/test_tem_build_workers.py); without it the library's default (the usable cores).
For the other builds (madlib's HNSW index and decode choice, BRR's) the count is faiss's OpenMP
threads (``OMP_NUM_THREADS`` / ``DENIABLE_WORKERS`` in the child, deniable._threads)::

    python bench/bench_prepare.py -m madlib -m brr --vocab-size 50000 --workers 1,2 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: build name -> ``deniable prepare`` arguments (every one-time build a README figure quotes)
CONFIGS = {
    "tem": ["-m", "tem"],
    "tem-far": ["-m", "tem", "--epsilon", "1"],  # the k-NN tables, the far bounds and the totals at 1
    "madlib": ["-m", "madlib"],
    "brr": ["-m", "brr"],
    "brr-hnsw": ["-m", "brr", "--index", "hnsw"],
    "all": ["-m", "tem", "-m", "madlib", "-m", "brr"],
    "calibration-tem": ["--calibration", "-m", "tem"],
    "calibration-madlib": ["--calibration", "-m", "madlib"],
}
QUICK = ("tem", "tem-far", "madlib", "brr", "calibration-tem", "calibration-madlib")


#: the child: the worker count first (0: the default), then the ``deniable`` command line
_CHILD = (
    "import sys\n"
    "workers = int(sys.argv.pop(1))\n"
    "try:\n"
    "    from deniable.mechanisms.tem._shared import set_build_workers\n"
    "except ImportError:  # a source tree from before TEM's build workers (--src, A/B)\n"
    "    if workers:\n"
    "        raise\n"
    "else:\n"
    "    set_build_workers(workers or None)\n"
    "from deniable.cli import main\n"
    "main()\n"
)


def run_prepare(mechanisms: list[str], args: argparse.Namespace, src: str | None, workers: int = 0) -> dict[str, float]:
    """One fresh-cache ``deniable prepare`` in a child process: wall s, user s, sys s, peak RSS MB."""
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as cache:
        env = dict(os.environ, DENIABLE_CACHE=cache)
        for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # the library's own BLAS choice, as users get it
            env.pop(var, None)
        if workers:  # the non-TEM builds (HNSW index, decode choice, BRR): faiss's OpenMP threads = workers
            env.update(OMP_NUM_THREADS=str(workers), DENIABLE_WORKERS=str(workers))
        if src:
            env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), env.get("PYTHONPATH", "")])
        cmd = [sys.executable, "-c", _CHILD, str(workers), "prepare", "-q", *mechanisms]
        if args.vocab_size:
            cmd += ["--vocab-size", str(args.vocab_size)]
        else:
            cmd += ["--vocabulary", args.vocabulary]
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(cmd)} failed with status {os.waitstatus_to_exitcode(status)}")
        return {
            "wall": wall,
            "user": usage.ru_utime,
            "sys": usage.ru_stime,
            "rss": usage.ru_maxrss / 1024,
            "load0": load0,
            "load1": os.getloadavg()[0],
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--build", action="append", choices=sorted(CONFIGS), help="default: each but all")
    ap.add_argument("--quick", action="store_true", help="5,000 words, one round (a try in seconds)")
    ap.add_argument("--vocabulary", default="all", help="words (the default vocabulary) or all (default: all)")
    ap.add_argument("--vocab-size", type=int, default=None, help="the N most frequent words instead")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--src", action="append", help="source folder(s) put first on PYTHONPATH (A/B, interleaved)")
    ap.add_argument(
        "--workers",
        default="",
        help="build worker counts to compare, e.g. 1,2 (interleaved; TEM: its workers; the others: faiss threads)",
    )
    args = ap.parse_args()
    if args.quick:
        args.vocab_size = args.vocab_size or 5000
    which = args.build or (list(QUICK) if args.quick else [c for c in CONFIGS if c != "all"])
    srcs = args.src or [None]
    counts = [int(w) for w in args.workers.split(",") if w] or [0]
    print(f"{os.cpu_count()} CPUs; vocabulary: {args.vocab_size or args.vocabulary}", flush=True)
    print("| source | build | workers | round | wall s | user s | sys s | peak RSS MB | load before / after |")
    print("|---|---|---|---|---|---|---|---|---|")
    walls: dict[tuple[str, str, int], list[float]] = {}
    for r in range(args.rounds):
        for name in which:
            for src in srcs:
                for workers in counts:
                    m = run_prepare(CONFIGS[name], args, src, workers)
                    walls.setdefault((src or "-", name, workers), []).append(m["wall"])
                    print(
                        f"| {src or '-'} | {name} | {workers or 'default'} | {r + 1} | {m['wall']:.1f} "
                        f"| {m['user']:.1f} | {m['sys']:.1f} | {m['rss']:.0f} | {m['load0']:.2f} / {m['load1']:.2f} |",
                        flush=True,
                    )
    print()
    print("| source | build | workers | rounds | wall s median | min - max |")
    print("|---|---|---|---|---|---|")
    for (src, name, workers), w in walls.items():
        print(
            f"| {src} | {name} | {workers or 'default'} | {len(w)} | {statistics.median(w):.1f} "
            f"| {min(w):.1f} - {max(w):.1f} |"
        )


if __name__ == "__main__":
    main()
