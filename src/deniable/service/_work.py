"""The work routes: ``POST /v1/privatize`` (and its alias ``/privatize``) and ``POST /v1/explain``.

Each finds the offered instance the validated body chose (``State.lookup``), charges a
privatize request to its API key's budget when ``budget_per_key`` is set (403 before any
noise is drawn, :func:`charge`), does the work
on a work thread within the request's deadline (``_limits.py``), gives its concurrency slot
back (``_guard.release_slot``) and holds the answer until its padded release time
(``_timing.py``). A privatize answer states the guarantee and what is not protected.
Request bodies are never logged or echoed. (No ``from __future__ import annotations`` here:
FastAPI reads the routes' annotations, whose body types are made per application.)

May import: FastAPI (the 'serve' extra), the library (_random, calibrate, budget), ``._errors``,
``._guard``, ``._limits``, ``._models`` and ``._state``.
"""

import time
from functools import partial
from typing import Annotated, Any

from fastapi import Body, FastAPI, HTTPException, Request  # imported by create_app only (the 'serve' extra is there)
from fastapi.responses import Response
from pydantic import BaseModel

from .._errors import InvalidParameterError
from .._random import secure_generator
from ._errors import error
from ._guard import KEY_DIGEST, release_slot
from ._limits import UNPADDED, Stopped, chunks, stopped
from ._models import (
    ExplainGuarantee,
    ExplainOutput,
    ExplainResponse,
    Guarantee,
    PrivatizeResponse,
    request_models,
)
from ._state import State

__all__ = ["install_work_routes"]

#: The error answers of every work route (OpenAPI).
RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key (when keys are configured)."},
    403: {"description": "The API key is not valid, or its privacy budget would be exceeded (budget_per_key)."},
    413: {"description": "Body or token limit exceeded."},
    422: {"description": "A field is not valid or not offered (its value is never echoed)."},
    503: {"description": "Not ready, busy (Retry-After) or stopped at the time limit."},
}


def install_work_routes(app: FastAPI, state: State) -> None:
    """Add ``/v1/privatize``, ``/privatize`` and ``/v1/explain`` to ``app``, with bodies narrowed to the offer."""
    cfg = state.config
    privatize_model, explain_model = request_models(cfg)
    example = {
        "texts": ["The hockey game was great!"],
        "epsilon": cfg.mechanisms[0].epsilons[0],
        "mechanism": cfg.mechanisms[0].name,
    }
    examples = {"default": {"summary": "privatize one text", "value": example}}

    @app.post("/v1/privatize", response_model=PrivatizeResponse, tags=["v1"], responses=RESPONSES)
    async def privatize_v1(
        request: Request,
        body: Annotated[privatize_model, Body(openapi_examples=examples)],  # type: ignore[valid-type]
    ) -> Response:
        """Privatize texts: every word is replaced by a random word near it; the response states the guarantee."""
        return await run_privatize(state, request, body)

    @app.post("/privatize", response_model=PrivatizeResponse, tags=["v1"], responses=RESPONSES, deprecated=True)
    async def privatize_alias(
        request: Request,
        body: Annotated[privatize_model, Body(openapi_examples=examples)],  # type: ignore[valid-type]
    ) -> Response:
        """Alias of /v1/privatize."""
        return await run_privatize(state, request, body)

    explain_example = {"word": "game", "epsilon": example["epsilon"], "mechanism": example["mechanism"]}

    @app.post("/v1/explain", response_model=ExplainResponse, tags=["v1"], responses=RESPONSES)
    async def explain_v1(
        request: Request,
        body: Annotated[
            explain_model,  # type: ignore[valid-type]
            Body(openapi_examples={"default": {"summary": "explain one word", "value": explain_example}}),
        ],
    ) -> Response:
        """What the mechanism does to one word: N_w, likely outputs, the guarantee against alternatives."""
        return await run_explain(state, request, body)


def rendered(body: BaseModel) -> Response:
    """``body`` as the JSON bytes of its answer, made **before** the hold.

    Whatever runs after the release time adds to the latency: validating and encoding the
    body there took a time that depends on the output texts and, through the allocator and
    the garbage collector, on the work that made them. Rendered first, what is left after
    the release time is sending bytes whose length the answer states anyway.
    """
    return Response(body.model_dump_json().encode(), media_type="application/json")


async def run_privatize(state: State, request: Request, req: Any) -> Response:
    """Privatize ``req.texts`` chunk by chunk within the deadline; the answer held until its release time."""
    cfg = state.config
    key, mech, info = state.lookup(req)
    start = time.monotonic()
    deadline = start + cfg.timeout_s
    priv = state.privatizers[(key, req.oov, req.case)]
    parts = chunks(cfg, req.texts)  # 413 beyond the token limits
    if state.budget is not None:  # spent (or refused, 403) before any noise is drawn
        try:
            await state.work.run(partial(charge, state, request.scope, float(mech.epsilon)), deadline)
        except Stopped:
            raise await stopped(cfg, state.timing, deadline) from None
    gen = secure_generator()
    texts: list[str] = []
    tokens = changed = oov = 0
    for chunk, n in parts:
        if time.monotonic() + state.timing.predict((key, "privatize"), n + len(chunk)) > deadline:
            raise await stopped(cfg, state.timing, deadline)
        if await request.is_disconnected():
            raise HTTPException(499, "client left")
        try:
            out, stats = await state.work.run(partial(priv.privatize_batch_with_stats, chunk, gen), deadline)
        except Stopped:
            raise await stopped(cfg, state.timing, deadline) from None
        except InvalidParameterError as exc:
            raise error(422, exc.name, "not accepted", "invalid") from None
        texts += out
        tokens, changed, oov = tokens + stats.tokens, changed + stats.changed, oov + stats.oov
    release_slot(request.scope)  # the work is done: its slot is free while the answer is held
    policy = priv.describe()  # states oov=keep / case=keep where chosen (offered with allow_unprotected)
    chosen = cfg.unprotected_chosen(key[0], dict(key[2]))
    if chosen:
        policy = {**policy, "not_protected": [*policy["not_protected"], *chosen]}
    if not cfg.pad_responses:
        policy = {**policy, "not_protected": [*policy["not_protected"], UNPADDED]}
    answer = rendered(
        PrivatizeResponse(
            texts=texts,
            tokens=tokens,
            changed=changed,
            oov=oov,
            guarantee=Guarantee(mechanism=info, statement=statement(info), not_protected=policy["not_protected"]),
            mechanism=info,
            policy=policy,
        )
    )
    await state.timing.hold((key, "privatize"), sum(n for _, n in parts) + len(req.texts), start)
    return answer


def charge(state: State, scope: Any, epsilon: float) -> None:
    """Spend ``epsilon`` per word from the budget of the request's API key; 403 (nothing spent) beyond it.

    The key's data set is ``dataset:api-key:<16 hex digits of SHA-256(key)>``: the ledger holds
    that id and the epsilons, never the key nor anything of the texts. Runs on a work thread
    (a budget file is written under a lock), before the mechanism is called.
    """
    from ..budget import BudgetError

    assert state.budget is not None
    digest = scope.get(KEY_DIGEST)
    if digest is None:  # the Guard sets it for every accepted key (the budget needs keys: State)
        raise error(403, "header", "an API key with a budget is needed", "budget_exhausted")
    try:
        state.budget.spend(epsilon, dataset=f"api-key:{digest.hex()[:16]}", name="budget_per_key")
    except BudgetError as exc:
        msg = (
            f"budget_per_key {exc.budget:g}: this API key has spent epsilon {exc.spent:g} per word, "
            f"this request asks {exc.asked:g}, {exc.remaining:g} remains; refused before any noise was drawn"
        )
        raise error(403, "epsilon", msg, "budget_exhausted") from None


def statement(info: dict[str, Any]) -> str:
    """The guarantee of the instance described by ``info``, in words."""
    return (
        f"{info.get('epsilon'):g}-metric differential privacy per word in the {info.get('metric')} distance: "
        "for inputs w, w' and every output y, Pr[M(w)=y] <= exp(epsilon * d(w, w')) * Pr[M(w')=y]; "
        "words are privatized independently, so the bounds of a text's words add up"
    )


async def run_explain(state: State, request: Request, req: Any) -> Response:
    """Explain ``req.word`` within the deadline (draws bounded at start-up); the answer held until its release time."""
    from ..calibrate import explain

    cfg = state.config
    key, mech, info = state.lookup(req)
    start = time.monotonic()
    deadline = start + cfg.timeout_s
    against = list(req.against) or None
    draws = state.explain_draws.get(key, cfg.explain_draws)  # bounded in time at start-up (_limits.calibrate)

    def work() -> Any:
        return explain(mech, req.word, top=cfg.explain_top, against=against, draws=draws, samples=min(1000, draws))

    try:
        ex = await state.work.run(work, deadline)
    except Stopped:
        raise await stopped(cfg, state.timing, deadline) from None
    except InvalidParameterError:
        raise error(422, "word", "word and alternatives must be in the vocabulary", "not_in_vocabulary") from None
    release_slot(request.scope)
    answer = rendered(
        ExplainResponse(
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
    )
    await state.timing.hold((key, "explain"), 1 + len(req.against), start)
    return answer


def _finite(v: float) -> float:
    return v if v < float("inf") else 1.7976931348623157e308
