"""The one place where mechanism names map to classes, and where their options are checked.

Every mechanism class declares its options once, as ``options: ClassVar[tuple[Option, ...]]``
(in the spirit of scikit-learn's ``_parameter_constraints``): name, type, default, bounds or
choices, help text, and whether an untrusted client (the HTTP service) may set it. The CLI
generates its mechanism flags from these declarations, the service its request schema, the
evaluation harness its factories; nothing else keeps a list of names or options.

>>> from deniable.mechanisms import registry
>>> "tem" in registry.mechanism_names()
True
>>> registry.validate_options("tem", {"metric": "angular"})
{'metric': 'angular'}

The declaration type :class:`Option` lives in :mod:`._options` (re-exported here): the
mechanism modules import it from there, and the registry names them as ``"module:Class"``
strings, imported on first use, so no mechanism's module imports the registry.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import InvalidParameterError
from ._options import EPSILON, Option, _shown, check_epsilon_option

if TYPE_CHECKING:
    from .base import Mechanism

__all__ = [
    "EPSILON",
    "MechanismInfo",
    "Option",
    "catalogue",
    "check_epsilon_option",
    "mechanism_class",
    "mechanism_names",
    "options_of",
    "register",
    "unregister",
    "validate_options",
]

# -- the registry -----------------------------------------------------------------------------
_lock = threading.Lock()
_registry: dict[str, str | type[Mechanism]] = {}
_infos: dict[str, MechanismInfo] = {}


@dataclass(frozen=True)
class MechanismInfo:
    """What the catalogue says of a mechanism, declared once at registration.

    ``deniable mechanisms``, ``deniable privatize --help`` and the service's ``/v1/mechanisms``
    read it (with the class's own ``guarantee_form``, ``metric`` and capabilities, see
    :func:`catalogue`).
    """

    #: one line: what the mechanism does
    summary: str = ""
    #: the paper it implements
    paper: str = ""
    #: the guarantee, in a formula or a few words
    guarantee: str = ""
    #: "O(1)", "k-NN search", "O(V d)", ... per token (the class of its cost)
    speed: str = ""
    #: what ``deniable prepare`` builds for it ("" = nothing)
    prepared: str = ""
    #: its page in docs/
    page: str = ""


def register(
    name: str, target: str | type[Mechanism], *, replace: bool = False, info: MechanismInfo | None = None
) -> None:
    """Register a mechanism class under ``name``: ``"module:Class"`` (imported on first use) or the class.

    The class declares its options in ``options`` (a tuple of :class:`Option`); ``info`` is
    its entry in the catalogue (:func:`catalogue`).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise InvalidParameterError("name", _shown(name, False), "an identifier")
    if isinstance(target, str):
        if target.count(":") != 1:
            raise InvalidParameterError("target", "<str>", "'module:Class' or a Mechanism class")
    elif not isinstance(target, type):
        raise InvalidParameterError("target", _shown(target, False), "'module:Class' or a Mechanism class")
    with _lock:
        if name in _registry and not replace:
            raise InvalidParameterError("name", name, "a name not registered yet (or replace=True)")
        _registry[name] = target
        _infos[name] = info or MechanismInfo()


def unregister(name: str) -> None:
    """Remove ``name`` from the registry (tests and plug-ins)."""
    with _lock:
        _registry.pop(name, None)
        _infos.pop(name, None)


def mechanism_names() -> list[str]:
    """Registered names, sorted."""
    with _lock:
        return sorted(_registry)


def _unknown(name: object, client: bool) -> InvalidParameterError:
    shown = name if isinstance(name, str) and not client else "<not shown>"
    return InvalidParameterError("mechanism", shown, "one of " + ", ".join(mechanism_names()))


def mechanism_class(name: str, *, client: bool = False) -> type[Mechanism]:
    """The class registered under ``name`` (imported on first use)."""
    with _lock:
        target = _registry.get(name) if isinstance(name, str) else None
    if target is None:
        raise _unknown(name, client)
    if isinstance(target, str):
        module, cls = target.split(":")
        found: type[Mechanism] = getattr(importlib.import_module(module), cls)
        with _lock:
            if _registry.get(name) == target:
                _registry[name] = found
        return found
    return target


def options_of(name: str) -> tuple[Option, ...]:
    """The options ``name`` declares (epsilon not included)."""
    return tuple(getattr(mechanism_class(name), "options", ()))


def validate_options(name: str, options: Mapping[str, Any], *, client: bool = False) -> dict[str, Any]:
    """Check ``options`` against ``name``'s declarations; return them validated.

    Unknown options, wrong types (a bool is not a number), out-of-bounds values and, with
    ``client=True``, options a client may not set raise :class:`InvalidParameterError`
    naming the option. With ``client=True`` no value is echoed. ``None`` values mean
    "unset" and are left out of the result.
    """
    cls = mechanism_class(name, client=client)  # an unknown name is an error
    declared = {o.name: o for o in getattr(cls, "options", ())}
    out: dict[str, Any] = {}
    for key, value in options.items():
        opt = declared.get(key) if isinstance(key, str) else None
        if opt is None:
            known = ", ".join(sorted(o.name for o in declared.values() if o.client or not client)) or "none"
            shown_key = key if isinstance(key, str) and not client else "option"
            shown_value = "<not shown>" if client else _shown(value, False)
            raise InvalidParameterError(shown_key, shown_value, f"not an option of mechanism {name} (options: {known})")
        if client and not opt.client:
            raise InvalidParameterError(key, "<not shown>", f"an option clients may not set for mechanism {name}")
        checked = opt.check(value, client=client)
        if checked is not None:  # None means "unset": the constructor's default applies
            out[key] = checked
    return out


def is_metric_dp(name: str) -> bool:
    """Whether ``name``'s guarantee is metric DP (``epsilon * d`` for every pair of words): its class's
    ``guarantee_form`` is ``"metric"``."""
    return getattr(mechanism_class(name), "guarantee_form", "metric") == "metric"


def catalogue(names: list[str] | None = None) -> list[dict[str, Any]]:
    """One JSON-able row per registered mechanism (or per name of ``names``): the catalogue.

    ``name``, ``summary``, ``paper``, ``guarantee`` (formula), ``guarantee_form`` (``"metric"``
    or the sentence saying how it differs), ``metric_dp``, ``metric``, ``exact`` (the exact
    output distribution is available), ``prepared``, ``speed``, ``page``. Declared once: the
    :class:`MechanismInfo` given at registration and the class's own attributes.
    """
    rows = []
    for name in mechanism_names() if names is None else names:
        cls = mechanism_class(name)
        with _lock:
            info = _infos.get(name) or MechanismInfo()
        metric = getattr(cls, "metric", None)
        if not isinstance(metric, str):  # a property of the instance: the declared option's default
            declared = {o.name: o for o in getattr(cls, "options", ())}
            metric = str(declared["metric"].default) if "metric" in declared else "depends on its options"
        rows.append(
            {
                "name": name,
                "summary": info.summary,
                "paper": info.paper,
                "guarantee": info.guarantee,
                "guarantee_form": getattr(cls, "guarantee_form", "metric"),
                "metric_dp": is_metric_dp(name),
                "metric": metric,
                "exact": bool(getattr(cls, "has_distribution", False)),
                "prepared": info.prepared,
                "speed": info.speed,
                "page": info.page,
            }
        )
    return rows


_NN = "one nearest-neighbour search"

#: The built-in mechanisms: (name, "module:Class", catalogue entry); each class is imported on first use.
_BUILTINS: tuple[tuple[str, str, MechanismInfo], ...] = (
    (
        "madlib",
        "deniable.mechanisms.laplace:MultivariateLaplace",
        MechanismInfo(
            "multivariate Laplace noise on the word vector, decoded to the nearest word",
            "Feyisetan et al., WSDM 2020",
            "eps * d_euclidean",
            _NN,
            "HNSW index (index=auto/hnsw)",
            "docs/madlib.md",
        ),
    ),
    (
        "tem",
        "deniable.mechanisms.tem:TruncatedExponential",
        MechanismInfo(
            "truncated exponential mechanism: exponential weights within gamma, uniform beyond",
            "Carvalho et al., TEM",
            "eps * d (any metric)",
            "O(|L_w|) with prepared tables",
            "k-NN tables + envelope totals",
            "docs/tem.md",
        ),
    ),
    (
        "brr",
        "deniable.mechanisms.brr:BinaryRandomizedResponse",
        MechanismInfo(
            "randomized response on the bits of a binary code, decoded to the nearest code",
            "Carvalho et al., BRR",
            "eps * d_hamming on codes",
            "one Hamming search",
            "binary codes (+ binary HNSW)",
            "docs/brr.md",
        ),
    ),
    (
        "mahalanobis",
        "deniable.mechanisms.mahalanobis:Mahalanobis",
        MechanismInfo(
            "elliptical noise shaped by the embedding's covariance, decoded to the nearest word",
            "Xu et al., PrivateNLP 2020",
            "eps * d_M (Mahalanobis)",
            _NN,
            "HNSW index (index=auto/hnsw)",
            "docs/mechanisms/mahalanobis.md",
        ),
    ),
    (
        "vickrey",
        "deniable.mechanisms.vickrey:Vickrey",
        MechanismInfo(
            "madlib or Mahalanobis noise, then the nearest or second-nearest word (threshold t)",
            "Xu et al., PrivateNLP 2021",
            "that of its noise (euclidean or d_M)",
            "one 2-NN search",
            "",
            "docs/mechanisms/vickrey.md",
        ),
    ),
    (
        "exponential",
        "deniable.mechanisms.exponential:ExponentialMechanism",
        MechanismInfo(
            "exponential mechanism over the whole vocabulary (TEM with gamma = infinity)",
            "McSherry-Talwar 2007",
            "eps * d (euclidean, angular)",
            "O(V d) a distinct word (history-free: a token)",
            "",
            "docs/mechanisms/exponential.md",
        ),
    ),
    (
        "santext",
        "deniable.mechanisms.santext:SanText",
        MechanismInfo(
            "SanText: the euclidean exponential mechanism over the vocabulary",
            "Yue et al., Findings ACL 2021",
            "eps * d_euclidean",
            "O(V d) a distinct word (history-free: a token)",
            "",
            "docs/mechanisms/santext.md",
        ),
    ),
    (
        "santext_plus",
        "deniable.mechanisms.santext:SanTextPlus",
        MechanismInfo(
            "SanText+: rare (sensitive) words sampled among sensitive words; others kept with prob. 1 - p",
            "Yue et al., Findings ACL 2021",
            "eps * d among sensitive words (+ ln(1/p)); kept words not protected",
            "O(|V_S| d) a distinct word (history-free: a token)",
            "",
            "docs/mechanisms/santext.md",
        ),
    ),
    (
        "custext",
        "deniable.mechanisms.custext:CusText",
        MechanismInfo(
            "CusText: exponential mechanism within a customized output set of k words",
            "Chen et al., Findings ACL 2023",
            "eps-DP within each output set; none across sets",
            "O(k)",
            "",
            "docs/mechanisms/custext.md",
        ),
    ),
    (
        "custext_plus",
        "deniable.mechanisms.custext:CusTextPlus",
        MechanismInfo(
            "CusText+: CusText, stopwords kept",
            "Chen et al., Findings ACL 2023",
            "as custext; stopwords not protected",
            "O(k)",
            "",
            "docs/mechanisms/custext.md",
        ),
    ),
    (
        "truncated_gumbel",
        "deniable.mechanisms.truncated_gumbel:TruncatedGumbel",
        MechanismInfo(
            "Gumbel noise on distances to the k nearest words (as in MLDP's code); for comparison only",
            "Carvalho et al., FLAIRS 2021",
            "none: not metric DP for any eps",
            "one k-NN search per distinct word",
            "",
            "docs/mechanisms/truncated_gumbel.md",
        ),
    ),
    (
        "diffractor",
        "deniable.mechanisms.diffractor:Diffractor",
        MechanismInfo(
            "1-Diffractor: geometric or TEM noise on the word's position in 1-d nearest-neighbour lists",
            "Meisenbacher et al., 2024",
            "eps * max_l |pos_l(w) - pos_l(w')|",
            "O(1) (geometric), O(gamma) (tem)",
            "1-d lists (greedy 50-NN walk)",
            "docs/mechanisms/diffractor.md",
        ),
    ),
)

for _name, _target, _info in _BUILTINS:
    register(_name, _target, info=_info)
