"""The one batch function: validation on the driver, one load per process, pickling, seeds."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

from deniable import InvalidParameterError, NotPrivateWarning
from deniable.integrations import BatchPrivatizer, clear_cache, load_count


def test_loads_once_per_process_and_pickles_small(emb_dir):
    clear_cache()
    batch = BatchPrivatizer(mechanism="madlib", epsilon=5, embedding=str(emb_dir), columns=("text",))
    before = load_count()
    for _ in range(3):
        out, stats = batch.privatize_texts(["the hockey game", None, "nasa rocket launch"])
        assert out[1] is None and stats.texts == 2 and stats.tokens == 6
    copy = pickle.loads(pickle.dumps(batch))
    copy.privatize_texts(["the puck"])
    assert load_count() == before + 1
    assert len(pickle.dumps(batch)) < 2000  # parameters only, never vectors


def test_validates_on_the_driver(emb_dir):
    with pytest.raises(InvalidParameterError, match="epsilon"):
        BatchPrivatizer(epsilon=-1, embedding=str(emb_dir))
    with pytest.raises(InvalidParameterError, match="oov"):
        BatchPrivatizer(oov="nope", embedding=str(emb_dir))
    with pytest.raises(InvalidParameterError):
        BatchPrivatizer(mechanism="madlib", options={"gamma": 1.0}, embedding=str(emb_dir))
    with pytest.raises(InvalidParameterError, match="embedding"):
        BatchPrivatizer(embedding=object())  # type: ignore[arg-type]


def test_columns_mapping_and_pandas(emb_dir):
    pd = pytest.importorskip("pandas")
    batch = BatchPrivatizer(epsilon=1e6, embedding=str(emb_dir), columns=("a", "b"), case="lower")
    new = batch({"a": ["the game", None], "b": ["nasa", "rocket"], "keep": [1, 2]})
    assert set(new) == {"a", "b"} and new["a"] == ["the game", None] and new["b"] == ["nasa", "rocket"]
    df = pd.DataFrame({"a": ["the game", None], "b": ["nasa", "rocket"], "n": [1, 2]})
    out = batch(df)
    assert out["n"].tolist() == [1, 2] and out["a"].tolist()[0] == "the game" and out["a"].isna().tolist()[1]
    with pytest.raises(InvalidParameterError, match="columns"):
        batch({"a": ["x"]})


def test_seeded_streams_per_unit(emb_dir):
    with pytest.warns(NotPrivateWarning):
        batch = BatchPrivatizer(epsilon=1, embedding=str(emb_dir), columns=("t",), seed=7)
    a = batch.generator((3, 0, 10)).integers(0, 2**62, 4)
    assert np.array_equal(a, batch.generator((3, 0, 10)).integers(0, 2**62, 4))
    assert not np.array_equal(a, batch.generator((4, 0, 10)).integers(0, 2**62, 4))
    with pytest.raises(InvalidParameterError, match="seed"):
        batch.generator(None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = BatchPrivatizer(epsilon=1, embedding=str(emb_dir), columns=("t",), seed=7)
    assert np.array_equal(a, again.generator((3, 0, 10)).integers(0, 2**62, 4))  # the seed makes the run key


def test_a_run_is_keyed_and_runs_are_independent(emb_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no seed, no warning
        run = BatchPrivatizer(epsilon=1, embedding=str(emb_dir), columns=("t",))
        other = BatchPrivatizer(epsilon=1, embedding=str(emb_dir), columns=("t",))
    draw = run.generator((3, 0, 10)).integers(0, 2**62, 4)
    assert np.array_equal(draw, run.generator((3, 0, 10)).integers(0, 2**62, 4))  # a recomputation
    assert np.array_equal(draw, pickle.loads(pickle.dumps(run)).generator((3, 0, 10)).integers(0, 2**62, 4))
    assert not np.array_equal(draw, other.generator((3, 0, 10)).integers(0, 2**62, 4))  # a new run
    assert not np.array_equal(draw, run.generator((3, 10, 10)).integers(0, 2**62, 4))  # another batch
    # no identity (Ray): fresh OS randomness every time
    assert not np.array_equal(run.generator(None).integers(0, 2**62, 4), run.generator(None).integers(0, 2**62, 4))
    assert run.run.hex() not in repr(run) and run.describe()["run_key_id"] == run.run.id


def test_datasets_style_batches_reproduce_within_a_run(emb_dir):
    texts = [f"the hockey game {i} was great" for i in range(40)]
    run = BatchPrivatizer(epsilon=2, embedding=str(emb_dir), columns=("t",))
    first = run({"t": texts[:20]}, list(range(20)))["t"] + run({"t": texts[20:]}, list(range(20, 40)))["t"]
    again = run({"t": texts[:20]}, list(range(20)))["t"] + run({"t": texts[20:]}, list(range(20, 40)))["t"]
    assert first == again
    other = BatchPrivatizer(epsilon=2, embedding=str(emb_dir), columns=("t",))
    fresh = other({"t": texts[:20]}, list(range(20)))["t"] + other({"t": texts[20:]}, list(range(20, 40)))["t"]
    assert sum(a != b for a, b in zip(first, fresh, strict=True)) >= 20
    # without indices there is no identity: fresh noise
    assert run({"t": texts[:20]})["t"] != run({"t": texts[:20]})["t"]


def test_run_key_can_be_exported_and_reused(emb_dir):
    run = BatchPrivatizer(epsilon=2, embedding=str(emb_dir), columns=("t",))
    again = BatchPrivatizer(epsilon=2, embedding=str(emb_dir), columns=("t",), run_key=run.run.hex())
    texts = {"t": [f"nasa rocket launch number {i}" for i in range(30)]}
    assert run(texts, list(range(30))) == again(texts, list(range(30)))
    with pytest.raises(InvalidParameterError, match="run_key"):
        BatchPrivatizer(epsilon=2, embedding=str(emb_dir), run_key="abc")
    with pytest.raises(InvalidParameterError, match="run_key"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        BatchPrivatizer(epsilon=2, embedding=str(emb_dir), seed=1, run_key=run.run)


def test_id_column_keys_each_record(emb_dir):
    pd = pytest.importorskip("pandas")
    batch = BatchPrivatizer(epsilon=2, embedding=str(emb_dir), columns=("t",), id_column="k")
    df = pd.DataFrame({"k": [5, 9, 2], "t": ["the hockey game", None, "nasa rocket launch"]})
    out = batch(df)
    # a record's release does not depend on its batch: alone, or in another order, it is the same
    assert batch(df.iloc[[2, 0]])["t"].tolist() == [out["t"][2], out["t"][0]] and out["t"].isna()[1]
    strs = batch(df.assign(k=["a", "b", "c"]))
    assert strs["t"][0] == batch(df.assign(k=["a", "b", "c"]).iloc[[0]])["t"][0]
    with pytest.raises(InvalidParameterError, match="unique"):
        batch(df.assign(k=[1, 1, 2]))
    with pytest.raises(InvalidParameterError, match="id_column"):
        batch(df.assign(k=[1.5, 2.0, 3.0]))
    with pytest.raises(InvalidParameterError, match="id_column"):
        batch(df.drop(columns="k"))
