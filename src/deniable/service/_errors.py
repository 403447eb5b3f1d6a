"""How the service answers what it will not do: the error bodies and the exception handlers.

Every error is ``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}`` naming a field or a
limit, never a value the client sent: pydantic's validation errors are reworded where their
message or location would quote a client's string, a body that is not UTF-8 is a 400, and
anything unexpected is a 500 whose log line holds the exception's type only.

May import: FastAPI (the 'serve' extra), ``._config`` and the registry's option declarations
(public names: an operator-only option a client sends is named); nothing else of the service.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, HTTPException, Request  # imported by create_app only (the 'serve' extra is there)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ._config import ServiceConfig

__all__ = ["error", "install_error_handlers", "not_ready"]

log = logging.getLogger("deniable.service")

#: Location parts that are field names of the request models (anything else, e.g. a dict key a client sent, is hidden).
_SAFE_LOC = frozenset(
    {
        "body",
        "<unknown field>",
        "texts",
        "epsilon",
        "mechanism",
        "options",
        "oov",
        "case",
        "word",
        "against",
        "header",
        "query",
        "path",
    }
)


def error(status: int, loc: str, msg: str, kind: str, headers: dict[str, str] | None = None) -> HTTPException:
    """The answer ``status`` about the body's field ``loc``."""
    return HTTPException(status, [{"loc": ["body", loc], "msg": msg, "type": kind}], headers=headers)


def not_ready() -> HTTPException:
    """The 503 of a work route before every offered mechanism is prepared."""
    return HTTPException(503, [{"loc": ["server"], "msg": "not ready", "type": "not_ready"}], {"Retry-After": "5"})


def install_error_handlers(app: FastAPI, cfg: ServiceConfig) -> None:
    """Answer validation errors, bad encodings and unexpected errors of ``app`` without echoing a value."""
    from ..mechanisms import options_of

    # declared options a client may not set (e.g. the decode's prior): public names, named in the 422
    operator_only = {o.name for m in cfg.mechanisms for o in options_of(m.name) if not o.client}
    safe_loc = _SAFE_LOC | set(cfg.names) | {k for m in cfg.mechanisms for k in m.client} | operator_only

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # pydantic's default body echoes the offending input, which may be user text: drop it,
        # and reword the errors whose message or location would quote a client's string.
        detail = []
        for e in exc.errors():
            loc, msg, kind = list(e.get("loc", ())), e.get("msg"), e.get("type")
            if kind == "union_tag_invalid":
                loc, msg = [*loc, "mechanism"], "one of " + ", ".join(cfg.names)
            elif kind == "extra_forbidden" and loc and loc[-1] in operator_only:
                msg = "set by the operator only, not by a client (see /v1/mechanisms)"
            elif kind == "extra_forbidden":
                loc, msg = [*loc[:-1], "<unknown field>"], "not a field here (see /v1/mechanisms)"
            elif kind == "json_invalid":
                loc, msg = ["body"], "not valid JSON"
            loc = [p if isinstance(p, int) or p in safe_loc or not isinstance(p, str) else "<key>" for p in loc]
            detail.append({"loc": loc, "msg": msg, "type": kind})
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(UnicodeDecodeError)
    async def bad_encoding(request: Request, exc: UnicodeDecodeError) -> JSONResponse:
        return JSONResponse(
            status_code=400, content={"detail": [{"loc": ["body"], "msg": "not UTF-8", "type": "encoding"}]}
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("deniable service: internal error (%s)", type(exc).__name__)  # the type only: no text
        return JSONResponse(status_code=500, content={"detail": [{"loc": ["server"], "msg": "internal error"}]})
