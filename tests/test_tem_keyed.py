"""TEM is keyed: one generator state gives one output, whatever the process computed before (issue 40, item 3).

The per-word state a (not history-free) TEM instance builds while it privatizes (ball tables,
k-NN tables, candidate counts, totals, all in this process's memory) only saves work: which
sampler draws a word's tokens, and so how the random stream is consumed, is a function of
the word, its count in the call and the public configuration (the embedding, the options and
which artefacts are prepared), never of what the instance or the process met before. So the
same generator state gives the same output cold, warm (a second and a third call, after other
input) and in a fresh process. Before the fix, the first and second calls of one instance
agreed on 4 of 1,000 rows (GloVe, eps 3: the second drew cached words from the tables the
first built); every registered mechanism is checked the same way at the end.

With prepared artefacts the sampler draws under the prepared envelopes: the same law, another
mapping from the stream to the output (a prepared and an unprepared process are two samplers;
see docs/tem.md, "Keyed"). Each of the two is history-independent, tested here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable import Embedding
from deniable.mechanisms.registry import mechanism_names
from deniable.mechanisms.tem import TruncatedExponential
from deniable.preparation import prepare
from test_tem_support import force_path

#: a small vocabulary where balls, k-NN envelopes, shells and uniform rejection all occur
_V, _DIM, _SEED = 400, 3, 40


def _emb() -> Embedding:
    return make_tiny_embedding(_V, _DIM, seed=_SEED)


def _text(seed: int, n: int = 600) -> np.ndarray:
    """``n`` word ids with Zipf-like repeats (some words many times, most once)."""
    r = np.random.default_rng(seed)
    return np.minimum(r.zipf(1.3, size=n) - 1, _V - 1).astype(np.int64)


def _draw(mech: TruncatedExponential, ids: np.ndarray, key: int = 7) -> np.ndarray:
    return mech.privatize(ids, np.random.Generator(np.random.PCG64(key)))


_PATHS = ["default", "table", "knn", "shells", "uniform"]


@pytest.mark.parametrize("path", _PATHS)
@pytest.mark.parametrize("epsilon", [0.5, 3.0, 12.0])
def test_cold_and_warm_instances_give_the_same_output(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, path: str, epsilon: float
) -> None:
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    opts: dict[str, Any] = force_path(monkeypatch, path) if path != "default" else {}
    emb = _emb()
    ids = _text(1)
    cold = _draw(TruncatedExponential(emb, epsilon, **opts), ids)
    warm_mech = TruncatedExponential(emb, epsilon, **opts)
    first = _draw(warm_mech, ids)
    _draw(warm_mech, _text(2), key=99)  # other input in between: more tables, other words
    second = _draw(warm_mech, ids)
    third = _draw(warm_mech, ids)
    np.testing.assert_array_equal(first, cold)
    np.testing.assert_array_equal(second, cold)
    np.testing.assert_array_equal(third, cold)
    if path in ("table", "knn"):  # the instance did build per-word state (the point of the test)
        assert warm_mech.cache_info()["memory_bytes"] > 0


def test_precompute_changes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    emb = _emb()
    ids = _text(3)
    cold = _draw(TruncatedExponential(emb, 2.0), ids)
    mech = TruncatedExponential(emb, 2.0)
    mech.precompute(np.arange(0, _V, 3))  # tables of a third of the words, in memory
    np.testing.assert_array_equal(_draw(mech, ids), cold)


@pytest.mark.parametrize("epsilon", [1.0, 6.0])
def test_prepared_cold_and_warm_give_the_same_output(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, epsilon: float
) -> None:
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    emb = _emb()
    prepare(emb, ["tem"], options={"epsilon": [epsilon]}, show_progress=False)
    ids = _text(4)
    cold = _draw(TruncatedExponential(emb, epsilon), ids)
    mech = TruncatedExponential(emb, epsilon)
    outs = [_draw(mech, ids)]
    _draw(mech, _text(5), key=3)
    outs += [_draw(mech, ids), _draw(mech, ids)]
    for out in outs:
        np.testing.assert_array_equal(out, cold)


_CHILD = """
import json, sys
import numpy as np
sys.path.insert(0, {tests!r})
from conftest import make_tiny_embedding
from deniable import Embedding
from deniable.mechanisms.tem import TruncatedExponential
emb = make_tiny_embedding({v}, {dim}, seed={seed})
ids = np.array(json.loads(sys.argv[1]), dtype=np.int64)
mech = TruncatedExponential(emb, float(sys.argv[2]))
if sys.argv[3] == "warm":
    mech.privatize(np.arange({v}), np.random.Generator(np.random.PCG64(5)))
out = mech.privatize(ids, np.random.Generator(np.random.PCG64(7)))
print(json.dumps(out.tolist()))
"""


@pytest.mark.parametrize("epsilon", [3.0, 12.0])
def test_the_same_in_another_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, epsilon: float) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("DENIABLE_CACHE", str(cache))
    ids = _text(6)
    here = TruncatedExponential(_emb(), epsilon)
    _draw(here, _text(8), key=1)  # this process is warm
    mine = _draw(here, ids)
    code = _CHILD.format(tests=str(Path(__file__).parent), v=_V, dim=_DIM, seed=_SEED)
    env = {**os.environ, "DENIABLE_CACHE": str(cache)}
    for state in ("cold", "warm"):
        res = subprocess.run(
            [sys.executable, "-c", code, json.dumps(ids.tolist()), str(epsilon), state],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=True,
        )
        np.testing.assert_array_equal(np.array(json.loads(res.stdout)), mine)


def test_the_sampler_is_named_and_a_new_one_is_a_new_release(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Prepared and unprepared processes draw the same law through two mappings: the manifest names
    the sampler, so the ledger counts a key reused across ``deniable prepare`` as two releases."""
    from deniable import Privatizer
    from deniable._random import RunKey
    from deniable.api import privacy_ledger, privatize_file, read_manifest

    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    emb = _emb()
    assert TruncatedExponential(emb, 3.0).sampler() == "lazy"
    assert TruncatedExponential(emb, 3.0, history_free=True).sampler() == "oblivious"
    src = tmp_path / "in.txt"
    src.write_text("w1 w2 w3\nw4 w5 w1\n", encoding="utf-8")
    key = RunKey.new()
    manifests = []
    for i in range(3):
        if i == 2:
            prepare(emb, ["tem"], options={"epsilon": [3.0]}, show_progress=False)
        mech = TruncatedExponential(emb, 3.0)
        dst = tmp_path / f"out{i}.txt"
        privatize_file(src, dst, Privatizer(mech), run_key=key, input_label="in")
        manifests.append(read_manifest(dst.with_name(dst.name + ".manifest.json")))
    lazy, again, prepared = (m["mechanism"]["sampler"] for m in manifests)
    assert lazy == again == "lazy"
    assert prepared.startswith("self-first, k-NN tables ") and "far bounds " in prepared
    assert (tmp_path / "out0.txt").read_bytes() == (tmp_path / "out1.txt").read_bytes()  # keyed
    assert privacy_ledger(manifests[:2])[0][0].releases == 1  # a re-run: one release
    assert privacy_ledger(manifests)[0][0].releases == 2  # another sampler: a new release


@pytest.mark.parametrize("name", [n for n in mechanism_names() if n != "custext_plus"])  # (slow to build)
def test_no_mechanism_remembers_what_changes_its_draws(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    """The same check for every registered mechanism: a fresh instance and one that privatized
    other text first map one generator state to the same output."""
    import warnings

    from deniable.mechanisms import make_mechanism

    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    emb = make_tiny_embedding(120, 4, seed=3)
    ids = np.random.default_rng(4).integers(0, 120, size=400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cold = _draw(make_mechanism(name, emb, 4.0), ids)
        warm = make_mechanism(name, emb, 4.0)
        _draw(warm, np.random.default_rng(5).integers(0, 120, size=400), key=11)
        np.testing.assert_array_equal(_draw(warm, ids), cold)
        np.testing.assert_array_equal(_draw(warm, ids), cold)


def test_an_engine_run_keeps_one_sampler_across_workers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The driver pins the sampler of its run; a worker whose prepared artefacts differ (here: prepared
    after the run was made) refuses, instead of re-releasing a recomputed batch through another mapping."""
    import pickle

    from deniable._errors import InvalidParameterError
    from deniable.integrations._batch import BatchPrivatizer, clear_cache

    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    emb = _emb()
    folder = tmp_path / "emb"
    emb.save(folder)
    clear_cache()
    run = BatchPrivatizer("tem", 3.0, embedding=str(folder))
    assert run.__dict__["_sampler"] == "lazy"  # pinned on the driver
    shipped = pickle.dumps(run)
    same = pickle.loads(shipped)
    clear_cache()  # a fresh worker, same artefacts: accepted, same output
    assert (
        same.privatize_texts(["w1 w2 w3"], np.random.Generator(np.random.PCG64(1)))[0]
        == run.privatize_texts(["w1 w2 w3"], np.random.Generator(np.random.PCG64(1)))[0]
    )
    from deniable.embedding import load_embedding

    prepare(load_embedding(str(folder)), ["tem"], options={"epsilon": [3.0]}, show_progress=False)
    clear_cache()  # a worker that sees prepared tables the driver did not
    worker = pickle.loads(shipped)
    with pytest.raises(InvalidParameterError, match="sampler"):
        worker.privatize_texts(["w1 w2 w3"], np.random.Generator(np.random.PCG64(1)))
