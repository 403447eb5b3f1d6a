"""The bodies of the work routes: request models generated from the registry and narrowed
to the operator's offer, and the response models.

Per offered mechanism one request model, chosen by ``mechanism``: ``epsilon`` is one of the
offered epsilons, ``options`` holds only the options the registry declares
client-settable *and* the operator offers, each one of the offered values. Strict types
(``true`` is not a number), unknown fields rejected, texts that are not valid Unicode
(lone surrogates) rejected.

May import: pydantic, the registry (``deniable.mechanisms``) and ``._config``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, create_model

from ._config import MechanismOffer, ServiceConfig

MAX_WORD_CHARS = 200
MAX_AGAINST = 10


def _encodable(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("not valid Unicode (a lone surrogate)") from None
    return value


def _texts_encodable(values: list[str]) -> list[str]:
    for i, v in enumerate(values):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"texts[{i}] is not valid Unicode (a lone surrogate)") from None
    return values


def _one_of(name: str, values: tuple[Any, ...]) -> Any:
    def check(v: Any) -> Any:
        if v not in values:
            raise ValueError(f"{name}: not offered (see /v1/mechanisms)")
        return v

    return AfterValidator(check)


def _title(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _options_model(offer: MechanismOffer) -> Any:
    """The ``options`` of one offered mechanism: each offered client option, one of its offered values."""
    from ..mechanisms import options_of

    declared = {o.name: o for o in options_of(offer.name)}
    fields: dict[str, Any] = {}
    for key, values in offer.client.items():
        opt = declared[key]
        if opt.type is str:
            ann: Any = Literal[values]
            extra: dict[str, Any] = {}  # a Literal of strings is strict already
        else:
            ann = Annotated[opt.type, _one_of(key, values)]
            extra = {"json_schema_extra": {"enum": list(values)}, "strict": True}
        fields[key] = (ann, Field(values[0], description=opt.help, **extra))
    return create_model(_title(offer.name) + "Options", __config__=ConfigDict(extra="forbid", strict=True), **fields)


def _epsilon_field(offer: MechanismOffer) -> tuple[Any, Any]:
    if any(isinstance(e, str) for e in offer.epsilons):  # targets ("unchanged<=0.5"), resolved at start-up
        ann: Any = Annotated[float | str, _one_of("epsilon", offer.epsilons)]
        return ann, Field(  # strict: the model's config
            ...,
            description="Privacy parameter: one of the offered epsilons, or an offered target (the response "
            "states the epsilon it resolved to).",
            json_schema_extra={"enum": list(offer.epsilons)},
        )
    ann = Annotated[float, _one_of("epsilon", offer.epsilons)]
    field = Field(
        ...,
        gt=0,
        allow_inf_nan=False,
        strict=True,
        description="Privacy parameter: one of the offered epsilons.",
        json_schema_extra={"enum": list(offer.epsilons)},
    )
    return ann, field


def _union(models: dict[str, Any], default: str) -> Any:
    def tag(body: Any) -> str | None:
        if isinstance(body, dict):
            found = body.get("mechanism", default)
            return found if isinstance(found, str) and found in models else "<unknown>"
        return getattr(body, "mechanism", None)

    if len(models) == 1:
        return next(iter(models.values()))
    members = tuple(Annotated[m, Tag(n)] for n, m in models.items())
    return Annotated[Union[members], Discriminator(tag)]  # noqa: UP007


def _per_mechanism(
    cfg: ServiceConfig, options: dict[str, Any], base: type[BaseModel], suffix: str, *, described: bool
) -> Any:
    """One model per offered mechanism on ``base`` (its ``mechanism``, ``epsilon``, ``options``), a union."""
    models = {}
    for offer in cfg.mechanisms:
        opts = options[offer.name]
        mechanism, options_field = Field(offer.name), Field(default_factory=opts)
        if described:
            mechanism = Field(offer.name, description=f"The mechanism (default {cfg.default_mechanism}).")
            options_field = Field(default_factory=opts, description=f"Options of {offer.name} a client may choose.")
        models[offer.name] = create_model(
            _title(offer.name) + suffix,
            __base__=base,
            mechanism=(Literal[offer.name], mechanism),  # type: ignore[arg-type]
            epsilon=_epsilon_field(offer),
            options=(opts, options_field),
        )
    return _union(models, cfg.default_mechanism)


def request_models(cfg: ServiceConfig) -> tuple[Any, Any]:
    """The ``/v1/privatize`` and ``/v1/explain`` bodies."""
    options = {offer.name: _options_model(offer) for offer in cfg.mechanisms}
    return _privatize_model(cfg, options), _explain_model(cfg, options)


def _privatize_model(cfg: ServiceConfig, options: dict[str, Any]) -> Any:

    class PrivatizeRequestBase(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)

        texts: Annotated[list[str], AfterValidator(_texts_encodable)] = Field(
            ..., max_length=cfg.max_texts, description="Texts to privatize."
        )
        oov: Literal[cfg.oov] = Field(  # type: ignore[name-defined]
            cfg.oov[0],
            description="Out-of-vocabulary words: random (protected), drop, or keep (NOT protected: offered only "
            "where the operator allows unprotected values, see /v1/mechanisms).",
        )
        case: Literal[cfg.case] = Field(  # type: ignore[name-defined]
            cfg.case[0],
            description="Case of output words: sentence, lower, or keep (copies the input's case pattern: "
            "NOT protected, offered only where the operator allows unprotected values).",
        )

    return _per_mechanism(cfg, options, PrivatizeRequestBase, "Request", described=True)


def _explain_model(cfg: ServiceConfig, options: dict[str, Any]) -> Any:

    class ExplainRequestBase(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)

        word: Annotated[str, AfterValidator(_encodable)] = Field(
            ..., min_length=1, max_length=MAX_WORD_CHARS, description="The word to explain (never logged)."
        )
        against: list[Annotated[str, AfterValidator(_encodable), Field(max_length=MAX_WORD_CHARS)]] = Field(
            default_factory=list,
            max_length=MAX_AGAINST,
            description="Alternative words w' for the guarantee (default: the likeliest other outputs).",
        )

    return _per_mechanism(cfg, options, ExplainRequestBase, "ExplainRequest", described=False)


# -- responses ------------------------------------------------------------------------------
class Guarantee(BaseModel):
    mechanism: dict[str, Any] = Field(description="The mechanism and its parameters (epsilon, metric, ...).")
    statement: str = Field(description="The guarantee in words.")
    not_protected: list[str] = Field(description="What the output releases outside the guarantee.")


class PrivatizeResponse(BaseModel):
    texts: list[str]
    tokens: int = Field(description="Word tokens in the request.")
    changed: int = Field(description="Vocabulary words replaced by another word.")
    oov: int = Field(description="Out-of-vocabulary word tokens (handled by the oov policy).")
    guarantee: Guarantee
    mechanism: dict[str, Any] = Field(description="Same as guarantee.mechanism (first version's field).")
    policy: dict[str, Any] = Field(description="The oov and case policies and what is not protected.")


class ExplainOutput(BaseModel):
    word: str
    probability: float
    low: float
    high: float
    distance: float


class ExplainGuarantee(BaseModel):
    other: str
    distance: float
    bound: float
    ratio: float


class ExplainResponse(BaseModel):
    mechanism: dict[str, Any]
    exact: bool = Field(description="Exact distribution (TEM) or estimated from draws (with intervals).")
    n_w: float = Field(description="Expected draws until the word comes back unchanged (N_w).")
    n_w_low: float
    n_w_high: float
    s_w: float
    outputs: list[ExplainOutput] = Field(description="The most likely outputs.")
    other_mass: float = Field(description="Probability of every output not listed.")
    guarantees: list[ExplainGuarantee] = Field(
        description="Pr[M(w)=y] <= ratio * Pr[M(w')=y] for every output y, against each alternative w'."
    )
