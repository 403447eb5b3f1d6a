"""Evaluation harness: what privatization costs a task (utility) and what it buys (membership inference).

- :mod:`~deniable.experiments.data`: labelled text from CSV / JSONL / Parquet / Hugging Face,
  and recipes for the shared data sets (IMDb, SST, 20 Newsgroups, Enron, CFPB, InsuranceQA);
- :mod:`~deniable.experiments.models`: TF-IDF + logistic regression, a fastText-style
  classifier, the attack MLP, a TF-IDF answer ranker;
- :mod:`~deniable.experiments.membership`: the shadow-model attack of seed 004 App. C;
- :mod:`~deniable.experiments.reconstruction`: the word reconstruction attacker (what share of the
  words an attacker who knows the mechanism and a public prior, :mod:`~deniable.priors`,
  recovers); :mod:`~deniable.experiments.contextual`: the contextual attacker (a public bigram model,
  :mod:`~deniable.ngram`, decoding each privatized text jointly);
- :mod:`~deniable.experiments.harness`: the grid over mechanisms x epsilons x repeats;
- :mod:`~deniable.experiments.output`: the text tasks' tables and plots;
- :mod:`~deniable.experiments.results`: what every experiment (this harness and the
  bag-of-words topic evaluation, :mod:`deniable.experiments.topics`) shares: the config base,
  the random streams, the results type, the file writer and the progress display.

scikit-learn (``pip install 'deniable[eval]'``) and matplotlib (``deniable[report]``)
are imported only when used.
"""

from __future__ import annotations

from ..priors import PRIORS, Prior, make_prior
from .contextual import ContextualResult, contextual_attack, contextual_evaluation
from .data import RECIPES, QAPairs, Split, TaskData, load_hf, load_labelled, load_task, split_stratified
from .harness import MODES, EvaluationConfig, EvaluationResult, mechanism_factories, run_evaluation, summarize
from .membership import MembershipResult, membership_inference, shadow_attack, train_attack
from .metrics import accuracy, auc, auc_interval, ranking_scores, t_interval
from .models import MODELS, FastTextClassifier, TfidfLogistic, TfidfRanker, attack_model, make_model
from .output import markdown_table, plot_metric, write_results
from .reconstruction import ReconstructionResult, TokenSample, reconstruction_attack, reconstruction_evaluation
from .results import ExperimentConfig, ExperimentProgress, ExperimentRandomness, Results, write_files

__all__ = [
    "MODELS",
    "MODES",
    "PRIORS",
    "RECIPES",
    "ContextualResult",
    "EvaluationConfig",
    "EvaluationResult",
    "ExperimentConfig",
    "ExperimentProgress",
    "ExperimentRandomness",
    "FastTextClassifier",
    "MembershipResult",
    "Prior",
    "QAPairs",
    "ReconstructionResult",
    "Results",
    "Split",
    "TaskData",
    "TfidfLogistic",
    "TfidfRanker",
    "TokenSample",
    "accuracy",
    "attack_model",
    "auc",
    "auc_interval",
    "contextual_attack",
    "contextual_evaluation",
    "load_hf",
    "load_labelled",
    "load_task",
    "make_model",
    "make_prior",
    "markdown_table",
    "mechanism_factories",
    "membership_inference",
    "plot_metric",
    "ranking_scores",
    "reconstruction_attack",
    "reconstruction_evaluation",
    "run_evaluation",
    "shadow_attack",
    "split_stratified",
    "summarize",
    "t_interval",
    "train_attack",
    "write_files",
    "write_results",
]
