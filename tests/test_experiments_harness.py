"""The evaluation harness's arithmetic on synthetic data it builds itself (fast, no shared data)."""

from __future__ import annotations

import numpy as np
import pytest

from deniable import Embedding
from deniable._errors import InvalidParameterError
from deniable.experiments import (
    EvaluationConfig,
    QAPairs,
    Split,
    TaskData,
    TfidfLogistic,
    accuracy,
    auc,
    auc_interval,
    mechanism_factories,
    membership_inference,
    ranking_scores,
    run_evaluation,
    summarize,
    t_interval,
    train_attack,
)
from deniable.experiments.harness import truncate_words
from deniable.experiments.metrics import proportion_interval
from fake_mechanisms import RandomWords

SPORT = ["hockey", "soccer", "puck", "goal", "game", "match"]
SPACE = ["nasa", "esa", "rocket", "orbit", "launch"]
FUNC = ["the", "a", "was", "is", "it", "great", "good"]


def topic_task(n: int = 240, seed: int = 0) -> TaskData:
    """Two balanced classes: texts of sport words vs space words, padded with function words."""
    rng = np.random.default_rng(seed)

    def make(m: int) -> Split:
        y = np.arange(m) % 2
        texts = []
        for label in y.tolist():
            topic = SPORT if label == 0 else SPACE
            ws = list(rng.choice(topic, 4)) + list(rng.choice(FUNC, 4))
            rng.shuffle(ws)
            texts.append(" ".join(ws).capitalize() + ".")
        return Split(texts, y.astype(np.int64), ("sport", "space"))

    return TaskData("topics", "classification", make(n), make(n))


@pytest.fixture(scope="module")
def toy() -> Embedding:
    from conftest import make_toy_embedding

    return make_toy_embedding()


def run(toy: Embedding, mechanisms: dict, **kw: object) -> list[dict]:
    cfg = EvaluationConfig(mechanisms=mechanisms, epsilons=[1e9], models=["tfidf"], random_state=3, **kw)  # type: ignore[arg-type]
    return run_evaluation(topic_task(), toy, cfg).rows


def test_huge_epsilon_matches_clean_baseline(toy: Embedding) -> None:
    rows = run(toy, mechanism_factories(["madlib"]), repeats=2, membership=False)
    for r in range(2):
        clean = [x["value"] for x in rows if x["mode"] == "clean" and x["repeat"] == r and x["metric"] == "accuracy"]
        for mode in ("train", "test"):
            priv = [x for x in rows if x["mode"] == mode and x["repeat"] == r and x["metric"] == "accuracy"]
            assert len(priv) == 1 and priv[0]["value"] == clean[0]
            assert priv[0]["changed_rate"] == 0.0 and priv[0]["tokens"] > 0
    assert min(x["value"] for x in rows if x["mode"] == "clean") > 0.95


def test_random_words_drop_to_chance(toy: Embedding) -> None:
    rows = run(toy, {"random": lambda emb, eps: RandomWords(emb, eps)}, repeats=2, membership=False)
    clean = np.mean([x["value"] for x in rows if x["mode"] == "clean"])
    assert clean > 0.95
    for mode in ("train", "test"):
        acc = [x["value"] for x in rows if x["mode"] == mode]
        assert len(acc) == 2
        assert all(0.35 < a < 0.65 for a in acc), acc  # 240 balanced test rows: chance is 0.5 +- 0.1


def memorisable(n: int, seed: int) -> Split:
    """Random labels on texts made of unique tokens: only memorisation can fit them."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(f"t{seed}x{i}x{j}" for j in range(5)) + " common words here" for i in range(n)]
    return Split(texts, rng.integers(0, 2, n).astype(np.int64), ("a", "b"))


def test_attack_detects_a_memorising_model() -> None:
    tr1, tr2, te1, te2 = (memorisable(150, s) for s in range(4))
    shadow = TfidfLogistic(n_classes=2, C=1e4).fit(te2.texts, te2.labels)
    attack = train_attack(shadow, te2, te1, seed=0)
    target = TfidfLogistic(n_classes=2, C=1e4).fit(tr1.texts, tr1.labels)
    res = membership_inference(target, tr1, tr2, attack)
    assert res.auc > 0.9 and res.ci_low > 0.8
    # a model that cannot memorise (almost no capacity) leaks nothing
    shadow0 = TfidfLogistic(n_classes=2, C=1e-6).fit(te2.texts, te2.labels)
    attack0 = train_attack(shadow0, te2, te1, seed=0)
    target0 = TfidfLogistic(n_classes=2, C=1e-6).fit(tr1.texts, tr1.labels)
    res0 = membership_inference(target0, tr1, tr2, attack0)
    assert 0.35 < res0.auc < 0.65


def test_harness_membership_rows_and_summary(toy: Embedding) -> None:
    rows = run(toy, mechanism_factories(["madlib"]), repeats=2, modes=("train",), train_size=60, test_size=60)
    aucs = [x for x in rows if x["metric"] == "mia_auc"]
    assert {x["mode"] for x in aucs} == {"clean", "train"} and len(aucs) == 4
    assert all(0 <= x["ci_low"] <= x["value"] <= x["ci_high"] <= 1 for x in aucs)
    assert all(x["n_train"] == 60 and x["n_test"] == 60 for x in rows)
    summ = summarize(rows)
    acc = next(s for s in summ if s["metric"] == "accuracy" and s["mechanism"] == "madlib")
    assert acc["n"] == 2 and acc["ci"] == "t over repeats" and acc["ci_low"] <= acc["mean"] <= acc["ci_high"]


def test_ranking_task(toy: Embedding) -> None:
    rng = np.random.default_rng(0)
    qs, ans, rel = [], [], []
    for i in range(30):
        topic = SPORT if i % 2 else SPACE
        q = f"key{i} " + " ".join(rng.choice(topic, 3))  # key{i}: out of vocabulary, shared with the answer
        qs += [q, q]
        ans += [f"key{i} " + " ".join(rng.choice(topic, 5)), f"other{i} " + " ".join(rng.choice(FUNC, 5))]
        rel += [True, False]
    pairs = QAPairs(qs, ans, np.array(rel))
    task = TaskData("qa", "ranking", pairs, pairs)
    cfg = EvaluationConfig(mechanisms={"random": lambda e, x: RandomWords(e, x)}, epsilons=[1.0], repeats=1,
                           random_state=0, negatives=5, oov="random")  # fmt: skip
    rows = run_evaluation(task, toy, cfg).rows
    clean = {x["metric"]: x["value"] for x in rows if x["mode"] == "clean"}
    test = {x["metric"]: x["value"] for x in rows if x["mode"] == "test"}
    assert clean["map"] > 0.9 and clean["mrr"] > 0.9
    assert test["mrr"] < clean["mrr"] - 0.3


def test_metrics() -> None:
    assert accuracy(np.array([[0.9, 0.1], [0.2, 0.8]]), [0, 0]) == 0.5
    assert auc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert auc([1, 1, 1, 1], [0, 1, 0, 1]) == 0.5
    lo, hi = auc_interval(0.5, 100, 100)
    assert lo < 0.5 < hi and hi - lo < 0.2
    mean, lo, hi = t_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and lo < 2.0 < hi
    assert np.isnan(t_interval([1.0])[1])
    lo, hi = proportion_interval(3, 10)  # Clopper-Pearson 95%: (0.0667, 0.6525)
    assert lo == pytest.approx(0.06674, abs=1e-4) and hi == pytest.approx(0.65245, abs=1e-4)
    assert proportion_interval(0, 5)[0] == 0.0 and all(np.isnan(proportion_interval(0, 0)))
    # group 0: relevant at rank 2 -> AP 1/2, RR 1/2; group 1: relevant at ranks 1 and 3 -> AP (1 + 2/3)/2, RR 1
    m, r = ranking_scores([0.9, 0.5, 0.1, 0.9, 0.5, 0.4], [0, 1, 0, 1, 0, 1], [0, 0, 0, 1, 1, 1])
    assert m == pytest.approx((0.5 + (1 + 2 / 3) / 2) / 2) and r == pytest.approx(0.75)
    # ties are pessimistic
    assert ranking_scores([1.0, 1.0], [1, 0], [0, 0])[1] == 0.5


def test_truncate_words() -> None:
    assert truncate_words(["Hello, world! This is it.", "a b"], 2) == ["Hello, world", "a b"]


def test_config_errors_name_the_parameter(toy: Embedding) -> None:
    mech = mechanism_factories(["madlib"])
    cases = [
        ({"epsilons": [0.0]}, "epsilon"),
        ({"models": ["bert"]}, "model"),
        ({"modes": ["both"]}, "mode"),
        ({"repeats": 0}, "repeats"),
        ({"oov": "skip"}, "oov"),
        ({"train_size": 1}, "train_size"),
    ]
    for kw, name in cases:
        args = {"mechanisms": mech, "epsilons": [1.0], **kw}
        with pytest.raises(InvalidParameterError) as exc:
            EvaluationConfig(**args)  # type: ignore[arg-type]
        assert exc.value.name == name
    with pytest.raises(InvalidParameterError, match="mechanism"):
        mechanism_factories(["nope"])
    cfg = EvaluationConfig(mechanisms=mech, epsilons=[1.0], train_size=10_000)
    with pytest.raises(InvalidParameterError) as exc:
        run_evaluation(topic_task(), toy, cfg)
    assert exc.value.name == "train_size"


def test_shared_results_summary_wide_and_randomness() -> None:
    import warnings

    from deniable.experiments import ExperimentConfig, Results

    res = Results("t", ("setting",))
    for rep, v in enumerate([1.0, 2.0, 3.0]):
        res.add(setting="a", repeat=rep, metric="m", value=v, note="x")
    res.add(setting="b", repeat=0, metric="m", value=0.7, ci_low=0.6, ci_high=0.8)
    res.add(setting="b", repeat=0, metric="snr", value=float("inf"))
    a, b, snr = res.summary()
    assert a["n"] == 3 and a["mean"] == 2.0 and a["sd"] == 1.0 and a["ci_low"] < 2.0 < a["ci_high"]
    assert (b["ci_low"], b["ci_high"], b["ci"]) == (0.6, 0.8, "the run's own interval")
    assert snr["mean"] == float("inf") and np.isnan(snr["sd"])
    wide = res.wide(extra=("note",))
    assert wide[0] == {"setting": "a", "repeat": 0, "note": "x", "m": 1.0}
    back = Results.from_wide("t", ("setting",), wide, ["m", "snr"])
    assert [s["mean"] for s in back.summary()] == [s["mean"] for s in res.summary()]
    # experiments may be seeded without the NotPrivateWarning, and reproduce
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r1, r2 = (
            ExperimentConfig(epsilons=[1.0], random_state=5).randomness(),
            ExperimentConfig(epsilons=[1.0], random_state=5).randomness(),
        )
    assert r1.generator(1, 2).random() == r2.generator(1, 2).random() and r1.seed(0) != r1.seed(1)
    assert (
        ExperimentConfig(epsilons=[1.0]).randomness().entropy != ExperimentConfig(epsilons=[1.0]).randomness().entropy
    )
    for bad in (-1, 1.5, "0", True):
        with pytest.raises(InvalidParameterError) as exc:
            ExperimentConfig(epsilons=[1.0], random_state=bad)  # type: ignore[arg-type]
        assert exc.value.name == "random_state"


def test_bow_config_is_frozen_and_validated() -> None:
    from dataclasses import FrozenInstanceError

    from deniable.experiments import ExperimentRandomness
    from deniable.experiments.topics import EvalConfig

    cfg = EvalConfig(random_state=3, repeats=2)
    assert cfg.repeat_seeds(ExperimentRandomness(0)) == [3, 4]
    with pytest.raises(FrozenInstanceError):
        cfg.n_docs = 5  # type: ignore[misc]
    for kw, name in (({"strategies": ["nope"]}, "strategies"), ({"repeats": 0}, "repeats"), ({"bins": [1]}, "bins")):
        with pytest.raises(InvalidParameterError) as exc:
            EvalConfig(**kw)  # type: ignore[arg-type]
        assert exc.value.name == name
