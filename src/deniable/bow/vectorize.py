"""Count vectors of documents over a fixed (public) vocabulary, sparse end to end.

Tokenization is the project's own: :data:`deniable.text.WORD_PATTERN` (a letter or digit,
then letters, digits and combining marks) on the lower-cased, NFC-normalized text, the same
tokens the word-level mechanisms see. A token that is not in the vocabulary is not counted.

The vocabulary is part of what is released (it names the columns), so it must not be
learned from the private documents: the default is the most frequent words of the
built-in GloVe embedding (a public corpus), optionally minus English stop words. Its
word order is that corpus's frequency order, which :func:`zipf_weights` turns into a
public frequency prior (used by the frequency-balanced bin map and to read topics
over bins back as words).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from .._errors import DataError, InvalidParameterError
from .._validation import check_int
from ..text import is_word, lookup_key
from ..text import words as word_tokens

if TYPE_CHECKING:
    from ..embedding import Embedding

__all__ = [
    "TOKENIZER",
    "BowVectorizer",
    "Vocabulary",
    "count_words",
    "resolve_stop_words",
    "zipf_weights",
]

StopWords = str | Iterable[str] | None


def resolve_stop_words(stop_words: StopWords) -> frozenset[str]:
    """``"english"`` (the 318-word Glasgow list), ``None`` (none) or an iterable of words."""
    if stop_words is None:
        return frozenset()
    if isinstance(stop_words, str):
        if stop_words == "english":
            from ._stop_words import ENGLISH_STOP_WORDS

            return ENGLISH_STOP_WORDS
        if stop_words == "none":
            return frozenset()
        raise InvalidParameterError("stop_words", stop_words, "'english', 'none', None or a list of words")
    return frozenset(w.lower() for w in stop_words)


def zipf_weights(ranks: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """A frequency prior from frequency ranks (0 = most frequent): ``1 / (rank + 1)``."""
    r = np.asarray(ranks, dtype=np.float64)
    return 1.0 / (r + 1.0)


class Vocabulary:
    """The columns of the count matrix: a list of distinct words and a public frequency prior.

    Parameters
    ----------
    words
        Distinct words (lower-case: documents are lower-cased before counting).
    frequencies
        Non-negative public frequency (or weight) of each word, used by the
        frequency-balanced bin map and to decompress topics; default Zipf weights
        by position (the list is assumed to be in frequency order).
    source
        A short description of where the words and frequencies come from (saved
        with a release). Never the private documents unless you accept the leak.
    """

    words: tuple[str, ...]
    frequencies: npt.NDArray[np.float64]
    source: str

    def __init__(self, words: Sequence[str], frequencies: npt.ArrayLike | None = None, source: str = "user") -> None:
        ws = tuple(words)
        if not ws:
            raise InvalidParameterError("words", "[]", "a non-empty list of words")
        if any(not isinstance(w, str) or not w for w in ws):
            raise InvalidParameterError("words", "(a non-string or empty entry)", "non-empty strings")
        if len(set(ws)) != len(ws):
            raise InvalidParameterError("words", "(duplicates)", "distinct words")
        if frequencies is None:
            freq = zipf_weights(np.arange(len(ws)))
        else:
            freq = np.array(frequencies, dtype=np.float64).ravel()
            if freq.shape != (len(ws),) or not np.all(np.isfinite(freq)) or np.any(freq < 0):
                raise InvalidParameterError(
                    "frequencies",
                    f"array of shape {freq.shape}",
                    f"{len(ws)} finite non-negative numbers (one per word)",
                )
        freq.setflags(write=False)
        self.words = ws
        self.frequencies = freq
        self.source = str(source)
        self._index = {w: i for i, w in enumerate(ws)}

    def __repr__(self) -> str:
        return f"Vocabulary({self.size} words, source={self.source!r})"

    @property
    def size(self) -> int:
        """Number of words (columns)."""
        return len(self.words)

    def __len__(self) -> int:
        return len(self.words)

    @property
    def index_of(self) -> dict[str, int]:
        """word -> column."""
        return self._index

    # -- constructors --------------------------------------------------------
    @classmethod
    def from_embedding(
        cls,
        embedding: Embedding | None = None,
        size: int = 20000,
        *,
        stop_words: StopWords = "english",
        alphabetic: bool = True,
        min_length: int = 2,
    ) -> Vocabulary:
        """The ``size`` most frequent usable words of a frequency-ordered embedding.

        Words are kept in the embedding's order; ``alphabetic`` keeps only words made
        of letters (drops numbers and punctuation entries), ``min_length`` drops very
        short ones, ``stop_words`` drops function words. The prior is Zipf over the
        word's rank *in the embedding* (so it reflects the public corpus).
        """
        from ..embedding import load_embedding

        n = check_int("size", size, minimum=1)
        check_int("min_length", min_length, minimum=1)
        emb = load_embedding() if embedding is None else embedding
        stops = resolve_stop_words(stop_words)
        words: list[str] = []
        ranks: list[int] = []
        seen: set[str] = set()
        for rank, w in enumerate(emb.vocabulary):
            if len(words) >= n:
                break
            lw = w.lower()
            if lw in seen or lw in stops or len(lw) < min_length:
                continue
            if alphabetic and not lw.isalpha():
                continue
            if not is_word(lw):  # could never be produced by the tokenizer
                continue
            seen.add(lw)
            words.append(lw)
            ranks.append(rank)
        if not words:
            raise DataError("the embedding has no usable words for a vocabulary")
        return cls(tuple(words), zipf_weights(ranks), source=f"embedding:{emb.name}[top {len(words)}]")

    @classmethod
    def from_file(cls, path: str | Path, *, stop_words: StopWords = None) -> Vocabulary:
        """A public word list: one word per line, optionally ``word<TAB>count``.

        Without counts the lines are taken to be in frequency order (Zipf prior).
        """
        p = Path(path)
        if not p.is_file():
            raise DataError(f"vocabulary file {p} does not exist or is not a file")
        stops = resolve_stop_words(stop_words)
        words: list[str] = []
        counts: list[float] = []
        has_counts: bool | None = None
        seen: set[str] = set()
        with open(p, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                parts = line.split("\t")
                if has_counts is None:
                    has_counts = len(parts) >= 2
                w = parts[0].strip().lower()
                if has_counts:
                    try:
                        c = float(parts[1])
                    except (IndexError, ValueError):
                        raise DataError(f"{p} line {lineno}: expected word<TAB>count") from None
                    counts.append(c)
                if w in seen or w in stops or not w:
                    if has_counts:
                        counts.pop()
                    continue
                seen.add(w)
                words.append(w)
        if not words:
            raise DataError(f"vocabulary file {p} has no words")
        freq = np.asarray(counts, dtype=np.float64) if has_counts else None
        return cls(tuple(words), freq, source=f"file:{p.name}")

    def with_frequencies(self, frequencies: npt.ArrayLike, source: str) -> Vocabulary:
        """The same words with another frequency prior (e.g. counts from a public corpus)."""
        return Vocabulary(self.words, np.asarray(frequencies, dtype=np.float64), source=source)


def _tokens(text: str) -> list[str]:
    return word_tokens(lookup_key(text, fold_case=True))  # lower-cased, NFC: the tokenizer's lookup keys


#: How the built-in vectorizer tokenizes (saved in a release's ``params.json``).
TOKENIZER = (
    "lower-cased and NFC-normalized, deniable.text.WORD_PATTERN (a letter or digit, then letters, digits and "
    "combining marks); words outside the vocabulary are not counted"
)


@dataclass(frozen=True, eq=False)
class BowVectorizer:
    """Documents -> sparse ``(n_docs, vocabulary.size)`` int32 count matrix (CSR).

    Every document gives exactly one row, in input order; ``None`` or an empty
    string gives an all-zero row.

    Parameters
    ----------
    vocabulary
        The public columns.
    analyzer
        ``text -> tokens`` (or n-grams) replacing the built-in tokenizer; tokens not in
        the vocabulary are not counted. :meth:`from_sklearn` sets it.
    binary
        Count each vocabulary token at most once per document.
    tokenizer
        Description of the tokenization, saved with a release.
    """

    vocabulary: Vocabulary
    analyzer: Callable[[str], Sequence[str]] | None = None
    binary: bool = False
    tokenizer: str = TOKENIZER

    @classmethod
    def from_sklearn(cls, vectorizer: Any, frequencies: npt.ArrayLike | None = None) -> BowVectorizer:
        """Adapt a scikit-learn ``CountVectorizer`` built with a fixed ``vocabulary=``.

        The counts are those of ``vectorizer.transform`` (same analyzer: token
        pattern, lower-casing, stop words, n-grams, ``binary``), with the columns in
        the vectorizer's order; the release is then made as with the built-in
        vectorizer. A vectorizer whose vocabulary was *learned* by ``fit`` is refused:
        the vocabulary names the released columns and is not noised, so one learned
        from the private documents leaks which words they contain. ``frequencies``
        is a public prior per column (default: Zipf over the column order). The
        vectorizer is not modified.
        """
        try:
            from sklearn.base import clone
            from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
        except ImportError:  # pragma: no cover - the caller passes a scikit-learn object
            raise InvalidParameterError(
                "vectorizer", type(vectorizer).__name__, "a scikit-learn CountVectorizer (needs scikit-learn)"
            ) from None
        if not isinstance(vectorizer, CountVectorizer) or isinstance(vectorizer, TfidfVectorizer):
            raise InvalidParameterError(
                "vectorizer", type(vectorizer).__name__, "a scikit-learn CountVectorizer (raw counts)"
            )
        if vectorizer.vocabulary is None:
            fitted = hasattr(vectorizer, "vocabulary_")
            raise InvalidParameterError(
                "vectorizer",
                "CountVectorizer fitted without vocabulary=" if fitted else "CountVectorizer(vocabulary=None)",
                "a CountVectorizer built with a fixed, public vocabulary=[...]: a vocabulary learned by fit from "
                "the private documents names the released columns, unnoised, and so leaks which words they contain",
            )
        if vectorizer.input != "content":
            raise InvalidParameterError("vectorizer.input", vectorizer.input, "'content' (documents are strings)")
        fixed = clone(vectorizer)
        try:
            fixed.fit([])  # validates the fixed vocabulary and its indices; learns nothing
        except ValueError:
            raise InvalidParameterError(
                "vectorizer.vocabulary", "(invalid)", "distinct terms with indices 0..n-1"
            ) from None
        mapping: Mapping[str, int] = fixed.vocabulary_
        words = sorted(mapping, key=mapping.__getitem__)
        vocab = Vocabulary(words, frequencies, source=f"scikit-learn CountVectorizer vocabulary ({len(words)} terms)")
        how = vectorizer.analyzer if isinstance(vectorizer.analyzer, str) else "a callable"
        cfg = f"analyzer={how}, ngram_range={tuple(vectorizer.ngram_range)}, lowercase={bool(vectorizer.lowercase)}"
        if how == "word" and vectorizer.tokenizer is not None:
            cfg += ", tokenizer=a callable"
        elif how == "word":
            cfg += f", token_pattern={vectorizer.token_pattern!r}"
        return cls(
            vocab,
            analyzer=fixed.build_analyzer(),
            binary=bool(vectorizer.binary),
            tokenizer=f"scikit-learn CountVectorizer ({cfg}, binary={bool(vectorizer.binary)}); "
            "terms outside the vocabulary are not counted",
        )

    @property
    def n_features(self) -> int:
        """Number of columns."""
        return self.vocabulary.size

    def transform(self, texts: Sequence[str | None]) -> sp.csr_matrix:
        """Count matrix of a batch of documents."""
        return self.transform_with_stats(texts)[0]

    def transform_with_stats(self, texts: Sequence[str | None]) -> tuple[sp.csr_matrix, int, int]:
        """(count matrix, word tokens seen, tokens counted = in the vocabulary) of a batch."""
        n = len(texts)
        lengths = np.zeros(n, dtype=np.int64)
        tokens: list[str] = []
        custom = self.analyzer
        for i, t in enumerate(texts):  # one regex call per document; no per-token Python code
            if t is None:
                continue
            if not isinstance(t, str):
                raise DataError(f"document {i} of the batch is a {type(t).__name__}, not text")
            toks = _tokens(t) if custom is None else list(custom(t))
            lengths[i] = len(toks)
            tokens.extend(toks)
        get = self.vocabulary.index_of.get
        ids = np.fromiter(map(get, tokens, itertools.repeat(-1)), dtype=np.int64, count=len(tokens))
        rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
        keep = ids >= 0
        rows, cols = rows[keep], ids[keep]
        mat = sp.csr_matrix(
            (np.ones(cols.size, dtype=np.int32), (rows, cols)), shape=(n, self.n_features), dtype=np.int32
        )
        mat.sum_duplicates()
        mat.sort_indices()
        if self.binary:
            mat.data[:] = 1
        return mat, len(tokens), int(cols.size)

    def transform_batches(self, batches: Iterable[Sequence[str | None]]) -> Iterator[sp.csr_matrix]:
        """Stream: one count matrix per batch of documents."""
        for batch in batches:
            yield self.transform(batch)


def count_words(batches: Iterable[Sequence[str | None]], vocabulary: Vocabulary) -> npt.NDArray[np.float64]:
    """Total count of each vocabulary word over a stream of documents.

    Use it on a *public* corpus to get a frequency prior
    (:meth:`Vocabulary.with_frequencies`). On the private documents themselves the
    result is not private.
    """
    vec = BowVectorizer(vocabulary)
    total = np.zeros(vocabulary.size, dtype=np.float64)
    for mat in vec.transform_batches(batches):
        total += np.asarray(mat.sum(axis=0), dtype=np.float64).ravel()
    return total
