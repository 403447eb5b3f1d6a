"""The public read-only routes (no API key, no work slot: ``_guard.PUBLIC_PATHS``).

The probes (``/livez``, ``/readyz`` and the first version's ``/health``), the playground
page at ``/`` (``static/playground.html``, with ``/static/guarantee.html``) and the catalogue of the offer
(``/v1/mechanisms`` and its alias ``/mechanisms``). None reads a request body.

May import: FastAPI (the 'serve' extra), ``._offers`` and ``._state``.
"""

from typing import Any

from fastapi import FastAPI  # imported by create_app only (the 'serve' extra is there)
from fastapi.responses import HTMLResponse, JSONResponse

from ._offers import describe_offer
from ._state import State

__all__ = ["install_public_routes"]


def install_public_routes(app: FastAPI, state: State) -> None:
    """Add the probes, the page and the catalogue to ``app``."""

    @app.get("/livez", tags=["probes"])
    def livez() -> dict[str, Any]:
        """The process answers (from start, also while preparing)."""
        return {"status": "alive"}

    @app.get("/readyz", tags=["probes"], responses={503: {"description": "Still preparing, or preparation failed."}})
    def readyz() -> JSONResponse:
        """Ready when every offered mechanism is built and prepared."""
        if state.ready.is_set():
            return JSONResponse({"status": "ready", "mechanisms": len(state.mechanisms)})
        status = "failed" if state.failed else "preparing"
        return JSONResponse({"status": status}, status_code=503, headers={"Retry-After": "5"})

    @app.get("/health", tags=["probes"], deprecated=True)
    def health() -> JSONResponse:
        """First version's probe: the embedding, once ready."""
        emb = state.embedding
        if not state.ready.is_set() or emb is None:
            return readyz()
        return JSONResponse({"status": "ok", "embedding": emb.name, "vocabulary": emb.size, "dim": emb.dim})

    @app.get("/", include_in_schema=False)
    def page() -> HTMLResponse:
        from importlib.resources import files

        return HTMLResponse(files(__package__).joinpath("static/playground.html").read_text(encoding="utf-8"))

    @app.get("/static/guarantee.html", include_in_schema=False)
    def guarantee_page() -> HTMLResponse:
        """The guarantee in plain words, linked from the page (public: ``_guard`` lets ``/static/`` through)."""
        from importlib.resources import files

        return HTMLResponse(files(__package__).joinpath("static/guarantee.html").read_text(encoding="utf-8"))

    def offers() -> dict[str, Any]:
        built = state.mechanisms if state.ready.is_set() else None
        return describe_offer(state.config, built, state.timing.describe())

    @app.get("/v1/mechanisms", tags=["v1"])
    def mechanisms_v1() -> dict[str, Any]:
        """What this service offers: per mechanism the epsilons and the option values a client may choose."""
        return offers()

    @app.get("/mechanisms", tags=["v1"], deprecated=True)
    def mechanisms_alias() -> dict[str, Any]:
        """Alias of /v1/mechanisms."""
        return offers()
