"""The application's state (``app.state.deniable``): the built offer, readiness, the work limits' state.

One :class:`State` per application: the embedding, every offered instance and its
privatizers (``_offers.py``), the padding schedule (``_timing.py``) with the explain draws
measured at start-up (``_limits.py``), the work threads, and whether the service is ready
(``/readyz``) or failed to prepare, and the per-API-key budget (``budget_per_key``) when
configured. :meth:`State.build` runs once, at start-up or in the thread the lifespan starts;
:meth:`State.lookup` finds the instance a validated request chose.

May import: the library (embedding, budget), ``._config``, ``._errors``, ``._limits``, ``._offers``
and ``._timing``.
"""

from __future__ import annotations

import logging
import threading
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from .._errors import InvalidParameterError
from ._config import ServiceConfig
from ._errors import error, not_ready
from ._limits import WorkThreads, calibrate
from ._offers import Instances, Key, Privatizers, build_offer, key
from ._timing import Timing

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from fastapi import FastAPI

    from ..budget import BudgetAccountant
    from ..embedding import Vocabulary
    from ..mechanisms.base import Mechanism

__all__ = ["State"]

log = logging.getLogger("deniable.service")


class State:
    """The embedding, every offered mechanism instance and its privatizers; readiness; the work's state."""

    def __init__(self, config: ServiceConfig, embedding: Vocabulary | None) -> None:
        self.config = config
        self.embedding = embedding
        self.mechanisms: Instances = {}
        self.privatizers: Privatizers = {}
        self.ready = threading.Event()
        self.failed: str | None = None
        self.timing = Timing(timeout_s=config.timeout_s, enabled=config.pad_responses, recover_s=config.pad_recover_s)
        self.explain_draws: dict[Key, int] = {}
        self.work = WorkThreads(config.max_concurrency)
        #: the per-API-key budget (``budget_per_key``): one data set per key digest, None when off
        self.budget: BudgetAccountant | None = None
        if config.budget_per_key is not None:
            if not config.api_key_digests:
                msg = "API keys to count against (DENIABLE_API_KEYS, DENIABLE_API_KEYS_FILE or api_keys_file)"
                raise InvalidParameterError("budget_per_key", config.budget_per_key, msg)
            from ..budget import BudgetAccountant

            self.budget = BudgetAccountant(config.budget_per_key, path=config.budget_ledger)

    def build(self) -> None:
        """Load, build, prepare and time everything the config offers (start-up; logs nothing from requests)."""
        try:
            if self.embedding is None:
                from ..embedding import load_embedding

                self.embedding = load_embedding(self.config.embedding, vocab_size=self.config.vocab_size)
            self.mechanisms, self.privatizers = build_offer(self.config, self.embedding)
            self.explain_draws = calibrate(self.config, self.embedding, self.mechanisms, self.privatizers, self.timing)
        except Exception as exc:  # noqa: BLE001 - reported by /readyz and the log, never raised into a request
            self.failed = f"{type(exc).__name__}: {exc}"
            log.error("deniable service: preparation failed: %s", self.failed)
            return
        self.ready.set()
        log.info("deniable service: ready (%d mechanism instances)", len(self.mechanisms))

    def lookup(self, req: Any) -> tuple[Key, Mechanism, dict[str, Any]]:
        """The instance a validated request chose: its key, the mechanism and what it states (503 before ready)."""
        if not self.ready.is_set():
            raise not_ready()
        found_key = key(req.mechanism, req.epsilon, req.options.model_dump())
        found = self.mechanisms.get(found_key)
        if found is None:  # the request models only admit offered values: should not happen
            raise error(422, "epsilon", "not offered (see /v1/mechanisms)", "not_offered")
        return found_key, found[0], found[1]

    def lifespan(self, background: bool) -> Callable[[FastAPI], Any]:
        """The application's lifespan: ``background`` builds in a thread at start; the end stops the work threads."""

        @asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            if background and not self.ready.is_set() and self.failed is None:
                threading.Thread(target=self.build, name="deniable-prepare", daemon=True).start()
            yield
            self.work.shutdown()

        return lifespan
