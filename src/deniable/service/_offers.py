"""The offer, built: one prepared mechanism instance per offered choice, and its description.

The operator's :class:`~deniable.service._config.ServiceConfig` names what a client may
choose; :func:`build_offer` makes, at start-up and before ``/readyz``, one mechanism
instance per (mechanism, epsilon, combination of offered client values) -- built by the
registry, its input-independent artefacts prepared, epsilon targets resolved by the
calibration table -- and one privatizer per offered OOV and case policy.
:func:`describe_offer` is the body of ``/v1/mechanisms``. Nothing here sees a request.

May import: the library (mechanisms, preparation, calibrate, embedding, privatizer) and
``._config``; no web framework.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from .._errors import NotPrivateWarning
from ._config import ServiceConfig

if TYPE_CHECKING:
    from ..embedding import Vocabulary
    from ..mechanisms.base import Mechanism
    from ..privatizer import Privatizer

__all__ = ["Instances", "Key", "Privatizers", "build_offer", "describe_offer", "key"]

#: An offered instance: (mechanism, epsilon or target as offered, the client values sorted).
Key = tuple[str, float | str, tuple[tuple[str, Any], ...]]
#: Each offered instance and what it states about itself (``describe()``, offered names, strength).
Instances = dict[Key, tuple["Mechanism", dict[str, Any]]]
#: Per instance, OOV policy and case policy: its privatizer.
Privatizers = dict[tuple[Key, str, str], "Privatizer"]


def key(name: str, epsilon: float | str, variant: dict[str, Any]) -> Key:
    """The key of the instance offered as ``name`` at ``epsilon`` with the client values ``variant``."""
    return (name, epsilon if isinstance(epsilon, str) else float(epsilon), tuple(sorted(variant.items())))


#: options whose value in ``mech.describe()`` is the mechanism's public record of it, kept as is
_RECORDED = frozenset({"prior"})


def build_offer(cfg: ServiceConfig, emb: Vocabulary) -> tuple[Instances, Privatizers]:
    """Build and prepare every instance ``cfg`` offers on ``emb`` (start-up; logs nothing from requests)."""
    from ..mechanisms import make_mechanism, options_of
    from ..privatizer import Privatizer

    mechanisms: Instances = {}
    privatizers: Privatizers = {}
    for offer in cfg.mechanisms:
        objects = {o.name for o in options_of(offer.name) if o.objects}
        for variant in offer.variants():
            opts = {**offer.options, **variant, **_history_free(offer.name)}
            shared: dict[str, Any] = {}
            for eps in offer.epsilons:
                resolution = None
                if isinstance(eps, str):  # a target: the calibration table's epsilon (calibrate/table.py)
                    from ..calibrate.table import resolve_epsilon

                    resolution = resolve_epsilon(emb, offer.name, eps, opts)
                with warnings.catch_warnings():  # a huge epsilon's warning: /v1/mechanisms shows the offer
                    warnings.simplefilter("ignore", NotPrivateWarning)
                    number = resolution.epsilon if resolution is not None else eps
                    mech = make_mechanism(offer.name, emb, number, **{**opts, **shared})
                if resolution is not None:
                    from ..calibrate.table import attach_resolution

                    attach_resolution(mech, resolution)
                prepare_mechanism(mech)
                uniform = getattr(mech, "uniform_prior", True)  # a prior's decode builds no index
                if not shared and "index" in objects and hasattr(mech, "search_index") and uniform:
                    shared["index"] = mech.search_index  # one decode index for every epsilon
                info = dict(mech.describe())
                for k, v in {**offer.options, **variant}.items():
                    # the offered name (not the shared object's type); a prior keeps the mechanism's
                    # own record (a file's name and sha256: the operator's path is never echoed)
                    if k in info and k not in _RECORDED and isinstance(v, str | int | float | bool):
                        info[k] = v
                info.update(_privacy_info(mech, opts))
                instance = key(offer.name, eps, variant)
                mechanisms[instance] = (mech, info)
                with warnings.catch_warnings():  # opt-in leaks are stated in every response
                    warnings.simplefilter("ignore", NotPrivateWarning)
                    for oov in cfg.oov:
                        for case in cfg.case:
                            privatizers[(instance, oov, case)] = Privatizer(
                                mech, oov=oov, case=case, check_strength=False
                            )
    return mechanisms, privatizers


def prepare_mechanism(mech: Mechanism) -> None:
    """Build the input-independent artefacts ``mech`` reads, before the service is ready.

    The seam to :mod:`deniable.artefacts` (content-addressed, verified, memory-mapped
    artefacts shared by every worker process): TEM's neighbour tables for the whole
    vocabulary, and its envelope totals at the instance's epsilon. Then one warm-up call
    on a public word builds any remaining lazy state (a decode index) now rather than
    during a user's request.
    """
    import numpy as np

    from .._random import secure_generator
    from ..preparation import prepare

    if hasattr(type(mech), "prepared_artefacts"):  # capability: TEM reads whole-vocabulary tables
        options: dict[str, Any] = {}
        if getattr(type(mech), "truncated_exponential", False):  # TEM: its envelope totals at this epsilon
            options = {"epsilon": mech.epsilon, "gamma": getattr(mech, "gamma", None)}
        prepare(mech.embedding, [mech.name], metric=str(mech.metric), options=options, show_progress=False)
    mech.privatize(np.zeros(1, dtype=np.int64), secure_generator())  # output discarded


def _privacy_info(mech: Mechanism, options: dict[str, Any]) -> dict[str, Any]:
    """``target`` (an offered target's text) and ``privacy``: how strong the instance is, in words,
    from the public calibration (computed once, at start-up; never from a request)."""
    from ..calibrate.table import resolution_of, strength

    res = resolution_of(mech)
    out: dict[str, Any] = {"target": str(res.target)} if res is not None else {}
    out["privacy"] = strength(mech, options=options).describe()
    return out


def _history_free(name: str) -> dict[str, Any]:
    """``history_free=True`` where the mechanism declares it (TEM: no per-word state between calls)."""
    from ..mechanisms import options_of

    return {"history_free": True} if any(o.name == "history_free" for o in options_of(name)) else {}


def describe_offer(cfg: ServiceConfig, mechanisms: Instances | None, timing: dict[str, Any]) -> dict[str, Any]:
    """The body of ``/v1/mechanisms``: per mechanism the epsilons and the option values a client may choose.

    ``mechanisms``: the built instances once ready (each one's epsilon and strength are
    listed), ``None`` before; ``timing``: the padding's public description.
    """
    from ..mechanisms import options_of
    from ..mechanisms.registry import catalogue

    out = {}
    for offer in cfg.mechanisms:
        help_of = {o.name: o.help for o in options_of(offer.name)}
        d = offer.describe()
        d["help"] = {k: help_of.get(k, "") for k in offer.client}
        d["catalogue"] = catalogue([offer.name])[0]  # guarantee form, metric, page (the registry's)
        if mechanisms is not None:  # each instance's epsilon (targets resolved) and strength, in words
            d["privacy"] = [
                {**info["privacy"], "offered": k[1], "options": dict(k[2])}
                for k, (_, info) in mechanisms.items()
                if k[0] == offer.name
            ]
        out[offer.name] = d
    return {
        "mechanisms": out,
        "default_mechanism": cfg.default_mechanism,
        "oov": list(cfg.oov),
        "case": list(cfg.case),
        # offered values that are NOT protected (the operator's allow_unprotected opt-in; empty by default)
        "unprotected": cfg.unprotected(),
        "limits": {
            "max_body_bytes": cfg.max_body_bytes,
            "max_texts": cfg.max_texts,
            "max_tokens": cfg.max_tokens,
            "max_text_tokens": cfg.max_text_tokens,
            "timeout_s": cfg.timeout_s,
            "body_timeout_s": cfg.body_timeout_s,
            "max_concurrency": cfg.max_concurrency,
        },
        "api_key_required": bool(cfg.api_key_digests),
        "timing": timing,
    }
