"""deniable.privatize: one call for a str, a list, a pandas Series or DataFrame column(s)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import deniable
from deniable import InvalidParameterError, NotPrivateWarning


def test_list_str_and_defaults(emb_dir):
    texts = ["The hockey game was great!", "nasa rocket launch"]
    out = deniable.privatize(texts, epsilon=1e9, embedding=str(emb_dir))
    assert out == ["The hockey game was great!", "Nasa rocket launch"]  # the CLI's defaults: case=sentence
    one = deniable.privatize("the puck", epsilon=1e9, embedding=str(emb_dir), case="lower")
    assert one == "the puck"
    assert deniable.privatize((t for t in texts), epsilon=1e9, embedding=str(emb_dir)) == out
    assert deniable.privatize(np.array(texts), epsilon=1e9, embedding=str(emb_dir)) == out


def test_pandas_series_and_dataframe(emb_dir):
    pd = pytest.importorskip("pandas")
    s = pd.Series(["the game", None, "nasa rocket"], index=[10, 11, 12], name="review")
    out = deniable.privatize(s, epsilon=1e9, embedding=str(emb_dir), case="lower")
    assert out.index.tolist() == [10, 11, 12] and out.name == "review"
    assert out[10] == "the game" and out.isna()[11] and out[12] == "nasa rocket"
    df = pd.DataFrame({"id": [1, 2], "a": ["the game", float("nan")], "b": ["nasa", "rocket"]})
    res = deniable.privatize(df, epsilon=1e9, column=["a", "b"], embedding=str(emb_dir), case="lower")
    assert res["id"].tolist() == [1, 2] and res["a"][0] == "the game" and res["a"].isna()[1]
    assert res["b"].tolist() == ["nasa", "rocket"] and df["b"].tolist() == ["nasa", "rocket"]  # a copy
    assert deniable.privatize(df, epsilon=1e9, column="b", embedding=str(emb_dir), case="lower").columns.tolist() == [
        "id",
        "a",
        "b",
    ]
    with pytest.raises(InvalidParameterError, match="column"):
        deniable.privatize(df, epsilon=1.0, embedding=str(emb_dir))
    with pytest.raises(InvalidParameterError, match="column"):
        deniable.privatize(df, epsilon=1.0, column="nope", embedding=str(emb_dir))
    with pytest.raises(InvalidParameterError, match="str values"):
        deniable.privatize(df, epsilon=1.0, column="id", embedding=str(emb_dir))


def test_bad_input_names_the_parameter(emb_dir):
    with pytest.raises(InvalidParameterError, match="epsilon"):
        deniable.privatize(["x"], epsilon=-1, embedding=str(emb_dir))
    with pytest.raises(InvalidParameterError, match="oov"):
        deniable.privatize(["x"], epsilon=1, oov="nope", embedding=str(emb_dir))
    with pytest.raises(InvalidParameterError):
        deniable.privatize(["x"], epsilon=1, gamma=3.0, embedding=str(emb_dir))  # not a madlib option
    with pytest.raises(InvalidParameterError, match="texts"):
        deniable.privatize([1, 2], epsilon=1, embedding=str(emb_dir))
    with pytest.raises(InvalidParameterError, match="texts"):
        deniable.privatize({"a": "b"}, epsilon=1, embedding=str(emb_dir))
    with pytest.raises(InvalidParameterError, match="texts='bytes'"):  # not read as a list of ints
        deniable.privatize(b"the game", epsilon=1, embedding=str(emb_dir))
    with pytest.raises(InvalidParameterError, match="target"):
        deniable.privatize(["x"], epsilon="auto", embedding=str(emb_dir))


def test_randomness_fresh_keyed_or_seeded(emb_dir):
    texts = [f"the hockey game {i} was great" for i in range(30)]
    a = deniable.privatize(texts, epsilon=2, embedding=str(emb_dir))
    b = deniable.privatize(texts, epsilon=2, embedding=str(emb_dir))
    assert sum(x != y for x, y in zip(a, b, strict=True)) > 15  # each call: a new run
    key = deniable.RunKey.new()
    assert deniable.privatize(texts, epsilon=2, embedding=str(emb_dir), run_key=key) == deniable.privatize(
        texts, epsilon=2, embedding=str(emb_dir), run_key=key.hex()
    )
    with pytest.warns(NotPrivateWarning):
        s1 = deniable.privatize(texts, epsilon=2, embedding=str(emb_dir), random_state=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert s1 == deniable.privatize(texts, epsilon=2, embedding=str(emb_dir), random_state=4)
        with pytest.raises(InvalidParameterError, match="run_key"):
            deniable.privatize(texts, epsilon=2, embedding=str(emb_dir), random_state=4, run_key=key)


def test_loads_once_per_process(emb_dir):
    from deniable.api import clear_cache, load_count

    clear_cache()
    before = load_count()
    for _ in range(3):
        deniable.privatize(["the game"], epsilon=3.21, mechanism="tem", embedding=str(emb_dir), gamma=2.0)
    assert load_count() == before + 1
