"""An HTTP service (FastAPI): ``POST /privatize`` texts in, privatized texts out.

Install with ``pip install 'deniable[serve]'`` and run ``deniable serve``. The
service never logs request bodies; errors name the field, never its text. Bad
parameters get a 4xx answer. The request schema is generated from the mechanism
registry: per mechanism, the options a client may set, with their types and bounds.
Each request draws fresh OS randomness; mechanisms are built once per (mechanism,
epsilon, options) and shared across requests (they hold no state, so that is
thread-safe).
"""

import threading
import warnings
from collections import OrderedDict
from typing import TYPE_CHECKING, Annotated, Any

from ._errors import DeniableError, InvalidParameterError, NotPrivateWarning

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .embedding import Vocabulary
    from .mechanisms.base import Mechanism
    from .mechanisms.registry import Option

__all__ = ["create_app"]

MAX_TEXTS = 10_000
MAX_CHARS = 5_000_000


def _options_model(name: str, options: "tuple[Option, ...]") -> Any:
    """A pydantic model of ``name``'s client-settable options (extra keys forbidden, strict types)."""
    from typing import Literal

    from pydantic import ConfigDict, Field, create_model

    fields: dict[str, Any] = {}
    for opt in options:
        if not opt.client or opt.type is dict:
            continue
        ann: Any = Literal[tuple(opt.choices)] if opt.choices is not None else opt.type
        if opt.nullable:
            ann = ann | None
        bounds: dict[str, Any] = {}
        if opt.low is not None:
            bounds["gt" if opt.low_open else "ge"] = opt.low
        if opt.high is not None:
            bounds["lt" if opt.high_open else "le"] = opt.high
        if opt.type is float:
            bounds["allow_inf_nan"] = False
        fields[opt.name] = (ann, Field(opt.default, description=opt.help, **bounds))
    title = "".join(part.capitalize() for part in name.split("_")) + "Options"
    return create_model(title, __config__=ConfigDict(extra="forbid", strict=True), **fields)


def _request_models(names: list[str]) -> tuple[Any, dict[str, Any]]:
    """The ``/privatize`` body: one model per registered mechanism, chosen by ``mechanism``."""
    from typing import Annotated, Literal, Union

    from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, create_model

    from .mechanisms import options_of
    from .privatizer import CASE_POLICIES, OOV_POLICIES

    default = "madlib" if "madlib" in names else names[0]

    class PrivatizeRequestBase(BaseModel):
        model_config = ConfigDict(extra="forbid")

        texts: list[str] = Field(..., max_length=MAX_TEXTS, description="Texts to privatize.")
        epsilon: float = Field(..., gt=0, allow_inf_nan=False, strict=True, description="Privacy parameter (> 0).")
        oov: Literal[tuple(OOV_POLICIES)] = Field(  # type: ignore[valid-type]
            "random",
            description="Out-of-vocabulary words: random (default, protected), drop, or keep (NOT protected).",
        )
        case: Literal[tuple(CASE_POLICIES)] = Field(  # type: ignore[valid-type]
            "sentence",
            description="Case of output words: sentence (default), lower, or keep (copies the input's case "
            "pattern: NOT protected).",
        )

    option_models = {name: _options_model(name, options_of(name)) for name in names}
    models = {}
    for name in names:
        opts = option_models[name]
        models[name] = create_model(
            opts.__name__.removesuffix("Options") + "Request",
            __base__=PrivatizeRequestBase,
            mechanism=(Literal[name], Field(name, description=f"The mechanism (default {default}).")),  # type: ignore[arg-type]
            options=(opts, Field(default_factory=opts, description=f"Options of {name} a client may set.")),
        )

    def tag(body: Any) -> str | None:
        if isinstance(body, dict):
            found = body.get("mechanism", default)
            return found if isinstance(found, str) and found in models else "<unknown>"
        return getattr(body, "mechanism", None)

    if len(models) == 1:
        return next(iter(models.values())), option_models
    members = tuple(Annotated[m, Tag(n)] for n, m in models.items())
    return Annotated[Union[members], Discriminator(tag)], option_models  # noqa: UP007


def create_app(embedding: "Vocabulary | None" = None, *, max_cached_mechanisms: int = 8) -> "FastAPI":
    """Build the FastAPI application (the embedding is loaded once, at start-up)."""
    try:
        from fastapi import Body, FastAPI, HTTPException, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse
        from pydantic import BaseModel
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise DeniableError("the service needs the 'serve' extra: pip install 'deniable[serve]'") from exc

    from . import __version__
    from ._random import secure_generator
    from .embedding import load_embedding
    from .mechanisms import EPSILON, make_mechanism, mechanism_names, options_of, validate_options
    from .privatizer import CASE_POLICIES, OOV_POLICIES, Privatizer

    emb = embedding if embedding is not None else load_embedding()
    cache: OrderedDict[tuple[Any, ...], Mechanism] = OrderedDict()
    lock = threading.Lock()

    names = mechanism_names()
    request_model, _ = _request_models(names)

    def mechanism_for(name: str, epsilon: float, options: dict[str, Any]) -> "Mechanism":
        # client values are validated by the registry before anything is built or cached
        eps = float(epsilon)  # strict float > 0, finite (the request model); huge ones warn when built
        opts = validate_options(name, options, client=True)
        key = (name, eps, tuple(sorted((k, repr(v)) for k, v in opts.items())))
        with lock:
            if key in cache:
                cache.move_to_end(key)
                return cache[key]
        mech = make_mechanism(name, emb, eps, **opts)
        with lock:
            cache[key] = mech
            while len(cache) > max_cached_mechanisms:
                cache.popitem(last=False)
        return mech

    class PrivatizeResponse(BaseModel):
        texts: list[str]
        tokens: int
        changed: int
        oov: int
        mechanism: dict[str, Any]
        policy: dict[str, Any]

    app = FastAPI(
        title="deniable",
        version=__version__,
        description="Privatize text with metric differential privacy.",
    )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # pydantic's default body echoes the offending input, which may be user text: drop it,
        # and reword the two errors whose message or location would quote a client's string.
        detail = []
        for e in exc.errors():
            loc, msg, kind = list(e.get("loc", ())), e.get("msg"), e.get("type")
            if kind == "union_tag_invalid":
                loc, msg = [*loc, "mechanism"], "one of " + ", ".join(names)
            elif kind == "extra_forbidden":
                loc, msg = [*loc[:-1], "<unknown field>"], "not a field here (see /mechanisms)"
            detail.append({"loc": loc, "msg": msg, "type": kind})
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "embedding": emb.name, "vocabulary": emb.size, "dim": emb.dim}

    @app.get("/mechanisms")
    def mechanisms() -> dict[str, Any]:
        """Every registered mechanism with the options a client may set (type, default, bounds, help)."""
        return {
            "mechanisms": {
                n: {"epsilon": EPSILON.describe(), "options": [o.describe() for o in options_of(n) if o.client]}
                for n in names
            },
            "oov": list(OOV_POLICIES),
            "case": list(CASE_POLICIES),
        }

    @app.post("/privatize", response_model=PrivatizeResponse)
    def privatize(body: Annotated[request_model, Body()]) -> PrivatizeResponse:  # type: ignore[valid-type]
        req: Any = body
        if sum(len(t) for t in req.texts) > MAX_CHARS:
            raise HTTPException(413, f"texts: more than {MAX_CHARS:,} characters in one request")
        try:
            mech = mechanism_for(req.mechanism, req.epsilon, req.options.model_dump(exclude_unset=True))
            with warnings.catch_warnings():  # the response's policy.not_protected states it
                warnings.simplefilter("ignore", NotPrivateWarning)
                priv = Privatizer(mech, oov=req.oov, case=req.case)
            texts, stats = priv.privatize_batch_with_stats(req.texts, secure_generator())
        except InvalidParameterError as exc:
            raise HTTPException(422, str(exc)) from None
        except DeniableError as exc:
            raise HTTPException(400, str(exc)) from None
        return PrivatizeResponse(
            texts=texts,
            tokens=stats.tokens,
            changed=stats.changed,
            oov=stats.oov,
            mechanism=mech.describe(),
            policy=priv.describe(),
        )

    return app
