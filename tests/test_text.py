from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deniable import Embedding, InvalidParameterError, MultivariateLaplace, NotPrivateWarning, Privatizer
from deniable.text import apply_case, is_word, join, split, words
from fake_mechanisms import Shift

TOY_WORDS = ["hockey", "soccer", "puck", "goal", "game", "match", "nasa", "esa", "the", "great"]

texts = st.lists(
    st.one_of(
        st.sampled_from(TOY_WORDS + [w.upper() for w in TOY_WORDS] + [w.title() for w in TOY_WORDS]),
        st.sampled_from([" ", "  ", "\r\n", "\n", "\t", ",", "!", "'", "—", "é", "😀", "_", "...", "ß"]),
        st.text(max_size=5),
    ),
    max_size=30,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(t=st.text())
def test_split_join_roundtrip(t: str) -> None:
    parts = split(t)
    assert join(parts) == t
    assert parts[1::2] == words(t)
    assert all(is_word(p) and p[0].isalnum() for p in parts[1::2])
    assert all(not p[:1].isalnum() for p in parts[2::2]) and all(not p[-1:].isalnum() for p in parts[:-1:2])


@pytest.mark.parametrize(
    ("template", "word", "expected"),
    [
        ("hockey", "soccer", "soccer"),
        ("Hockey", "soccer", "Soccer"),
        ("NASA", "esa", "ESA"),
        ("iPhone", "phone", "phone"),
        ("A", "the", "The"),
        ("42", "the", "the"),
    ],
)
def test_apply_case(template: str, word: str, expected: str) -> None:
    assert apply_case(template, word) == expected


@pytest.fixture(scope="module")
def toy() -> Embedding:
    from conftest import make_toy_embedding

    return make_toy_embedding()


@pytest.fixture(scope="module")
def keep_all(toy: Embedding) -> Privatizer:
    """oov=keep and case=keep: today's old defaults, an explicit opt-in now."""
    with pytest.warns(NotPrivateWarning, match="oov=keep and case=keep"):
        return Privatizer(
            MultivariateLaplace(toy, epsilon=1e9), oov="keep", case="keep", random_state=np.random.default_rng(0)
        )


@settings(max_examples=100, deadline=None)
@given(t=texts)
def test_huge_epsilon_returns_the_input_exactly(keep_all: Privatizer, t: str) -> None:
    assert keep_all.privatize(t) == t
    assert keep_all.privatize_batch([t, "", t]) == [t, "", t]


def test_case_pattern_and_separators_are_kept_with_case_keep() -> None:
    emb = Embedding(["hockey", "soccer", "nasa", "esa"], np.eye(4, dtype=np.float32))
    with pytest.warns(NotPrivateWarning, match="case=keep"):
        p = Privatizer(Shift(emb), case="keep")
    assert p.privatize("Hockey, NASA!\r\nhockey") == "Soccer, ESA!\r\nsoccer"


@pytest.mark.parametrize(("oov", "expected"), [("keep", "Soccer zzz, soccer"), ("drop", "Soccer, soccer")])
def test_oov_policies(oov: str, expected: str) -> None:
    emb = Embedding(["hockey", "soccer"], np.eye(2, dtype=np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        p = Privatizer(Shift(emb), oov=oov)
    out, stats = p.privatize_batch_with_stats(["hockey zzz, hockey"], np.random.default_rng(0))
    assert out == [expected]
    assert (stats.tokens, stats.oov, stats.changed) == (3, 1, 2)


def test_oov_random_replaces_with_vocabulary_words() -> None:
    emb = Embedding(["hockey", "soccer"], np.eye(2, dtype=np.float32))
    out = Privatizer(Shift(emb), oov="random", case="lower").privatize("zzz qqq", np.random.default_rng(0))
    assert all(w in ("hockey", "soccer") for w in words(out))


def test_privatizer_validation(toy: Embedding) -> None:
    with pytest.raises(InvalidParameterError, match="oov"):
        Privatizer(MultivariateLaplace(toy, epsilon=1.0), oov="skip")
    with pytest.raises(InvalidParameterError, match="mechanism"):
        Privatizer("madlib")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match=r"texts\[1\]"):
        Privatizer(MultivariateLaplace(toy, epsilon=1.0)).privatize_batch(["ok", None])  # type: ignore[list-item]


@pytest.mark.parametrize("case", ["sentence", "lower", "keep"])
def test_case_sensitive_embedding_is_looked_up_exactly(case: str) -> None:
    emb = Embedding(["Paris", "paris"], np.eye(2, dtype=np.float32))
    assert not emb.is_lowercase
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        p = Privatizer(Shift(emb), oov="keep", case=case)
    assert p.privatize("Paris paris PARIS") == "paris Paris PARIS"  # vocabulary words as is, first one too


def test_seeded_privatizer_warns_at_the_callers_line(toy: Embedding) -> None:
    mech = MultivariateLaplace(toy, epsilon=1.0)
    with pytest.warns(NotPrivateWarning, match="NOT private") as record:
        Privatizer(mech, random_state=1)
    with pytest.warns(NotPrivateWarning, match="oov=keep") as record2:
        Privatizer(mech, oov="keep")
    assert [w.filename for w in record2] == [__file__]
    assert [w.filename for w in record] == [__file__]
    with pytest.raises(TypeError):
        Privatizer(mech, seed=1)  # type: ignore[call-arg]


def test_docs_name_the_real_seed_parameter_and_existing_files() -> None:
    import re
    from pathlib import Path

    import deniable.index

    root = Path(__file__).resolve().parents[1]
    madlib = (root / "docs" / "madlib.md").read_text(encoding="utf-8")
    assert "`seed=`" not in madlib and "random_state=" in madlib
    doc = deniable.index.__doc__ or ""
    linked = re.findall(r"docs/[\w.-]+\.md", doc)
    assert linked and all((root / p).is_file() for p in linked)
    assert "## Why an approximate index keeps the guarantee" in madlib
