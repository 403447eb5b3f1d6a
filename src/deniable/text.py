"""Tokenization that round-trips exactly, and the case policy.

A *word* is a maximal run of Unicode letters and digits (``[^\\W_]+``). Everything
between words (spaces, punctuation, apostrophes, line breaks, emoji) is a
*separator* and is never changed. ``split(text)`` returns the separators and words
interleaved, and ``"".join(parts) == text`` always.
"""

from __future__ import annotations

import re

__all__ = ["WORD_PATTERN", "apply_case", "join", "split", "words"]

WORD_PATTERN = re.compile(r"([^\W_]+)")


def split(text: str) -> list[str]:
    """``[sep0, word1, sep1, word2, ..., sepN]``: words at odd positions."""
    return WORD_PATTERN.split(text)


def words(text: str) -> list[str]:
    """The word tokens of ``text``, in order."""
    return WORD_PATTERN.findall(text)


def join(parts: list[str]) -> str:
    """Inverse of :func:`split`."""
    return "".join(parts)


def apply_case(template: str, word: str) -> str:
    """Give ``word`` the case pattern of ``template``.

    ALL CAPS (two or more cased letters, all upper) -> upper; Title -> first letter
    upper; anything else -> ``word`` unchanged.
    """
    if template.islower() or not any(c.isalpha() for c in template):
        return word
    if template.isupper() and sum(c.isalpha() for c in template) > 1:
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word
