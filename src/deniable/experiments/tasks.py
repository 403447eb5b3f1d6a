"""What ``deniable evaluate`` runs, as library calls: the data a task names, and the attacks on users.

Owns the task names (a built-in recipe, ``file``: labelled files, ``hf``: a Hugging Face data
set) and the data each one means (:func:`load_task_data`), and the attack names and which
experiment each runs on a user corpus (:func:`run_attack`). May import the other
experiments modules (data, harness, authorship, provenance) and the library; nothing of the
library imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..embedding import Embedding
from .data import RECIPES, TaskData, UserCorpus, load_hf, load_labelled, load_task, split_stratified
from .harness import MechanismFactory
from .results import Results

__all__ = ["ATTACKS", "TASKS", "load_task_data", "run_attack"]

#: ``--task``: a built-in recipe, labelled files, or a Hugging Face data set
TASKS = (*RECIPES, "file", "hf")
#: ``--attack``: none (utility + membership inference), an attack on a user corpus, or word
#: reconstruction on a task's training texts (:mod:`deniable.experiments.reconstruction`)
ATTACKS = ("none", "authorship", "user-audit", "reconstruction")


def load_task_data(
    task: str,
    data: str,
    *,
    text_column: str = "text",
    label_column: str = "label",
    test: str | None = None,
    test_fraction: float = 0.2,
    hf_train_split: str = "train",
    hf_test_split: str = "test",
) -> TaskData:
    """The train and test sides ``task`` names: a recipe's folder ``data``; for ``file`` the labelled
    file ``data`` and ``test`` (without it a stratified ``test_fraction`` split, seed 0); for ``hf`` the
    splits of the locally available Hugging Face data set ``data``."""
    if task in RECIPES:
        return load_task(task, data)
    if task == "file":
        train_split = load_labelled(data, text_column=text_column, label_column=label_column)
        if test is not None:
            test_split = load_labelled(
                test, text_column=text_column, label_column=label_column, classes=train_split.classes
            )
        else:
            train_split, test_split = split_stratified(train_split, test_fraction, seed=0)
        return TaskData(Path(data).stem.split(".")[0], "classification", train_split, test_split)
    tr = load_hf(data, split=hf_train_split, text_column=text_column, label_column=label_column)
    te = load_hf(data, split=hf_test_split, text_column=text_column, label_column=label_column, classes=tr.classes)
    return TaskData(data.replace("/", "_"), "classification", tr, te)


def run_attack(
    attack: str,
    corpus: UserCorpus,
    embedding: Embedding,
    mechanisms: Mapping[str, MechanismFactory],
    epsilons: Sequence[float],
    *,
    model: str,
    repeats: int,
    max_words: int | None,
    oov: str,
    random_state: int | np.random.Generator | None,
    show_progress: bool | None,
) -> Results:
    """``authorship`` (attribute privatized texts to their authors, with ``model``) or ``user-audit``
    (was a user's data used to train a language model) on ``corpus`` (docs/audit.md)."""
    if attack == "authorship":
        from .authorship import authorship_attack

        return authorship_attack(
            corpus,
            embedding,
            mechanisms,
            epsilons,
            repeats=repeats,
            model=model,
            max_words=max_words,
            oov=oov,
            random_state=random_state,
            show_progress=show_progress,
        )
    from .provenance import user_audit

    return user_audit(
        corpus,
        embedding,
        mechanisms,
        epsilons,
        repeats=repeats,
        max_words=max_words,
        oov=oov,
        random_state=random_state,
        show_progress=show_progress,
    )
