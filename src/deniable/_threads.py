"""The one thread policy: no configuration the project starts by itself oversubscribes the cores.

One BLAS (and faiss OpenMP) thread per worker process or worker thread; the work is split across
workers, and the number of workers is the usable cores (``os.sched_getaffinity``) unless the
user says otherwise (``DENIABLE_WORKERS``). A user's explicit ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` /
``MKL_NUM_THREADS`` is respected: it is never overridden.

- :func:`plan` is pure (inputs -> thread counts); the others apply it.
- :func:`init_worker`: the start of every worker process or engine task (``deniable serve``'s
  workers, Spark / Ray / Dask / HF ``num_proc`` workers): 1 BLAS thread, 1 faiss thread, and the
  in-process decode on 1 thread (the engine's workers are the parallelism).
- :func:`init_local`: the CLI's local run (its own process): 1 BLAS thread, the decode on the
  plan's worker threads.
- :func:`engine_task`: around each engine batch (``BatchPrivatizer``): :func:`init_worker` in a
  worker process; in a thread of a local scheduler (Dask's threads), 1 decode and 1 BLAS thread.
- :func:`one_blas_thread`: a context (reference-counted, thread-safe) under which the exact decode
  splits its batch across :func:`decode_workers` threads of 1 BLAS thread each. Measured in
  ``bench/bench_threads.py``: 2 BLAS threads in one process lose to 1 as soon as another process
  shares a core; 2 worker threads over blocks of the batch (a queue: a slowed thread takes fewer)
  do not.

May import: deniable._errors (threadpoolctl and faiss inside the functions that use them).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import InvalidParameterError

__all__ = [
    "BLAS_ENV",
    "WORKERS_ENV",
    "ThreadPlan",
    "blas_threads_now",
    "decode_workers",
    "engine_task",
    "explicit_blas_threads",
    "init_local",
    "init_worker",
    "local_decode_workers",
    "one_blas_thread",
    "plan",
    "set_decode_workers",
    "usable_cores",
    "worker_env",
]

#: The variables by which a user fixes the BLAS / OpenMP thread count (respected, never overridden).
BLAS_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: The variable by which a user sets the number of workers (default: the usable cores).
WORKERS_ENV = "DENIABLE_WORKERS"


@dataclass(frozen=True)
class ThreadPlan:
    """``workers`` processes or threads, each running ``blas_threads`` BLAS / faiss threads."""

    workers: int
    blas_threads: int
    user_blas: bool  # the BLAS count came from the user's environment (left as it is)


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def explicit_blas_threads(env: Mapping[str, str]) -> int | None:
    """The BLAS thread count a user set in ``env`` (the first valid of :data:`BLAS_ENV`), else None."""
    for name in BLAS_ENV:
        raw = env.get(name, "").strip().split(",")[0]
        if raw.isdigit() and int(raw) > 0:
            return int(raw)
    return None


def plan(workers: int | None, cores: int, env: Mapping[str, str]) -> ThreadPlan:
    """The thread counts (pure): ``workers`` (None: ``$DENIABLE_WORKERS``, else one per usable core),
    1 BLAS thread each, unless the user's environment fixes the BLAS threads."""
    if workers is None and env.get(WORKERS_ENV, "").strip():
        raw = env[WORKERS_ENV].strip()
        if not raw.isdigit() or int(raw) < 1:
            raise InvalidParameterError(WORKERS_ENV, raw, "an integer >= 1 (the worker threads or processes)")
        workers = int(raw)
    if workers is not None and (isinstance(workers, bool) or int(workers) < 1):
        raise InvalidParameterError("workers", workers, "an integer >= 1")
    n = max(1, cores) if workers is None else int(workers)
    user = explicit_blas_threads(env)
    return ThreadPlan(workers=n, blas_threads=1 if user is None else user, user_blas=user is not None)


# ----------------------------------------------------------------------------- applying it
_lock = threading.Lock()
_depth = 0
_limiter: Any = None
_decode_workers: int | None = None  # None: the plan's (the usable cores)
_local = threading.local()  # a thread's own decode workers (engine tasks on a local scheduler's threads)
_worker_pid: int | None = None  # the process init_worker ran in


def set_decode_workers(n: int | None) -> None:
    """How many threads the in-process exact decode splits a batch across (None: the usable cores)."""
    global _decode_workers
    if n is not None and (isinstance(n, bool) or int(n) < 1):
        raise InvalidParameterError("workers", n, "an integer >= 1")
    _decode_workers = n


def decode_workers() -> int:
    """The in-process decode's worker threads: as set, else one per usable core; 1 where the
    user fixed the BLAS threads (their choice of threads stands)."""
    mine = getattr(_local, "workers", None)
    if mine is not None:
        return int(mine)
    if _decode_workers is not None:
        return _decode_workers
    if explicit_blas_threads(os.environ) is not None and not os.environ.get(WORKERS_ENV, "").strip():
        return 1
    return plan(None, usable_cores(), os.environ).workers


def _set_faiss_threads(n: int) -> None:
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss is a core dependency
        return
    faiss.omp_set_num_threads(n)


def worker_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to the environment of worker processes the project spawns (pure):
    1 BLAS / OpenMP thread each, read by the libraries as they load (OpenMP's count set by
    :func:`init_worker` holds only for the thread that sets it); nothing where the user set any."""
    if explicit_blas_threads(env) is not None:
        return {}
    return {name: "1" for name in BLAS_ENV}


def init_worker() -> ThreadPlan:
    """At the start of a worker process (or an engine task): 1 BLAS thread, 1 faiss thread, the decode
    on 1 thread, for the rest of the process; a user's explicit BLAS threads are left as they are.
    Once per process (later calls return at once)."""
    global _worker_pid
    p = plan(1, usable_cores(), os.environ)
    if _worker_pid == os.getpid():
        return p
    _worker_pid = os.getpid()
    set_decode_workers(1)
    if not p.user_blas:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover - a core dependency; without it, the env route
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        else:
            threadpool_limits(1, user_api="blas")  # process-wide, kept (not used as a context)
    _set_faiss_threads(p.blas_threads)
    return p


_controllers: dict[bool, Any] = {}


def _blas_controller() -> Any:
    """threadpoolctl's controller of the loaded BLAS libraries, made once per process (a scan of the
    loaded libraries: about 10 ms on a busy machine, too slow for every decode) and once more after
    faiss (which brings its own BLAS) is imported; None without threadpoolctl."""
    key = "faiss" in sys.modules
    if key not in _controllers:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - a core dependency
            _controllers[key] = None
        else:
            _controllers[key] = ThreadpoolController().select(user_api="blas")
    return _controllers[key]


def blas_threads_now() -> int:
    """The most threads any loaded BLAS would use for a call from this thread (1 without threadpoolctl)."""
    ctl = _blas_controller()
    if ctl is None:  # pragma: no cover
        return 1
    return max([int(lib.get_num_threads() or 1) for lib in ctl.lib_controllers], default=1)


@contextlib.contextmanager
def one_blas_thread() -> Iterator[bool]:
    """1 BLAS thread while inside (re-entrant across threads: the first in sets it, the last out
    restores it); nothing where the user fixed the BLAS threads. Yields whether BLAS is on 1 thread
    inside: OpenBLAS (0.3.31, measured) ignores a thread count set from another thread once the main
    thread has set one, so a caller that would add threads of its own checks first."""
    global _depth, _limiter
    if explicit_blas_threads(os.environ) is not None:
        yield blas_threads_now() <= 1
        return
    with _lock:
        if _depth == 0:
            ctl = _blas_controller()
            _limiter = None if ctl is None else ctl.limit(limits=1)
        _depth += 1
    try:
        yield blas_threads_now() <= 1
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _limiter is not None:
                _limiter.restore_original_limits()
                _limiter = None


def init_local() -> ThreadPlan:
    """A process the project runs for itself (``deniable privatize``'s local run), from its main
    thread: 1 BLAS thread for the rest of the process (the exact decode splits its batches across
    the plan's worker threads), faiss's OpenMP on the plan's workers (it splits its own queries).
    A user's explicit BLAS threads are left as they are."""
    p = plan(None, usable_cores(), os.environ)
    if not p.user_blas:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover - a core dependency
            pass
        else:
            threadpool_limits(1, user_api="blas")  # process-wide, kept
        _set_faiss_threads(p.workers)
    return p


@contextlib.contextmanager
def engine_task(driver_pid: int) -> Iterator[None]:
    """Around an engine's batch: in a worker process (not ``driver_pid``), :func:`init_worker`; in
    a thread of a local scheduler (Dask's threaded one) 1 decode thread of 1 BLAS thread while inside;
    on the driver's main thread (scikit-learn, a local run), the in-process policy as it is."""
    if os.getpid() != driver_pid:
        p = init_worker()
        _set_faiss_threads(p.blas_threads)  # OpenMP's count is per thread: this task's thread too
        yield
        return
    if threading.current_thread() is threading.main_thread():
        yield
        return
    with local_decode_workers(1), one_blas_thread():
        yield


@contextlib.contextmanager
def local_decode_workers(n: int) -> Iterator[None]:
    """This thread's in-process decode on ``n`` worker threads while inside (:func:`decode_workers`
    here; other threads keep theirs)."""
    before = getattr(_local, "workers", None)
    _local.workers = int(n)
    try:
        yield
    finally:
        _local.workers = before
