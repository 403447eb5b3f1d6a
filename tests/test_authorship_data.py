"""The user corpora from the shared data sets (skipped when absent)."""

from __future__ import annotations

import pytest

from deniable.experiments.data import load_user_corpus

pytestmark = pytest.mark.data


def test_newsgroup_senders() -> None:
    from conftest import shared_data

    corpus = load_user_corpus("20newsgroups", shared_data("20newsgroups"), min_posts=5)
    assert corpus.users == 817 and len(corpus) == 8700
    assert corpus.topics is not None and len(corpus.topics.classes) == 20


def test_enron_mailboxes() -> None:
    from conftest import shared_data

    corpus = load_user_corpus("enron", shared_data("enron_spam"))
    assert corpus.users == 6 and len(corpus) == 16545 and corpus.topics is None
