"""Limited-precision local privacy for bags of words (SPEC section 6, seed 002).

For analysts who need only word counts (topic models, LSA, search statistics), not
text. Documents become count vectors over a public vocabulary, are compressed
(features summed into ``k`` bins, optionally documents summed in groups of ``g``),
and every coordinate receives independent two-sided geometric noise with
``alpha = exp(-eps / N)``: count vectors within l1 distance ``N`` of each other are
``eps``-indistinguishable (``(N, eps)``-LPLP).

Quick start::

    from deniable import bow
    vocab = bow.Vocabulary.from_embedding(size=20000)          # public (GloVe order)
    bins = bow.frequency_bin_map(vocab.frequencies, 500)       # public prior
    priv = bow.BowPrivatizer(bow.BowVectorizer(vocab),
                             bow.TwoSidedGeometric(epsilon=1.0, precision=10, clamp=True),
                             bins)
    release, report = priv.release([["first document", "second one"]])
    release.save("out/")

See ``docs/bow.md`` for the guarantee, what is released, and measured utility.
"""

from __future__ import annotations

from .compress import (
    STRATEGIES,
    BinMap,
    frequency_bin_map,
    group_rows,
    identity_bin_map,
    make_bin_map,
    random_bin_map,
    semantic_bin_map,
)
from .noise import (
    TwoSidedGeometric,
    lplp_alpha,
    lplp_max_log_ratio,
    lplp_privacy_loss,
    sample_two_sided_geometric,
    two_sided_geometric_logpmf,
    two_sided_geometric_pmf,
)
from .pipeline import BowPrivatizer, estimate_release_bytes
from .release import BowRelease, NoiseReport, load_release
from .vectorize import BowVectorizer, Vocabulary, count_words, zipf_weights

__all__ = [
    "STRATEGIES",
    "BinMap",
    "BowPrivatizer",
    "BowRelease",
    "BowVectorizer",
    "NoiseReport",
    "TwoSidedGeometric",
    "Vocabulary",
    "count_words",
    "estimate_release_bytes",
    "frequency_bin_map",
    "group_rows",
    "identity_bin_map",
    "load_release",
    "lplp_alpha",
    "lplp_max_log_ratio",
    "lplp_privacy_loss",
    "make_bin_map",
    "random_bin_map",
    "sample_two_sided_geometric",
    "semantic_bin_map",
    "two_sided_geometric_logpmf",
    "two_sided_geometric_pmf",
    "zipf_weights",
]
