"""``oov="drop"``: a dropped word leaves no visible slot, punctuation included (issue 27).

The rule is :func:`deniable.text.close_gap`, used by ``Tokenizer.render(drop=...)``, which is
the one path the Privatizer takes.
"""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from deniable import Embedding, Privatizer
from deniable.text import WORD_PATTERN, Tokenizer, close_gap
from fake_mechanisms import Shift

VOCAB = ["a", "b", "c"]
TOK: Tokenizer = Embedding(VOCAB, np.eye(3, dtype=np.float32)).tokenizer

#: Separators as they occur between words of ordinary prose.
NATURAL = [" ", ", ", "; ", ": ", ". ", "! ", "? ", " (", ") ", " - ", "\n", ".\n", ' "', '" ', "-", "/", "'"]
#: What a slot left by a dropped word looks like; none of these can occur in a text built from NATURAL.
SLOT_MARKS = re.compile(r"[,;:.!?]\s*[,;:.!?)]|\(\s*[,;:.!?)]|[ ]{2}|^\s*[,;:)]|[,;:(-]\s*$")


def _drop(texts: list[str]) -> list[str]:
    doc = TOK.tokenize(texts)
    return TOK.render(doc, np.maximum(doc.ids, 0), case="lower", drop=~doc.known)


@st.composite
def prose(draw: st.DrawFn) -> str:
    """Words (known a/b/c or unknown zzz/qqq) between natural separators."""
    n = draw(st.integers(1, 8))
    words = draw(st.lists(st.sampled_from(["a", "b", "c", "zzz", "qqq"]), min_size=n, max_size=n))
    seps = draw(st.lists(st.sampled_from(NATURAL), min_size=n - 1, max_size=n - 1))
    end = draw(st.sampled_from(["", ".", "!", ")"]))
    text = words[0] + "".join(s + w for s, w in zip(seps, words[1:], strict=True)) + end
    return text


@settings(max_examples=400, deadline=None)
@given(prose())
def test_no_slot_marks_in_prose(text: str) -> None:
    (out,) = _drop([text])
    assert not SLOT_MARKS.search(out), (text, out)
    assert [w for w in WORD_PATTERN.split(out)[1::2]] == [w for w in WORD_PATTERN.split(text)[1::2] if w in VOCAB]


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=40), st.data())
def test_any_text_keeps_its_words_and_joins_none(text: str, data: st.DataObject) -> None:
    """Any text, any drop mask: the kept words come out in order, never glued together, and
    only separator characters are removed (one space is the only thing ever added)."""
    doc = TOK.tokenize([text])
    n = len(doc.tokens)
    drop = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    (out,) = TOK.render(doc, np.zeros(n, dtype=np.int64), case="keep", verbatim=~drop, drop=drop)
    kept = [t for t, d in zip(doc.tokens, drop.tolist(), strict=True) if not d]
    assert WORD_PATTERN.split(out)[1::2] == kept
    assert set(out) <= set(text) | {" "}


@settings(max_examples=200, deadline=None)
@given(prose(), st.sampled_from(["zzz", "qqqqqqqqqqqq", "x"]))
def test_the_rule_never_depends_on_the_dropped_word(text: str, other: str) -> None:
    assert _drop([text]) == _drop([text.replace("zzz", other)])


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=" ,.;:!?()-'\"\n\t", max_size=6), st.text(alphabet=" ,.;:!?()-'\"\n\t", max_size=6))
def test_close_gap_removes_only(left: str, right: str) -> None:
    out = close_gap(left, right)
    assert out  # two kept words are never joined
    if out != " ":
        assert len(out) <= len(left + right)
        it = iter(left + right)
        assert all(ch in it for ch in out)  # a subsequence: nothing added, nothing reordered


def test_examples_from_issue_27() -> None:
    texts = ["a, zzz, b", "(zzz)", "a (zzz) b", "a, zzz.", "zzz, b", "a zzz\nb", 'c "a" zzz "b" c', '"zzz" a']
    assert _drop(texts) == [
        "a, b",
        "",
        "a b",
        "a.",
        "b",
        "a\nb",
        'c "a" "b" c',  # closing and opening quotes facing each other are not an empty pair
        "a",
    ]


def test_the_privatizer_takes_the_same_path() -> None:
    texts = ["a, zzz, b", "c (qqq) a.", "zzz, b"]
    p = Privatizer(Shift(TOK.embedding, shift=0), oov="drop", case="lower")
    assert p.privatize_batch(texts) == _drop(texts)
