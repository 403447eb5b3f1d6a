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

``SynTF`` (Weggenmann and Kerschbaum 2018) is the other release of this room: synthetic
term-frequency vectors drawn by the exponential mechanism, epsilon-DP between any two
documents (``deniable.bow.syntf``).
"""

from __future__ import annotations

from . import compress, noise, pipeline, release, syntf, vectorize
from .compress import *  # noqa: F403
from .noise import *  # noqa: F403
from .pipeline import *  # noqa: F403
from .release import *  # noqa: F403
from .syntf import *  # noqa: F403
from .vectorize import *  # noqa: F403

# every public name of the submodules, listed once: in the submodule's own ``__all__``
__all__ = [*compress.__all__, *noise.__all__, *pipeline.__all__, *release.__all__, *syntf.__all__, *vectorize.__all__]
