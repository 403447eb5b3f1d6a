"""Helpers shared by the benchmark scripts (not part of the package)."""

from __future__ import annotations

import gzip
import json
import os
import resource
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("DENIABLE_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def imdb_texts(limit: int, split: str = "train") -> list[str] | None:
    """The first ``limit`` IMDb reviews, or None when the shared data are absent."""
    path = DATA / "imdb" / f"{split}.jsonl.gz"
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
