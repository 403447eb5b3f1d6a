"""An HTTP service (FastAPI): ``POST /privatize`` texts in, privatized texts out.

Install with ``pip install 'deniable[serve]'`` and run ``deniable serve``. The
service never logs request bodies; errors name the field, never its text. Bad
parameters get a 4xx answer. Each request draws fresh OS randomness; mechanisms are
built once per (mechanism, epsilon, options) and shared across requests (they hold no
state, so that is thread-safe).
"""

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ._errors import DeniableError, InvalidParameterError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .embedding import Embedding
    from .mechanisms.base import Mechanism

__all__ = ["create_app"]

MAX_TEXTS = 10_000
MAX_CHARS = 5_000_000


def create_app(embedding: "Embedding | None" = None, *, max_cached_mechanisms: int = 8) -> "FastAPI":
    """Build the FastAPI application (the embedding is loaded once, at start-up)."""
    try:
        from fastapi import FastAPI, HTTPException, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse
        from pydantic import BaseModel, Field
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise DeniableError("the service needs the 'serve' extra: pip install 'deniable[serve]'") from exc

    from . import __version__
    from ._random import secure_generator
    from .embeddings import load_embedding
    from .mechanisms import MECHANISMS, make_mechanism
    from .privatizer import OOV_POLICIES, Privatizer

    emb = embedding if embedding is not None else load_embedding()
    cache: OrderedDict[tuple[Any, ...], Mechanism] = OrderedDict()
    lock = threading.Lock()

    def mechanism_for(name: str, epsilon: float, options: dict[str, Any]) -> "Mechanism":
        key = (name, float(epsilon), tuple(sorted((k, repr(v)) for k, v in options.items())))
        with lock:
            if key in cache:
                cache.move_to_end(key)
                return cache[key]
        mech = make_mechanism(name, emb, epsilon, **options)
        with lock:
            cache[key] = mech
            while len(cache) > max_cached_mechanisms:
                cache.popitem(last=False)
        return mech

    class PrivatizeRequest(BaseModel):
        texts: list[str] = Field(..., max_length=MAX_TEXTS, description="Texts to privatize.")
        epsilon: float = Field(..., gt=0, allow_inf_nan=False, description="Privacy parameter (> 0).")
        mechanism: str = Field("madlib", description="madlib, tem or brr.")
        options: dict[str, Any] = Field(
            default_factory=dict, description="Mechanism options, e.g. {'metric': 'angular'} for tem."
        )
        oov: str = Field("keep", description="keep (not protected), drop or random.")

    class PrivatizeResponse(BaseModel):
        texts: list[str]
        tokens: int
        changed: int
        oov: int
        mechanism: dict[str, Any]

    app = FastAPI(
        title="deniable",
        version=__version__,
        description="Privatize text with metric differential privacy.",
    )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # pydantic's default body echoes the offending input, which may be user text: drop it.
        detail = [{"loc": e.get("loc"), "msg": e.get("msg"), "type": e.get("type")} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "embedding": emb.name, "vocabulary": emb.size, "dim": emb.dim}

    @app.get("/mechanisms")
    def mechanisms() -> dict[str, list[str]]:
        return {"mechanisms": sorted(MECHANISMS), "oov": list(OOV_POLICIES)}

    @app.post("/privatize", response_model=PrivatizeResponse)
    def privatize(req: PrivatizeRequest) -> PrivatizeResponse:
        if sum(len(t) for t in req.texts) > MAX_CHARS:
            raise HTTPException(413, f"texts: more than {MAX_CHARS:,} characters in one request")
        try:
            if req.mechanism not in MECHANISMS:
                raise InvalidParameterError("mechanism", req.mechanism, "one of " + ", ".join(sorted(MECHANISMS)))
            mech = mechanism_for(req.mechanism, req.epsilon, req.options)
            priv = Privatizer(mech, oov=req.oov)
            texts, stats = priv.privatize_batch_with_stats(req.texts, secure_generator())
        except TypeError as exc:  # unknown option name for the mechanism
            raise HTTPException(422, f"options: {exc}") from None
        except InvalidParameterError as exc:
            raise HTTPException(422, str(exc)) from None
        except DeniableError as exc:
            raise HTTPException(400, str(exc)) from None
        return PrivatizeResponse(
            texts=texts, tokens=stats.tokens, changed=stats.changed, oov=stats.oov, mechanism=mech.describe()
        )

    return app
