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

import logging
import threading
import time
import warnings
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any

from .._errors import DeniableError, InvalidParameterError, NotPrivateWarning
from ._config import MechanismOffer, ServiceConfig, load_config

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from fastapi import FastAPI

    from ..embedding import Vocabulary
    from ..mechanisms.base import Mechanism
    from ..privatizer import Privatizer

__all__ = ["MechanismOffer", "ServiceConfig", "app_factory", "create_app", "load_config"]

log = logging.getLogger("deniable.service")

#: Work endpoints (a concurrency slot each).
WORK_PATHS = frozenset({"/v1/privatize", "/v1/explain", "/privatize"})

_Key = tuple[str, float | str, tuple[tuple[str, Any], ...]]


def _key(name: str, epsilon: float | str, variant: dict[str, Any]) -> _Key:
    return (name, epsilon if isinstance(epsilon, str) else float(epsilon), tuple(sorted(variant.items())))


def _prepare_mechanism(mech: "Mechanism") -> None:
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


def _privacy_info(mech: "Mechanism", options: dict[str, Any]) -> dict[str, Any]:
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


class _State:
    """The embedding, every offered mechanism instance and its privatizers; readiness."""

    def __init__(self, config: ServiceConfig, embedding: "Vocabulary | None") -> None:
        self.config = config
        self.embedding = embedding
        self.mechanisms: dict[_Key, tuple[Mechanism, dict[str, Any]]] = {}
        self.privatizers: dict[tuple[_Key, str, str], Privatizer] = {}
        self.ready = threading.Event()
        self.failed: str | None = None
        self.started = time.monotonic()
        from ._timing import Timing

        self.timing = Timing(timeout_s=config.timeout_s, enabled=config.pad_responses, recover_s=config.pad_recover_s)
        self.explain_draws: dict[_Key, int] = {}
        #: work threads still running for requests already answered at their deadline (count toward the limit)
        self.orphans = 0
        self._orphans_lock = threading.Lock()
        self._pool: Any = None

    def orphan(self, work: Any) -> None:
        """Count ``work`` (a concurrent future whose request was answered) as busy until it ends."""
        with self._orphans_lock:
            self.orphans += 1

        def done(f: Any) -> None:  # on the work thread (or here, if already done)
            with self._orphans_lock:
                self.orphans -= 1
            if not f.cancelled():
                f.exception()  # retrieved: an error of abandoned work is not logged

        work.add_done_callback(done)

    @property
    def pool(self) -> Any:
        """The work threads (one per concurrent request; made on first use)."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            workers = self.config.max_concurrency + 1
            self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="deniable-work")
        return self._pool

    def build(self) -> None:
        """Load, build and prepare everything the config offers (start-up; logs nothing from requests)."""
        try:
            self._build()
            self._calibrate()
        except Exception as exc:  # noqa: BLE001 - reported by /readyz and the log, never raised into a request
            self.failed = f"{type(exc).__name__}: {exc}"
            log.error("deniable service: preparation failed: %s", self.failed)
            return
        self.ready.set()
        log.info("deniable service: ready (%d mechanism instances)", len(self.mechanisms))

    def _build(self) -> None:
        from ..embedding import load_embedding
        from ..mechanisms import make_mechanism, options_of
        from ..privatizer import Privatizer

        cfg = self.config
        if self.embedding is None:
            self.embedding = load_embedding(cfg.embedding, vocab_size=cfg.vocab_size)
        emb = self.embedding
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
                    _prepare_mechanism(mech)
                    if not shared and "index" in objects and hasattr(mech, "search_index"):
                        shared["index"] = mech.search_index  # one decode index for every epsilon
                    info = dict(mech.describe())
                    for k, v in {**offer.options, **variant}.items():
                        if k in info and isinstance(v, str | int | float | bool):
                            info[k] = v  # the offered name (not the shared object's type)
                    info.update(_privacy_info(mech, opts))
                    key = _key(offer.name, eps, variant)
                    self.mechanisms[key] = (mech, info)
                    with warnings.catch_warnings():  # opt-in leaks are stated in every response
                        warnings.simplefilter("ignore", NotPrivateWarning)
                        for oov in cfg.oov:
                            for case in cfg.case:
                                self.privatizers[(key, oov, case)] = Privatizer(mech, oov=oov, case=case)

    def _calibrate(self) -> None:
        """Time every offered instance on public words, before ready (see _timing.py): padding and deadlines.

        Public inputs only: distinct vocabulary words spread from the most to the least
        frequent (the slow case of every decode). Also bounds ``/v1/explain``'s draws so
        that a sampled explanation takes at most a quarter of ``timeout_s``.
        """
        import numpy as np

        from .._random import secure_generator
        from ..calibrate import explain

        cfg = self.config
        emb = self.embedding
        assert emb is not None
        units = max(2, min(cfg.chunk_tokens, cfg.max_text_tokens, 256))
        ids = np.unique(np.linspace(0, emb.size - 1, units).round().astype(np.int64))
        words = [w for w in emb.words(ids.tolist()) if w]
        gen = secure_generator()
        for key, (mech, _) in self.mechanisms.items():
            priv = self.privatizers[(key, cfg.oov[0], cfg.case[0])]

            def measure(n: int, probe: int, priv: "Privatizer" = priv) -> float:
                # n words spread over the vocabulary; one word: the first, a middle or the last
                text = " ".join(words[:: max(1, len(words) // n)][:n]) if n > 1 else _probe(words, probe)
                t0 = time.perf_counter()
                priv.privatize_batch_with_stats([text], gen)
                return time.perf_counter() - t0

            self.timing.calibrate((key, "privatize"), measure, units=min(units, len(words)))
            exact = bool(getattr(mech, "has_distribution", False))  # calibrate.explain: exact, no draws
            draws = cfg.explain_draws
            if not exact:  # sampled: as many draws as fit in a quarter of the deadline
                draws = self._explain_draws(mech, words, 0.25 * cfg.timeout_s)
            self.explain_draws[key] = draws

            def measure_explain(n: int, probe: int, mech: "Mechanism" = mech, draws: int = draws) -> float:
                word = _probe(words, probe)
                others = [w for w in words if w != word][: n - 1]
                t0 = time.perf_counter()
                explain(mech, word, top=cfg.explain_top, against=others or None, draws=draws, samples=min(1000, draws))
                return time.perf_counter() - t0

            self.timing.calibrate((key, "explain"), measure_explain, units=min(11, len(words)), probes=2, repeats=1)

    def _explain_draws(self, mech: "Mechanism", words: list[str], seconds: float) -> int:
        """The most draws (up to ``explain_draws``) a sampled explanation of public words makes in ``seconds``."""
        from ..calibrate import explain

        cfg = self.config

        def timed(draws: int, word: str) -> float:
            t0 = time.perf_counter()
            explain(mech, word, top=cfg.explain_top, draws=draws, samples=min(1000, draws))
            return time.perf_counter() - t0

        cap = cfg.explain_draws
        draws = min(100, cap)
        probes = [words[0], words[len(words) // 2], words[-1]]
        took, slowest = max((timed(draws, w), w) for w in probes)
        while draws < cap and took < seconds / 2:  # grow until the time is measured, not extrapolated far
            draws = min(cap, draws * 4)
            took = timed(draws, slowest)
        if took <= seconds:
            return draws
        return max(1, int(draws * seconds / took))


def _probe(words: list[str], probe: int) -> str:
    """Public probe ``probe`` of ``words`` (spread from frequent to rare): the first, the middle, the last."""
    return words[(0, len(words) // 2, len(words) - 1)[probe % 3]]


def _run_build(state: _State) -> None:
    state.build()


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
        from fastapi import Body, FastAPI, HTTPException, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import HTMLResponse, JSONResponse
        from pydantic import BaseModel, Field
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise DeniableError("the service needs the 'serve' extra: pip install 'deniable[serve]'") from exc

    from .. import __version__
    from .._random import secure_generator
    from ..text import split
    from ._guard import RELEASE, Guard
    from ._models import request_models

    cfg = config if config is not None else load_config()
    if not cfg.pad_responses:
        msg = (
            "pad_responses is off: a response's time may reveal which words a request held "
            "(which were kept, how many distinct); every response says so"
        )
        warnings.warn(msg, NotPrivateWarning, stacklevel=2)
        log.warning("deniable service: %s", msg)
    state = _State(cfg, embedding)
    if not background:
        state.build()
        if state.failed:
            raise DeniableError(f"the service could not prepare its mechanisms: {state.failed}")

    privatize_model, explain_model = request_models(cfg)
    safe_loc = _SAFE_LOC | set(cfg.names) | {k for m in cfg.mechanisms for k in m.client}

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

    def statement(info: dict[str, Any]) -> str:
        return (
            f"{info.get('epsilon'):g}-metric differential privacy per word in the {info.get('metric')} distance: "
            "for inputs w, w' and every output y, Pr[M(w)=y] <= exp(epsilon * d(w, w')) * Pr[M(w')=y]; "
            "words are privatized independently, so the bounds of a text's words add up"
        )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> "AsyncIterator[None]":
        if background and not state.ready.is_set() and state.failed is None:
            threading.Thread(target=_run_build, args=(state,), name="deniable-prepare", daemon=True).start()
        yield
        pool, state._pool = state._pool, None  # an app served again (a new lifespan) makes a new pool
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        title="deniable",
        version=__version__,
        description=__doc__,
        lifespan=lifespan,
    )
    app.add_middleware(
        Guard,
        max_body_bytes=cfg.max_body_bytes,
        max_concurrency=cfg.max_concurrency,
        retry_after_s=cfg.retry_after_s,
        work_paths=WORK_PATHS,
        api_key_digests=cfg.api_key_digests,
        body_timeout_s=cfg.body_timeout_s,
        busy=lambda: state.orphans,
    )
    app.state.deniable = state

    def error(status: int, loc: str, msg: str, kind: str, headers: dict[str, str] | None = None) -> HTTPException:
        return HTTPException(status, [{"loc": ["body", loc], "msg": msg, "type": kind}], headers=headers)

    def not_ready() -> HTTPException:
        return HTTPException(503, [{"loc": ["server"], "msg": "not ready", "type": "not_ready"}], {"Retry-After": "5"})

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # pydantic's default body echoes the offending input, which may be user text: drop it,
        # and reword the errors whose message or location would quote a client's string.
        detail = []
        for e in exc.errors():
            loc, msg, kind = list(e.get("loc", ())), e.get("msg"), e.get("type")
            if kind == "union_tag_invalid":
                loc, msg = [*loc, "mechanism"], "one of " + ", ".join(cfg.names)
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

    # -- probes and the page --------------------------------------------------------------
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

    # -- the API ---------------------------------------------------------------------------
    def offers() -> dict[str, Any]:
        from ..mechanisms import options_of
        from ..mechanisms.registry import catalogue

        out = {}
        for offer in cfg.mechanisms:
            help_of = {o.name: o.help for o in options_of(offer.name)}
            d = offer.describe()
            d["help"] = {k: help_of.get(k, "") for k in offer.client}
            d["catalogue"] = catalogue([offer.name])[0]  # guarantee form, metric, page (the registry's)
            if state.ready.is_set():  # each instance's epsilon (targets resolved) and strength, in words
                d["privacy"] = [
                    {**info["privacy"], "offered": key[1], "options": dict(key[2])}
                    for key, (_, info) in state.mechanisms.items()
                    if key[0] == offer.name
                ]
            out[offer.name] = d
        return {
            "mechanisms": out,
            "default_mechanism": cfg.default_mechanism,
            "oov": list(cfg.oov),
            "case": list(cfg.case),
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
            "timing": state.timing.describe(),
        }

    @app.get("/v1/mechanisms", tags=["v1"])
    def mechanisms_v1() -> dict[str, Any]:
        """What this service offers: per mechanism the epsilons and the option values a client may choose."""
        return offers()

    @app.get("/mechanisms", tags=["v1"], deprecated=True)
    def mechanisms_alias() -> dict[str, Any]:
        """Alias of /v1/mechanisms."""
        return offers()

    def lookup(req: Any) -> tuple[_Key, "Mechanism", dict[str, Any]]:
        if not state.ready.is_set():
            raise not_ready()
        variant = req.options.model_dump()
        key = _key(req.mechanism, req.epsilon, variant)
        found = state.mechanisms.get(key)
        if found is None:  # the request models only admit offered values: should not happen
            raise error(422, "epsilon", "not offered (see /v1/mechanisms)", "not_offered")
        return key, found[0], found[1]

    example = {
        "texts": ["The hockey game was great!"],
        "epsilon": cfg.mechanisms[0].epsilons[0],
        "mechanism": cfg.mechanisms[0].name,
    }

    class _Stopped(Exception):
        """The work would not finish by the request's deadline."""

    async def bounded(fn: Any, deadline: float) -> Any:
        """``fn()`` on a work thread; :class:`_Stopped` at ``deadline`` (the thread then runs on, counted busy)."""
        import asyncio

        work = state.pool.submit(fn)
        try:
            return await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(work)), max(0.0, deadline - time.monotonic())
            )
        except BaseException as exc:  # the deadline, or a cancellation: the thread cannot be stopped
            state.orphan(work)
            if isinstance(exc, TimeoutError):
                raise _Stopped from None
            raise

    async def stopped(deadline: float) -> HTTPException:
        """The 503 of a request stopped at its deadline, answered at the deadline (not earlier)."""
        await state.timing.hold_until(deadline)
        return HTTPException(
            503,
            [{"loc": ["server"], "msg": f"stopped after {cfg.timeout_s:g} s", "type": "timeout"}],
            {"Retry-After": str(cfg.retry_after_s)},
        )

    async def run_privatize(request: Request, req: Any) -> PrivatizeResponse:
        key, _, info = lookup(req)
        start = time.monotonic()
        deadline = start + cfg.timeout_s
        priv = state.privatizers[(key, req.oov, req.case)]
        counts = [len(split(t)) // 2 for t in req.texts]
        if sum(counts) > cfg.max_tokens:
            raise error(413, "texts", f"more than {cfg.max_tokens:,} word tokens in one request", "too_many_tokens")
        if counts and max(counts) > cfg.max_text_tokens:
            msg = f"a text has more than {cfg.max_text_tokens:,} word tokens: split it"
            raise error(413, "texts", msg, "text_too_long")
        # chunks of whole texts of about chunk_tokens tokens; the deadline is checked before and during each
        chunks: list[tuple[list[str], int]] = [([], 0)]
        for text, n in zip(req.texts, counts, strict=True):
            if chunks[-1][0] and chunks[-1][1] + n > cfg.chunk_tokens:
                chunks.append(([], 0))
            chunks[-1][0].append(text)
            chunks[-1] = (chunks[-1][0], chunks[-1][1] + n)
        gen = secure_generator()
        texts: list[str] = []
        tokens = changed = oov = 0
        for chunk, n in chunks:
            if time.monotonic() + state.timing.predict((key, "privatize"), n + len(chunk)) > deadline:
                raise await stopped(deadline)
            if await request.is_disconnected():
                raise HTTPException(499, "client left")
            try:
                out, stats = await bounded(lambda chunk=chunk: priv.privatize_batch_with_stats(chunk, gen), deadline)
            except _Stopped:
                raise await stopped(deadline) from None
            except InvalidParameterError as exc:
                raise error(422, exc.name, "not accepted", "invalid") from None
            texts += out
            tokens, changed, oov = tokens + stats.tokens, changed + stats.changed, oov + stats.oov
        request.scope.get(RELEASE, _nothing)()  # the work is done: its slot is free while the answer is held
        await state.timing.hold((key, "privatize"), sum(counts) + len(req.texts), start)
        policy = priv.describe()
        if not cfg.pad_responses:
            policy = {**policy, "not_protected": [*policy["not_protected"], UNPADDED]}
        return PrivatizeResponse(
            texts=texts,
            tokens=tokens,
            changed=changed,
            oov=oov,
            guarantee=Guarantee(mechanism=info, statement=statement(info), not_protected=policy["not_protected"]),
            mechanism=info,
            policy=policy,
        )

    responses: dict[int | str, dict[str, Any]] = {
        401: {"description": "No API key (when keys are configured)."},
        403: {"description": "The API key is not valid."},
        413: {"description": "Body or token limit exceeded."},
        422: {"description": "A field is not valid or not offered (its value is never echoed)."},
        503: {"description": "Not ready, busy (Retry-After) or stopped at the time limit."},
    }
    examples = {"default": {"summary": "privatize one text", "value": example}}

    @app.post("/v1/privatize", response_model=PrivatizeResponse, tags=["v1"], responses=responses)
    async def privatize_v1(
        request: Request,
        body: Annotated[privatize_model, Body(openapi_examples=examples)],  # type: ignore[valid-type]
    ) -> PrivatizeResponse:
        """Privatize texts: every word is replaced by a random word near it; the response states the guarantee."""
        return await run_privatize(request, body)

    @app.post("/privatize", response_model=PrivatizeResponse, tags=["v1"], responses=responses, deprecated=True)
    async def privatize_alias(
        request: Request,
        body: Annotated[privatize_model, Body(openapi_examples=examples)],  # type: ignore[valid-type]
    ) -> PrivatizeResponse:
        """Alias of /v1/privatize."""
        return await run_privatize(request, body)

    explain_example = {"word": "game", "epsilon": example["epsilon"], "mechanism": example["mechanism"]}

    @app.post("/v1/explain", response_model=ExplainResponse, tags=["v1"], responses=responses)
    async def explain_v1(
        request: Request,
        body: Annotated[
            explain_model,  # type: ignore[valid-type]
            Body(openapi_examples={"default": {"summary": "explain one word", "value": explain_example}}),
        ],
    ) -> ExplainResponse:
        """What the mechanism does to one word: N_w, likely outputs, the guarantee against alternatives."""
        from ..calibrate import explain

        req: Any = body
        key, mech, info = lookup(req)
        start = time.monotonic()
        deadline = start + cfg.timeout_s
        against = list(req.against) or None
        draws = state.explain_draws.get(key, cfg.explain_draws)  # bounded in time at start-up (_calibrate)

        def work() -> Any:
            return explain(mech, req.word, top=cfg.explain_top, against=against, draws=draws, samples=min(1000, draws))

        try:
            ex = await bounded(work, deadline)
        except _Stopped:
            raise await stopped(deadline) from None
        except InvalidParameterError:
            raise error(422, "word", "word and alternatives must be in the vocabulary", "not_in_vocabulary") from None
        request.scope.get(RELEASE, _nothing)()
        await state.timing.hold((key, "explain"), 1 + len(req.against), start)
        return ExplainResponse(
            mechanism=info,
            exact=ex.exact,
            n_w=ex.n_w,
            n_w_low=ex.n_w_low,
            n_w_high=ex.n_w_high,
            s_w=ex.s_w,
            outputs=[
                ExplainOutput(word=o.word, probability=o.probability, low=o.low, high=o.high, distance=o.distance)
                for o in ex.outputs
            ],
            other_mass=ex.other_mass,
            guarantees=[
                ExplainGuarantee(other=g.other, distance=g.distance, bound=g.bound, ratio=_finite(g.ratio))
                for g in ex.guarantees
            ],
        )

    __import__(f"{__name__}._device", fromlist=["_"]).install_device_routes(app, state)  # on-device: docs/device.md
    return app


#: What an unpadded service's responses add to ``not_protected``.
UNPADDED = "the response time (pad_responses = false): it may depend on which words were sent"


def _nothing() -> None:
    pass


def _finite(v: float) -> float:
    return v if v < float("inf") else 1.7976931348623157e308


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
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss is a core dependency
        return
    faiss.omp_set_num_threads(1)
