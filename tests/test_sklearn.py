"""deniable.sklearn.PrivatizeText: a Pipeline step, clone / pickle round trips, estimator checks."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="needs deniable[sklearn]")
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


# scikit-learn's generic checks assume numeric 2-d X; these are the ones that apply to a
# text transformer (1-d list of str in, list of str out). Skipped, and why:
#   check_transformer_general / _data_not_an_array / check_fit2d_* / check_fit1d / dtype and
#   NaN/inf checks / check_n_features_in* / check_estimators_pickle(readonly_memmap) /
#   check_methods_sample_order_invariance: feed numeric arrays; a text transformer refuses them.
#   check_transformer_preserve_dtypes / check_fit_idempotent: numeric output compared with allclose.
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
)


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
