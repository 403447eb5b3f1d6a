"""TEM's envelope totals: every word's k-NN envelope mass at one epsilon, prepared or memoized.

The self-first sampler (:mod:`._self_first`) draws ``u ~ U[0, T)`` against a word's envelope
total ``T`` before anything else. The totals of the whole vocabulary at one epsilon and
gamma are an input-independent artefact (kind ``tem-totals``, registered with the store when
this module is imported; ``deniable prepare -m tem -e EPS``): :func:`build_totals_artefact`
computes them with the sampler's own arithmetic (:class:`._envelope.Envelope`) from the
prepared k-NN tables (and far bounds, whose layouts for the most frequent words it stores
too, :func:`write_layouts`); :func:`totals_stale` refuses totals computed from other tables.
Without prepared totals, :func:`token_totals` memoizes the totals of the words met in this
process (not when history-free).

May import: :mod:`._envelope`, :mod:`._far`, :mod:`._shared`, :mod:`._tables`, and the
library below the mechanisms (:mod:`deniable.artefacts`, :mod:`deniable.embedding`); the
mechanism only for type checking.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..._progress import progress
from ...artefacts import ArtefactInfo, register_kind
from ...embedding import Embedding, Vocabulary
from . import _envelope as envelope
from ._envelope import KNN_WORDS, Envelope, Prepared
from ._far import FAR_KIND, PreparedFar, far_artefact_params
from ._shared import build_workers, single_threaded_blas, touch_pages
from ._tables import KNN_KIND, PreparedKnn, knn_artefact_params

if TYPE_CHECKING:
    from ._mechanism import TruncatedExponential

__all__ = [
    "TOTALS_KIND",
    "build_totals_artefact",
    "open_totals",
    "token_totals",
    "totals_artefact_params",
    "totals_stale",
    "write_layouts",
]

#: The artefact kind of the envelope totals at one epsilon (deniable.artefacts).
TOTALS_KIND = "tem-totals"
#: Words whose envelope totals are computed at once (bounds scratch memory: ~2 KB a word).
_TOTALS_BLOCK = 1 << 14
#: The prepared totals at an epsilon also hold the far layouts of the words with ids below
#: this (the most frequent ones in a frequency-ordered vocabulary such as GloVe's; 80% of
#: the distinct words of a 10,000-token IMDb batch) that use the far bounds: 8 KB a word,
#: at most 128 MB, which the sampler reads instead of computing (~6 us a word).
_LAYOUT_WORDS = 1 << 14


def totals_artefact_params(
    embedding: Vocabulary, metric: str, epsilon: float, gamma: float, far: bool = False
) -> dict[str, object]:
    """Parameters of the prepared envelope totals of every word at ``epsilon`` and ``gamma``.

    ``far``: the envelope uses the prepared far bounds (:mod:`._far`), which change
    the totals; they are then part of the key.
    """
    out: dict[str, object] = {
        "knn": knn_artefact_params(embedding, metric),
        "epsilon": float(epsilon),
        "gamma": float(gamma),
        "usable": [envelope.KNN_MAX_RATIO, envelope.KNN_MAX_EST],  # (read now: tests change them)
        "format": 1,
    }
    if far:  # the far artefact's own key, which words use it, and which layouts are stored
        out["far"] = far_artefact_params(embedding, metric)
        out["far_min_share"] = envelope.FAR_MIN_SHARE
        out["layouts"] = min(_LAYOUT_WORDS, embedding.size)
    return out


def _totals_sources(embedding: Vocabulary, params: dict[str, Any]) -> list[str]:
    """The content ids of the k-NN tables (and far bounds) the totals of ``params`` are computed from."""
    from ...artefacts import content_id  # (at call time: tests watch the store's functions)

    ids = [content_id(embedding, KNN_KIND, dict(params["knn"])) or ""]
    if "far" in params:
        ids.append(content_id(embedding, FAR_KIND, dict(params["far"])) or "")
    return ids


def totals_stale(embedding: Vocabulary, params: dict[str, Any], path: Path) -> bool:
    """Whether prepared totals at ``path`` were computed from other k-NN tables or far bounds than the prepared ones.

    A total is the mass the sampler draws ``u`` against: from other tables (rebuilt after
    damage, or by another build whose ties broke otherwise) it would not be the envelope's
    mass, and the draws would not be exact. Stale totals are rebuilt by ``prepare`` and
    not used meanwhile (the sampler then computes the totals it needs).
    """
    try:
        recorded = np.load(path / "sources.npy", allow_pickle=False).tolist()
    except (OSError, ValueError):
        return True
    current = _totals_sources(embedding, params)
    return bool(recorded != current or "" in current)


def build_totals_artefact(
    embedding: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None
) -> None:
    """Write ``totals.npy``: every word's k-NN envelope total at one epsilon and gamma.

    ``totals[w]`` is the mass ``E's weights + V * envelope`` that the k-NN envelope sampler
    draws ``u`` against, or 0.0 where that sampler is not used for ``w`` (an expensive
    envelope). It is computed by the same code as the sampler's own arrays
    (:meth:`Envelope.totals`), from the prepared k-NN tables (built first if missing): a
    function of the embedding, the metric, epsilon and gamma only. With the far bounds,
    also the far layouts of the words below ``params["layouts"]`` that use them
    (:func:`write_layouts`).
    """
    from ...artefacts import build_artefact  # (at call time: tests watch the store's functions)

    embedding = Embedding.check(embedding)
    knn_params = dict(params["knn"])
    epsilon, k = float(params["epsilon"]), int(knn_params["k"])
    prepared = Prepared()
    env = Envelope(embedding.size, epsilon / 2.0, float(params["gamma"]), k, prepared)
    info = build_artefact(embedding, KNN_KIND, knn_params, show_progress=show_progress)
    knn = PreparedKnn(info.path, k)
    if "far" in params:  # the envelope the sampler will use: with the far bounds
        far_info = build_artefact(embedding, FAR_KIND, dict(params["far"]), show_progress=show_progress)
        prepared.far = PreparedFar(far_info.path)
    # the totals fit these tables and bounds only: their content ids go with them (see totals_stale)
    np.save(folder / "sources.npy", np.array(_totals_sources(embedding, params)), allow_pickle=False)
    v = embedding.size
    totals = np.empty(v, dtype=np.float64)
    what = f"TEM: envelope totals of {v:,} words (eps {epsilon:g})"

    def block(s: int) -> int:  # each block's rows computed alone (per-row arithmetic: any split, the same bits)
        words = np.arange(s, min(v, s + _TOTALS_BLOCK), dtype=np.int64)
        totals[words] = env.totals(words, knn.rows(words))
        return words.size

    if "far" in params:
        env.far_tables()  # (filled once here, not raced by the workers)
    with (
        progress(v, what, enabled=show_progress) as advance,
        single_threaded_blas(),
        ThreadPoolExecutor(build_workers()) as pool,
    ):
        for n in pool.map(block, range(0, v, _TOTALS_BLOCK)):
            advance(n)
    np.save(folder / "totals.npy", totals, allow_pickle=False)
    if "far" in params:
        write_layouts(env, knn, totals[: int(params["layouts"])], folder)


def write_layouts(env: Envelope, knn: PreparedKnn, totals: npt.NDArray[np.float64], folder: Path) -> None:
    """Write the far layouts of the words ``0 .. n-1`` that use the far bounds (``totals``: theirs).

    ``layouts.npy`` (float64, one row a word: :meth:`Envelope.far_layout`'s cumulative
    cluster masses, the same bits) and ``layout_rows.npy`` (int32, ``n``: a word's row
    there, -1 for a word whose envelope does not use the far bounds).
    """
    n = totals.size
    rows = np.full(n, -1, dtype=np.int32)
    parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = []
    for s in range(0, n, KNN_WORDS):
        words = np.arange(s, min(n, s + KNN_WORDS), dtype=np.int64)
        _, _, m_e, _, log_env, _, _ = env.arrays(knn.rows(words), words, totals[words])
        sel = np.flatnonzero(env.far_words(m_e, log_env))
        parts.append((words[sel], log_env[sel]))
    count = sum(p[0].size for p in parts)
    far = env.prepared.far
    assert far is not None
    out = np.lib.format.open_memmap(folder / "layouts.npy", mode="w+", dtype=np.float64, shape=(count, far.clusters))
    at = 0
    for words, log_env in parts:
        rows[words] = np.arange(at, at + words.size, dtype=np.int32)
        out[at : at + words.size] = env.far_layout(words, log_env)[0]
        at += words.size
    out.flush()
    del out
    np.save(folder / "layout_rows.npy", rows, allow_pickle=False)


def open_totals(holder: Prepared, info: ArtefactInfo, *, prefault: bool) -> None:
    """Memory-map the prepared totals of ``info`` (and their far layouts, with far bounds) into ``holder``.

    ``prefault`` (history-free): every page is read now, so which rows a batch reads is
    not timed later.
    """
    holder.totals = np.asarray(np.load(info.file("totals.npy"), mmap_mode="r"))
    if prefault:
        touch_pages(holder.totals)
    if holder.far is not None and "layouts.npy" in info.files:
        holder.layout_rows = np.load(info.file("layout_rows.npy"), allow_pickle=False)
        layouts = np.load(info.file("layouts.npy"), mmap_mode="r", allow_pickle=False)
        holder.layouts = np.asarray(layouts)
        if prefault:
            touch_pages(holder.layouts)


def token_totals(mech: TruncatedExponential, flat: npt.NDArray[np.int64]) -> npt.NDArray[np.float64] | None:
    """Each token's envelope total (0.0: not for the self-first sampler), or None without prepared tables.

    From the prepared totals at this epsilon when they exist; else, unless
    history-free, from a per-process memo filled for the words met so far.
    """
    prepared = mech._prepared_knn()
    if prepared is None:
        return None
    holder = mech._prepared
    if holder.totals is not None:
        return np.asarray(holder.totals[flat], dtype=np.float64)
    if mech.history_free:
        return None
    memo = holder.memo
    if memo is None:
        with holder.lock:
            if holder.memo is None:
                holder.memo = np.full(mech.embedding.size, np.nan)
            memo = holder.memo
    t = memo[flat]
    unknown = np.isnan(t)
    if unknown.any():
        words = np.unique(flat[unknown])
        for s in range(0, words.size, _TOTALS_BLOCK):
            part = words[s : s + _TOTALS_BLOCK]
            memo[part] = mech._env.totals(part, prepared.rows(part))
        t = memo[flat]
    return t


# the store's kind, declared where its builder is
register_kind(
    TOTALS_KIND,
    build_totals_artefact,
    totals_stale,
    about="TEM's totals at one epsilon (a token then costs one lookup)",
)
