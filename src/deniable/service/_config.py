"""The operator's service configuration: what the service offers, within which limits.

A client chooses among what the operator offers: the mechanisms, for each the epsilons
and the values of the options the registry declares client-settable (``client=True``).
Everything is checked once, at start-up, against the mechanism registry; a client value
outside the offer is a 422 naming the field.

Defaults protect (issue 40): a value the registry declares not protected (``unprotected``:
``oov = "keep"``, ``case = "keep"``) is operator-only. Offering one to clients needs
``allow_unprotected = true`` (NotPrivateWarning and the log at start-up; ``/v1/mechanisms``
lists it under ``unprotected``, and a response that used it says so in ``not_protected``).
The rule is :meth:`deniable.mechanisms.Option.offered_to_clients`, for the policies and for
every mechanism option alike.

The file is TOML (``.toml``) or JSON (anything else)::

    embedding = "/srv/glove"          # optional (default: GloVe 6B 50-d)
    max_tokens = 20000
    max_text_tokens = 2048            # word tokens per text (413 beyond): bounds one unit of work
    timeout_s = 10
    body_timeout_s = 10               # the whole body must arrive within this (408 beyond)
    pad_responses = true              # deadline-padded responses (see _timing.py); false: NOT protected
    pad_recover_s = 30                # a padding budget is back at idle this long after its last miss (0: never)
    budget_per_key = 50               # optional: epsilon per word each API key may spend in all (403 beyond)
    budget_ledger = "/srv/budget.json"  # optional: where the per-key releases persist (default: in memory)
    allow_non_metric = false          # true: also offer mechanisms whose guarantee is not metric DP
    allow_unprotected = false         # true: may offer values that are NOT protected (oov/case "keep"; warned)
    oov = ["random", "drop"]          # the default; "keep" (verbatim) needs allow_unprotected
    case = ["sentence", "lower"]      # the default; "keep" (the input's case) needs allow_unprotected

    [mechanisms.madlib]
    epsilons = [5, 10, 20, "unchanged<=0.5"]   # a target: resolved to an epsilon at start-up
    options = { batch_size = 4096 }      # fixed by the operator
    client = { index = ["flat", "exact"] }  # offered to clients (the first is the default)

Environment: ``DENIABLE_SERVICE_CONFIG`` (a path or inline JSON), ``DENIABLE_API_KEYS``
(comma-separated keys) and ``DENIABLE_API_KEYS_FILE`` (one key per line).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .._errors import InvalidParameterError
from .._validation import check_int_fields, int_field

__all__ = [
    "ENV_API_KEYS",
    "ENV_API_KEYS_FILE",
    "ENV_CONFIG",
    "MechanismOffer",
    "ServiceConfig",
    "config_data",
    "config_from_mapping",
    "load_config",
]

ENV_CONFIG = "DENIABLE_SERVICE_CONFIG"
ENV_API_KEYS = "DENIABLE_API_KEYS"
ENV_API_KEYS_FILE = "DENIABLE_API_KEYS_FILE"

#: The default offer: the Laplace mechanism with the faiss HNSW decode (prepared before /readyz) at a few epsilons.
DEFAULT_EPSILONS = (1.0, 5.0, 10.0, 20.0, 50.0)


@dataclass(frozen=True)
class MechanismOffer:
    """One mechanism as the operator offers it."""

    name: str
    #: numbers, or targets like "unchanged<=0.5" (resolved at start-up from the calibration table)
    epsilons: tuple[float | str, ...]
    #: fixed by the operator (validated by the registry as a trusted caller)
    options: dict[str, Any] = field(default_factory=dict)
    #: client-settable option -> the values offered (the first is the default)
    client: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def variants(self) -> list[dict[str, Any]]:
        """Every combination of offered client values (each one mechanism instance per epsilon)."""
        combos: list[dict[str, Any]] = [{}]
        for key, values in self.client.items():
            combos = [{**c, key: v} for c in combos for v in values]
        return combos

    def describe(self) -> dict[str, Any]:
        return {
            "epsilons": list(self.epsilons),
            "options": {k: list(v) for k, v in self.client.items()},
            "defaults": {k: v[0] for k, v in self.client.items()},
        }


@dataclass(frozen=True)
class ServiceConfig:
    """What the service offers and its limits (see the module docstring for the file format).

    Attributes
    ----------
    mechanisms
        The offered mechanisms (built once at start-up, one instance per epsilon and
        combination of offered client values).
    default_mechanism
        The mechanism of a request that names none.
    oov, case
        The policies offered (the first is the default). ``"keep"`` releases input verbatim
        (not protected): offered only with ``allow_unprotected``.
    embedding, vocab_size
        The embedding to load (``None``: the default one).
    max_body_bytes
        Largest request body, enforced while reading (413 beyond).
    max_texts, max_tokens
        Most texts and word tokens in one request (422 / 413 beyond).
    max_text_tokens
        Most word tokens in one text (413 beyond): one text is one unit of work, so this
        bounds the time between two deadline checks.
    chunk_tokens
        Work is done in chunks of whole texts of about this many tokens; the deadline is
        checked before each chunk (with the chunk's calibrated time) and while it runs.
    timeout_s
        Every work request is answered within this many seconds of its start: a request that
        would not finish by then is stopped and answered 503 with ``Retry-After`` at the deadline.
    body_timeout_s
        The whole request body must arrive within this many seconds (408 beyond); no work
        slot is held while it arrives.
    pad_responses
        Hold each work response until a time that depends only on public quantities
        (:mod:`deniable.service._timing`). ``False``: answers as soon as done, and the time
        may reveal which words were sent (warned, stated in every response).
    pad_recover_s
        A padding budget that doubled after a slow response (a burst, CPU contention) is back
        at its calibrated idle value once this many seconds passed without a miss in its size
        class, for every class: within ``timeout_s + pad_recover_s`` of the end of the load.
        0: never (the strict schedule: budgets only grow, the leak bounded by the misses alone).
    max_concurrency
        Requests doing work at once per worker process; beyond: 503 with ``Retry-After``.
    explain_draws, explain_top
        Draws behind a sampled explanation, and likely outputs listed.
    api_key_digests
        SHA-256 digests of the accepted API keys (empty: no key needed).
    allow_non_metric
        Offer mechanisms whose guarantee is not metric DP (``guarantee_form`` other than
        ``"metric"``: custext, custext_plus, santext_plus, truncated_gumbel). Refused by
        default; ``/v1/mechanisms`` states each offered mechanism's guarantee form.
    budget_per_key
        Optional (``None``: off). Each API key's privatize releases compose sequentially: a
        request at epsilon ``e`` spends ``e`` per word from its key's budget, recorded before
        any noise is drawn, and a request that would take the key over ``budget_per_key`` is
        refused (403, ``type`` ``"budget_exhausted"``) before the mechanism is called. Needs API
        keys. Conservative: every release counts as if it were of the same words (the service
        keeps nothing of the texts to tell them apart). The ledger is keyed by a digest of the
        key, never the key.
    budget_ledger
        The per-key ledger's file (a :class:`deniable.budget.BudgetAccountant` budget file,
        written atomically under a lock at every release; shared by the worker processes).
        ``None``: in memory, per worker process, lost at restart (then each worker holds its
        own budget: use a file with several workers).
    allow_unprotected
        Let the offer (``oov``, ``case``, mechanisms' ``client`` values) include values the
        registry declares not protected (``Option.unprotected``). Refused by default;
        when on: warned at start-up and listed by ``/v1/mechanisms`` (``unprotected``).
    """

    mechanisms: tuple[MechanismOffer, ...]
    default_mechanism: str = ""
    oov: tuple[str, ...] = ("random", "drop")
    case: tuple[str, ...] = ("sentence", "lower")
    embedding: str | None = None
    vocab_size: int | None = int_field(None, minimum=1)
    max_body_bytes: int = int_field(1 << 20, minimum=64)
    max_texts: int = int_field(1000, minimum=1)
    max_tokens: int = int_field(20_000, minimum=1)
    max_text_tokens: int = int_field(2048, minimum=1)
    chunk_tokens: int = int_field(2048, minimum=1)
    timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    pad_responses: bool = True
    pad_recover_s: float = 30.0
    max_concurrency: int = int_field(8, minimum=1)
    retry_after_s: int = int_field(1, minimum=0)
    explain_draws: int = int_field(2000, minimum=1)
    explain_top: int = int_field(10, minimum=1)
    api_key_digests: tuple[bytes, ...] = field(default=(), repr=False)
    allow_non_metric: bool = False
    allow_unprotected: bool = False
    budget_per_key: float | None = None
    budget_ledger: str | None = None
    #: per mechanism, each offered client option's unprotected values (from the registry, at start-up)
    _unsafe: dict[str, dict[str, tuple[Any, ...]]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.mechanisms:
            raise InvalidParameterError("mechanisms", "(none)", "at least one offered mechanism")
        if not isinstance(self.allow_non_metric, bool):
            raise InvalidParameterError("allow_non_metric", self.allow_non_metric, "true or false")
        from ..mechanisms.registry import is_metric_dp, mechanism_class

        for m in self.mechanisms:
            if not self.allow_non_metric and not is_metric_dp(m.name):
                raise InvalidParameterError(
                    f"mechanisms.{m.name}",
                    "offered",
                    "a mechanism whose guarantee is metric DP; its guarantee is: "
                    f"{mechanism_class(m.name).guarantee_form} (set allow_non_metric = true to offer it anyway)",
                )
        names = [m.name for m in self.mechanisms]
        if len(set(names)) != len(names):
            raise InvalidParameterError("mechanisms", ", ".join(names), "each mechanism once")
        if not self.default_mechanism:
            default = "madlib" if "madlib" in names else names[0]
            object.__setattr__(self, "default_mechanism", default)
        elif self.default_mechanism not in names:
            raise InvalidParameterError("default_mechanism", self.default_mechanism, "an offered mechanism")
        check_int_fields(self)
        for name in ("timeout_s", "body_timeout_s"):
            t = getattr(self, name)
            if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
                raise InvalidParameterError(name, t, "a finite number of seconds > 0")
        r = self.pad_recover_s
        if isinstance(r, bool) or not isinstance(r, int | float) or not math.isfinite(r) or r < 0:
            raise InvalidParameterError("pad_recover_s", r, "a finite number of seconds >= 0 (0: never)")
        b = self.budget_per_key
        if b is not None and (isinstance(b, bool) or not isinstance(b, int | float) or not math.isfinite(b) or b <= 0):
            raise InvalidParameterError("budget_per_key", b, "a finite epsilon per word > 0 (or none: no budget)")
        if self.budget_ledger is not None and (not isinstance(self.budget_ledger, str) or not self.budget_ledger):
            raise InvalidParameterError("budget_ledger", self.budget_ledger, "a file path")
        if self.budget_ledger is not None and b is None:
            raise InvalidParameterError("budget_ledger", self.budget_ledger, "set together with budget_per_key")
        if not isinstance(self.pad_responses, bool):
            raise InvalidParameterError("pad_responses", self.pad_responses, "true or false")
        if not isinstance(self.allow_unprotected, bool):
            raise InvalidParameterError("allow_unprotected", self.allow_unprotected, "true or false")
        # one rule for every client-settable value: an unprotected one is operator-only (issue 40)
        for name, option in _policy_options().items():
            values = option.offered_to_clients(getattr(self, name), allow_unprotected=self.allow_unprotected)
            object.__setattr__(self, name, values)
        unsafe: dict[str, dict[str, tuple[Any, ...]]] = {}  # per mechanism, offered option -> its unprotected values
        for m in self.mechanisms:
            declared = _declared(m.name)
            for key, values in m.client.items():
                if key not in declared:
                    raise InvalidParameterError(f"mechanisms.{m.name}.client.{key}", "", "a declared option")
                declared[key].offered_to_clients(
                    values, allow_unprotected=self.allow_unprotected, prefix=f"mechanisms.{m.name}.client."
                )
                unsafe.setdefault(m.name, {})[key] = declared[key].unprotected
        object.__setattr__(self, "_unsafe", unsafe)  # read per request: no registry look-up there

    def unprotected(self) -> dict[str, list[Any]]:
        """The offered values that are NOT protected, by field (empty unless ``allow_unprotected``)."""
        out: dict[str, list[Any]] = {}
        for name, option in _policy_options().items():
            found = [v for v in getattr(self, name) if not option.protected(v)]
            if found:
                out[name] = found
        for m in self.mechanisms:
            for key, values in m.client.items():
                found = [v for v in values if v in self._unsafe[m.name][key]]
                if found:
                    out[f"mechanisms.{m.name}.options.{key}"] = found
        return out

    def unprotected_chosen(self, mechanism: str, options: Mapping[str, Any]) -> list[str]:
        """What a request's mechanism ``options`` release outside the guarantee (its ``not_protected`` items)."""
        unsafe = self._unsafe.get(mechanism, {})
        return [
            f"{k}={v} is NOT protected (offered with allow_unprotected)"
            for k, v in options.items()
            if v in unsafe.get(k, ())
        ]

    def offer(self, name: str) -> MechanismOffer:
        return next(m for m in self.mechanisms if m.name == name)

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.mechanisms]

    def with_api_keys(self, keys: list[str]) -> ServiceConfig:
        """A copy that also accepts these keys (only their digests are kept)."""
        digests = self.api_key_digests + tuple(_digest(k) for k in keys)
        return replace(self, api_key_digests=digests)


def _policy_options() -> dict[str, Any]:
    """The oov and case policies as the registry's options (declared in :mod:`deniable.privatizer`)."""
    from ..privatizer import POLICY_OPTIONS

    return POLICY_OPTIONS


def _declared(name: str) -> dict[str, Any]:
    from ..mechanisms import options_of

    return {o.name: o for o in options_of(name)}


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def _epsilon_or_target(value: object, name: str) -> float | str:
    """An offered epsilon: a number > 0, or a target like ``"unchanged<=0.5"`` (kept as its canonical text)."""
    from ..mechanisms.registry import check_epsilon_option

    if isinstance(value, str):
        from ..calibrate.table import parse_target

        return str(parse_target(value, name))
    return check_epsilon_option(value, name=name)


def _offer(name: str, spec: object) -> MechanismOffer:
    from ..mechanisms import options_of, validate_options

    if not isinstance(spec, Mapping):
        raise InvalidParameterError(f"mechanisms.{name}", type(spec).__name__, "a table")
    unknown = set(spec) - {"epsilons", "options", "client"}
    if unknown:
        raise InvalidParameterError(f"mechanisms.{name}", ", ".join(sorted(unknown)), "epsilons, options, client")
    epsilons = spec.get("epsilons", DEFAULT_EPSILONS)
    if not isinstance(epsilons, list | tuple) or not epsilons:
        raise InvalidParameterError(f"mechanisms.{name}.epsilons", epsilons, "a non-empty list of numbers > 0")
    eps = tuple(dict.fromkeys(_epsilon_or_target(e, f"mechanisms.{name}.epsilons") for e in epsilons))
    fixed = validate_options(name, dict(spec.get("options", {})))
    declared = {o.name: o for o in options_of(name)}
    client: dict[str, tuple[Any, ...]] = {}
    for key, values in dict(spec.get("client", {})).items():
        opt = declared.get(key)
        if opt is None or not opt.client:
            settable = ", ".join(o.name for o in declared.values() if o.client) or "none"
            raise InvalidParameterError(f"mechanisms.{name}.client.{key}", "", f"a client-settable option ({settable})")
        if key in fixed:
            raise InvalidParameterError(f"mechanisms.{name}.client.{key}", "", "not also fixed in options")
        # parsed here; whether an unprotected value may be offered: ServiceConfig (allow_unprotected)
        client[key] = opt.offered_to_clients(values, allow_unprotected=True, prefix=f"mechanisms.{name}.client.")
    return MechanismOffer(name, eps, fixed, client)


def config_from_mapping(data: Mapping[str, Any]) -> ServiceConfig:
    """A :class:`ServiceConfig` from a parsed file (unknown keys are errors)."""
    data = dict(data)
    # default: madlib with the faiss HNSW decode, a prepared artefact built once (minutes) and
    # loaded before /readyz: interactive (docs/service.md, "The default offer"); same guarantee
    # as exact decode, a near-nearest word for some tokens; "exact" stays available to offer
    mechs = data.pop("mechanisms", {"madlib": {"client": {"index": ["hnsw"]}}})
    if not isinstance(mechs, Mapping):
        raise InvalidParameterError("mechanisms", type(mechs).__name__, "a table of mechanism name -> offer")
    keys_file = data.pop("api_keys_file", None)
    known = {f.name for f in fields(ServiceConfig) if f.init} - {"mechanisms", "api_key_digests"}
    unknown = set(data) - known
    if unknown:
        raise InvalidParameterError("config", ", ".join(sorted(unknown)), "known keys: " + ", ".join(sorted(known)))
    for key in ("oov", "case"):
        if key in data and isinstance(data[key], list):
            data[key] = tuple(data[key])
    config = ServiceConfig(mechanisms=tuple(_offer(n, s) for n, s in mechs.items()), **data)
    if keys_file is not None:
        config = config.with_api_keys(read_api_keys(keys_file))
    return config


def read_api_keys(path: str | os.PathLike[str]) -> list[str]:
    """Keys from a file, one per line (blank lines and ``#`` comments skipped)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidParameterError("api_keys_file", str(path), f"a readable file ({exc.strerror})") from None
    keys = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not keys:
        raise InvalidParameterError("api_keys_file", str(path), "a file with at least one key")
    return keys


def config_data(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The parsed configuration: ``path`` (or ``$DENIABLE_SERVICE_CONFIG``: a path or inline JSON), ``overrides``."""
    env = os.environ if environ is None else environ
    source = path if path is not None else env.get(ENV_CONFIG)
    data: Any = {}
    if source:
        text = str(source)
        if text.lstrip().startswith("{"):
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise InvalidParameterError("config", "(inline JSON)", f"valid JSON ({exc})") from None
        else:
            p = Path(text)
            try:
                raw = p.read_bytes()
            except OSError as exc:
                raise InvalidParameterError("config", text, f"a readable file ({exc.strerror})") from None
            try:
                data = tomllib.loads(raw.decode("utf-8")) if p.suffix == ".toml" else json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise InvalidParameterError("config", text, f"valid TOML or JSON ({exc})") from None
        if not isinstance(data, dict):
            raise InvalidParameterError("config", text, "a table at the top level")
    data.update({k: v for k, v in overrides.items() if v is not None})
    return data


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> ServiceConfig:
    """The configuration from ``path`` (or ``$DENIABLE_SERVICE_CONFIG``), ``overrides`` and API keys in the environment.

    Without a file: the default offer (madlib, faiss HNSW decode, epsilons 1 to 50).
    ``overrides`` (e.g. ``embedding=...``) replace keys of the file; ``None`` values are ignored.
    """
    env = os.environ if environ is None else environ
    config = config_from_mapping(config_data(path, environ=env, **overrides))
    keys: list[str] = []
    if env.get(ENV_API_KEYS):
        keys += [k.strip() for k in env[ENV_API_KEYS].split(",") if k.strip()]
    if env.get(ENV_API_KEYS_FILE):
        keys += read_api_keys(env[ENV_API_KEYS_FILE])
    return config.with_api_keys(keys) if keys else config
