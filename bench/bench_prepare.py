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


def run_prepare(mechanisms: list[str], args: argparse.Namespace, src: str | None) -> dict[str, float]:
    """One fresh-cache ``deniable prepare`` in a child process: wall s, user s, sys s, peak RSS MB."""
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as cache:
        env = dict(os.environ, DENIABLE_CACHE=cache)
        for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # the library's own BLAS choice, as users get it
            env.pop(var, None)
        if src:
            env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), env.get("PYTHONPATH", "")])
        cmd = [sys.executable, "-c", "from deniable.cli import main; main()", "prepare", "-q", *mechanisms]
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
    args = ap.parse_args()
    if args.quick:
        args.vocab_size = args.vocab_size or 5000
    which = args.build or (list(QUICK) if args.quick else [c for c in CONFIGS if c != "all"])
    srcs = args.src or [None]
    print(f"{os.cpu_count()} CPUs; vocabulary: {args.vocab_size or args.vocabulary}", flush=True)
    print("| source | build | round | wall s | user s | sys s | peak RSS MB | load before / after |")
    print("|---|---|---|---|---|---|---|---|")
    walls: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for name in which:
            for src in srcs:
                m = run_prepare(CONFIGS[name], args, src)
                walls.setdefault((src or "-", name), []).append(m["wall"])
                print(
                    f"| {src or '-'} | {name} | {r + 1} | {m['wall']:.1f} | {m['user']:.1f} | {m['sys']:.1f} "
                    f"| {m['rss']:.0f} | {m['load0']:.2f} / {m['load1']:.2f} |",
                    flush=True,
                )
    print()
    print("| source | build | rounds | wall s median | min - max |")
    print("|---|---|---|---|---|")
    for (src, name), w in walls.items():
        print(f"| {src} | {name} | {len(w)} | {statistics.median(w):.1f} | {min(w):.1f} - {max(w):.1f} |")


if __name__ == "__main__":
    main()
