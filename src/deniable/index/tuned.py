"""The default nearest-neighbour decode: the cheapest index that agrees with exact search.

:func:`tuned_index` checks, once per embedding and noise setting, how often a faiss HNSW
search returns the same nearest neighbour as exact search on *public* queries (noisy
vectors of uniformly random vocabulary words, drawn with a fixed seed), raising
``efSearch`` along a ladder until the agreement is at least ``target`` with a margin
for sampling error, and falls back to exact search when no rung reaches it. The
choice depends only on public data (the embedding, the noise setting, the fixed seed),
never on the text being privatized. It is kept as the prepared artefact
:data:`DECODE_CHOICE_KIND` (:mod:`deniable.artefacts`: manifest, sha256 verified when
opened, built once under a lock; ``deniable prepare -m madlib --epsilon E`` records it
ahead). The ``decode-choices.json`` file of earlier versions is read once to take over
a choice it holds; it is never written.

Uniformly random words are the hard case: rare words sit where HNSW's recall is worst,
so agreement on real text (dominated by frequent words) is higher still.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._progress import progress
from .._random import seeded_generator
from ._base import Index
from .exact import ExactIndex
from .faiss_index import HNSWIndex

if TYPE_CHECKING:
    from ..embedding import Embedding

__all__ = [
    "DECODE_CHOICE_KIND",
    "DEFAULT_LADDER",
    "MIN_SIZE",
    "TunedChoice",
    "agreement_threshold",
    "choice_queries",
    "decode_choice_params",
    "decoded_exactly",
    "ladder_agreements",
    "measured_exact",
    "tuned_index",
    "write_choice",
]

#: efSearch values tried, cheapest first: only those faster than the exact decode. Measured
#: 2026-11-29 (one thread, 4,096 noisy GloVe 6B 50-d queries, the exact decode of
#: :class:`~deniable.index.exact.ExactIndex`): on all 336,158 words HNSW took 0.63x the exact
#: decode's time at efSearch 64, 1.21x at 128 and 2.35x at 256, so the ladder stops at 64
#: (until then (64, 128, 256, 512), set when the exact decode was ~4x slower; docs/madlib.md).
DEFAULT_LADDER: tuple[int, ...] = (64,)

#: Vocabularies smaller than this are decoded exactly by default (faster there than HNSW at any
#: efSearch, and nothing to prepare). Measured as above: efSearch 64 took 1.67x the exact
#: decode's time on 50,000 words, 1.45x on 100,000 and 0.90x on 200,000 (until 2026-11-29: 50,000).
MIN_SIZE = 250_000

#: The prepared-artefact kind of a decode choice (madlib's ``index="auto"``), and its file.
DECODE_CHOICE_KIND = "decode-choice"
CHOICE_FILE = "choice.json"
_LEGACY_CHOICES_FILE = "decode-choices.json"


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


def decoded_exactly(size: int, min_size: int | None = None) -> bool:
    """True when a vocabulary of ``size`` words is decoded exactly without a choice (smaller than
    ``min_size``, default :data:`MIN_SIZE`)."""
    return size < (MIN_SIZE if min_size is None else min_size)


def decode_choice_params(
    key: str,
    *,
    target: float = 0.99,
    samples: int = 2000,
    ladder: tuple[int, ...] = DEFAULT_LADDER,
    hnsw_options: dict[str, int] | None = None,
    mechanism: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The store parameters of a decode choice.

    ``key`` names the noise setting (e.g. ``"madlib epsilon=10.0"``); ``mechanism``
    (``{"name": ..., "options": {...}}``: the registered mechanism and the constructor
    arguments of its noise) lets ``deniable prepare`` rebuild the public queries; without
    it the choice is made only by the caller of :func:`tuned_index` holding them.
    """
    graph = {"m": 32, "ef_construction": 100, **(hnsw_options or {})}
    return {
        "key": str(key),
        "target": float(target),
        "samples": int(samples),
        "ladder": [int(ef) for ef in ladder],
        "hnsw": {"m": int(graph["m"]), "ef_construction": int(graph["ef_construction"])},
        "mechanism": None
        if mechanism is None
        else {"name": str(mechanism["name"]), "options": dict(mechanism["options"])},
    }


def tuned_index(
    embedding: Embedding,
    make_queries: Callable[[np.random.Generator, int], np.ndarray],
    key: str,
    *,
    target: float = 0.99,
    samples: int = 2000,
    ladder: tuple[int, ...] = DEFAULT_LADDER,
    min_size: int | None = None,
    hnsw_options: dict[str, int] | None = None,
    notice: bool = True,
    mechanism: dict[str, Any] | None = None,
) -> TunedChoice:
    """The fastest decode for ``embedding`` that agrees with exact search on >= ``target`` of queries.

    ``make_queries(rng, n)`` returns ``n`` public query vectors (e.g. noisy vectors of
    random vocabulary words); ``key`` names the noise setting in the store (e.g.
    ``"madlib epsilon=10.0"``; ``mechanism``: see :func:`decode_choice_params`).
    Vocabularies smaller than ``min_size`` (default :data:`MIN_SIZE`) are decoded exactly
    (exact search is fast there and needs no artefact). ``hnsw_options`` (``m``,
    ``ef_construction``) choose the HNSW graph (default M=32, efConstruction=100; M=64,
    efConstruction=200 agrees more at a given ``efSearch`` but takes about 4x longer to
    build). A choice not yet prepared is made now, once, with one notice on stderr
    (unless ``notice=False``) and a progress bar on a terminal.
    """
    from ..artefacts import obtain_artefact

    if decoded_exactly(embedding.size, min_size):
        return TunedChoice(ExactIndex(embedding.vectors), "exact", None)
    params = decode_choice_params(
        key, target=target, samples=samples, ladder=ladder, hnsw_options=hnsw_options, mechanism=mechanism
    )
    known = measured_exact(embedding, params)
    if known is not None:
        return TunedChoice(ExactIndex(embedding.vectors), known, None)

    def write(folder: Path, show_progress: bool | None) -> None:
        write_choice(embedding, make_queries, params, folder, show_progress)
        nonlocal notice
        notice = False  # said once; the HNSW index was built (or found) with the choice

    message = (
        f"deniable: choosing the default decode for {key} on this embedding ({embedding.size:,} words): "
        f"checking the HNSW index (built first if needed) against exact search on {samples:,} public "
        "random words (once, then kept as a prepared artefact)"
    )
    info = obtain_artefact(embedding, DECODE_CHOICE_KIND, params, notice=message if notice else None, builder=write)
    ef, agree = _read_choice(info.file(CHOICE_FILE))
    return _make_choice(embedding, ef, agree, params["hnsw"], notice)


#: Choices measured once for the built-in embedding (GloVe 6B 50-d, its two vocabularies:
#: fingerprints below) with the default tuning parameters: ``(fingerprint, mechanism) -> eps``
#: up to which no rung of the ladder reaches the agreement threshold (``math.inf``: at no
#: epsilon), so the choice is the exact decode -- known without building an HNSW index (a
#: minute for 336k words) only to find that out. Measured 2026-11-29 with the ladder of
#: :data:`DEFAULT_LADDER` (efSearch 64) on the choice's own queries (2,000 public random words,
#: seed 0) at every epsilon 2^(k/16) from 14.7 to 16,384 (``python bench/bench_madlib.py
#: --choice [--vocabulary all]``, docs/madlib.md): the agreement climbs from 89% (88%) to a
#: plateau of 98.0-98.6% (97.8-98.3%) from epsilon ~50 on and never reaches the 99.52% needed;
#: without noise (each word's own vector, the limit of large epsilon) efSearch 64 finds the
#: exact decode of 97.96% of the 336,158 words (97.80% of the 400,000). Below 14.7 the agreement
#: is lower still (it only falls as epsilon falls: more noise puts the queries farther from
#: the vocabulary). Until then the ladder went up to efSearch 512, which agreed on 99.2% at
#: epsilon 15 on the words: the limit recorded then.
_MEASURED_EXACT_UP_TO: dict[tuple[str, str], float] = {
    ("f54617d98424ac9a0a40f0cc38bd573a030ec7d72e8b29ccd28e5e9e0251ae95", "madlib"): math.inf,  # 336,158 words
    ("0f3c93ed94f50200ba8b6ffbc361dd23addcbe55db773ef83bdb49859cb65c75", "madlib"): math.inf,  # all 400,000
}


def measured_exact(embedding: Embedding, params: dict[str, Any]) -> str | None:
    """The description of the exact decode the choice ``params`` is known to make, or None
    (:data:`_MEASURED_EXACT_UP_TO`: this embedding and mechanism, the default tuning parameters)."""
    spec = params.get("mechanism")
    if not spec:
        return None
    options = dict(spec.get("options") or {})
    eps = options.pop("epsilon", None)
    default = decode_choice_params(params["key"], mechanism=spec)
    limit = _MEASURED_EXACT_UP_TO.get((embedding.fingerprint, str(spec.get("name"))))
    if limit is None or options or not isinstance(eps, (int, float)) or params != default or eps > limit:
        return None
    where = "at any epsilon" if math.isinf(limit) else f"at epsilon <= {limit:g}"
    rungs = "/".join(str(ef) for ef in params["ladder"])
    return (
        f"exact (measured for this embedding: HNSW at efSearch {rungs} does not agree with exact search "
        f"on 99% of public random words {where})"
    )


def write_choice(
    embedding: Embedding,
    make_queries: Callable[[np.random.Generator, int], np.ndarray],
    params: dict[str, Any],
    folder: Path,
    show_progress: bool | None,
) -> None:
    """Measure the choice of ``params`` (or take it over from the cache of earlier versions) into ``folder``."""
    graph, ladder, samples = params["hnsw"], tuple(params["ladder"]), params["samples"]
    legacy_key = (
        f"{params['key']}; target={params['target']!r}; samples={samples}; ladder={list(ladder)}; "
        f"hnsw m={graph['m']} efc={graph['ef_construction']}"
    )
    found = _read_legacy_choices(embedding.cache_path(_LEGACY_CHOICES_FILE)).get(legacy_key)
    if found is not None:
        chosen, agree = found
    else:
        threshold = agreement_threshold(params["target"], samples)
        queries = choice_queries(make_queries, samples)
        # the exact decode's own words (ExactIndex: what "exact" releases): the same words as faiss's
        # IndexFlatL2 on GloVe's 336k words at every choice epsilon, 4.5-5.5x faster (faiss's BLAS)
        truth = ExactIndex(embedding.vectors).search(queries, 1)[1][:, 0]
        hnsw = HNSWIndex.cached(embedding, notice=False, m=graph["m"], ef_construction=graph["ef_construction"])
        chosen, agree = None, 0.0
        with progress(len(ladder), "checking HNSW against exact search", enabled=show_progress) as advance:
            for ef, agree in ladder_agreements(hnsw, queries, truth, ladder):
                advance(1)
                if agree >= threshold:
                    chosen = ef
                    break
    (folder / CHOICE_FILE).write_text(json.dumps({"ef_search": chosen, "agreement": agree}), encoding="utf-8")


def choice_queries(make_queries: Callable[[np.random.Generator, int], np.ndarray], samples: int) -> np.ndarray:
    """The choice's public queries: ``samples`` rows of ``make_queries`` drawn with the fixed seed 0, float32."""
    return np.ascontiguousarray(make_queries(seeded_generator(0, warn=False), samples), dtype=np.float32)


def ladder_agreements(
    hnsw: HNSWIndex, queries: np.ndarray, truth: np.ndarray, ladder: tuple[int, ...]
) -> Iterator[tuple[int, float]]:
    """``(efSearch, agreement)`` rung by rung: the share of ``queries`` whose nearest word in ``hnsw``
    at that efSearch is ``truth`` (the exact decode's)."""
    for ef in ladder:
        hnsw.set_ef_search(ef)
        yield ef, float(np.mean(hnsw.search(queries, 1)[1][:, 0] == truth))


def _read_choice(path: Path) -> tuple[int | None, float]:
    from ..artefacts import ArtefactError

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        ef = raw["ef_search"]
        return (None if ef is None else int(ef)), float(raw["agreement"])
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ArtefactError(
            f"prepared artefact {path.parent}: unreadable decode choice ({type(exc).__name__})"
        ) from None


def _make_choice(
    embedding: Embedding, ef: int | None, agree: float, graph: dict[str, int], notice: bool = True
) -> TunedChoice:
    if ef is None:
        return TunedChoice(
            ExactIndex(embedding.vectors),
            f"exact (HNSW agreed with exact search on only {agree:.1%} of public random words)",
            agree,
        )
    index = HNSWIndex.cached(embedding, m=graph["m"], ef_construction=graph["ef_construction"], notice=notice)
    index.set_ef_search(ef)
    return TunedChoice(index, f"hnsw efSearch={ef} ({agree:.1%} agreement with exact on public random words)", agree)


def _read_legacy_choices(path: Path) -> dict[str, tuple[int | None, float]]:
    """The ``decode-choices.json`` of versions before the store (read only, to take a choice over)."""
    try:
        raw = json.loads(path.read_text())
        return {str(k): (None if v[0] is None else int(v[0]), float(v[1])) for k, v in raw.items()}
    except (OSError, ValueError, TypeError, IndexError, AttributeError):
        return {}
