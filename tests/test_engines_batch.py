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


def test_seeded_streams_per_partition(emb_dir):
    with pytest.warns(NotPrivateWarning):
        batch = BatchPrivatizer(epsilon=1, embedding=str(emb_dir), columns=("t",), seed=7)
    a = batch.generator(3).integers(0, 2**62, 4)
    assert np.array_equal(a, batch.generator(3).integers(0, 2**62, 4))
    assert not np.array_equal(a, batch.generator(4).integers(0, 2**62, 4))
    with pytest.raises(InvalidParameterError, match="seed"):
        batch.generator(None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        unseeded = BatchPrivatizer(epsilon=1, embedding=str(emb_dir))
        assert not np.array_equal(
            unseeded.generator(3).integers(0, 2**62, 4), unseeded.generator(3).integers(0, 2**62, 4)
        )
