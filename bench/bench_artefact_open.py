"""Opening prepared artefacts in a fresh process: hashed whole vs trusted by their stamp (issue 27).

Each cell is a fresh Python process that checks every prepared artefact of the cache
(``$DENIABLE_CACHE``) against its manifest: ``full`` hashes every file whole (what every
process did before the stamp, and what ``deniable prepare --verify`` does), ``stamp`` is what
opening does now (size, inode, mtime and 16 sampled blocks; a whole hash only for a changed
file). Rounds interleave the two; median and min-max of the wall time of the checks.

    python bench/bench_artefact_open.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

_CHILD = """
import sys, time
import deniable.artefacts as prep
infos = prep.list_artefacts()
t0 = time.perf_counter()
for i in infos:
    prep._verify(i.path, prep._read_manifest(i.path), full=sys.argv[1] == "full")
print(time.perf_counter() - t0, len(infos), sum(i.disk_bytes for i in infos))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"full": [], "stamp": []}
    count = size = 0
    subprocess.run([sys.executable, "-c", _CHILD, "full"], check=True, capture_output=True)  # stamps written
    for _ in range(args.rounds):
        for mode in times:
            out = subprocess.run([sys.executable, "-c", _CHILD, mode], check=True, capture_output=True, text=True)
            seconds, n, b = out.stdout.split()
            times[mode].append(float(seconds))
            count, size = int(n), int(b)
    print(f"{count} prepared artefacts, {size / 2**30:.2f} GiB; {args.rounds} interleaved rounds, fresh processes")
    print(f"{'check':<8}{'median s':>10}{'min-max s':>18}")
    for mode, ts in times.items():
        print(f"{mode:<8}{statistics.median(ts):>10.3f}{f'{min(ts):.3f}-{max(ts):.3f}':>18}")


if __name__ == "__main__":
    main()
