"""Utility of LPLP bag-of-words releases: LDA topics and LSA + random forest (seed 002's protocol).

For each setting (bin strategy, number of bins ``k``, ``eps``, ``N``) the same sample
of documents is vectorized over the public vocabulary, compressed, noised (clamped at
zero, which LDA needs) and analysed. Three kinds of rows:

- ``reference``: LDA / LSA on the clean, *uncompressed* counts (the non-private
  baseline), plus a second LDA seed on the same data (how much LDA itself varies);
- ``clean``: the clean *compressed* counts (the cost of compression alone);
- ``private``: the noisy compressed counts.

Topics over bins are read back as topics over words by spreading each bin's weight
over its words in proportion to the public frequency prior
(:meth:`BinMap.expand`), then matched one-to-one to the reference topics (Hungarian
assignment on cosine similarity). Metrics: Jaccard similarity of the matched
topics' top words, exclusivity of the top words (share of a word's weight that
falls in the topic, averaged), per-word coherence (mean pairwise NPMI of the top
words, document co-occurrence on the clean documents), and LSA + random-forest
category accuracy on a stratified train/test split (train and test both private).
Each private row also records the signal-to-noise ratio of its release (true counts
l1 / noise l1, from :class:`~deniable.bow.release.NoiseReport`). A private condition
whose clamped release would hold more than ``max_nonzero`` non-zero entries (no or
little compression at small ``eps / N``) is recorded as skipped, not fitted.

scikit-learn (``pip install deniable[eval]``) and, for plots, matplotlib
(``deniable[report]``) are imported only here, on use.

The package: ``_config`` (what is asked: the data sets, :class:`EvalConfig`, the
result columns), ``_measures`` (LDA and the scores of one fit), ``_sweep``
(:func:`run_evaluation`: the order of the fits and their rows) and ``_report`` (the
files, tables and plots). This ``__init__`` only re-exports them.
"""

from __future__ import annotations

from ._config import DATASETS, EVAL_STRATEGIES, KEYS, EvalConfig, load_dataset, load_heldout
from ._measures import (
    chance_jaccard,
    exclusivity,
    fit_lda,
    jaccard_top_words,
    lsa_accuracy,
    majority_accuracy,
    match_topics,
    npmi_coherence,
    require_sklearn,
    top_words,
)
from ._report import markdown_table, plot_results, read_results, summary_tables, write_results
from ._sweep import run_evaluation

__all__ = [
    "DATASETS",
    "EVAL_STRATEGIES",
    "KEYS",
    "EvalConfig",
    "chance_jaccard",
    "exclusivity",
    "fit_lda",
    "jaccard_top_words",
    "load_dataset",
    "load_heldout",
    "lsa_accuracy",
    "majority_accuracy",
    "markdown_table",
    "match_topics",
    "npmi_coherence",
    "plot_results",
    "read_results",
    "require_sklearn",
    "run_evaluation",
    "summary_tables",
    "top_words",
    "write_results",
]
