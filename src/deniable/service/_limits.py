"""The limits of one request's work, inside the application: tokens, deadline, threads, calibration.

Beside the middleware in front (``_guard.py``: API keys, body size and time, concurrency
slots) and the padding schedule (``_timing.py``: when a work response is released), this
module owns what a work route checks and waits on:

- the **token limits** of a privatize request (``max_tokens``, ``max_text_tokens``: 413)
  and its **chunks** of whole texts of about ``chunk_tokens`` tokens;
- the **deadline**: work runs on a :class:`WorkThreads` thread and a request not done by
  ``timeout_s`` is answered 503 at the deadline (:func:`stopped`), while its thread runs
  on and counts as busy toward ``max_concurrency`` (:attr:`WorkThreads.orphans`);
- the **start-up calibration** on public words (:func:`calibrate`) that the padding and the
  deadline checks read, and the draws that bound a sampled ``/v1/explain`` in time;
- the paths that take a slot (:data:`WORK_PATHS`) and the statement of an unpadded service.

May import: the library (text, calibrate, _random), FastAPI's HTTPException, ``._config``,
``._errors``, ``._offers`` (the instance types) and ``._timing``.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException  # imported by create_app only (the 'serve' extra is there)

from .._errors import NotPrivateWarning
from ..text import split
from ._config import ServiceConfig
from ._errors import error

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..embedding import Vocabulary
    from ..mechanisms.base import Mechanism
    from ..privatizer import Privatizer
    from ._offers import Instances, Key, Privatizers
    from ._timing import Timing

__all__ = [
    "UNPADDED",
    "WORK_PATHS",
    "Stopped",
    "WorkThreads",
    "calibrate",
    "chunks",
    "stopped",
    "warn_unpadded",
    "warn_unprotected",
]

log = logging.getLogger("deniable.service")

#: Work endpoints (a concurrency slot each); the device routes add /v1/decode (``_device.DECODE_PATH``).
WORK_PATHS = frozenset({"/v1/privatize", "/v1/explain", "/privatize"})

#: What an unpadded service's responses add to ``not_protected``.
UNPADDED = "the response time (pad_responses = false): it may depend on which words were sent"


def warn_unpadded(cfg: ServiceConfig) -> None:
    """Warn (NotPrivateWarning, and the log) when ``cfg`` turns the padding off: an explicit opt-in."""
    if not cfg.pad_responses:
        msg = (
            "pad_responses is off: a response's time may reveal which words a request held "
            "(which were kept, how many distinct); every response says so"
        )
        warnings.warn(msg, NotPrivateWarning, stacklevel=3)  # at create_app's caller
        log.warning("deniable service: %s", msg)


def warn_unprotected(cfg: ServiceConfig) -> None:
    """Warn (NotPrivateWarning, and the log) when ``cfg`` offers clients values that are not protected."""
    found = cfg.unprotected()
    if found:
        listed = "; ".join(f"{k} = {', '.join(map(str, v))}" for k, v in found.items())
        msg = (
            f"allow_unprotected is on and clients may choose values that are NOT protected ({listed}): "
            "they release input outside the guarantee; /v1/mechanisms and the responses that use them say so"
        )
        warnings.warn(msg, NotPrivateWarning, stacklevel=3)  # at create_app's caller
        log.warning("deniable service: %s", msg)


# -- per request -------------------------------------------------------------------------
def chunks(cfg: ServiceConfig, texts: list[str]) -> list[tuple[list[str], int]]:
    """``texts`` in chunks of whole texts of about ``chunk_tokens`` word tokens, each with its token count.

    413 (naming the limit) beyond ``max_tokens`` in the request or ``max_text_tokens`` in a text.
    """
    counts = [len(split(t)) // 2 for t in texts]
    if sum(counts) > cfg.max_tokens:
        raise error(413, "texts", f"more than {cfg.max_tokens:,} word tokens in one request", "too_many_tokens")
    if counts and max(counts) > cfg.max_text_tokens:
        msg = f"a text has more than {cfg.max_text_tokens:,} word tokens: split it"
        raise error(413, "texts", msg, "text_too_long")
    # the deadline is checked before and during each chunk
    out: list[tuple[list[str], int]] = [([], 0)]
    for text, n in zip(texts, counts, strict=True):
        if out[-1][0] and out[-1][1] + n > cfg.chunk_tokens:
            out.append(([], 0))
        out[-1][0].append(text)
        out[-1] = (out[-1][0], out[-1][1] + n)
    return out


class Stopped(Exception):
    """The work would not finish by the request's deadline."""


class WorkThreads:
    """The work threads (one per concurrent request), and the work still running for requests already answered."""

    def __init__(self, max_concurrency: int) -> None:
        self.workers = max_concurrency + 1
        #: work threads still running for requests already answered at their deadline (count toward the limit)
        self.orphans = 0
        self._orphans_lock = threading.Lock()
        self._pool: Any = None

    @property
    def pool(self) -> Any:
        """The threads (made on first use, and again after :meth:`shutdown`)."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="deniable-work")
        return self._pool

    def shutdown(self) -> None:
        """End of the application's lifespan (an app served again makes a new pool)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

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

    async def run(self, fn: Callable[[], Any], deadline: float) -> Any:
        """``fn()`` on a work thread; :class:`Stopped` at ``deadline`` (the thread then runs on, counted busy)."""
        import asyncio

        work = self.pool.submit(fn)
        try:
            return await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(work)), max(0.0, deadline - time.monotonic())
            )
        except BaseException as exc:  # the deadline, or a cancellation: the thread cannot be stopped
            self.orphan(work)
            if isinstance(exc, TimeoutError):
                raise Stopped from None
            raise


async def stopped(cfg: ServiceConfig, timing: Timing, deadline: float) -> HTTPException:
    """The 503 of a request stopped at its deadline, answered at the deadline (not earlier)."""
    await timing.hold_until(deadline)
    return HTTPException(
        503,
        [{"loc": ["server"], "msg": f"stopped after {cfg.timeout_s:g} s", "type": "timeout"}],
        {"Retry-After": str(cfg.retry_after_s)},
    )


# -- start-up ----------------------------------------------------------------------------
def calibrate(
    cfg: ServiceConfig, emb: Vocabulary, mechanisms: Instances, privatizers: Privatizers, timing: Timing
) -> dict[Key, int]:
    """Time every offered instance on public words, before ready (see _timing.py): padding and deadlines.

    Public inputs only: distinct vocabulary words spread from the most to the least
    frequent (the slow case of every decode). Returns the draws of each instance's
    ``/v1/explain``, bounded so that a sampled explanation takes at most a quarter of
    ``timeout_s``.
    """
    import numpy as np

    from .._random import secure_generator
    from ..calibrate import explain

    units = max(2, min(cfg.chunk_tokens, cfg.max_text_tokens, 256))
    ids = np.unique(np.linspace(0, emb.size - 1, units).round().astype(np.int64))
    words = [w for w in emb.words(ids.tolist()) if w]
    gen = secure_generator()
    explain_draws: dict[Key, int] = {}
    for key, (mech, _) in mechanisms.items():
        priv = privatizers[(key, cfg.oov[0], cfg.case[0])]

        def measure(n: int, probe: int, priv: Privatizer = priv) -> float:
            # n words spread over the vocabulary; one word: the first, a middle or the last
            text = " ".join(words[:: max(1, len(words) // n)][:n]) if n > 1 else _probe(words, probe)
            t0 = time.perf_counter()
            priv.privatize_batch_with_stats([text], gen)
            return time.perf_counter() - t0

        timing.calibrate((key, "privatize"), measure, units=min(units, len(words)))
        exact = bool(getattr(mech, "has_distribution", False))  # calibrate.explain: exact, no draws
        draws = cfg.explain_draws
        if not exact:  # sampled: as many draws as fit in a quarter of the deadline
            draws = _explain_draws(cfg, mech, words, 0.25 * cfg.timeout_s)
        explain_draws[key] = draws

        def measure_explain(n: int, probe: int, mech: Mechanism = mech, draws: int = draws) -> float:
            word = _probe(words, probe)
            others = [w for w in words if w != word][: n - 1]
            t0 = time.perf_counter()
            explain(mech, word, top=cfg.explain_top, against=others or None, draws=draws, samples=min(1000, draws))
            return time.perf_counter() - t0

        timing.calibrate((key, "explain"), measure_explain, units=min(11, len(words)), probes=2, repeats=1)
    return explain_draws


def _explain_draws(cfg: ServiceConfig, mech: Mechanism, words: list[str], seconds: float) -> int:
    """The most draws (up to ``explain_draws``) a sampled explanation of public words makes in ``seconds``."""
    from ..calibrate import explain

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
