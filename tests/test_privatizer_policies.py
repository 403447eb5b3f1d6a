"""Privatizer policies (issue 13): private defaults, explicit opt-ins that warn, no trace of a dropped slot."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deniable import Embedding, InvalidParameterError, MultivariateLaplace, NotPrivateWarning, Privatizer
from deniable.mechanisms.base import Mechanism
from deniable.text import words
from fake_mechanisms import Shift


def _emb(*vocab: str) -> Embedding:
    return Embedding(list(vocab), np.eye(len(vocab), dtype=np.float32))


def _quiet(mech: Mechanism, **kw: str) -> Privatizer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return Privatizer(mech, **kw)  # type: ignore[arg-type]


def test_default_oov_is_a_random_vocabulary_word() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotPrivateWarning)
        p = Privatizer(Shift(_emb("hockey", "soccer")))
    assert (p.oov, p.case) == ("random", "sentence")
    out, stats = p.privatize_batch_with_stats(["Zzzsecret qqq hockey"], np.random.default_rng(0))
    assert "zzzsecret" not in out[0].lower() and "qqq" not in out[0].lower()
    assert {w.lower() for w in words(out[0])} <= {"hockey", "soccer"} and len(words(out[0])) == 3
    assert (stats.tokens, stats.oov, stats.changed) == (3, 2, 1)


@pytest.mark.parametrize(("kw", "match"), [({"oov": "keep"}, "oov=keep"), ({"case": "keep"}, "case=keep")])
def test_keep_policies_are_opt_ins_that_warn_once(kw: dict[str, str], match: str) -> None:
    with pytest.warns(NotPrivateWarning, match=match) as record:
        Privatizer(Shift(_emb("hockey", "soccer")), **kw)  # type: ignore[arg-type]
    assert len(record) == 1 and record[0].filename == __file__


def test_case_keep_copies_nothing_for_a_case_sensitive_vocabulary() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotPrivateWarning)
        Privatizer(Shift(_emb("Paris", "paris")), case="keep")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hockey zzz hockey", "Soccer soccer"),
        ("hockey zzz", "Soccer"),
        ("zzz hockey", "Soccer"),
        ("zzz, hockey", "Soccer"),  # the comma left dangling at the start goes too
        ("hockey, zzz, hockey", "Soccer, soccer"),
        ("hockey (zzz) hockey", "Soccer soccer"),
        ("hockey zzz\nhockey", "Soccer\nsoccer"),
    ],
)
def test_oov_drop_leaves_no_empty_slot(text: str, expected: str) -> None:
    assert Privatizer(Shift(_emb("hockey", "soccer")), oov="drop").privatize(text) == expected


@pytest.mark.parametrize("case", ["sentence", "lower"])
def test_input_case_does_not_reach_the_output(case: str) -> None:
    p = Privatizer(MultivariateLaplace(_emb("nasa", "esa", "rocket", "the"), epsilon=0.5), case=case)
    for a, b in [("NASA rocket", "nasa rocket"), ("the NASA. ROCKET", "The nasa. Rocket"), ("Esa", "ESA")]:
        assert p.privatize(a, np.random.default_rng(3)) == p.privatize(b, np.random.default_rng(3))


def test_unchanged_words_follow_the_policy_too() -> None:
    p = Privatizer(MultivariateLaplace(_emb("nasa", "esa", "the"), epsilon=1e9))
    assert p.privatize("the NASA. ESA the! nasa") == "The nasa. Esa the! Nasa"
    assert _quiet(p.mechanism, case="lower").privatize("The NASA. ESA") == "the nasa. esa"
    assert _quiet(p.mechanism, case="keep").privatize("the NASA. ESA") == "the NASA. ESA"


def test_describe_names_what_is_not_protected() -> None:
    mech = Shift(_emb("hockey", "soccer"))
    d = Privatizer(mech).describe()
    assert (d["oov"], d["case"], d["vocabulary_size"]) == ("random", "sentence", 2)
    assert d["not_protected"] == ["separators (spaces, punctuation, line breaks, emoji) and the number of word tokens"]
    keep = _quiet(mech, oov="keep", case="keep").describe()["not_protected"]
    assert any("oov=keep" in s for s in keep) and any("case=keep" in s for s in keep)
    assert any("oov=drop" in s for s in Privatizer(mech, oov="drop").describe()["not_protected"])
    exact = _quiet(Shift(_emb("Paris", "paris")), case="keep").describe()
    assert exact["case_sensitive_vocabulary"] and not any("case" in s for s in exact["not_protected"])


def test_a_lone_string_is_not_a_batch() -> None:
    p = Privatizer(Shift(_emb("hockey", "soccer")))
    with pytest.raises(InvalidParameterError, match="texts") as info:
        p.privatize_batch("hockey game")  # type: ignore[arg-type]
    assert "hockey" not in str(info.value)
    with pytest.raises(InvalidParameterError, match="text"):
        p.privatize(["hockey"])  # type: ignore[arg-type]


def test_random_state_per_call_follows_the_rule() -> None:
    p = Privatizer(MultivariateLaplace(_emb("nasa", "esa", "rocket", "the"), epsilon=0.1))
    with pytest.warns(NotPrivateWarning, match="NOT private") as record:
        a = p.privatize_batch(["the rocket"] * 20, 7)
        p.privatize("the rocket", 7)
        p.privatize_batch_with_stats(["the rocket"], 7)
    assert [w.filename for w in record] == [__file__] * 3
    with pytest.warns(NotPrivateWarning):
        assert p.privatize_batch(["the rocket"] * 20, 7) == a
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotPrivateWarning)
        p.privatize("the rocket", np.random.default_rng(1))
        p.privatize("the rocket")


@pytest.fixture(scope="module")
def punctuated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved embedding whose vocabulary is mostly entries that are not one word."""
    vocab = ["the", "game", "and", ",", ".", "—", "2.87", "n't", "e-mail", "u.s.", "'s", "--", "a_b", "x y", "ǰ"]
    vec = np.random.default_rng(0).normal(size=(len(vocab), 3)).astype(np.float32)
    folder = tmp_path_factory.mktemp("emb") / "punct"
    Embedding(vocab, vec).save(folder)
    return folder


texts = st.lists(
    st.one_of(
        st.sampled_from(["the", "The", "GAME", "and", "zzz", "Ǉ", "ǰ"]),
        st.sampled_from([" ", ". ", ", ", "\n", "—", "'", "_"]),
        st.text(max_size=3),
    ),
    max_size=20,
).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(t=texts, case=st.sampled_from(["sentence", "lower", "keep"]), oov=st.sampled_from(["random", "keep"]))
def test_output_has_as_many_words_as_the_input(punctuated: Path, t: str, case: str, oov: str) -> None:
    from deniable import load_embedding

    emb = load_embedding(punctuated)
    p = _quiet(MultivariateLaplace(emb, epsilon=0.01), oov=oov, case=case)
    out = p.privatize_batch([t, "and and and the the of"], np.random.default_rng(0))
    assert len(words(out[0])) == len(words(t))
    assert len(words(out[1])) == 6
