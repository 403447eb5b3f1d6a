"""Shared fixtures: tiny synthetic embeddings (no downloads), the real default one when asked."""

from __future__ import annotations

import csv
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deniable import Embedding

SHARED_DATA = Path(os.environ.get("DENIABLE_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Every test session writes its artefacts to a private cache folder."""
    old = os.environ.get("DENIABLE_CACHE")
    os.environ["DENIABLE_CACHE"] = str(tmp_path_factory.getbasetemp() / "cache")
    yield
    if old is None:
        os.environ.pop("DENIABLE_CACHE", None)
    else:
        os.environ["DENIABLE_CACHE"] = old


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator for reproducible tests (tests are experiments, not releases)."""
    return np.random.default_rng(12345)


def make_tiny_embedding(n_words: int = 8, dim: int = 3, seed: int = 0) -> Embedding:
    words = [f"w{i}" for i in range(n_words)]
    vec = np.random.default_rng(seed).normal(size=(n_words, dim)).astype(np.float32)
    return Embedding(words, vec, name="tiny")


@pytest.fixture
def tiny_embedding() -> Embedding:
    """8 random 3-d words w0..w7."""
    return make_tiny_embedding()


@pytest.fixture
def toy_embedding() -> Embedding:
    """A small real-looking lowercase vocabulary: clusters of related words in 4-d."""
    return make_toy_embedding()


def make_toy_embedding() -> Embedding:
    """18 lowercase words in three clusters (sport, space, function words), 4-d."""
    groups = {
        "sport": ["hockey", "soccer", "puck", "goal", "game", "match"],
        "space": ["nasa", "esa", "rocket", "orbit", "launch"],
        "func": ["the", "a", "was", "is", "it", "great", "good"],
    }
    words, vecs = [], []
    r = np.random.default_rng(7)
    for g, ws in enumerate(groups.values()):
        centre = np.zeros(4)
        centre[g] = 3.0
        for w in ws:
            words.append(w)
            vecs.append(centre + r.normal(scale=0.5, size=4))
    return Embedding(words, np.array(vecs, dtype=np.float32), name="toy")


#: the words of :func:`two_topic_corpus`: three of sport, three of space
TOPIC_WORDS = ("hockey", "puck", "goal", "nasa", "rocket", "orbit")


def two_topic_corpus(n: int = 40, seed: int = 1) -> tuple[list[str], list[str]]:
    """``n`` short texts alternating between two topics (sport, space) of three words each, and their labels."""
    words = list(TOPIC_WORDS)
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(words[:3] if i % 2 else words[3:], size=8)) for i in range(n)]
    return texts, ["sport" if i % 2 else "space" for i in range(n)]


def write_labelled_csvs(
    root: Path,
    row: Callable[[int, np.random.Generator], list[str]],
    *,
    n: int = 60,
    header: tuple[str, str] = ("text", "label"),
) -> dict[str, Path]:
    """The toy embedding saved as ``root/emb`` and ``train.csv`` / ``test.csv`` of ``n`` rows
    ``row(i, rng)`` each (one generator seeded 0 for both files); ``{"emb", "train", "test"}``."""
    make_toy_embedding().save(root / "emb")
    rng = np.random.default_rng(0)
    out = {"emb": root / "emb"}
    for part in ("train", "test"):
        path = root / f"{part}.csv"
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(list(header))
            for i in range(n):
                w.writerow(row(i, rng))
        out[part] = path
    return out


@pytest.fixture(scope="session")
def glove() -> Embedding:
    """The real default embedding (installed with the package, memory-mapped)."""
    from deniable import load_embedding

    return load_embedding()


def shared_data(name: str) -> Path:
    """Path of a shared data set, or skip the test with a reason when it is absent."""
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"shared data set {name!r} not found at {path} (set DENIABLE_DATA)")
    return path


@pytest.fixture(scope="module")
def emb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy embedding saved as a folder (for ``--embedding``)."""
    path = tmp_path_factory.mktemp("emb") / "toy"
    make_toy_embedding().save(path)
    return path


# -- the on-device client (clients/js): one Node harness and one web export per test module --
@pytest.fixture(scope="module")
def js():  # type: ignore[no-untyped-def]
    """A Node process running clients/js/tools/harness.mjs (skips without Debian's nodejs)."""
    from _device_helpers import Harness

    h = Harness()
    yield h
    h.close()


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both web artefacts (``deniable export-device --format web``) of the small test mechanisms."""
    from _device_helpers import export

    return export(tmp_path_factory.mktemp("web"))


# -- the service's deadline tests: work made slow on purpose --
@pytest.fixture
def slow_work(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], list[int]]:
    """``slow_work(seconds)``: from now on every ``Privatizer.privatize_batch_with_stats`` call
    sleeps ``seconds`` first (call again to change it); returns the list of the calls made since
    the first ``slow_work`` (one entry each)."""
    import time

    from deniable.privatizer import Privatizer

    calls: list[int] = []
    delay = [0.0]
    original = Privatizer.privatize_batch_with_stats

    def slowed(self: Privatizer, texts: object, random_state: object = None) -> object:
        calls.append(1)
        time.sleep(delay[0])
        return original(self, texts, random_state)  # type: ignore[arg-type]

    def set_delay(seconds: float) -> list[int]:
        delay[0] = seconds
        monkeypatch.setattr(Privatizer, "privatize_batch_with_stats", slowed)
        return calls

    return set_delay


# -- the service's middleware (deniable.service._guard) alone --
def work_guard(**limits: object) -> Any:
    """A ``Guard`` whose work path is ``/w``, in front of an application that must not be reached."""
    from deniable.service._guard import Guard

    async def unreachable(scope: object, receive: object, send: object) -> None:  # pragma: no cover
        raise AssertionError("the guard let the request through")

    return Guard(unreachable, work_paths=frozenset({"/w"}), **limits)  # type: ignore[arg-type]


def guard_answers(guard: Any, receive: Callable[[], Any]) -> list[dict[str, Any]]:
    """The messages ``guard`` sends back for one HTTP request to ``/w`` whose messages ``receive`` gives."""
    import asyncio

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(guard({"type": "http", "path": "/w", "headers": []}, receive, send))
    return sent


@pytest.fixture
def keyfile(tmp_path: Path) -> Path:
    """A run key file only its owner can read (what --run-key-file accepts)."""
    from deniable._random import RunKey

    path = tmp_path / "run.key"
    path.write_text(RunKey.new().hex() + "\n", encoding="ascii")
    os.chmod(path, 0o600)
    return path


def assert_records_use_their_own_streams(mech: Any, small: Any, size: int) -> None:
    """``mech.privatize_records``: each record's output is the same alone, in a group, in another order, and
    from ``small`` (the same mechanism with a small ``batch_size``), under one run key (keyed determinism)."""
    from deniable._random import RunKey

    key = RunKey.new()
    rng = np.random.default_rng(1)
    records = [rng.integers(0, size, n) for n in (5, 0, 17, 1, 40, 3)]

    def gens() -> list[np.random.Generator]:
        return [key.record_generator(i, "t", "x") for i in range(len(records))]

    together = mech.privatize_records(records, gens())
    alone = [mech.privatize_records([r], [g])[0] for r, g in zip(records, gens(), strict=True)]
    reversed_ = mech.privatize_records(records[::-1], gens()[::-1])[::-1]
    blocks = small.privatize_records(records, gens())
    for a, b, c, d in zip(together, alone, reversed_, blocks, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c) and np.array_equal(a, d)
    assert [len(a) for a in together] == [len(r) for r in records]
