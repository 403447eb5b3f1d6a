"""Tokenization that round-trips exactly, vocabulary lookup, and the case policy.

A *word* is a Unicode letter or digit (``[^\\W_]``, a character for which
:meth:`str.isalnum` is true) followed by a maximal run of letters, digits and combining
marks (categories Mn, Mc, Me: a decomposed accent, ``na\\u0308ive``, or a Devanagari vowel
sign stays inside its word). Everything between words (spaces, punctuation, apostrophes,
line breaks, emoji) is a *separator* and is never changed. A word is looked up in its
NFC form (:func:`lookup_key`), so ``na\\u0308ive`` and ``naïve`` are the same word.
``split(text)`` returns the separators and words interleaved, and
``"".join(parts) == text`` always.

:class:`Tokenizer` is the one place that turns texts into vocabulary ids and ids back
into texts: splitting and joining, lookup (case folded for an all-lower-case
vocabulary, batched), dropping a token without leaving a trace of its slot, and the
case of the output words (:data:`CASE_POLICIES`). The module functions
(:func:`split`, :func:`words`, :func:`join`, :func:`apply_case`, :data:`WORD_PATTERN`)
are the same rules for callers that need no vocabulary. No other module defines its
own word pattern.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ._errors import InvalidParameterError
from ._validation import check_choice

if TYPE_CHECKING:
    from .embedding import Vocabulary

__all__ = [
    "CASE_POLICIES",
    "SENTENCE_END",
    "WORD_PATTERN",
    "Tokenized",
    "Tokenizer",
    "apply_case",
    "capitalize",
    "close_gap",
    "is_word",
    "join",
    "lookup_key",
    "split",
    "word_mask",
    "words",
]


def _mark_class() -> str:
    """The combining marks (categories Mn, Mc, Me) of this Python's Unicode data, as a regex class body.

    Marks live in planes 0, 1 and 14 only (planes 2-3 hold CJK ideographs, 15-16 private
    use); ``tests/test_tokenizer.py`` checks that against a scan of every code point.
    """
    category = unicodedata.category
    marks = [cp for cp in itertools.chain(range(0x20000), range(0xE0000, 0xE1000)) if category(chr(cp))[0] == "M"]
    runs: list[list[int]] = []
    for cp in marks:
        if runs and runs[-1][1] == cp - 1:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp])
    body = [f"\\U{a:08x}-\\U{b:08x}" for a, b in runs]
    return "".join(body)


#: The combining marks a word may hold after its first character (a regex class body).
MARKS = _mark_class()
_NFC = functools.partial(unicodedata.normalize, "NFC")
#: One word token: a letter or digit, then letters, digits and combining marks.
WORD_PATTERN = re.compile(rf"([^\W_](?:[^\W_]|[{MARKS}])*)")
_ONE_WORD = re.compile(rf"[^\W_](?:[^\W_]|[{MARKS}])*")

#: A separator that ends a sentence: ``.``, ``!`` or ``?`` (optionally followed by closing
#: quotes or brackets) and then whitespace. Under ``case="sentence"`` the next word gets a capital.
SENTENCE_END = re.compile(r"[.!?][\"'\u2019\u201d\u00bb)\]]*\s")

#: How output words are cased (for an all-lower-case vocabulary), see :meth:`Tokenizer.render`.
CASE_POLICIES = ("sentence", "lower", "keep")


def split(text: str) -> list[str]:
    """``[sep0, word1, sep1, word2, ..., sepN]``: words at odd positions."""
    return WORD_PATTERN.split(text)


def words(text: str) -> list[str]:
    """The word tokens of ``text``, in order."""
    return WORD_PATTERN.findall(text)


def join(parts: list[str]) -> str:
    """Inverse of :func:`split`."""
    return "".join(parts)


def is_word(s: str) -> bool:
    """True when :func:`words` reads ``s`` back as exactly one word (``s`` is one token)."""
    return s.isalnum() or _ONE_WORD.fullmatch(s) is not None  # isalnum: the same characters as [^\W_]


def word_mask(strings: Iterable[str]) -> npt.NDArray[np.bool_]:
    """Which strings are one word of letters and digits only (``str.isalnum``), as a boolean array (one C pass).

    Every such string is one word (:func:`is_word`); a word that also holds combining marks
    is left out, so :meth:`~deniable.embedding.Vocabulary.restrict_to_words` keeps the
    vocabulary it always kept (GloVe 6B: 336,158 entries) while the tokenizer reads such a
    token as one word (then out of that vocabulary).
    """
    items = strings if isinstance(strings, Sequence) else list(strings)
    return np.fromiter(map(str.isalnum, items), dtype=bool, count=len(items))


def lookup_key(token: str, fold_case: bool = False) -> str:
    """The form of a word token that is looked up in a vocabulary: NFC (lower-cased first with ``fold_case``).

    ``na\\u0308ive`` (decomposed) and ``naïve`` (composed) are the same word; an ASCII token is
    its own key.
    """
    return _NFC(token.lower() if fold_case else token)


def apply_case(template: str, word: str) -> str:
    """Give ``word`` the case pattern of ``template``.

    ALL CAPS (two or more cased letters, all upper) -> upper; Title -> first letter
    upper; anything else -> ``word`` unchanged. A result that would not read back as
    one word (a few letters upper-case to a letter plus a combining mark) stays ``word``.
    """
    if template.islower() or not any(c.isalpha() for c in template):
        return word
    if template.isupper() and sum(c.isalpha() for c in template) > 1:
        out = word.upper()
        return out if is_word(out) else word
    if template[:1].isupper():
        return capitalize(word)
    return word


def capitalize(word: str) -> str:
    """``word`` with its first character upper case (the rest unchanged), if that stays one word."""
    out = word[:1].upper() + word[1:]
    return out if is_word(out) else word


@dataclass(eq=False)
class Tokenized:
    """A batch of texts split into words, with their vocabulary ids.

    ``parts[t]`` is :func:`split` of text ``t``; ``tokens`` are all the word tokens of
    the batch in order (text ``t`` owns ``tokens[offsets[t]:offsets[t + 1]]``); ``ids``
    are their vocabulary ids, ``-1`` for a token that is not in the vocabulary.
    """

    parts: list[list[str]]
    tokens: list[str]
    offsets: npt.NDArray[np.int64]
    ids: npt.NDArray[np.int64]

    @property
    def known(self) -> npt.NDArray[np.bool_]:
        """Which tokens are in the vocabulary."""
        return self.ids >= 0


class Tokenizer:
    """Texts <-> vocabulary ids for one embedding (get it as ``embedding.tokenizer``).

    Lookup ignores case when the vocabulary is all lower case (``Hockey`` -> ``hockey``)
    and is exact otherwise. Splitting and joining round-trip exactly; only the word
    tokens that :meth:`render` is told to replace or drop change.
    """

    def __init__(self, embedding: Vocabulary) -> None:
        self.embedding = embedding
        #: True when lookups (and output words) are lower case.
        self.fold_case: bool = embedding.is_lowercase
        self._index = embedding.index_of
        self._words = np.array(embedding.vocabulary, dtype=object)

    def __repr__(self) -> str:
        return f"Tokenizer({self.embedding.name!r}, fold_case={self.fold_case})"

    # -- text -> ids --------------------------------------------------------
    def lookup(self, tokens: Sequence[str]) -> npt.NDArray[np.int64]:
        """Ids of word tokens (:func:`lookup_key`: NFC, case folded for a lower-case vocabulary); -1 when absent."""
        keys: Iterable[str] = map(str.lower, tokens) if self.fold_case else tokens
        keys = map(_NFC, keys)  # C calls only; an ASCII key is itself
        return np.fromiter(map(self._index.get, keys, itertools.repeat(-1)), dtype=np.int64, count=len(tokens))

    def tokenize(self, texts: Sequence[str], name: str = "texts") -> Tokenized:
        """Split every text and look all its word tokens up in one batch.

        ``texts`` must be a sequence of ``str`` (a lone ``str`` is rejected: it is not a
        batch); an error names ``texts[i]``, never the text.
        """
        if isinstance(texts, str | bytes):
            raise InvalidParameterError(name, type(texts).__name__, "a list of str (one str per text), not one str")
        parts: list[list[str]] = []
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InvalidParameterError(
                    f"{name}[{i}]", type(t).__name__, "a str (None/NaN cells must be handled by the caller)"
                )
            parts.append(WORD_PATTERN.split(t))
        tokens = list(itertools.chain.from_iterable(p[1::2] for p in parts))
        counts = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)) // 2
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return Tokenized(parts, tokens, offsets, self.lookup(tokens))

    # -- ids -> text --------------------------------------------------------
    def render(
        self,
        doc: Tokenized,
        ids: npt.ArrayLike,
        *,
        case: str = "sentence",
        verbatim: npt.ArrayLike | None = None,
        drop: npt.ArrayLike | None = None,
    ) -> list[str]:
        """Texts of ``doc`` with word token ``k`` replaced by vocabulary word ``ids[k]``.

        Parameters
        ----------
        doc
            What :meth:`tokenize` returned (not modified).
        ids
            One output id per token of ``doc`` (ignored where ``verbatim`` or ``drop``).
        case
            How replaced words are cased when the vocabulary is all lower case:
            ``"sentence"`` -- lower case, except the first word of a text and the first
            word after a sentence end (:data:`SENTENCE_END`: ``.``, ``!`` or ``?`` then
            whitespace) which get a capital: a function of the separators only;
            ``"lower"`` -- lower case; ``"keep"`` -- each word takes the case pattern of
            the token it replaces (:func:`apply_case`; this copies information from the
            input). For a case-sensitive vocabulary the vocabulary word is used as is
            under every policy.
        verbatim
            Boolean mask of tokens emitted exactly as in the input.
        drop
            Boolean mask of tokens removed. A dropped token goes so that no empty slot
            marks where it was (:func:`close_gap` is the rule): the marks joined to it
            (hyphens, slashes, apostrophes), an empty bracket or quote pair that held
            only it, of two clause marks meeting where it was the weaker one
            (``,`` < ``;:-`` < ``.!?``; the right one on a tie), a clause mark facing a
            bracket, clause marks left dangling at the start or end of a text (a
            sentence end is kept at the end), and one whitespace run (the one before
            it, unless that run holds a line break and the one after does not). Two
            kept words are never joined. Examples: ``"a zzz b"`` -> ``"a b"``,
            ``"a, zzz, b"`` -> ``"a, b"``, ``"a (zzz) b"`` -> ``"a b"``,
            ``"a, zzz."`` -> ``"a."``, ``"zzz, b"`` -> ``"b"``, ``"a zzz\\nb"`` -> ``"a\\nb"``.
        """
        check_choice("case", case, CASE_POLICIES)
        n = len(doc.tokens)
        out_ids = np.asarray(ids, dtype=np.int64)
        if out_ids.shape != (n,):
            raise InvalidParameterError("ids", out_ids.shape, f"one id per token, shape ({n},)")
        keep = np.zeros(n, dtype=bool) if verbatim is None else np.asarray(verbatim, dtype=bool)
        gone = np.zeros(n, dtype=bool) if drop is None else np.asarray(drop, dtype=bool)
        replace = ~(keep | gone)
        chosen = out_ids[replace]
        if chosen.size and (chosen.min() < 0 or chosen.max() >= len(self._words)):
            raise InvalidParameterError("ids", "out of range", f"word ids in [0, {len(self._words) - 1}]")
        out = np.empty(n, dtype=object)
        out[replace] = self._words[out_ids[replace]]
        if keep.any():
            out[keep] = np.asarray(doc.tokens, dtype=object)[keep]
        if case == "keep" and self.fold_case:
            _transfer_case(doc.tokens, out, replace)
        parts = [p.copy() for p in doc.parts]
        offsets = doc.offsets
        if gone.any():
            parts, out, replace, offsets = _drop_tokens(parts, out, replace, offsets, gone)
        if case == "sentence" and self.fold_case:
            _sentence_case(parts, out, replace, offsets)
        new = out.tolist()
        for t, p in enumerate(parts):
            a, b = int(offsets[t]), int(offsets[t + 1])
            if b > a:
                p[1::2] = new[a:b]
        return ["".join(p) for p in parts]


def _transfer_case(tokens: list[str], out: npt.NDArray[np.object_], replace: npt.NDArray[np.bool_]) -> None:
    """``case="keep"``: replaced words take the case pattern of the input token (only where it has one)."""
    cased = np.fromiter(map(str.islower, tokens), dtype=bool, count=len(tokens))
    for k in np.flatnonzero(replace & ~cased).tolist():
        out[k] = apply_case(tokens[k], out[k])


def _sentence_case(
    parts: list[list[str]],
    out: npt.NDArray[np.object_],
    replace: npt.NDArray[np.bool_],
    offsets: npt.NDArray[np.int64],
) -> None:
    """``case="sentence"``: capitalize replaced words that start a text or follow a sentence end."""
    before = list(itertools.chain.from_iterable(p[0:-1:2] for p in parts))  # the separator before each word
    ends = {s: SENTENCE_END.search(s) is not None for s in set(before)}
    start = np.fromiter(map(ends.__getitem__, before), dtype=bool, count=len(before))
    firsts = offsets[:-1][offsets[1:] > offsets[:-1]]
    start[firsts] = True
    for k in np.flatnonzero(start & replace).tolist():
        out[k] = capitalize(out[k])


def _has_break(s: str) -> bool:
    return "\n" in s or "\r" in s


#: Marks joined to a word (no space between): they go with a dropped word (``well-zzz`` -> ``well``).
_GLUE = "-\u2010\u2011\u2013\u2014/'\u2019_&+@#"
#: Bracket and quote pairs: an empty pair left where a dropped word was goes too.
_PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">", '"': '"', "\u201c": "\u201d", "\u2018": "\u2019", "\u00ab": "\u00bb"}
_OPENERS = frozenset("([{<\u201c\u2018\u00ab")
_CLOSERS = frozenset(")]}>\u201d\u2019\u00bb")
#: Clause marks and their strength: of two meeting where a word was dropped, the weaker goes.
_CLAUSE_RANK = {",": 1, ";": 2, ":": 2, "-": 2, "\u2013": 2, "\u2014": 2, ".": 3, "!": 3, "?": 3, "\u2026": 3}


def _one_run(x: str, y: str) -> str:
    """Of two whitespace runs, the one kept: the second, unless only the first holds a line break."""
    if not x or not y:
        return x or y
    return x if _has_break(x) and not _has_break(y) else y


def _opens(before: str, at_start: bool) -> bool:
    """A straight quote opens when a space, an opening bracket or the start of the text is before it."""
    return (at_start and not before) or (before[-1:].isspace() or before[-1:] in _OPENERS)


def close_gap(left: str, right: str, *, at_start: bool = False, at_end: bool = False) -> str:
    """The one separator that replaces ``left + dropped word + right`` (the rule of ``render(drop=...)``).

    ``at_start``/``at_end``: no kept word before/after the gap in its text. Only separator
    characters are removed, never added, except one space where two kept words would
    otherwise touch. The result depends on the separators only, never on the dropped word.
    """
    left = left.rstrip(_GLUE)
    right = right.lstrip(_GLUE)
    while True:
        lb = left.rstrip()
        lws = left[len(lb) :]
        rb = right.lstrip()
        rws = right[: len(right) - len(rb)]
        a, b = lb[-1:], rb[:1]
        ra, rb_rank = _CLAUSE_RANK.get(a, 0), _CLAUSE_RANK.get(b, 0)
        take_a = take_b = False
        if a and b and _PAIRS.get(a) == b and (a != '"' or _opens(lb[:-1], at_start)):  # an empty pair
            take_a = take_b = True
        elif at_start and b and (rb_rank or b in _CLOSERS):  # nothing before it to attach to
            take_b = True
        elif at_end and a and (0 < ra < 3 or a in _OPENERS):  # a dangling comma or bracket at the end
            take_a = True
        elif a in _OPENERS and rb_rank:  # "(zzz, b)" -> "(b)"
            take_b = True
        elif ra and (b in _CLOSERS or (rb_rank and ra <= rb_rank)):  # "a, zzz)" -> "a)"; ", zzz." -> "."
            take_a = True
        elif ra and rb_rank:  # ". zzz," -> ". "
            take_b = True
        else:
            break
        if take_a:  # the whitespace runs on either side of the removed mark become one
            body = lb[:-1].rstrip()
            left = body + _one_run(lb[len(body) : -1], lws)
        if take_b:
            rest = rb[1:].lstrip()
            right = _one_run(rws, rb[1 : len(rb) - len(rest)]) + rest
    out = lb + (_one_run(lws, rws) if lws and rws else "") + rb  # one whitespace run goes with the word
    return out if out or at_start or at_end else " "


def _drop_tokens(
    parts: list[list[str]],
    out: npt.NDArray[np.object_],
    replace: npt.NDArray[np.bool_],
    offsets: npt.NDArray[np.int64],
    gone: npt.NDArray[np.bool_],
) -> tuple[list[list[str]], npt.NDArray[np.object_], npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """Remove the dropped tokens and one adjacent whitespace run each; re-index what remains."""
    hit = np.flatnonzero(gone)
    texts = np.searchsorted(offsets, hit, side="right") - 1
    for t in np.unique(texts).tolist():
        p = parts[t]
        a = int(offsets[t])
        seps, toks = p[0::2], p[1::2]
        merged = [seps[0]]
        kept: list[str] = []
        for j, tok in enumerate(toks):
            right = seps[j + 1]
            if gone[a + j]:
                at_end = bool(gone[a + j + 1 : a + len(toks)].all())
                merged[-1] = close_gap(merged[-1], right, at_start=not kept, at_end=at_end)
            else:
                kept.append(tok)
                merged.append(right)
        new = [merged[0]]
        for tok, sep in zip(kept, merged[1:], strict=True):
            new += [tok, sep]
        parts[t] = new
    stay = ~gone
    counts = np.diff(offsets) - np.bincount(texts, minlength=len(parts))
    new_offsets = np.zeros_like(offsets)
    np.cumsum(counts, out=new_offsets[1:])
    return parts, out[stay], replace[stay], new_offsets
