"""The default nearest-neighbour decode: the cheapest index that agrees with exact search.

:func:`tuned_index` checks, once per embedding and noise setting, how often a faiss HNSW
search returns the same nearest neighbour as exact search on *public* queries (noisy
vectors of uniformly random vocabulary words, drawn with a fixed seed), raising
``efSearch`` along a ladder until the agreement is at least ``target`` with a margin
for sampling error, and falls back to exact search when no rung reaches it. The
choice depends only on public data (the embedding, the noise setting, the fixed seed),
never on the text being privatized, and is cached on disk beside the HNSW index.

Uniformly random words are the hard case: rare words sit where HNSW's recall is worst,
so agreement on real text (dominated by frequent words) is higher still.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._cache import atomic_path
from .._random import seeded_generator
from ._base import Index
from .exact import ExactIndex
from .faiss_index import FlatIndex, HNSWIndex

if TYPE_CHECKING:
    from ..embedding import Embedding

__all__ = ["DEFAULT_LADDER", "TunedChoice", "agreement_threshold", "tuned_index"]

#: efSearch values tried, cheapest first. Beyond 512 HNSW is no faster per thread than
#: exact search on GloVe 6B 50-d, so the ladder stops there.
DEFAULT_LADDER: tuple[int, ...] = (64, 128, 256, 512)

_CHOICES_FILE = "decode-choices.json"


class TunedChoice:
    """What :func:`tuned_index` chose: the index, a description, and the measured agreement."""

    def __init__(self, index: Index, description: str, agreement: float | None) -> None:
        self.index = index
        self.description = description
        self.agreement = agreement

    def __repr__(self) -> str:
        return f"TunedChoice({self.description!r}, agreement={self.agreement})"


def agreement_threshold(target: float, samples: int, z: float = 2.33) -> float:
    """The observed agreement needed on ``samples`` queries to claim ``target`` (one-sided, ~99% confidence)."""
    return target + z * math.sqrt(target * (1.0 - target) / samples)


def tuned_index(
    embedding: Embedding,
    make_queries: Callable[[np.random.Generator, int], np.ndarray],
    key: str,
    *,
    target: float = 0.99,
    samples: int = 2000,
    ladder: tuple[int, ...] = DEFAULT_LADDER,
    min_size: int = 50_000,
    hnsw_options: dict[str, int] | None = None,
    notice: bool = True,
) -> TunedChoice:
    """The fastest decode for ``embedding`` that agrees with exact search on >= ``target`` of queries.

    ``make_queries(rng, n)`` returns ``n`` public query vectors (e.g. noisy vectors of
    random vocabulary words); ``key`` names the noise setting in the on-disk cache of
    choices (e.g. ``"madlib epsilon=10.0"``). Vocabularies smaller than ``min_size``
    are decoded exactly (exact search is fast there and needs no artefact).
    ``hnsw_options`` (``m``, ``ef_construction``) choose the HNSW graph (default M=32,
    efConstruction=100; M=64, efConstruction=200 agrees more at a given ``efSearch`` but
    takes about 4x longer to build).
    """
    if embedding.size < min_size:
        return TunedChoice(ExactIndex(embedding.vectors), "exact", None)
    threshold = agreement_threshold(target, samples)
    path = embedding.cache_path(_CHOICES_FILE)
    graph = {"m": 32, "ef_construction": 100, **(hnsw_options or {})}
    full_key = (
        f"{key}; target={target!r}; samples={samples}; ladder={list(ladder)}; "
        f"hnsw m={graph['m']} efc={graph['ef_construction']}"
    )
    choices = _read_choices(path)
    if full_key in choices:
        ef, agree = choices[full_key]
        return _make_choice(embedding, ef, agree, graph)
    if notice:
        print(
            f"deniable: choosing the default decode for {key}: checking the HNSW index against exact search "
            f"on {samples:,} public random words (once; the choice is cached on disk)",
            file=sys.stderr,
            flush=True,
        )
    queries = np.ascontiguousarray(make_queries(seeded_generator(0, warn=False), samples), dtype=np.float32)
    truth = FlatIndex(embedding.vectors).search(queries, 1)[1][:, 0]
    hnsw = HNSWIndex.cached(embedding, notice=notice, m=graph["m"], ef_construction=graph["ef_construction"])
    chosen: int | None = None
    agree = 0.0
    for ef in ladder:
        hnsw.set_ef_search(ef)
        agree = float(np.mean(hnsw.search(queries, 1)[1][:, 0] == truth))
        if agree >= threshold:
            chosen = ef
            break
    choices = _read_choices(path)
    choices[full_key] = (chosen, agree)
    text = json.dumps(choices, indent=1, sort_keys=True)
    atomic_path(path, lambda p: _write(p, text))
    return _make_choice(embedding, chosen, agree, graph, hnsw)


def _make_choice(
    embedding: Embedding, ef: int | None, agree: float, graph: dict[str, int], hnsw: HNSWIndex | None = None
) -> TunedChoice:
    if ef is None:
        return TunedChoice(
            ExactIndex(embedding.vectors),
            f"exact (HNSW agreed with exact search on only {agree:.1%} of public random words)",
            agree,
        )
    index = (
        hnsw
        if hnsw is not None
        else HNSWIndex.cached(embedding, m=graph["m"], ef_construction=graph["ef_construction"])
    )
    index.set_ef_search(ef)
    return TunedChoice(index, f"hnsw efSearch={ef} ({agree:.1%} agreement with exact on public random words)", agree)


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _read_choices(path: Path) -> dict[str, tuple[int | None, float]]:
    try:
        raw = json.loads(path.read_text())
        return {str(k): (None if v[0] is None else int(v[0]), float(v[1])) for k, v in raw.items()}
    except (OSError, ValueError, TypeError, IndexError, AttributeError):
        return {}
