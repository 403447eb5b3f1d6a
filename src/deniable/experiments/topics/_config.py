"""What a topic evaluation is asked, and the shape of what it answers.

Owns the data sets and their samples (:func:`load_dataset`, :func:`load_heldout`), the
bin strategies, :class:`EvalConfig` and the columns of the results (:data:`KEYS`, the
per-run columns, the metric names) that the sweep writes and the report reads.
Imports the experiments' config base and data recipes and the library's validators.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..._errors import InvalidParameterError
from ..._validation import check_choice, check_epsilon, check_int, check_int_fields, int_field
from ..results import ExperimentConfig, ExperimentRandomness

__all__ = [
    "ALL_METRICS",
    "DATASETS",
    "EVAL_STRATEGIES",
    "KEYS",
    "METRICS",
    "RUN_COLUMNS",
    "EvalConfig",
    "load_dataset",
    "load_heldout",
]


DATASETS = ("cfpb", "20newsgroups")
#: ``frequency`` uses the public GloVe-rank prior; ``frequency-heldout`` uses word counts of
#: a disjoint sample of the same data set standing in for a public corpus of the same
#: domain (CFPB: the test split; 20 Newsgroups: messages outside the sample), which is
#: also its within-bin prior for reading topics; ``frequency-data`` uses the evaluated
#: documents' own counts: NOT private (the map leaks), evaluated only for comparison.
EVAL_STRATEGIES = ("random", "frequency", "frequency-heldout", "frequency-data", "semantic", "none")


def load_dataset(name: str, data_dir: str | Path, n_docs: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """A random sample of ``n_docs`` (text, label) pairs from a shared data set.

    The documents are those of :func:`deniable.experiments.data.load_corpus` (the recipe
    that knows each file's columns): ``cfpb``, the training split (complaint narrative,
    product); ``20newsgroups``, every message with its headers removed (headers name
    senders and groups).
    """
    from ..data import load_corpus

    if name not in DATASETS:
        raise InvalidParameterError("dataset", name, "one of " + ", ".join(DATASETS))
    n = check_int("n_docs", n_docs, minimum=2)
    corpus = load_corpus(name, data_dir)
    texts = corpus.texts
    labels = [corpus.classes[i] for i in corpus.labels.tolist()]
    idx = np.random.default_rng(seed).permutation(len(texts))[: min(n, len(texts))]
    idx.sort()
    return [texts[i] for i in idx], [labels[i] for i in idx]


def load_heldout(name: str, data_dir: str | Path, n_docs: int, seed: int = 0, size: int = 3000) -> list[str]:
    """Documents disjoint from :func:`load_dataset`'s sample, standing in for a same-domain public corpus.

    ``cfpb``: the test split; ``20newsgroups``: up to ``size`` messages outside the sample.
    """
    from ..data import load_corpus

    if name == "cfpb":
        return load_corpus(name, data_dir, "test").texts[:size]
    if name != "20newsgroups":
        raise InvalidParameterError("dataset", name, "one of " + ", ".join(DATASETS))
    all_texts, _ = load_dataset(name, data_dir, 10**9, seed=0)  # every message, file order
    idx = np.random.default_rng(seed).permutation(len(all_texts))[n_docs : n_docs + size]
    return [all_texts[i] for i in np.sort(idx)]


@dataclass(frozen=True, kw_only=True)
class EvalConfig(ExperimentConfig):
    """What to evaluate. Kept small by default: the machine may be shared.

    ``epsilons``, ``repeats`` and ``random_state`` are :class:`ExperimentConfig`'s. Repeat
    ``r`` uses the seed ``random_state + r`` for the noise, the maps, LDA and the split
    (``random_state=None``: seeds drawn from fresh, recorded entropy).
    """

    dataset: str = "cfpb"
    data_dir: str = "../shared/data"
    n_docs: int = int_field(1500, minimum=20)
    epsilons: Sequence[float] = (1.0, 3.0, 10.0)
    random_state: int | np.random.Generator | None = 0
    precisions: Sequence[float] = (1.0, 3.0)
    bins: Sequence[int] = (50, 200, 1000)
    strategies: Sequence[str] = ("random", "frequency", "frequency-heldout", "frequency-data", "semantic")
    n_topics: int | None = int_field(None, minimum=2)
    lda_iter: int = int_field(10, minimum=1)
    lda_doc_iter: int = int_field(20, minimum=1)
    top_n: int = int_field(10, minimum=2)
    vocab_size: int = 20000
    test_fraction: float = 0.25
    skip_duplicate_ratios: bool = True
    max_nonzero: int = int_field(3_000_000, minimum=1)
    #: SynTF rows beside LPLP: one per (epsilon, output length n) (``precision`` column = n); empty: none
    syntf_lengths: Sequence[int] = ()
    #: SynTF's public similarity: ``k`` nearest embedding neighbours (0: the identity)
    syntf_neighbours: int = int_field(0, minimum=0)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check every field; raise InvalidParameterError naming the bad one."""
        super().__post_init__()
        if self.dataset not in DATASETS:
            raise InvalidParameterError("dataset", self.dataset, "one of " + ", ".join(DATASETS))
        check_int_fields(self)
        object.__setattr__(self, "precisions", tuple(check_epsilon(p, "precisions") for p in self.precisions))
        object.__setattr__(self, "bins", tuple(check_int("bins", k, minimum=2) for k in self.bins))
        object.__setattr__(
            self, "strategies", tuple(check_choice("strategies", s, EVAL_STRATEGIES) for s in self.strategies)
        )
        object.__setattr__(
            self, "syntf_lengths", tuple(check_int("syntf_lengths", n, minimum=1) for n in self.syntf_lengths)
        )
        if not 0.05 <= self.test_fraction <= 0.5:
            raise InvalidParameterError("test_fraction", self.test_fraction, "a number in [0.05, 0.5]")

    def repeat_seeds(self, randomness: ExperimentRandomness) -> list[int]:
        """The seed of each repeat: ``random_state + r``, or drawn from ``randomness`` without an int seed."""
        if isinstance(self.random_state, int | np.integer):
            return [int(self.random_state) + r for r in range(self.repeats)]
        return [randomness.seed(r) for r in range(self.repeats)]

    def noise_settings(self) -> list[tuple[float, float]]:
        """(eps, N) pairs; only eps/N matters, so duplicate ratios are skipped by default."""
        out: list[tuple[float, float]] = []
        seen: set[float] = set()
        for n in self.precisions:
            for e in self.epsilons:
                r = round(e / n, 12)
                if self.skip_duplicate_ratios and r in seen:
                    continue
                seen.add(r)
                out.append((e, n))
        return out

    def settings(self, entropy: int) -> dict[str, Any]:
        """The fields as JSON-able settings (``random_state``: the seed or the fresh entropy used)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["random_state"] = self.describe_random_state(entropy)
        return out


#: the setting of a bag-of-words run; the per-run columns besides the metrics
KEYS = ("dataset", "kind", "strategy", "bins", "epsilon", "precision")
RUN_COLUMNS = ("documents", "topics", "eps_over_n", "seed", "seconds", "note")
METRICS = ("jaccard", "jaccard_bins", "jaccard_noise", "chance_bins", "exclusivity", "npmi", "accuracy", "snr")
ALL_METRICS = (*METRICS, "majority")
