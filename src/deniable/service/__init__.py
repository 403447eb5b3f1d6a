"""An HTTP service (FastAPI) a platform team can put in front of users.

Install with ``pip install 'deniable[serve]'`` and run ``deniable serve`` (see
docs/service.md). The operator's :class:`ServiceConfig` names what is offered -- the
mechanisms, their epsilons and the values of the options the registry declares
client-settable -- and the limits; every mechanism instance is built and prepared once,
before ``/readyz`` turns ready. A client chooses among the offer; anything else is a 422
that names the field without echoing its value.

Endpoints: ``POST /v1/privatize``, ``POST /v1/explain``, ``GET /v1/mechanisms``,
``GET /livez``, ``GET /readyz``, the playground page at ``/``; the first version's
``/privatize``, ``/mechanisms`` and ``/health`` remain as aliases.

Nothing the service logs, persists or times depends on request text beyond the output:
request bodies and API keys are never logged, errors name a field and never its value,
each request draws fresh OS randomness, and TEM is served from prepared input-independent
tables in its history-free mode.
"""

# This module is the app factory: create_app composes the service's rooms, each a module --
# _config (what the operator offers), _offers (the offer built), _limits / _guard / _timing
# (the limits), _state (app.state.deniable), _errors (the error answers), and the routes
# (_public, _work, _device); _models holds the bodies. It may import all of them; they never
# import it. Its docstring above is the API's description in the OpenAPI schema.

from typing import TYPE_CHECKING

from .._errors import DeniableError
from ._config import MechanismOffer, ServiceConfig, load_config

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ..embedding import Vocabulary

__all__ = ["MechanismOffer", "ServiceConfig", "app_factory", "create_app", "load_config"]


def create_app(
    embedding: "Vocabulary | None" = None,
    config: ServiceConfig | None = None,
    *,
    background: bool = False,
) -> "FastAPI":
    """Build the FastAPI application.

    ``config`` (default: :func:`load_config` from the environment) says what is offered;
    ``embedding`` (default: the config's) is used as is. With ``background=False`` every
    mechanism is built and prepared now; with ``background=True`` that happens in a
    thread started by the application's lifespan, ``/livez`` answers at once and
    ``/readyz`` (and every work endpoint) says 503 until it is done.
    """
    try:
        from fastapi import FastAPI
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise DeniableError("the service needs the 'serve' extra: pip install 'deniable[serve]'") from exc

    from .. import __version__
    from ._device import DECODE_PATH, install_device_routes
    from ._errors import install_error_handlers
    from ._guard import Guard
    from ._limits import WORK_PATHS, warn_unpadded, warn_unprotected
    from ._public import install_public_routes
    from ._state import State
    from ._work import install_work_routes

    cfg = config if config is not None else load_config()
    warn_unpadded(cfg)
    warn_unprotected(cfg)
    state = State(cfg, embedding)
    if not background:
        state.build()
        if state.failed:
            raise DeniableError(f"the service could not prepare its mechanisms: {state.failed}")

    app = FastAPI(title="deniable", version=__version__, description=__doc__, lifespan=state.lifespan(background))
    app.add_middleware(
        Guard,
        max_body_bytes=cfg.max_body_bytes,
        max_concurrency=cfg.max_concurrency,
        retry_after_s=cfg.retry_after_s,
        work_paths=WORK_PATHS | {DECODE_PATH},
        api_key_digests=cfg.api_key_digests,
        body_timeout_s=cfg.body_timeout_s,
        busy=lambda: state.work.orphans,
    )
    app.state.deniable = state
    install_error_handlers(app, cfg)
    install_public_routes(app, state)  # probes, the page, /v1/mechanisms
    install_work_routes(app, state)  # /v1/privatize, /v1/explain
    install_device_routes(app, state)  # on-device: docs/device.md
    return app


def app_factory() -> "FastAPI":
    """The application for ``uvicorn --factory deniable.service:app_factory`` (config from the environment).

    Used by ``deniable serve --workers N``: each worker process builds its own app from
    ``$DENIABLE_SERVICE_CONFIG``; the embedding and prepared artefacts are memory-mapped,
    so the workers share their pages.
    """
    _one_thread_per_request()
    return create_app(config=load_config(), background=True)


def _one_thread_per_request() -> None:
    """In a worker process of ``deniable serve``: faiss searches on one thread per request.

    The service's parallelism is its concurrent requests (and worker processes); faiss's
    OpenMP threads on top of them contend for the same cores (measured: a 30-token HNSW
    decode 10 ms at 2 OpenMP threads under load against 3 ms at 1).
    """
    from .._threads import init_worker

    init_worker()  # and 1 BLAS thread: N worker processes x 1 thread (deniable._threads)
