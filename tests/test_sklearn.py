"""deniable.sklearn.PrivatizeText: scikit-learn's conventions (1-D / 2-D input, feature names,
set_output, ColumnTransformer, estimator checks) and train-private / test-clean pipelines in which
each training text is released once, however often cross-validation refits."""

from __future__ import annotations

import pickle
import warnings
from collections import defaultdict

import numpy as np
import pytest

pytest.importorskip("sklearn", minversion="1.6", reason="needs deniable[sklearn] (scikit-learn >= 1.6)")
from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.feature_extraction.text import CountVectorizer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GridSearchCV, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from _engine_helpers import imdb_like  # noqa: E402
from deniable import InvalidParameterError, NotPrivateWarning  # noqa: E402
from deniable._random import RunKey  # noqa: E402
from deniable.integrations.sklearn import EXPECTED_FAILED_CHECKS  # noqa: E402
from deniable.sklearn import PrivatizeText  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::deniable.NotPrivateWarning")


@pytest.fixture(autouse=True)
def _fresh_process_memory():
    """Each test as in a fresh process: the texts earlier tests privatized are forgotten."""
    from deniable.integrations import sklearn as module

    module._SEEN.clear()


def _data(n=200, seed=2):
    rows = imdb_like(n, seed=seed)
    X = [r["review"] + (" hockey puck" if r["label"] else " nasa orbit") for r in rows]  # noqa: N806
    return X, np.array([r["label"] for r in rows])


SEEN: list[list[str]] = []  # what the step after PrivatizeText received, call by call


def _record(X):  # noqa: N803
    SEEN.append(list(X))
    return X


def _pipe(emb_dir, **params):
    return make_pipeline(
        PrivatizeText("madlib", 3.0, embedding=str(emb_dir), **params),
        FunctionTransformer(_record),
        CountVectorizer(),
        LogisticRegression(),
    )


# -------------------------------------------------------------------------- conventions
def test_pipeline_cross_val_score(emb_dir):
    X, y = _data()  # noqa: N806
    pipe = make_pipeline(PrivatizeText("madlib", 50.0, embedding=str(emb_dir)), CountVectorizer(), LogisticRegression())
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.shape == (3,) and scores.mean() > 0.6


def test_one_d_in_one_d_out_two_d_in_two_d_out(emb_dir):
    pd = pytest.importorskip("pandas")
    t = PrivatizeText(epsilon=1e9, embedding=str(emb_dir), case="lower")
    texts = ["the hockey game", "nasa rocket"]
    out = t.fit_transform(texts)
    assert isinstance(out, np.ndarray) and out.shape == (2,) and out.tolist() == texts
    assert t.transform(pd.Series(texts)).tolist() == texts
    assert list(t.get_feature_names_out()) == ["x0"]
    df = pd.DataFrame({"title": texts, "body": ["a good game", None]})
    out = t.fit_transform(df)
    assert out.shape == (2, 2) and out.tolist() == [["the hockey game", "a good game"], ["nasa rocket", None]]
    assert list(t.get_feature_names_out()) == ["title", "body"] and t.n_features_in_ == 2
    col = np.array([["the game"], ["nasa"]], dtype=object)
    assert t.fit_transform(col).tolist() == [["the game"], ["nasa"]]
    with pytest.raises(InvalidParameterError, match="1 text column"):
        t.transform(df)
    with pytest.raises(InvalidParameterError, match=r"column 'body', row 1"):
        PrivatizeText(embedding=str(emb_dir)).fit(df.assign(body=["x", 3]))
    with pytest.raises(InvalidParameterError, match="X"):
        PrivatizeText(embedding=str(emb_dir)).fit("one text")


def test_set_output_pandas_and_feature_names(emb_dir):
    pd = pytest.importorskip("pandas")
    from sklearn import config_context
    from sklearn.compose import ColumnTransformer

    texts = pd.Series(["the hockey game", "nasa rocket"], index=[7, 9], name="review")
    t = PrivatizeText(epsilon=1e9, embedding=str(emb_dir), case="lower").set_output(transform="pandas")
    s = t.fit_transform(texts)  # 1-D in: a Series, so a vectorizer can still follow
    assert isinstance(s, pd.Series) and s.name == "review" and list(s.index) == [7, 9]
    assert clone(t).fit_transform(texts.to_frame()).columns.tolist() == ["review"]  # clone keeps set_output
    with config_context(transform_output="pandas"):
        assert isinstance(PrivatizeText(epsilon=1e9, embedding=str(emb_dir)).fit_transform(texts), pd.Series)
    df = pd.DataFrame({"review": texts.tolist(), "label": [0, 1]})
    ct = ColumnTransformer(
        [("text", PrivatizeText(epsilon=1e9, embedding=str(emb_dir)), ["review"])], remainder="passthrough"
    )
    pipe = make_pipeline(ct, FunctionTransformer(feature_names_out="one-to-one")).set_output(transform="pandas")
    out = pipe.fit_transform(df)
    assert isinstance(out, pd.DataFrame) and out.columns.tolist() == ["text__review", "remainder__label"]
    assert out["text__review"].str.lower().tolist() == ["the hockey game", "nasa rocket"]
    assert pipe.get_feature_names_out().tolist() == ["text__review", "remainder__label"]


def test_in_a_column_transformer(emb_dir):
    pd = pytest.importorskip("pandas")
    from sklearn.compose import ColumnTransformer

    df = pd.DataFrame(imdb_like(60, seed=3)).assign(title=lambda d: d["review"].str[:10])
    text = make_pipeline(PrivatizeText("madlib", 1e9, embedding=str(emb_dir)), CountVectorizer())
    ct = ColumnTransformer([("text", text, "review")], remainder="drop")  # 1-D into the vectorizer
    assert ct.fit_transform(df).shape[0] == 60
    alone = ColumnTransformer([("t", PrivatizeText("madlib", 3.0, embedding=str(emb_dir)), ["review", "title"])])
    out = alone.fit_transform(df)  # 2-D: was "The output of the 't' transformer should be 2D"
    assert out.shape == (60, 2) and alone.get_feature_names_out().tolist() == ["t__review", "t__title"]


def test_clone_pickle_and_fitted_state(emb_dir):
    t = PrivatizeText("tem", 5.0, options={"gamma": 2.0}, embedding=str(emb_dir), oov="drop")
    with pytest.raises(NotFittedError):
        t.transform(["the hockey game"])
    out = t.fit_transform(["the hockey game", "nasa rocket"])
    assert len(out) == 2 and all(isinstance(s, str) for s in out)
    c = clone(t)
    assert c.get_params() == t.get_params() and not hasattr(c, "run_key_id_")
    blob = pickle.dumps(t)
    assert len(blob) < 2000 and t._privatizer.run.hex().encode() not in blob
    back = pickle.loads(blob)
    assert back.get_params() == t.get_params() and "_privatizer" not in back.__dict__  # the run key stays behind
    c.set_params(epsilon=1e9, case="lower")
    assert c.fit(["x"]).transform(["the hockey game"]).tolist() == ["the hockey game"]


def test_random_state_and_run_key(emb_dir):
    with pytest.raises(InvalidParameterError, match="epsilon"):
        PrivatizeText(epsilon=0, embedding=str(emb_dir)).fit(["x"])
    with pytest.raises(InvalidParameterError, match="on_transform"):
        PrivatizeText(on_transform="keep", embedding=str(emb_dir)).fit(["x"])
    with pytest.raises(InvalidParameterError, match="random_state"):
        PrivatizeText(embedding=str(emb_dir), random_state=1, run_key=RunKey.new()).fit(["x"])
    t = PrivatizeText(epsilon=3.0, embedding=str(emb_dir), random_state=3)
    with pytest.warns(NotPrivateWarning):
        t.fit(["x"])
    X, _ = _data(50)  # noqa: N806
    assert t.transform(X).tolist() == clone(t).fit(["x"]).transform(X).tolist()
    key = RunKey.new()
    a = PrivatizeText(epsilon=3.0, embedding=str(emb_dir), run_key=key)
    b = pickle.loads(pickle.dumps(a.fit(["x"])))  # a given key is a parameter: it travels
    assert a.transform(X).tolist() == b.transform(X).tolist()


def test_keyed_by_text_not_by_row(emb_dir):
    """One fitted run: a text comes out the same wherever it is, so two predict calls agree."""
    X, _ = _data(100)  # noqa: N806
    t = PrivatizeText(epsilon=3.0, embedding=str(emb_dir)).fit(X)
    first = t.transform(X).tolist()
    assert t.transform(X[::-1]).tolist() == first[::-1]
    assert t.transform(X[:10] + X[:10]).tolist() == first[:10] * 2
    other = PrivatizeText(epsilon=3.0, embedding=str(emb_dir)).fit(X).transform(X).tolist()
    assert sum(a != b for a, b in zip(first, other, strict=True)) > 30  # a new run is independent


# -------------------------------------------------- train private, test clean, released once
def test_passthrough_privatizes_training_text_only(emb_dir, monkeypatch):
    from deniable.integrations import _batch

    X, y = _data(100)  # noqa: N806
    calls = []
    real = _batch.BatchPrivatizer.privatize_texts
    monkeypatch.setattr(
        _batch.BatchPrivatizer, "privatize_texts", lambda s, t, *a, **k: calls.append(len(t)) or real(s, t, *a, **k)
    )
    SEEN.clear()
    pipe = _pipe(emb_dir, on_transform="passthrough").fit(X, y)
    assert calls == [100] and SEEN[0] != X  # fit: the training texts, privatized once
    pipe.predict(X[:30])
    pipe.score(X[:30], y[:30])
    assert calls == [100] and SEEN[1] == X[:30] == SEEN[2]  # predict / score: clean text, nothing released
    SEEN.clear()
    _pipe(emb_dir).fit(X, y).predict(X[:30])  # the default privatizes test text too (defaults protect)
    assert SEEN[1] != X[:30]


def test_cross_val_score_with_run_key_releases_each_text_once(emb_dir, recwarn):
    X, y = _data(200)  # noqa: N806
    SEEN.clear()
    cross_val_score(_pipe(emb_dir, on_transform="passthrough", run_key=RunKey.new()), X, y, cv=5)
    assert [len(c) for c in SEEN] == [160, 40] * 5  # per fold: fit (privatized), then score (clean)
    outs = defaultdict(set)
    for k in range(5):  # KFold without shuffling: fold k trains on X without block k, in order
        train = X[: 40 * k] + X[40 * k + 40 :]
        for text, out in zip(train, SEEN[2 * k], strict=True):
            outs[text].add(out)
        assert SEEN[2 * k + 1] == X[40 * k : 40 * k + 40]  # test text reached the model clean
    assert len(outs) == len(set(X)) and all(len(v) == 1 for v in outs.values())  # one release per text
    assert sum(a != next(iter(b)) for a, b in outs.items()) > 50  # and privatized
    assert not [w for w in recwarn if issubclass(w.category, NotPrivateWarning)]


def test_the_budget_counts_one_release_with_a_run_key_and_each_fit_without(emb_dir):
    """cross_val_score(cv=5) under a budget: with a run_key the five fits reproduce one release (eps 3
    spent, a budget of 4 suffices); without one each fit is a new release, refused before it draws."""
    from deniable.budget import BudgetAccountant, BudgetError

    X, y = _data(100, seed=7)  # noqa: N806
    with BudgetAccountant(epsilon=4.0) as acc:
        key = RunKey.new()
        cross_val_score(_pipe(emb_dir, on_transform="passthrough", run_key=key), X, y, cv=5, error_score="raise")
        assert acc.total() == pytest.approx(3.0)
    with BudgetAccountant(epsilon=4.0) as acc, pytest.raises(BudgetError):
        cross_val_score(_pipe(emb_dir, on_transform="passthrough"), X, y, cv=5, error_score="raise")
    assert acc.total() == pytest.approx(3.0)  # the first fit; the second was refused before drawing


def test_cross_val_score_without_run_key_warns(emb_dir):
    X, y = _data(200, seed=5)  # noqa: N806
    with pytest.warns(NotPrivateWarning, match="already privatized in this process by another run"):
        cross_val_score(_pipe(emb_dir, on_transform="passthrough"), X, y, cv=5)


def test_grid_search_with_run_key_releases_each_text_once(emb_dir, recwarn):
    X, y = _data(120, seed=6)  # noqa: N806
    SEEN.clear()
    pipe = _pipe(emb_dir, on_transform="passthrough", run_key=RunKey.new())
    search = GridSearchCV(pipe, {"logisticregression__C": [0.1, 10]}, cv=3).fit(X, y)
    assert search.best_estimator_.predict(X[:5]).shape == (5,)
    final = SEEN[-2] if len(SEEN[-1]) == 5 else SEEN[-1]  # the refit on all of X (then the predict)
    refit = dict(zip(X, final, strict=True))
    for call in SEEN:
        if len(call) == 80:  # a training fold: each text as in the refit
            assert set(call) <= set(final)
    assert len(refit) == len(set(X))
    assert not [w for w in recwarn if issubclass(w.category, NotPrivateWarning)]


# --------------------------------------------------------------------------- estimator checks
@parametrize_with_checks([PrivatizeText()], expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS)
def test_sklearn_estimator_checks(estimator, check):
    """Every check scikit-learn runs passes, except those listed (with why) in EXPECTED_FAILED_CHECKS."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        check(estimator)
