"""The authorship attack on synthetic authored texts: clean texts are attributed, random words are not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deniable import Embedding
from deniable.experiments.authorship import authorship_attack, split_users, write_attack_results
from deniable.experiments.data import Split, UserCorpus
from deniable.experiments.harness import mechanism_factories


def authored(emb: Embedding, users: int = 4, per_user: int = 30, length: int = 25, seed: int = 0) -> UserCorpus:
    """Each user writes mostly with their own few words (a style), sometimes with any word; topics alternate."""
    rng = np.random.default_rng(seed)
    vocab = emb.vocabulary
    styles = [rng.choice(len(vocab), size=4, replace=False) for _ in range(users)]
    texts, authors, topics = [], [], []
    for u in range(users):
        for i in range(per_user):
            own = rng.random(length) < 0.7
            ids = np.where(own, rng.choice(styles[u], size=length), rng.integers(len(vocab), size=length))
            texts.append(" ".join(vocab[j] for j in ids))
            authors.append(u)
            topics.append(i % 2)
    a = Split(texts, np.array(authors), tuple(f"user{u}" for u in range(users)))
    t = Split(texts, np.array(topics), ("even", "odd"))
    return UserCorpus("synthetic", a, t)


def test_clean_texts_are_attributed_and_random_words_are_not(toy_embedding: Embedding) -> None:
    corpus = authored(toy_embedding)
    # TEM at a tiny epsilon replaces every word by an (almost) uniformly random word
    res = authorship_attack(
        corpus,
        toy_embedding,
        mechanism_factories(["tem"], {"tem": {"cache": False}}),
        [1e-4, 50.0],
        repeats=1,
        random_state=0,
        show_progress=False,
    )
    by = {(s["mechanism"], s["epsilon"] if s["mechanism"] != "none" else None, s["metric"]): s for s in res.summary()}
    chance = by["none", None, "chance"]["mean"]
    assert chance == pytest.approx(0.25)
    clean = by["none", None, "author_accuracy"]
    assert clean["mean"] > 0.8 and clean["ci_low"] > chance
    noisy = by["tem", 1e-4, "author_accuracy"]
    assert noisy["ci_low"] <= chance + 0.05 and noisy["mean"] < 0.45
    assert by["tem", 50.0, "author_accuracy"]["mean"] > noisy["mean"]  # little noise: the author shows again
    assert ("tem", 1e-4, "topic_accuracy") in by  # utility beside the attack


def test_split_is_stratified_by_user(toy_embedding: Embedding) -> None:
    corpus = authored(toy_embedding, users=3, per_user=10)
    tr, te = split_users(corpus, 0.3)
    assert len(tr) + len(te) == len(corpus)
    assert np.bincount(te.authors.labels).tolist() == [3, 3, 3]
    assert te.topics is not None and len(te.topics) == len(te)


def test_write_attack_results(tmp_path: Path, toy_embedding: Embedding) -> None:
    corpus = authored(toy_embedding, users=3, per_user=10)
    res = authorship_attack(
        corpus,
        toy_embedding,
        mechanism_factories(["madlib"]),
        [5.0],
        repeats=2,
        random_state=1,
        show_progress=False,
        utility=False,
    )
    paths = write_attack_results(res, tmp_path, command="deniable evaluate --attack authorship")
    md = paths["results.md"].read_text()
    assert "author_accuracy" in md and "chance" in md and "clean" in md
    assert json.loads(paths["settings.json"].read_text())["attack"] == "authorship"
    assert "user0" not in md  # user names are never written


def newsgroups_folder(root: Path, emb: Embedding, users: int = 8, posts: int = 8) -> Path:
    """A 20newsgroups folder in the shared layout (id, label, sender, text with headers), built from ``authored``."""
    import gzip

    corpus = authored(emb, users=users, per_user=posts, length=20, seed=5)
    d = root / "20newsgroups"
    d.mkdir(parents=True)
    with gzip.open(d / "20news-19997.jsonl.gz", "wt", encoding="utf-8") as fh:
        for i, (t, u) in enumerate(zip(corpus.authors.texts, corpus.authors.labels.tolist(), strict=True)):
            sender = f"user{u}@example.org"
            rec = {"id": str(i), "label": f"group{i % 2}", "sender": sender, "text": f"From: {sender}\n\n{t}"}
            fh.write(json.dumps(rec) + "\n")
    return d


def test_load_user_corpus_strips_senders(tmp_path: Path, toy_embedding: Embedding) -> None:
    from deniable.experiments.data import load_user_corpus

    newsgroups_folder(tmp_path, toy_embedding)
    corpus = load_user_corpus("20newsgroups", tmp_path, min_posts=5, max_users=6)
    assert corpus.users == 6 and len(corpus) == 48
    assert not any("example.org" in t for t in corpus.authors.texts)
    assert corpus.topics is not None and corpus.topics.classes == ("group0", "group1")


def attack_args(attack: str, data: Path, out: Path, emb_dir: Path, epsilons: str) -> list[str]:
    """``deniable evaluate --attack ATTACK`` on the synthetic 20 Newsgroups folder, TEM, one seeded repeat."""
    return [
        "evaluate", "--attack", attack, "--task", "20newsgroups", "--data", str(data), "--out", str(out),
        "-m", "tem", "-e", epsilons, "--repeats", "1", "--seed", "1", "--embedding", str(emb_dir), "--quiet",
    ]  # fmt: skip


def test_cli_evaluate_attack_authorship(tmp_path: Path, emb_dir: Path, toy_embedding: Embedding) -> None:
    from deniable.cli._common import run_app

    newsgroups_folder(tmp_path, toy_embedding)
    out = tmp_path / "out"
    code = run_app(attack_args("authorship", tmp_path, out, emb_dir, "0.001,30"))
    assert code == 0
    md = (out / "results.md").read_text()
    assert "author_accuracy" in md and "topic_accuracy" in md and "example.org" not in md
    assert run_app(["evaluate", "--attack", "nope", "--data", str(tmp_path), "--out", str(out)]) == 2
    assert (
        run_app(
            [
                "evaluate",
                "--attack",
                "authorship",
                "--task",
                "imdb",
                "--data",
                str(tmp_path),
                "--out",
                str(out),
                "--embedding",
                str(emb_dir),
            ]
        )
        == 2
    )
