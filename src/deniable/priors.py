"""Public priors over input words: what is believed about a word before its privatized form is read.

A reconstruction attacker (:mod:`deniable.experiments.reconstruction`) guesses
``argmax_w prior(w) * P(M(w) = y)``; the prior is the only thing it knows about the text
besides the mechanism. A posterior decoder (the ``prior`` option of the perturb-then-decode
mechanisms) uses the same priors to decode a noisy vector to its most probable word. Each prior
is declared here once, from public data only, never from the text under attack:

- ``zipf`` (``zipf:S`` for an exponent ``S``, default 1): ``prior(w) ~ 1 / rank(w)^S`` over the
  embedding's row order. GloVe's rows are in corpus-frequency order, so this needs no extra
  data; for an embedding whose rows are not frequency-ordered it is a poor prior.
- ``counts:PATH``: word counts of a public UTF-8 text file (``.gz`` allowed) the user names,
  tokenized with the one tokenizer (:mod:`deniable.text`, the embedding's lookup), plus a
  pseudo-count of 1/2 per vocabulary word so that no word is impossible.
- ``uniform``: every word alike (the maximum-likelihood attacker).
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np
import numpy.typing as npt

from ._errors import DataError, InvalidParameterError
from .embedding import Vocabulary

__all__ = ["PRIORS", "Prior", "counts_prior", "make_prior", "uniform_prior", "zipf_prior"]

#: ``--prior``: the prior sources (``zipf[:S]``, ``counts:PATH``, ``uniform``)
PRIORS = ("zipf", "counts", "uniform")
#: Pseudo-count added to every vocabulary word by ``counts:PATH``
COUNTS_PSEUDO = 0.5
_LINES_PER_BATCH = 20_000


@dataclass(frozen=True, eq=False)
class Prior:
    """A probability per vocabulary id (``probs``, shape ``(V,)``, all > 0, summing to 1) and its source."""

    source: str
    probs: npt.NDArray[np.float64]

    def __post_init__(self) -> None:
        p = np.asarray(self.probs, dtype=np.float64)
        if p.ndim != 1 or p.size == 0 or not np.all(np.isfinite(p)) or np.any(p <= 0):
            raise InvalidParameterError("prior", self.source, "positive finite probabilities, one per vocabulary word")
        p = p / p.sum()
        p.setflags(write=False)
        object.__setattr__(self, "probs", p)

    @property
    def size(self) -> int:
        return int(self.probs.size)

    def log(self) -> npt.NDArray[np.float64]:
        """``log prior(w)`` per vocabulary id."""
        return np.log(self.probs)

    def order(self) -> npt.NDArray[np.int64]:
        """Vocabulary ids from the most to the least probable (ties: lower id first)."""
        return np.argsort(-self.probs, kind="stable").astype(np.int64)


def zipf_prior(vocab: Vocabulary, exponent: float = 1.0) -> Prior:
    """``prior(w) ~ (row(w) + 1)^-exponent``: Zipf over the embedding's (frequency) row order."""
    if not isinstance(exponent, int | float) or isinstance(exponent, bool) or not 0 <= exponent <= 10:
        raise InvalidParameterError("prior", f"zipf:{exponent}", "zipf:S with an exponent S in [0, 10]")
    ranks = np.arange(1, vocab.size + 1, dtype=np.float64)
    return Prior(f"zipf:{float(exponent):g}", ranks ** -float(exponent))


def uniform_prior(vocab: Vocabulary) -> Prior:
    """Every vocabulary word alike."""
    return Prior("uniform", np.ones(vocab.size, dtype=np.float64))


def _lines(fh: IO[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for line in fh:
        batch.append(line)
        if len(batch) >= _LINES_PER_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def counts_prior(vocab: Vocabulary, path: str | Path, pseudo_count: float = COUNTS_PSEUDO) -> Prior:
    """Word counts of the public text file ``path`` (tokenized by ``vocab.tokenizer``) plus ``pseudo_count``.

    The file must be UTF-8 text (``.gz`` read as gzip). It must not be the text under attack: the
    prior is what an attacker could know in advance.
    """
    p = Path(path)
    if not p.is_file():
        raise InvalidParameterError("prior", f"counts:{path}", "counts:PATH with PATH an existing text file")
    if not pseudo_count > 0:
        raise InvalidParameterError("pseudo_count", pseudo_count, "a number > 0")
    counts = np.zeros(vocab.size, dtype=np.float64)
    tokenizer = vocab.tokenizer
    raw: BinaryIO = gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")  # type: ignore[assignment]  # noqa: SIM115
    try:
        with io.TextIOWrapper(raw, encoding="utf-8", errors="strict") as fh:
            for batch in _lines(fh):
                ids = tokenizer.tokenize(batch, name="prior lines").ids
                counts += np.bincount(ids[ids >= 0], minlength=vocab.size)
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        raise DataError(f"prior counts file {p}: not readable UTF-8 text ({type(exc).__name__})") from None
    if not counts.any():
        raise DataError(f"prior counts file {p}: no word of the embedding's vocabulary")
    return Prior(f"counts:{p.name}", counts + float(pseudo_count))


def make_prior(spec: str | Prior, vocab: Vocabulary) -> Prior:
    """The prior ``spec`` names: ``zipf``, ``zipf:S``, ``counts:PATH`` or ``uniform`` (a :class:`Prior` as is)."""
    if isinstance(spec, Prior):
        if spec.size != vocab.size:
            raise InvalidParameterError("prior", spec.source, f"a prior over the {vocab.size:,} vocabulary words")
        return spec
    if not isinstance(spec, str):
        raise InvalidParameterError("prior", type(spec).__name__, "zipf, zipf:S, counts:PATH or uniform")
    kind, _, arg = spec.partition(":")
    if kind == "zipf":
        try:
            exponent = float(arg) if arg else 1.0
        except ValueError:
            raise InvalidParameterError("prior", spec, "zipf:S with a number S") from None
        return zipf_prior(vocab, exponent)
    if kind == "counts" and arg:
        return counts_prior(vocab, arg)
    if kind == "uniform" and not arg:
        return uniform_prior(vocab)
    if kind == "ngram":  # a contextual prior: no probability per word (the decode of madlib / mahalanobis)
        raise InvalidParameterError(
            "prior",
            spec,
            "a prior per word: zipf, zipf:S, counts:PATH or uniform (ngram:PATH is a contextual "
            "prior, decoded jointly per text by madlib and mahalanobis on the server only)",
        )
    raise InvalidParameterError("prior", spec, "zipf, zipf:S, counts:PATH or uniform")
