"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np


def _data_dir() -> Path:
    if "DENIABLE_DATA" in os.environ:
        return Path(os.environ["DENIABLE_DATA"])
    here = Path(__file__).resolve()
    # the main checkout sits beside shared/ (/work/main), a worktree one level deeper (/work/wt/<name>)
    for up in (2, 3):
        candidate = here.parents[up] / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return here.parents[2] / "shared" / "data"


DATA = _data_dir()


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def imdb_texts(limit: int, split: str = "train", data: Path = DATA) -> list[str] | None:
    """The first ``limit`` IMDb reviews under ``data``, or None when the shared data are absent."""
    path = data / "imdb" / f"{split}.jsonl.gz"
    if not path.is_file():
        return None
    out: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            out.append(json.loads(line)["text"])
            if len(out) >= limit:
                break
    return out


def corpus_ids(embedding, n_tokens: int, seed: int = 0) -> tuple[np.ndarray, str]:  # type: ignore[no-untyped-def]
    """``n_tokens`` in-vocabulary ids from real text (IMDb) when present, else Zipf-like ids."""
    from deniable.text import words

    texts = imdb_texts(max(50, n_tokens // 100))
    if texts is not None:
        ids = embedding.ids(w.lower() for t in texts for w in words(t))
        ids = ids[ids >= 0][:n_tokens]
        if len(ids) >= n_tokens:
            return ids, "IMDb train tokens"
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.1, size=n_tokens) - 1, embedding.size - 1)
    return ranks.astype(np.int64), "Zipf(1.1) over frequency ranks"


def mldp_from_arrays(words: list[str], vectors: np.ndarray, name: str, epsilon: float):  # type: ignore[no-untyped-def]
    """MLDP's mechanism ``name`` over ``words`` and their ``vectors`` (rows in the same order).

    MLDP is a peer measured beside deniable in the same run, never a dependency: it pins
    numpy 1.x, so it runs in an environment of its own (``pip install mldp-text
    threadpoolctl``) as a child that needs no deniable (:func:`mldp_rate`): the parent writes
    the vocabulary and the vectors, the child reads them.
    """
    import mldp_text
    from gensim.models import KeyedVectors

    vectors = np.asarray(vectors, dtype=np.float32)
    kv = KeyedVectors(vector_size=vectors.shape[1])  # not count=V: add_vectors would append after V empty rows
    kv.add_vectors(words, vectors)
    assert kv.vectors.shape == (len(words), vectors.shape[1])
    # ``vocab`` is MLDP's word list; its TEM reads len(vocab) as the vocabulary size
    return getattr(mldp_text, name)(epsilon, embedding_matrix=kv, dim=vectors.shape[1], vocab=set(words))


@contextlib.contextmanager
def busy_cores(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` spinning Python processes for the duration of the block (a "busy machine" cell).

    They are this process's own children, ended by their pid when the block exits.
    """
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(0.2)  # let them reach the scheduler before the measured work starts
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def pin_threads(n: int = 1) -> object:
    """Pin faiss's and BLAS's thread pools to ``n`` (per-thread numbers); returns the threadpoolctl limiter."""
    import faiss
    from threadpoolctl import threadpool_limits

    faiss.omp_set_num_threads(n)
    return threadpool_limits(limits=n)


def interleaved_rounds(
    contenders: dict[str, Callable[[], int]], rounds: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, list[float]]:
    """Run every contender once per round, in turn (A B A B ...); each call returns its item count.

    Returns items per second of ``clock`` (wall time by default; ``time.process_time`` for
    CPU-seconds) for each round, per contender, so a load spike on a shared machine hits all
    contenders alike instead of one.
    """
    out: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            t0 = clock()
            n = fn()
            out[name].append(n / (clock() - t0))
    return out


def summarise(rates: list[float]) -> str:
    """``median (min-max)`` of a list of rates."""
    return f"{_fmt(statistics.median(rates))} ({_fmt(min(rates))}-{_fmt(max(rates))})"


def load_average() -> str:
    """The 1/5/15-minute load average (to report alongside timings on a shared machine)."""
    try:
        a, b, c = os.getloadavg()
    except OSError:  # pragma: no cover
        return "n/a"
    return f"{a:.1f} / {b:.1f} / {c:.1f} on {os.cpu_count()} cores"


def table(rows: list[dict[str, object]]) -> str:
    """A markdown table of ``rows``."""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    return "\n".join(lines)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


# -- MLDP in its own environment ------------------------------------------------------------------
# ``mldp-text`` pins numpy 1.x, so it lives in a venv of its own (``--mldp-python``) without
# deniable: the parent writes the vocabulary, its vectors and the tokens' words to a folder,
# and a child of that Python (this file run as a script) reads them and privatizes for a
# fixed time after its own start-up.


def write_mldp_inputs(folder: Path, embedding, ids: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    """The vocabulary, its vectors and the words of ``ids``, for :func:`mldp_rate`'s child (public data, IMDb words)."""
    (folder / "vocab.json").write_text(json.dumps(list(embedding.words(np.arange(embedding.size)))))
    np.save(folder / "vectors.npy", np.asarray(embedding.vectors, dtype=np.float32)[: embedding.size])
    (folder / "tokens.json").write_text(json.dumps(list(embedding.words(ids))))


def _mldp_child(name: str, epsilon: float, folder: Path, seconds: float) -> None:
    """MLDP's ``name`` on the folder's tokens (cycled), one thread, for ``seconds`` after its start-up.

    Prints ``{"ready": true}`` once started, then a JSON line after every token (tokens done,
    seconds since ready), so a parent that stops it still knows the rate.
    """
    import itertools

    limiter = pin_threads(1)
    words = json.loads((folder / "vocab.json").read_text())
    mldp = mldp_from_arrays(words, np.load(folder / "vectors.npy"), name, epsilon)
    tokens = json.loads((folder / "tokens.json").read_text())
    print(json.dumps({"ready": True}), flush=True)
    t0 = time.perf_counter()
    for i, w in enumerate(itertools.cycle(tokens)):
        mldp.replace_word(w)
        elapsed = time.perf_counter() - t0
        print(json.dumps({"done": i + 1, "seconds": elapsed}), flush=True)
        if elapsed >= seconds:
            break
    del limiter


def mldp_rate(
    python: str, name: str, epsilon: float, folder: Path, seconds: float, timeout: float = 300.0
) -> dict[str, float]:
    """MLDP's ``name`` in a fresh process of ``python``: tokens/s after its start-up, the tokens
    it did, and the start-up's wall seconds (imports, reading the inputs, building its index)."""
    cmd = [python, str(Path(__file__).resolve()), "mldp-child", name, str(epsilon), str(folder), str(seconds)]
    t_spawn = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready, last = None, None
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith('{"ready"'):
            ready = time.perf_counter() - t_spawn
        elif line.startswith("{"):
            last = json.loads(line)
        if time.perf_counter() - t_spawn > timeout:
            proc.kill()
            break
    proc.wait()
    if ready is None or last is None:
        raise SystemExit(f"MLDP's child ({python}) did not start or privatized nothing: does it have mldp-text?")
    return {"MLDP tok/s": last["done"] / last["seconds"], "MLDP tokens": last["done"], "MLDP start-up s": ready}


if __name__ == "__main__" and sys.argv[1:2] == ["mldp-child"]:
    _mldp_child(sys.argv[2], float(sys.argv[3]), Path(sys.argv[4]), float(sys.argv[5]))
