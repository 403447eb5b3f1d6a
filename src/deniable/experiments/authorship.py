"""Authorship attribution attack: does privatized text still tell who wrote it?

Protocol. A user corpus (:func:`~deniable.experiments.data.load_user_corpus`: 20 Newsgroups
senders, the six Enron mailboxes, or any :class:`~deniable.experiments.data.UserCorpus`) is
split once, stratified by user (``test_fraction`` of each user's documents to the test side).
The attacker trains a classifier (TF-IDF + logistic regression by default,
:mod:`deniable.experiments.models`) on the *clean* training texts, labelled by author, and
predicts the author of the *privatized* test texts: the "test time" mode of the evaluation
harness (:func:`~deniable.experiments.harness.run_evaluation`, which this module reuses). The
attack's accuracy is reported beside

- ``chance``: the share of the most frequent author in the test side (the best guess without
  reading the text);
- ``topic_accuracy`` (utility, when the corpus has topics: the newsgroup): the same protocol
  with the topic as the label: what the privatized text is still good for.

Intervals: Student-t 95% over ``repeats`` (independent noise and model seeds); a single run
brings its own Clopper-Pearson 95% interval on the accuracy (binomial over test documents).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import check_probability
from ..embedding import Embedding
from .data import Split, TaskData, UserCorpus, split_stratified
from .harness import KEYS, EvaluationConfig, MechanismFactory, run_evaluation
from .metrics import proportion_interval
from .results import ExperimentRandomness, Results, format_interval, write_files

__all__ = ["authorship_attack", "split_users", "write_attack_results"]


def split_users(corpus: UserCorpus, test_fraction: float = 0.5, seed: int = 0) -> tuple[UserCorpus, UserCorpus]:
    """A split stratified by user (fixed ``seed``: a data split, not a privacy draw)."""
    check_probability("test_fraction", test_fraction)
    rows = Split([str(i) for i in range(len(corpus))], corpus.authors.labels, corpus.authors.classes)
    tr, te = split_stratified(rows, test_fraction, seed=seed)
    return corpus.take([int(t) for t in tr.texts]), corpus.take([int(t) for t in te.texts])


def _with_interval(rows: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        if r["metric"] != "accuracy":
            continue
        n = int(r["n_test"])
        lo, hi = proportion_interval(round(float(r["value"]) * n), n)
        out.append({**r, "metric": metric, "ci_low": lo, "ci_high": hi})
    return out


def authorship_attack(
    corpus: UserCorpus,
    embedding: Embedding,
    mechanisms: Mapping[str, MechanismFactory],
    epsilons: Sequence[float],
    *,
    repeats: int = 3,
    model: str = "tfidf",
    test_fraction: float = 0.5,
    max_words: int | None = None,
    oov: str = "random",
    utility: bool = True,
    random_state: int | np.random.Generator | None = None,
    show_progress: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> Results:
    """Author-attribution accuracy on privatized test texts per mechanism and epsilon (see the module docstring).

    Returns :class:`~deniable.experiments.results.Results` with the harness's setting columns
    (``model``, ``mechanism``, ``epsilon``, ``mode``) and the metrics ``author_accuracy``,
    ``chance`` and (``utility`` and topics present) ``topic_accuracy``; the clean rows
    (``mechanism="none"``) are the attack on unprivatized text.
    """
    train, test = split_users(corpus, test_fraction)
    entropy = ExperimentRandomness.from_random_state(random_state).entropy
    cfg = EvaluationConfig(
        mechanisms=mechanisms,
        epsilons=epsilons,
        models=(model,),
        modes=("test",),
        repeats=repeats,
        random_state=entropy,
        membership=False,
        max_words=max_words,
        oov=oov,
        # the test side in one call per setting: a whole-vocabulary mechanism computes a distance
        # row per distinct word of a call; batches of 200 texts computed a word's row again in each batch
        batch_texts=max(1, len(test.authors.texts)),
    )

    def attack(target: str, train_labels: Split, test_labels: Split) -> Results:
        task = TaskData(f"{corpus.name}-{target}", "classification", train_labels, test_labels)
        return run_evaluation(task, embedding, cfg, show_progress=show_progress, log=log)

    runs = attack("authors", train.authors, test.authors)
    rows = _with_interval(runs.rows, "author_accuracy")
    counts = np.bincount(test.authors.labels, minlength=corpus.users)
    chance = float(counts.max() / counts.sum())
    for r in [r for r in rows if r["mechanism"] == "none"]:
        rows.append({**r, "metric": "chance", "value": chance, "ci_low": math.nan, "ci_high": math.nan})
    if utility and train.topics is not None and test.topics is not None:
        rows += _with_interval(attack("topics", train.topics, test.topics).rows, "topic_accuracy")
    settings = {
        **runs.settings,
        "attack": "authorship",
        "corpus": corpus.name,
        "users": corpus.users,
        "documents": len(corpus),
        "test_fraction": test_fraction,
        "chance": chance,
    }
    return Results(
        f"{corpus.name} authorship",
        KEYS,
        rows,
        settings=settings,
        notes=[
            "author_accuracy: a classifier trained on clean texts attributes privatized test texts; "
            "chance: the most frequent author's share of the test side"
        ],
        own_interval="Clopper-Pearson (one run)",
    )


def write_attack_results(result: Results, folder: str | Path, *, command: str = "") -> dict[str, Path]:
    """runs.csv, results.csv (mean and 95% interval per setting and metric), results.md and settings.json."""
    summary = result.summary()
    metrics = result.metrics()
    table: dict[tuple[Any, ...], dict[str, str]] = {}
    for s in summary:
        eps = s["epsilon"]
        key = (s["model"], s["mechanism"], None if isinstance(eps, float) and math.isnan(eps) else eps)
        table.setdefault(key, {})[s["metric"]] = format_interval(s["mean"], s["ci_low"], s["ci_high"])
    md = [f"# {result.name}", ""]
    md += [f"- {n}" for n in result.notes]
    md += [
        "",
        "| model | mechanism | epsilon | " + " | ".join(metrics) + " |",
        "|---|---|---:|" + "---|" * len(metrics),
    ]
    for (model, mech, eps), vals in table.items():
        e = "" if eps is None else f"{eps:g}"
        md.append(
            f"| {model} | {'clean' if mech == 'none' else mech} | {e} | "
            + " | ".join(vals.get(m, "") for m in metrics)
            + " |"
        )
    settings = dict(result.settings)
    if command:
        settings["command"] = command
    run_cols = [*KEYS, "repeat", "metric", "value", "ci_low", "ci_high", "n_train", "n_test", "tokens", "changed_rate"]
    sum_cols = [*KEYS, "metric", "n", "mean", "ci_low", "ci_high", "ci", "sd"]
    return write_files(
        folder,
        tables={"runs.csv": (result.rows, run_cols), "results.csv": (summary, sum_cols)},
        texts={"results.md": "\n".join(md)},
        json_files={"settings.json": settings},
    )
