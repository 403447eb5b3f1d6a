"""Time ``deniable prepare`` on a fresh cache: TEM, madlib, BRR and all three together.

Each run is a fresh child process (``deniable prepare ... -q``) with
``DENIABLE_CACHE`` set to a new temporary folder (deleted afterwards), so every artefact
is built from scratch. Wall time, user and system CPU and peak RSS come from the child's
own resource usage (``os.wait4``); the load average is read before and after each run.

    python bench/bench_prepare.py --vocabulary all              # the issue-14 target
    python bench/bench_prepare.py --vocab-size 100000 -m tem --rounds 3
    python bench/bench_prepare.py --src /work/main/src --src src  # A/B, interleaved
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGS = {"tem": ["tem"], "madlib": ["madlib"], "brr": ["brr"], "all": ["tem", "madlib", "brr"]}


def run_prepare(mechanisms: list[str], args: argparse.Namespace, src: str | None) -> dict[str, float]:
    """One fresh-cache ``deniable prepare`` in a child process: wall s, user s, sys s, peak RSS MB."""
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as cache:
        env = dict(os.environ, DENIABLE_CACHE=cache)
        if src:
            env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), env.get("PYTHONPATH", "")])
        cmd = [sys.executable, "-c", "from deniable.cli import main; main()", "prepare", "-q"]
        for m in mechanisms:
            cmd += ["-m", m]
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
    ap.add_argument("-m", "--mechanism", action="append", choices=sorted(CONFIGS), help="default: each, then all")
    ap.add_argument("--vocabulary", default="all", help="words (the default vocabulary) or all (default: all)")
    ap.add_argument("--vocab-size", type=int, default=None, help="the N most frequent words instead")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--src", action="append", help="source folder(s) put first on PYTHONPATH (A/B, interleaved)")
    args = ap.parse_args()
    which = args.mechanism or list(CONFIGS)
    srcs = args.src or [None]
    print(f"{os.cpu_count()} CPUs; vocabulary: {args.vocab_size or args.vocabulary}", flush=True)
    print("| source | prepare | round | wall s | user s | sys s | peak RSS MB | load before / after |")
    print("|---|---|---|---|---|---|---|---|")
    for r in range(args.rounds):
        for name in which:
            for src in srcs:
                m = run_prepare(CONFIGS[name], args, src)
                print(
                    f"| {src or '-'} | {name} | {r + 1} | {m['wall']:.1f} | {m['user']:.1f} | {m['sys']:.1f} "
                    f"| {m['rss']:.0f} | {m['load0']:.2f} / {m['load1']:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
