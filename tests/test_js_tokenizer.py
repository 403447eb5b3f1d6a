"""The JavaScript client splits, re-joins, folds case and sentence-cases exactly as deniable.text.

Generated Unicode (accents, combining marks, CJK, emoji, RTL, digits of many scripts,
every kind of whitespace, the underscore) always runs; >= 10,000 real lines (IMDb,
20 Newsgroups, SST) run when the shared data is there.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator

import numpy as np
import pytest

from _device_helpers import Harness
from conftest import SHARED_DATA
from deniable import Embedding
from deniable.text import lookup_key, split

#: Pieces the generated texts are made of (a word or a separator each, or parts of one).
ALPHABET = [
    *"abcXYZ019 _-.,!?;:'\"()[]{}/\\\t\n\r",
    *"éÉàçñøÅßœÆ",  # precomposed accents
    "e\u0301",
    "a\u0308",
    "n\u0303",
    "\u0301",  # combining marks (inside a word after a letter or digit, else a separator)
    "i\u0308",
    "नमस्ते",  # Devanagari: vowel signs (Mc) and a virama (Mn) inside the word
    *"日本語中文한국어ひらがなカタカナ〇一二",  # CJK, Hangul, kana, CJK numerals
    "😀",
    "👍🏽",
    "👨\u200d👩\u200d👧",
    "🇫🇷",
    "\u2764\ufe0f",  # emoji, skin tone, ZWJ family, flag, variation selector
    *"שלום עולם",
    *"مرحبا بالعالم",
    "\u064b",
    "\u05b8",
    "\u200f",
    "\u200e",  # Hebrew, Arabic, harakat/niqqud, RTL/LTR marks
    *"٠١٢٣۴۵६७໑௮１２３",
    "²",
    "½",
    "Ⅻ",  # digits of other scripts, superscripts, fractions, Roman numerals
    *"ΑΣΣΟΣσςİıǅǆﬁŉ",  # Greek sigma, dotted I, titlecase digraphs, ligatures
    "\u00a0",
    "\u2028",
    "\u2029",
    "\u3000",
    "\u200b",
    "\ufeff",
    "\x1c",
    "\x1f",
    "\x85",
    "\x0b",
    "\x0c",  # every kind of (non-)space
    ". ",
    "! ",
    "?\n",
    ".\u201d ",
    ".) ",
    "'s",
    "n't",
    "https://example.org/a_b?x=1",
    "\U0001d400\U0001d7d8",  # astral letters and digits
]


def generated(n: int, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(0, 40))
        out.append("".join(ALPHABET[i] for i in rng.integers(0, len(ALPHABET), k)))
    out += ["", " ", "_", "a", "\u0301", "😀", "e\u0301te\u0301"]
    return out


def real_lines(limit: int) -> Iterator[str]:
    """Lines of IMDb reviews, 20 Newsgroups posts and SST sentences, up to ``limit`` of each source."""
    for path in (SHARED_DATA / "imdb" / "test.jsonl.gz", SHARED_DATA / "20newsgroups" / "20news-19997.jsonl.gz"):
        n = 0
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for row in fh:
                for line in json.loads(row)["text"].splitlines(keepends=True):
                    yield line
                    n += 1
                if n >= limit:
                    break
    sst = SHARED_DATA / "sst" / "stsa.fine.test"
    with open(sst, encoding="utf-8", errors="surrogateescape") as fh:
        for i, line in enumerate(fh):
            if i >= limit:
                break
            yield line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def check_split(js: Harness, texts: list[str]) -> None:
    got = js("split", texts=texts)["parts"]
    for i, text in enumerate(texts):
        assert got[i] == split(text), f"texts[{i}] splits differently"
        assert "".join(got[i]) == text


def test_generated_unicode_splits_identically(js: Harness) -> None:
    check_split(js, generated(5000))


def test_a_known_split(js: Harness) -> None:
    text = "Café e\u0301 snake_case 日本 😀 שלום, ٣٤!"
    assert js("split", texts=[text])["parts"][0] == [
        "",
        "Café",
        " ",
        "e\u0301",
        " ",
        "snake",
        "_",
        "case",
        " ",
        "日本",
        " 😀 ",
        "שלום",
        ", ",
        "٣٤",
        "!",
    ]


def test_case_folding_matches_python(js: Harness) -> None:
    tokens = [t for text in generated(2000, seed=3) for t in split(text)[1::2]]
    assert js("lower", tokens=tokens)["lower"] == [t.lower() for t in tokens]


def test_lookup_keys_match_python(js: Harness) -> None:
    # NFC after case folding: a decomposed accent is the same word as the composed one
    tokens = [t for text in generated(2000, seed=5) for t in split(text)[1::2]] + ["NAI\u0308VE", "nai\u0308ve"]
    assert js("key", tokens=tokens)["keys"] == [lookup_key(t, True) for t in tokens]


def test_sentence_case_matches_the_tokenizer(js: Harness) -> None:
    out_words = ["hockey", "élan", "ßtraße", "ǆemal", "ﬁx", "σοφία", "日本", "ŉa", "i̇x", "x2", "٣"]
    vocab = [w for w in out_words if w.isalnum()]
    emb = Embedding(vocab, np.eye(len(vocab), dtype=np.float32), name="case")
    tok = emb.tokenizer
    texts = generated(3000, seed=11)
    doc = tok.tokenize(texts)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, len(vocab), len(doc.tokens))
    expected = tok.render(doc, ids, case="sentence")
    outs = [vocab[i] for i in ids.tolist()]
    got = js("render", parts=doc.parts, words=outs, offsets=doc.offsets.tolist())["texts"]
    assert got == expected


def test_real_lines_split_identically(js: Harness) -> None:
    if not (SHARED_DATA / "imdb").is_dir():
        pytest.skip(f"no shared data at {SHARED_DATA}")
    lines = list(real_lines(4000))
    assert len(lines) >= 10_000
    for s in range(0, len(lines), 2000):
        check_split(js, lines[s : s + 2000])
