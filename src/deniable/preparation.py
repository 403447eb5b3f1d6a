"""What each mechanism prepares, and preparing it: :func:`prepare` (``deniable prepare``).

Owns the step from mechanism names to artefacts: each mechanism class that reads prepared
artefacts lists them (its ``prepared_artefacts`` capability, read through the registry), and
:func:`prepare` builds them in the store (:mod:`deniable.artefacts`). Importing a mechanism's
class imports the modules of its artefact kinds, which register their builders there.

May import: :mod:`deniable.artefacts`, :mod:`deniable.mechanisms`, :mod:`deniable.metrics`.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .artefacts import ArtefactInfo, build_artefact

if TYPE_CHECKING:
    from .embedding import Vocabulary

__all__ = ["planned_artefacts", "prepare"]


def planned_artefacts(
    embedding: Vocabulary,
    mechanisms: Iterable[str] = ("tem",),
    *,
    metric: str = "euclidean",
    options: dict[str, Any] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """``(kind, params)`` of every artefact ``mechanisms`` read on ``embedding`` (nothing is built).

    ``options``: mechanism parameters the artefacts depend on (brr: ``bits``, ``binarizer``,
    ``seed``, ``binarizer_options``, ``index``; madlib: ``epsilon``, a number or a list, for
    its ``index="auto"`` decode choice, ``index``, ``index_options``); each mechanism reads
    the ones it knows.
    """
    from .mechanisms import mechanism_class
    from .metrics import METRICS, check_metric

    names = [mechanisms] if isinstance(mechanisms, str) else list(mechanisms)
    for name in names:
        mechanism_class(name)  # an unknown name is an InvalidParameterError naming the registered ones
    # a mechanism whose guarantee has a metric of its own (diffractor: list positions) accepts it too
    own = tuple(m for n in names if isinstance(m := getattr(mechanism_class(n), "metric", None), str))
    options = {**(options or {}), "metric": check_metric(metric, (*METRICS, *own))}
    out: list[tuple[str, dict[str, Any]]] = []
    for name in names:
        # capability: a mechanism class that reads prepared artefacts lists them
        planner = getattr(mechanism_class(name), "prepared_artefacts", None)
        if planner is not None:
            out.extend(planner(embedding, options))
    return out


def prepare(
    embedding: Vocabulary,
    mechanisms: Iterable[str] = ("tem",),
    *,
    metric: str = "euclidean",
    options: dict[str, Any] | None = None,
    show_progress: bool | None = None,
    rebuild: bool = False,
) -> list[ArtefactInfo]:
    """Build every input-independent artefact ``mechanisms`` use on ``embedding`` (once).

    Parameters
    ----------
    embedding
        The vocabulary and vectors (restrict it first with ``Embedding.subset``).
    mechanisms
        Mechanism names; ``"tem"`` prepares TEM's k-NN tables for the whole vocabulary
        (they serve every epsilon and gamma); ``"madlib"`` (and ``"mahalanobis"``) the
        float HNSW index of its ``index="hnsw"`` / ``"auto"`` decode and, for each
        ``options["epsilon"]``, the ``"auto"`` decode choice at that epsilon
        (``decode-choice``); ``"brr"`` its trained binary codes (``options``: ``bits``,
        ``binarizer``, ``seed``) and, with ``options["index"] == "hnsw"``, their binary
        HNSW index (``binary-hnsw``).
    metric
        The metric the mechanism will use (TEM: euclidean, manhattan, chebyshev, angular).
    options
        Other mechanism parameters the artefacts depend on (see :func:`planned_artefacts`).
    show_progress
        Progress bars (default: when stderr is a terminal).
    rebuild
        Rebuild even when a verified copy exists.

    Returns the artefacts (built now or found verified). Mechanisms that need nothing
    prepared are accepted and add nothing.
    """
    names = [mechanisms] if isinstance(mechanisms, str) else list(mechanisms)
    groups = [planned_artefacts(embedding, [name], metric=metric, options=options) for name in names]
    groups = [g for g in groups if g]

    def build_group(group: list[tuple[str, dict[str, Any]]]) -> list[ArtefactInfo]:
        return [build_artefact(embedding, k, p, show_progress=show_progress, rebuild=rebuild) for k, p in group]

    if len(groups) <= 1:
        return [info for group in groups for info in build_group(group)]
    # each mechanism's artefacts in order, two mechanisms at a time: the long TEM build
    # leaves part of the CPU idle (its two workers wait on each other), which the others
    # use; the locks keep a shared artefact (the same HNSW index) built once
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(build_group, group) for group in groups]
        return [info for f in futures for info in f.result()]
