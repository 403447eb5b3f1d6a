"""A scikit-learn CountVectorizer with a fixed (public) vocabulary as the release's vectorizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deniable import InvalidParameterError
from deniable.bow import BowPrivatizer, BowVectorizer, TwoSidedGeometric, Vocabulary, load_release, random_bin_map

pytest.importorskip("sklearn")
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer  # noqa: E402

WORDS = ["rocket", "orbit", "launch", "orbit launch", "foo_bar", "hockey", "a", "42"]
DOCS = [
    "Rocket launch into ORBIT; orbit launch again",
    None,
    "foo_bar and a 42 hockey hockey",
    "",
    "nothing in the vocabulary",
]


def test_adapter_counts_equal_sklearn_transform_and_release_runs(tmp_path: Path) -> None:
    cv = CountVectorizer(vocabulary=WORDS, ngram_range=(1, 2))
    vec = BowVectorizer.from_sklearn(cv)
    assert not hasattr(cv, "vocabulary_")  # the user's vectorizer is not modified
    assert vec.vocabulary.words == tuple(WORDS)
    expected = cv.transform([d or "" for d in DOCS]).toarray()
    np.testing.assert_array_equal(vec.transform(DOCS).toarray(), expected)

    bins = random_bin_map(len(WORDS), 3, seed=1)
    priv = BowPrivatizer(vec, TwoSidedGeometric(1000.0, 1.0), bins)  # noiseless: the release is the counts
    release, report = priv.release([DOCS[:2], DOCS[2:]], np.random.default_rng(0), seeded=True)
    np.testing.assert_array_equal(release.matrix.toarray(), bins.apply(expected).toarray())
    assert report.tokens_counted == expected.sum()
    loaded = load_release(release.save(tmp_path / "rel"))
    assert "scikit-learn CountVectorizer" in loaded.params["tokenizer"]
    assert loaded.vocabulary.words == tuple(WORDS)


def test_adapter_gives_the_same_release_as_the_builtin_vectorizer() -> None:
    words = ["rocket", "orbit", "launch", "hockey", "game"]
    docs = ["Rocket launch, orbit!", None, "hockey game game", ""]
    mech = TwoSidedGeometric(1.0, 1.0)
    ours, _ = BowPrivatizer(BowVectorizer(Vocabulary(words)), mech).privatize_batches([docs], np.random.default_rng(5))
    theirs, _ = BowPrivatizer(BowVectorizer.from_sklearn(CountVectorizer(vocabulary=words)), mech).privatize_batches(
        [docs], np.random.default_rng(5)
    )
    np.testing.assert_array_equal(ours.toarray(), theirs.toarray())


def test_adapter_refuses_a_vocabulary_learned_from_the_data() -> None:
    fitted = CountVectorizer().fit(["private words only the data owner knows"])
    with pytest.raises(InvalidParameterError, match="leaks") as err:
        BowVectorizer.from_sklearn(fitted)
    assert "private words" not in str(err.value)
    with pytest.raises(InvalidParameterError, match="vocabulary="):
        BowVectorizer.from_sklearn(CountVectorizer())
    with pytest.raises(InvalidParameterError, match="raw counts"):
        BowVectorizer.from_sklearn(TfidfVectorizer(vocabulary=["rocket"]))
    with pytest.raises(InvalidParameterError, match="content"):
        BowVectorizer.from_sklearn(CountVectorizer(vocabulary=["rocket"], input="filename"))
    with pytest.raises(InvalidParameterError, match="indices"):
        BowVectorizer.from_sklearn(CountVectorizer(vocabulary={"rocket": 0, "orbit": 5}))
