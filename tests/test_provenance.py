"""The user-level provenance audit on users the test builds: members are detected, strangers are not."""

from __future__ import annotations

import numpy as np
import pytest

from deniable import Embedding
from deniable.experiments.baselines import make_baseline
from deniable.experiments.data import Split, UserCorpus
from deniable.experiments.harness import mechanism_factories
from deniable.experiments.provenance import BigramLM, audit_users, rank_features, user_audit


def users(n: int, *, vocab: list[str], texts: int = 6, length: int = 30, seed: int = 0) -> list[list[str]]:
    """Each user writes with their own habits: a private random Markov chain over the vocabulary."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        follow = rng.integers(len(vocab), size=(len(vocab), 2))  # two habitual followers per word
        ts = []
        for _ in range(texts):
            w = int(rng.integers(len(vocab)))
            seq = [w]
            for _ in range(length - 1):
                w = int(follow[w, rng.integers(2)]) if rng.random() < 0.9 else int(rng.integers(len(vocab)))
                seq.append(w)
            ts.append(" ".join(vocab[i] for i in seq))
        out.append(ts)
    return out


VOCAB = [f"word{i}" for i in range(150)]


def test_bigram_ranks() -> None:
    lm = BigramLM().fit(["a b a b a c"])
    r = lm.ranks(["a b", "a zzz"])
    assert r.tolist()[1] == 1  # b is the most likely word after a
    assert r.tolist()[3] == 0  # an unseen word
    f = rank_features(r)
    assert f.sum() == pytest.approx(1.0) and f[0] > 0 and f[-1] > 0


def test_a_model_trained_on_the_users_is_detected_and_one_that_never_saw_them_is_not() -> None:
    pool = users(60, vocab=VOCAB, seed=1)
    members, non_members, shadow, strangers = pool[:15], pool[15:30], pool[30:50], pool[50:]
    seen = BigramLM().fit([t for u in members for t in u])
    res = audit_users(seen, members, non_members, shadow, seed=0)
    assert res["auc"] > 0.9 and res["auc_low"] > 0.5
    never = BigramLM().fit([t for u in strangers for t in u])
    res2 = audit_users(never, members, non_members, shadow, seed=0)
    assert res2["auc_low"] < 0.5 < res2["auc_high"]


def corpus(n_users: int = 24) -> UserCorpus:
    pool = users(n_users, vocab=VOCAB, seed=2)
    texts = [t for u in pool for t in u]
    labels = np.repeat(np.arange(n_users), [len(u) for u in pool])
    return UserCorpus("synthetic", Split(texts, labels, tuple(f"u{i}" for i in range(n_users))))


def vocab_embedding() -> Embedding:
    vec = np.random.default_rng(0).normal(size=(len(VOCAB), 4)).astype(np.float32)
    return Embedding(VOCAB, vec, name="vocab")


def test_user_audit_table() -> None:
    emb = vocab_embedding()
    res = user_audit(
        corpus(32),
        emb,
        mechanism_factories(["tem"], {"tem": {"cache": False}}),
        [1e-4],
        baselines=("original", "nearest", "decoys", "decoys-noise"),
        repeats=1,
        random_state=0,
        show_progress=False,
    )
    by = {(s["mechanism"], s["metric"]): s for s in res.summary()}
    assert set(s["metric"] for s in res.summary()) == {"auc", "precision", "recall", "accuracy"}
    assert by["original", "auc"]["mean"] > 0.8
    assert by["tem", "auc"]["mean"] < by["original", "auc"]["mean"]  # near-uniform words hide the users


def test_a_baseline_that_changes_nothing_scores_like_the_original() -> None:
    emb = vocab_embedding()
    keep = make_baseline("original", emb)
    texts = ["Word1 word2, word3."]
    assert keep(texts, np.random.default_rng(0)) == ["word1 word2 word3"]
    res = user_audit(
        corpus(16), emb, {}, [1.0], baselines=("original",), repeats=1, random_state=3, show_progress=False
    )
    same = BigramLM().fit(texts)
    assert (same.ranks(texts) == BigramLM().fit(keep(texts, np.random.default_rng(0))).ranks(texts)).all()
    assert {s["metric"] for s in res.summary()} == {"auc", "precision", "recall", "accuracy"}


def test_baselines_transform() -> None:
    emb = vocab_embedding()
    rng = np.random.default_rng(0)
    text = ["word1 word2 word3 word4 word5 word6"]
    near = make_baseline("nearest", emb)(text, rng)[0].split()
    assert len(near) == 6 and all(a != b for a, b in zip(near, text[0].split(), strict=True))
    assert make_baseline("nearest", emb)(text, rng) == make_baseline("nearest", emb)(text, rng)  # deterministic
    dec = make_baseline("decoys", emb)(text, rng)[0].split()
    assert len(dec) > 6 and [w for w in dec if w in text[0].split()][:6] == text[0].split()
    noisy = make_baseline("decoys-noise", emb, noise=1.0, rate=0.0)(text, rng)[0].split()
    assert len(noisy) == 6 and noisy != text[0].split()


def test_cli_evaluate_attack_user_audit(tmp_path, emb_dir, toy_embedding) -> None:  # type: ignore[no-untyped-def]
    from deniable.cli._common import run_app
    from test_authorship import attack_args, newsgroups_folder

    newsgroups_folder(tmp_path, toy_embedding, users=10, posts=6)
    out = tmp_path / "out"
    code = run_app(attack_args("user-audit", tmp_path, out, emb_dir, "1"))
    assert code == 0
    md = (out / "results.md").read_text()
    for word in ("original", "nearest", "decoys-noise", "auc", "recall"):
        assert word in md
