"""Non-private text transformations, the baselines of the user-level audit (seed 003 Table 3).

Each baseline maps a batch of texts to transformed texts (word tokens of
:func:`deniable.text.words`, lower-cased, joined by spaces); none has a privacy guarantee:

- ``original``: the text unchanged (the words, lower-cased).
- ``nearest``: deterministic substitution: every vocabulary word becomes its nearest other
  word in the embedding (Euclidean); words outside the vocabulary are kept. (In the spirit of
  the "semantic" scrambling of Arampatzis et al. 2015: same meaning, other words, no randomness.)
- ``decoys``: decoy insertion without noise: after every word, with probability ``rate``
  (0.5), a decoy drawn uniformly from the ``frequent`` (1000) most frequent vocabulary words
  is inserted. The user's own words all stay. (In the spirit of Incognito, Masood et al. 2018.)
- ``decoys-noise``: decoy insertion with noise: as ``decoys``, and in addition every original
  word is replaced, with probability ``noise`` (0.25), by a random frequent word.

The randomness (decoys) comes from the generator the caller passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .._validation import check_choice
from ..embedding import Embedding
from ..text import words

__all__ = ["BASELINES", "Baseline", "make_baseline"]

BASELINES = ("original", "nearest", "decoys", "decoys-noise")
#: texts, generator -> transformed texts
Baseline = Callable[[Sequence[str], np.random.Generator], list[str]]


def _lower_words(text: str) -> list[str]:
    return [w.lower() for w in words(text)]


def make_baseline(
    name: str, embedding: Embedding, *, rate: float = 0.5, noise: float = 0.25, frequent: int = 1000
) -> Baseline:
    """The baseline ``name`` (see the module docstring) for ``embedding``."""
    check_choice("baseline", name, BASELINES)
    if name == "original":
        return lambda texts, rng: [" ".join(_lower_words(t)) for t in texts]
    if name == "nearest":
        return _nearest(embedding)
    pool = np.array(embedding.vocabulary[: min(frequent, embedding.size)], dtype=object)
    replace = noise if name == "decoys-noise" else 0.0

    def decoys(texts: Sequence[str], rng: np.random.Generator) -> list[str]:
        out = []
        for t in texts:
            ws = np.array(_lower_words(t), dtype=object)
            if ws.size == 0:
                out.append("")
                continue
            if replace > 0:
                swap = rng.random(ws.size) < replace
                ws[swap] = pool[rng.integers(pool.size, size=int(swap.sum()))]
            extra = rng.random(ws.size) < rate
            d = pool[rng.integers(pool.size, size=ws.size)]
            merged: list[str] = []
            for w, add, decoy in zip(ws.tolist(), extra.tolist(), d.tolist(), strict=True):
                merged += [w, decoy] if add else [w]
            out.append(" ".join(merged))
        return out

    return decoys


def _nearest(embedding: Embedding) -> Baseline:
    from ..index import make_index

    cache: dict[str, str] = {}
    index: list[object] = []
    index_of = embedding.index_of
    fold = embedding.is_lowercase

    def substitute(texts: Sequence[str], rng: np.random.Generator) -> list[str]:
        toks = [_lower_words(t) if fold else words(t) for t in texts]
        todo = sorted({w for ws in toks for w in ws if w in index_of and w not in cache})
        if todo:
            ids = np.array([index_of[w] for w in todo], dtype=np.int64)
            if not index:
                index.append(make_index(embedding, "exact"))
            _, nn = index[0].search(embedding.vectors[ids], 2)  # type: ignore[attr-defined]
            # the nearest other word: the first hit that is not the word itself
            best = np.where(nn[:, 0] == ids, nn[:, 1], nn[:, 0])
            cache.update(zip(todo, embedding.words(best), strict=True))
        return [" ".join(cache.get(w, w) for w in ws) for ws in toks]

    return substitute
