"""The Tokenizer: batched lookup, exact round trip, the drop rule and the case policies."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deniable import Embedding, InvalidParameterError
from deniable.text import MARKS, SENTENCE_END, Tokenizer, capitalize, is_word, lookup_key, split, word_mask, words

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
    assert capitalize("ǰ") == "J\u030c"  # its capital is J + a combining mark: one word, looked up as ǰ
    assert tok.tokenize(["J\u030c"]).ids.tolist() == [VOCAB.index("ǰ")]


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


# -- combining marks and Unicode normalization (issue 40) ---------------------------------------


def test_a_decomposed_accent_stays_inside_its_word() -> None:
    # before: "nai\u0308ve" split into "nai" + separator "\u0308" + "ve"
    assert words("nai\u0308ve cafe\u0301 x") == ["nai\u0308ve", "cafe\u0301", "x"]
    assert words("na\u0308ive") == ["na\u0308ive"]
    assert words("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]  # Devanagari vowel signs (Mc/Mn) and virama
    assert split(" \u0301e") == [" \u0301", "e", ""]  # a word never starts with a mark
    assert is_word("nai\u0308ve") and not is_word("\u0301e") and not is_word("a_b")


def test_lookup_is_on_the_nfc_form() -> None:
    emb = Embedding(["naïve", "café", "the"], np.eye(3, dtype=np.float32))
    doc = emb.tokenizer.tokenize(["nai\u0308ve NAI\u0308VE naïve Cafe\u0301 the"])
    assert doc.ids.tolist() == [0, 0, 0, 1, 2]
    assert lookup_key("nai\u0308ve") == "naïve" and lookup_key("NAI\u0308VE", True) == "naïve"
    assert lookup_key("na\u0308ive") == "n\u00e4ive"  # the spelling is ä, not ï


def test_the_restricted_vocabulary_keeps_letters_and_digits_only() -> None:
    # an entry with a combining mark is one word for the tokenizer, but restrict_to_words keeps
    # what it always kept (the default vocabulary's fingerprint does not move)
    assert word_mask(["naïve", "nai\u0308ve", "a_b", ""]).tolist() == [True, False, False, False]


def test_the_mark_class_is_every_mark_of_this_python() -> None:
    import sys
    import unicodedata

    marks = {cp for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp))[0] == "M"}
    pattern = re.compile(f"[{MARKS}]")
    found = {cp for cp in range(sys.maxunicode + 1) if not 0xD800 <= cp <= 0xDFFF and pattern.match(chr(cp))}
    assert found == marks


@settings(max_examples=200, deadline=None)
@given(t=st.text(alphabet=st.characters(categories=["L", "N", "M", "Zs", "P"]), max_size=30))
def test_nfd_and_nfc_texts_have_the_same_words(t: str) -> None:
    import unicodedata

    nfc, nfd = unicodedata.normalize("NFC", t), unicodedata.normalize("NFD", t)
    assert [lookup_key(w) for w in words(nfd)] == [lookup_key(w) for w in words(nfc)]
