"""Bag-of-words releases of record files: what ``deniable bow privatize`` runs, as library calls.

Owns the steps from files to a release: the public vocabulary (a word list, or the
embedding's most frequent words), the bin map (its frequency prior counted from a public
corpus, or from the private input itself on an explicit opt-in that leaks), the privatizer
with the map's assumption recorded, and the release of every record of a file. May import
bow's other modules, records (the one reader of documents) and the embedding loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..mechanisms._options import Option
from .compress import BinMap, identity_bin_map, make_bin_map
from .noise import TwoSidedGeometric
from .pipeline import BowPrivatizer, release_version
from .records import iter_documents
from .release import BowRelease, NoiseReport
from .syntf import SYNTF_OPTIONS, SynTF, neighbour_similarity
from .vectorize import BowVectorizer, Vocabulary, count_words, resolve_stop_words

__all__ = ["RELEASES", "file_bin_map", "file_privatizer", "public_vocabulary", "release_file", "syntf_release_file"]

#: The releases ``deniable bow privatize --mechanism`` offers, each with its declared options
#: (the command reads a release's flags through them; LPLP's are the command's own flags).
RELEASES: dict[str, tuple[Option, ...]] = {"lplp": (), "syntf": SYNTF_OPTIONS}


def _embedding(path: str | None) -> Any:
    from ..embedding import load_embedding

    return load_embedding(path)


def public_vocabulary(path: str | None, size: int, stop_words: str, embedding: str | None) -> Vocabulary:
    """The word list at ``path`` (public), else the ``size`` most frequent words of ``embedding``
    (None: the built-in GloVe); ``stop_words`` (english or none) are left out."""
    resolve_stop_words(stop_words)
    if path is not None:
        return Vocabulary.from_file(path, stop_words=stop_words)
    return Vocabulary.from_embedding(_embedding(embedding), size=size, stop_words=stop_words)


def file_bin_map(
    strategy: str,
    vocabulary: Vocabulary,
    n_bins: int,
    *,
    seed: int,
    public_corpus: str | None = None,
    public_column: str | None = None,
    private_input: str | None = None,
    column: str | None = None,
    format: str | None = None,
    batch_size: int = 1000,
    show_progress: bool | None = None,
    embedding: str | None = None,
) -> BinMap:
    """The bin map of ``strategy``; for ``frequency`` with the word counts of ``public_corpus``
    (its ``public_column``) as the prior, or of ``private_input`` (its ``column``; NOT private:
    the release is then private only conditionally on this map); ``semantic`` clusters
    ``embedding`` (None: the built-in GloVe)."""
    frequencies = None
    source = None
    if public_corpus:
        docs = iter_documents(public_corpus, column=public_column, batch_size=batch_size, show_progress=show_progress)
        frequencies = count_words(docs, vocabulary)
        source = f"public corpus {Path(public_corpus).name}"
    elif private_input is not None:
        docs = iter_documents(
            private_input, column=column, format=format, batch_size=batch_size, show_progress=show_progress
        )
        frequencies = count_words(docs, vocabulary)
        source = "private data (NOT private: the release is private only conditionally on this map)"
    emb = _embedding(embedding) if strategy == "semantic" else None
    return make_bin_map(
        strategy, vocabulary, n_bins, seed=seed, frequencies=frequencies, frequency_source=source, embedding=emb
    )


def file_privatizer(
    vocabulary: Vocabulary,
    mechanism: TwoSidedGeometric,
    bin_map: BinMap,
    *,
    group: int,
    max_memory: int,
    map_from_data: bool,
) -> BowPrivatizer:
    """The privatizer of a file's release, recording what its bin map assumes."""
    params: dict[str, Any] = {
        "map_assumption": (
            "the bin map was computed from the private documents (leaks)"
            if map_from_data
            else "the vocabulary and bin map are data-independent (public sources or a seed)"
        ),
    }
    return BowPrivatizer(
        BowVectorizer(vocabulary), mechanism, bin_map, group=group, max_memory=max_memory, params=params
    )


def release_file(
    privatizer: BowPrivatizer,
    path: str,
    rng: np.random.Generator,
    *,
    column: str | None = None,
    format: str | None = None,
    batch_size: int = 1000,
    seeded: bool = False,
    show_progress: bool | None = None,
) -> tuple[BowRelease, NoiseReport]:
    """The release of every record of ``path`` (row ``j`` is record ``j``; a record without text is
    an empty document) and its noise report (computed from the PRIVATE counts: not for release)."""
    batches = iter_documents(path, column=column, format=format, batch_size=batch_size, show_progress=show_progress)
    return privatizer.release(batches, rng, seeded=seeded, batch_size_hint=batch_size)


def syntf_release_file(
    vocabulary: Vocabulary,
    path: str,
    epsilon: float,
    rng: np.random.Generator,
    *,
    length: int = 100,
    neighbours: int = 0,
    embedding: str | None = None,
    column: str | None = None,
    format: str | None = None,
    batch_size: int = 1000,
    seeded: bool = False,
    show_progress: bool | None = None,
) -> BowRelease:
    """SynTF's release of every record of ``path``: row ``j`` is record ``j``'s synthetic vector of
    ``length`` terms over the public ``vocabulary`` (one column per word: no bins), epsilon-DP
    between any two documents. ``neighbours`` > 0: the public similarity of each word's nearest
    neighbours in ``embedding`` (None: the built-in GloVe); 0: the identity."""
    similarity = neighbour_similarity(vocabulary, neighbours, _embedding(embedding)) if neighbours else None
    mech = SynTF(epsilon, length, similarity=similarity)
    vectorizer = BowVectorizer(vocabulary)
    rows = []
    for batch in iter_documents(path, column=column, format=format, batch_size=batch_size, show_progress=show_progress):
        rows.append(mech.privatize(vectorizer.transform(list(batch)), rng))
    v = vocabulary.size
    matrix = sp.csr_matrix(sp.vstack(rows, format="csr")) if rows else sp.csr_matrix((0, v), dtype=np.int32)
    params: dict[str, Any] = {
        **mech.describe(),
        "similarity": f"public: {neighbours} nearest embedding neighbours" if neighbours else "identity",
        "rows": "row j = document j (a synthetic vector of length terms)",
        "tokenizer": vectorizer.tokenizer,
        "noise_generator": "seeded (NOT private: the draws can be recomputed)"
        if seeded
        else "ChaCha20 keyed from os.urandom",
        "deniable_version": release_version(),
    }
    return BowRelease(matrix, identity_bin_map(v), vocabulary, params)
