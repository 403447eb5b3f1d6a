"""The Tokenizer: batched lookup, exact round trip, the drop rule and the case policies."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deniable import Embedding, InvalidParameterError
from deniable.text import SENTENCE_END, Tokenizer, capitalize, split, words

VOCAB = ["the", "hockey", "soccer", "nasa", "esa", "ǰ", "ß"]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Embedding(VOCAB, np.eye(len(VOCAB), dtype=np.float32)).tokenizer


def test_tokenizer_is_built_once_per_embedding() -> None:
    emb = Embedding(VOCAB, np.eye(len(VOCAB), dtype=np.float32))
    assert emb.tokenizer is emb.tokenizer and emb.tokenizer.fold_case


def test_tokenize_batches_lookup_with_case_folding(tok: Tokenizer) -> None:
    doc = tok.tokenize(["The HOCKEY, zzz!", "", "nasa"])
    assert doc.tokens == ["The", "HOCKEY", "zzz", "nasa"]
    assert doc.offsets.tolist() == [0, 3, 3, 4]
    assert doc.ids.tolist() == [0, 1, -1, 3]
    assert doc.parts[0] == split("The HOCKEY, zzz!")


def test_tokenize_rejects_a_lone_string_without_echoing_it(tok: Tokenizer) -> None:
    with pytest.raises(InvalidParameterError, match="texts") as info:
        tok.tokenize("hockey game")  # type: ignore[arg-type]
    assert "hockey" not in str(info.value)
    with pytest.raises(InvalidParameterError, match=r"texts\[1\]"):
        tok.tokenize(["ok", 3])  # type: ignore[list-item]


texts = st.lists(
    st.one_of(
        st.sampled_from(VOCAB + [w.upper() for w in VOCAB] + ["Hockey", "zzz", "Zzz"]),
        st.sampled_from([" ", "  ", "\r\n", "\n", ". ", "! ", "?\n", ".", ",", "—", "😀", "_", '." ']),
        st.text(max_size=4),
    ),
    max_size=25,
).map("".join)


@settings(max_examples=150, deadline=None)
@given(t=texts)
def test_render_keeps_every_separator_and_the_word_count(tok: Tokenizer, t: str) -> None:
    doc = tok.tokenize([t, t])
    rng = np.random.default_rng(0)
    new = rng.integers(0, len(VOCAB), size=len(doc.tokens))
    for case in ("sentence", "lower", "keep"):
        out = tok.render(doc, new, case=case)
        assert [split(o)[0::2] for o in out] == [split(t)[0::2]] * 2  # separators byte for byte
        assert all(len(words(o)) == len(words(t)) for o in out)
    assert tok.render(doc, doc.ids, verbatim=np.ones(len(doc.tokens), bool)) == [t, t]


def _reference_sentence_case(t: str, tok: Tokenizer) -> str:
    parts = split(t)
    for j in range(1, len(parts), 2):
        w = parts[j].lower()
        start = j == 1 or SENTENCE_END.search(parts[j - 1]) is not None
        parts[j] = capitalize(w) if start else w
    return "".join(parts)


@settings(max_examples=150, deadline=None)
@given(t=texts.filter(lambda t: all(w.lower() in VOCAB for w in words(t) + words(t.upper()))))
def test_sentence_case_depends_on_separators_only(tok: Tokenizer, t: str) -> None:
    doc = tok.tokenize([t, t.lower(), t.upper()])
    out = tok.render(doc, doc.ids, case="sentence")
    assert out[0] == out[1] == out[2]
    assert out[0] == _reference_sentence_case(t, tok)
    assert tok.render(doc, doc.ids, case="lower")[0] == "".join(
        p.lower() if i % 2 else p for i, p in enumerate(split(t))
    )


def test_sentence_case_examples(tok: Tokenizer) -> None:
    doc = tok.tokenize(["NASA. the ESA! hockey?\nthe soccer.the", '"the hockey." the'])
    assert tok.render(doc, doc.ids) == ["Nasa. The esa! Hockey?\nThe soccer.the", '"The hockey." The']
    assert capitalize("ǰ") == "ǰ"  # its capital is J + a combining mark: two tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the zzz hockey", "the hockey"),
        ("the zzz", "the"),
        ("zzz hockey", "hockey"),
        ("zzz, hockey", "hockey"),
        ("the, zzz, hockey", "the, hockey"),
        ("the (zzz) hockey", "the hockey"),
        ("(zzz)", ""),
        ("the, zzz.", "the."),
        ("the. zzz, hockey", "the. hockey"),
        ("the (zzz, hockey)", "the (hockey)"),
        ("(the, zzz) hockey", "(the) hockey"),
        ('the "zzz" hockey', "the hockey"),
        ("the-zzz hockey", "the hockey"),
        ("the(zzz)hockey", "the hockey"),
        ("the, zzz", "the"),
        ("the zzz\nhockey", "the\nhockey"),
        ("the\nzzz hockey", "the\nhockey"),
        ("the zzz qqq hockey", "the hockey"),
        ("zzz qqq", ""),
        ("the zzz. Qqq hockey", "the. hockey"),
        ("the\tzzz  hockey", "the  hockey"),
    ],
)
def test_drop_leaves_no_empty_slot(tok: Tokenizer, text: str, expected: str) -> None:
    doc = tok.tokenize([text, "the hockey"])
    out = tok.render(doc, np.maximum(doc.ids, 0), case="lower", drop=~doc.known)
    assert out == [expected, "the hockey"]
    assert not re.search(r"\s\s", out[0]) or re.search(r"\s\s", text.replace("zzz", "").replace("qqq", ""))


def test_drop_then_sentence_case_reads_the_merged_separator(tok: Tokenizer) -> None:
    doc = tok.tokenize(["zzz the hockey. zzz the"])
    assert tok.render(doc, np.maximum(doc.ids, 0), drop=~doc.known) == ["The hockey. The"]


def test_case_sensitive_vocabulary_is_exact(tok: Tokenizer) -> None:
    emb = Embedding(["Paris", "paris"], np.eye(2, dtype=np.float32))
    t = emb.tokenizer
    assert not t.fold_case
    doc = t.tokenize(["paris PARIS Paris"])
    assert doc.ids.tolist() == [1, -1, 0]
    assert t.render(doc, [1, 0, 0], verbatim=~doc.known) == ["paris PARIS Paris"]


def test_render_validates(tok: Tokenizer) -> None:
    doc = tok.tokenize(["the hockey"])
    with pytest.raises(InvalidParameterError, match="ids"):
        tok.render(doc, [0])
    with pytest.raises(InvalidParameterError, match="ids"):
        tok.render(doc, [0, 99])
    with pytest.raises(InvalidParameterError, match="case"):
        tok.render(doc, [0, 1], case="title")
