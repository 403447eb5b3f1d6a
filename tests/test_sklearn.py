"""deniable.sklearn.PrivatizeText: a Pipeline step, clone / pickle round trips, estimator checks."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

pytest.importorskip("sklearn", minversion="1.6", reason="needs deniable[sklearn] (scikit-learn >= 1.6)")
from sklearn.base import clone  # noqa: E402
from sklearn.feature_extraction.text import CountVectorizer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from _engine_helpers import imdb_like  # noqa: E402
from deniable import InvalidParameterError, NotPrivateWarning  # noqa: E402
from deniable.sklearn import PrivatizeText  # noqa: E402


def test_pipeline_cross_val_score(emb_dir):
    rows = imdb_like(200, seed=2)
    X = [r["review"] + (" hockey puck" if r["label"] else " nasa orbit") for r in rows]  # noqa: N806
    y = np.array([r["label"] for r in rows])
    pipe = make_pipeline(PrivatizeText("madlib", 50.0, embedding=str(emb_dir)), CountVectorizer(), LogisticRegression())
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.shape == (3,) and scores.mean() > 0.6


def test_clone_and_pickle_exclude_the_mechanism(emb_dir):
    t = PrivatizeText("tem", 5.0, options={"gamma": 2.0}, embedding=str(emb_dir), oov="drop")
    out = t.fit_transform(["the hockey game", "nasa rocket"])
    assert len(out) == 2 and all(isinstance(s, str) for s in out)
    c = clone(t)
    assert c.get_params() == t.get_params() and not hasattr(c, "is_fitted_")
    blob = pickle.dumps(t)
    assert len(blob) < 2000
    assert pickle.loads(blob).get_params() == t.get_params()
    c.set_params(epsilon=1e9, case="lower")
    assert c.transform(["the hockey game"]) == ["the hockey game"]


def test_fit_validates_params_only(emb_dir):
    with pytest.raises(InvalidParameterError, match="epsilon"):
        PrivatizeText(epsilon=0, embedding=str(emb_dir)).fit(["x"])
    with pytest.raises(InvalidParameterError, match="X"):
        PrivatizeText(embedding=str(emb_dir)).fit(None).transform("one text")
    t = PrivatizeText(embedding=str(emb_dir), random_state=3)
    with pytest.warns(NotPrivateWarning):
        t.fit(None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        assert t.transform(["the hockey game"] * 5) == t.transform(["the hockey game"] * 5)


def test_dataframe_and_column_inputs(emb_dir):
    pd = pytest.importorskip("pandas")
    t = PrivatizeText(epsilon=1e9, embedding=str(emb_dir), case="lower")
    df = pd.DataFrame({"Text": ["the hockey game", "nasa rocket"]})
    assert t.fit_transform(df) == ["the hockey game", "nasa rocket"]  # not ["text"], the column name
    assert t.transform(df["Text"]) == ["the hockey game", "nasa rocket"]
    assert t.transform(np.array([["the game"], ["nasa"]], dtype=object)) == ["the game", "nasa"]
    with pytest.raises(InvalidParameterError, match="2 columns"):
        t.transform(df.assign(other=["a", "b"]))


def test_in_a_column_transformer(emb_dir):
    pd = pytest.importorskip("pandas")
    from sklearn.compose import ColumnTransformer

    rows = imdb_like(60, seed=3)
    df = pd.DataFrame(rows)
    text = make_pipeline(PrivatizeText("madlib", 1e9, embedding=str(emb_dir)), CountVectorizer())
    for column in ("review", ["review"]):  # a Series, then a one-column DataFrame
        ct = ColumnTransformer([("text", text, column)], remainder="drop")
        assert ct.fit_transform(df).shape[0] == 60


# scikit-learn's check_estimator(PrivatizeText()) runs ONE check (check_estimator_cloneable):
# the estimator's tags say it takes no 2-d numeric array (input_tags.two_d_array=False), and
# scikit-learn then stops ("Can't test estimator ... which requires input of type ..."),
# because every later generic check feeds numeric 2-d X. The checks that test the estimator
# API itself, not numeric behaviour, apply and are run here one by one. Not applicable:
#   check_transformer_general / _data_not_an_array / check_fit2d_* / check_fit1d / dtype and
#   NaN/inf checks / check_n_features_in* / check_estimators_pickle(readonly_memmap) /
#   check_methods_sample_order_invariance / check_dict_unchanged / check_fit_idempotent /
#   check_transformer_preserve_dtypes / sample_weight checks: they feed numeric arrays (a text
#   transformer refuses them) or compare numeric output with allclose. Their text versions are
#   the tests above (pickling, cloning, pipelines, column inputs).
APPLICABLE = (
    "check_no_attributes_set_in_init",
    "check_get_params_invariance",
    "check_set_params",
    "check_parameters_default_constructible",
    "check_estimator_cloneable",
    "check_estimator_repr",
    "check_estimators_overwrite_params",
    "check_dont_overwrite_parameters",
    "check_do_not_raise_errors_in_init_or_set_params",
    "check_estimator_tags_renamed",
    "check_valid_tag_types",
    "check_estimators_fit_returns_self",
    "check_mixin_order",
    "check_fit_check_is_fitted",
    "check_requires_y_none",
)


def test_check_estimator_runs_one_check_and_says_why():
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = check_estimator(PrivatizeText(), on_fail=None)
    assert [r["check_name"] for r in results] == ["check_estimator_cloneable"]
    assert any("2darray" in str(w.message) or "requires input" in str(w.message) for w in caught)


@pytest.mark.filterwarnings("ignore::deniable.NotPrivateWarning")
@pytest.mark.parametrize("name", APPLICABLE)
def test_estimator_checks(name):
    from sklearn.utils import estimator_checks

    check = getattr(estimator_checks, name, None)
    if check is None:
        pytest.skip(f"{name} is not in this scikit-learn")
    try:
        check("PrivatizeText", PrivatizeText())
    except TypeError:
        check(PrivatizeText())
