"""The thread policy (deniable._threads): the pure plan, and 1 BLAS thread inside every worker."""

from __future__ import annotations

import multiprocessing
import os
import threading

import numpy as np
import pytest

from deniable import _threads
from deniable._errors import InvalidParameterError
from deniable._threads import ThreadPlan, explicit_blas_threads, plan


def _blas_threads() -> set[int]:
    from threadpoolctl import threadpool_info

    return {int(i["num_threads"]) for i in threadpool_info() if i.get("user_api") == "blas"}


# -- the plan: inputs -> thread counts (pure) -------------------------------------------------
@pytest.mark.parametrize(
    ("workers", "cores", "env", "expected"),
    [
        (None, 2, {}, ThreadPlan(2, 1, False)),  # one worker per usable core, 1 BLAS thread each
        (None, 16, {}, ThreadPlan(16, 1, False)),
        (1, 2, {}, ThreadPlan(1, 1, False)),
        (3, 2, {}, ThreadPlan(3, 1, False)),  # the user's count stands
        (None, 0, {}, ThreadPlan(1, 1, False)),
        (None, 2, {"DENIABLE_WORKERS": "4"}, ThreadPlan(4, 1, False)),
        (1, 2, {"DENIABLE_WORKERS": "4"}, ThreadPlan(1, 1, False)),  # an explicit argument wins
        (None, 2, {"OMP_NUM_THREADS": "3"}, ThreadPlan(2, 3, True)),  # the user's BLAS threads stand
        (None, 2, {"OPENBLAS_NUM_THREADS": "2"}, ThreadPlan(2, 2, True)),
        (None, 2, {"OMP_NUM_THREADS": "4,2"}, ThreadPlan(2, 4, True)),  # OpenMP's nested list: the outer
        (None, 2, {"OMP_NUM_THREADS": "", "MKL_NUM_THREADS": "0"}, ThreadPlan(2, 1, False)),  # not a count
    ],
)
def test_plan(workers, cores, env, expected):
    assert plan(workers, cores, env) == expected


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_plan_bad_workers_env_names_the_variable(bad):
    with pytest.raises(InvalidParameterError, match="DENIABLE_WORKERS"):
        plan(None, 2, {"DENIABLE_WORKERS": bad})


@pytest.mark.parametrize("bad", [0, -2, True])
def test_plan_bad_workers(bad):
    with pytest.raises(InvalidParameterError, match="workers"):
        plan(bad, 2, {})


def test_explicit_blas_threads_order():
    assert explicit_blas_threads({}) is None
    assert explicit_blas_threads({"OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "5"}) == 2


def test_usable_cores_is_the_affinity():
    assert _threads.usable_cores() == len(os.sched_getaffinity(0))


def test_decode_workers_follow_the_environment(monkeypatch):
    for name in (*_threads.BLAS_ENV, _threads.WORKERS_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_threads, "_decode_workers", None)
    monkeypatch.setattr(_threads, "usable_cores", lambda: 7)
    assert _threads.decode_workers() == 7
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user chose BLAS's threads: no threads on top
    assert _threads.decode_workers() == 1
    monkeypatch.setenv("DENIABLE_WORKERS", "3")
    assert _threads.decode_workers() == 3


# -- the exact decode: split across worker threads of 1 BLAS thread, the same words ---------------
def _split_decode_in_a_fresh_process() -> tuple[bool, bool, int, list[set[int]], int]:
    """In a fresh interpreter (no BLAS thread count set by earlier tests: OpenBLAS then ignores a count set
    from another thread, and the decode runs serially by design): the exact decode on 1 worker and on 2."""
    from deniable.index.exact import ExactIndex

    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.pop(name, None)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 8)).astype(np.float32)
    q = rng.normal(size=(1000, 8)).astype(np.float32)
    idx = ExactIndex(x, vocab_block=512, query_block=64)
    _threads._decode_workers = 1  # type: ignore[attr-defined]
    one_d, one_i = idx.search(q, 3)
    seen: list[tuple[set[int], str]] = []
    inner = idx._search_block

    def spy(qb, k):  # type: ignore[no-untyped-def]
        seen.append((_blas_threads(), threading.current_thread().name))
        return inner(qb, k)

    idx._search_block = spy  # type: ignore[method-assign]
    _threads._decode_workers = 2  # type: ignore[attr-defined]
    two_d, two_i = idx.search(q, 3)
    names = {name for _, name in seen}
    same = bool(np.array_equal(one_i, two_i)), bool(np.array_equal(one_d, two_d))
    return same[0], same[1], len(seen), [b for b, _ in seen], len(names)


def test_exact_decode_split_gives_the_same_words_on_one_blas_thread() -> None:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        same_ids, same_d, blocks, blas, names = pool.apply(_split_decode_in_a_fresh_process)
    assert same_ids and same_d
    assert blocks == 16
    assert all(b <= {1} for b in blas)  # 1 BLAS thread per worker thread while split
    assert names == 2


# -- every worker process: 1 BLAS thread, 1 faiss thread, the decode on 1 thread ---------------------
def _in_engine_worker(batch, texts):  # type: ignore[no-untyped-def]
    import faiss

    out, _ = batch.privatize_texts(texts)
    return len(out), _blas_threads(), faiss.omp_get_max_threads(), _threads.decode_workers()


def _in_service_worker():  # type: ignore[no-untyped-def]
    import faiss

    from deniable.service import _one_thread_per_request

    _one_thread_per_request()  # what app_factory runs first in each `deniable serve` worker
    return _blas_threads(), faiss.omp_get_max_threads(), _threads.decode_workers()


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*_threads.BLAS_ENV, _threads.WORKERS_ENV):
        monkeypatch.delenv(name, raising=False)


def test_engine_worker_process_runs_one_blas_thread(emb_dir, monkeypatch):
    """The engines (Spark, Ray, Dask, HF num_proc) all run BatchPrivatizer in their workers."""
    from deniable.integrations import BatchPrivatizer

    _clean_env(monkeypatch)
    batch = BatchPrivatizer(mechanism="madlib", epsilon=3.0, embedding=str(emb_dir), columns=("review",))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        n, blas, omp, workers = pool.apply(_in_engine_worker, (batch, ["the game was great", None]))
    assert n == 2
    assert blas <= {1}
    assert omp == 1
    assert workers == 1


def test_service_worker_process_runs_one_blas_thread(monkeypatch):
    pytest.importorskip("fastapi")
    _clean_env(monkeypatch)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        blas, omp, workers = pool.apply(_in_service_worker)
    assert blas <= {1}
    assert omp == 1
    assert workers == 1


def test_worker_keeps_the_users_blas_threads(emb_dir, monkeypatch):
    from deniable.integrations import BatchPrivatizer

    _clean_env(monkeypatch)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")  # inherited by the spawned worker
    batch = BatchPrivatizer(mechanism="madlib", epsilon=3.0, embedding=str(emb_dir), columns=("review",))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        _, blas, _, _ = pool.apply(_in_engine_worker, (batch, ["a good game"]))
    assert blas <= {2}


def test_engine_task_on_a_local_schedulers_thread(emb_dir, monkeypatch):
    """Dask's threaded scheduler runs tasks on threads of the driver: 1 decode and 1 BLAS thread each."""
    from deniable.integrations import BatchPrivatizer
    from deniable.privatizer import Privatizer

    _clean_env(monkeypatch)
    batch = BatchPrivatizer(mechanism="madlib", epsilon=3.0, embedding=str(emb_dir), columns=("review",))
    seen: list[tuple[set[int], int]] = []
    inner = Privatizer.privatize_batch_with_stats

    def spy(self, *a, **kw):  # type: ignore[no-untyped-def]
        seen.append((_blas_threads(), _threads.decode_workers()))
        return inner(self, *a, **kw)

    monkeypatch.setattr(Privatizer, "privatize_batch_with_stats", spy)
    t = threading.Thread(target=batch.privatize_texts, args=(["the game was great"],))
    t.start()
    t.join()
    assert len(seen) == 1
    assert seen[0][1] == 1  # no decode threads on top of the scheduler's
    # (its BLAS threads: 1 where OpenBLAS takes a count set from this thread; 0.3.31 ignores it
    # once the main thread has set one, see _threads.one_blas_thread)
    batch.privatize_texts(["the game was great"])  # the driver's main thread: the in-process policy
    assert seen[-1][1] == _threads.decode_workers()


def test_exact_decode_does_not_split_when_blas_keeps_its_threads(monkeypatch):
    """Where the 1-thread limit did not apply (set from another thread), no threads are added."""
    import contextlib

    from deniable.index import exact

    monkeypatch.setattr(_threads, "_decode_workers", 2)

    @contextlib.contextmanager
    def not_applied():  # type: ignore[no-untyped-def]
        yield False

    monkeypatch.setattr(exact, "one_blas_thread", not_applied)
    rng = np.random.default_rng(1)
    idx = exact.ExactIndex(rng.normal(size=(500, 4)).astype(np.float32), vocab_block=128, query_block=16)
    names: set[str] = set()
    inner = idx._search_block

    def spy(qb, k):  # type: ignore[no-untyped-def]
        names.add(threading.current_thread().name)
        return inner(qb, k)

    monkeypatch.setattr(idx, "_search_block", spy)
    idx.search(rng.normal(size=(100, 4)).astype(np.float32), 1)
    assert names == {threading.current_thread().name}


def test_cli_local_run_sets_one_blas_thread_and_faiss_on_the_workers(monkeypatch):
    import faiss
    from threadpoolctl import threadpool_limits

    _clean_env(monkeypatch)
    before = faiss.omp_get_max_threads()
    with threadpool_limits(None):  # restores this process's BLAS threads afterwards
        p = _threads.init_local()
        from threadpoolctl import threadpool_info

        # numpy's BLAS (where the wheel keeps it varies by numpy version: numpy.libs, scipy_openblas, ...);
        # faiss's own, OpenMP-threaded, follows faiss's count
        numpy_blas = [
            i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas" and "faiss" not in i["filepath"]
        ]
        assert numpy_blas and set(numpy_blas) == {1}
        assert faiss.omp_get_max_threads() == p.workers == _threads.usable_cores()
    faiss.omp_set_num_threads(before)


def test_worker_env():
    assert _threads.worker_env({}) == {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert _threads.worker_env({"OMP_NUM_THREADS": "4"}) == {}  # the user's choice stands


def _faiss_threads_in_a_new_thread(batch):  # type: ignore[no-untyped-def]
    import faiss

    got: list[int] = []

    def task() -> None:
        batch.privatize_texts(["a good game"])
        got.append(faiss.omp_get_max_threads())

    t = threading.Thread(target=task)
    t.start()
    t.join()
    return got[0]


def test_engine_worker_thread_runs_one_faiss_thread(emb_dir, monkeypatch):
    """OpenMP's thread count is per thread: a worker's task thread (Ray's, a thread pool's) gets 1 too."""
    from deniable.integrations import BatchPrivatizer

    _clean_env(monkeypatch)
    batch = BatchPrivatizer(mechanism="madlib", epsilon=3.0, embedding=str(emb_dir), columns=("review",))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_faiss_threads_in_a_new_thread, (batch,)) == 1
