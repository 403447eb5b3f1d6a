"""The evaluation loop: privatize, train, test, attack, over mechanisms x epsilons x repeats.

Protocol (SPEC section 7; seed 004 App. C). Per repeat ``r`` the data are split
into four disjoint sets drawn at random: TR1 and TR2 from the training side, TE1
and TE2 from the test side (each half of its side, or ``train_size`` /
``test_size`` rows when subsampling). For every model:

- *clean baseline*: train on TR1, test on TE1;
- *training time* (``mode="train"``): train on privatized TR1, test on clean TE1;
- *test time* (``mode="test"``): the clean model, tested on privatized TE1;
- *membership inference* (classification, when ``membership``): the models trained
  on TR1 (clean and privatized) are attacked with a shadow model trained on clean TE2
  (see :mod:`deniable.experiments.membership`).

Each text is privatized independently through :meth:`Privatizer.privatize_batch_with_stats`
(one vectorized mechanism call per batch of texts; every token gets fresh noise).
Confidence intervals: Student-t 95% intervals over the repeats; with a single
repeat the AUC rows carry the Hanley-McNeil interval of that run instead.

``max_words`` cuts every text (train and test sides alike) after its first
``max_words`` word tokens: a documented way to make privatization affordable.

Randomness: an evaluation releases nothing, so an int ``random_state`` (reproducible
splits, noise and model initialisations) is fine here and warns nothing;
``random_state=None`` draws fresh entropy, recorded in the results
(:class:`~deniable.experiments.results.ExperimentRandomness`).

For answer ranking (InsuranceQA) the model is a TF-IDF cosine ranker, TR1 is the
training side's (question, answer) pairs and TE1 the test side's questions with at
least one relevant answer; each question's candidates are its labelled answers plus
``negatives`` answers drawn at random from the other test answers. Metrics: MAP and
MRR. Membership inference does not apply to the ranker and is skipped.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import InvalidParameterError, NotPrivateWarning
from .._validation import check_choice, check_int
from ..embedding import Embedding, Vocabulary
from ..mechanisms.base import Mechanism
from ..privatizer import OOV_POLICIES, Privatizer, PrivatizeStats
from ..text import split as split_words
from .data import QAPairs, Split, TaskData
from .membership import membership_inference, shadow_attack
from .metrics import accuracy, ranking_scores
from .models import TextClassifier, TfidfRanker, check_model_names, make_model
from .results import ExperimentConfig, ExperimentProgress, Results

__all__ = [
    "MODES",
    "EvaluationConfig",
    "EvaluationResult",
    "MechanismFactory",
    "RegisteredMechanism",
    "mechanism_factories",
    "mechanism_info",
    "peak_rss",
    "run_evaluation",
    "summarize",
    "truncate_words",
]

MODES = ("train", "test")
MechanismFactory = Callable[[Embedding, float], Mechanism]


def mechanism_factories(
    names: Sequence[str], options: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, MechanismFactory]:
    """``{name: (embedding, eps) -> make_mechanism(name, embedding, eps, **options[name])}``.

    Any registered mechanism (:mod:`deniable.mechanisms.registry`); names and options are
    validated here, before anything is built.
    """
    from ..mechanisms import validate_options

    return {
        name: RegisteredMechanism(name, validate_options(name, dict((options or {}).get(name, {})))) for name in names
    }


@dataclass(frozen=True)
class RegisteredMechanism:
    """A :data:`MechanismFactory` for a registered mechanism with validated options (recorded in the results)."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, embedding: Embedding, epsilon: float) -> Mechanism:
        from ..mechanisms import make_mechanism

        return make_mechanism(self.name, embedding, epsilon, **dict(self.options))


@dataclass(frozen=True, kw_only=True)
class EvaluationConfig(ExperimentConfig):
    """What to evaluate. ``mechanisms`` maps a name to a factory ``(embedding, eps) -> Mechanism``;
    ``epsilons``, ``repeats`` and ``random_state`` are :class:`ExperimentConfig`'s."""

    mechanisms: Mapping[str, MechanismFactory]
    repeats: int = 3
    models: Sequence[str] = ("fasttext",)
    modes: Sequence[str] = MODES
    train_size: int | None = None
    test_size: int | None = None
    membership: bool = True
    label_feature: bool = False
    oov: str = "random"
    negatives: int = 49
    max_words: int | None = None
    batch_texts: int = 200
    model_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.mechanisms:
            raise InvalidParameterError("mechanisms", "none", "at least one mechanism")
        super().__post_init__()
        object.__setattr__(self, "models", tuple(check_model_names(list(self.models))))
        modes = tuple(check_choice("mode", m, MODES) for m in self.modes)
        if not modes:
            raise InvalidParameterError("mode", "none", "train, test or both")
        object.__setattr__(self, "modes", modes)
        for name in ("train_size", "test_size"):
            v = getattr(self, name)
            if v is not None:
                check_int(name, v, minimum=2)
        check_int("negatives", self.negatives, minimum=1)
        if self.max_words is not None:
            check_int("max_words", self.max_words)
        check_int("batch_texts", self.batch_texts)
        check_choice("oov", self.oov, OOV_POLICIES)


#: The results of :func:`run_evaluation` (the one results type of every experiment).
EvaluationResult = Results
KEYS = ("model", "mechanism", "epsilon", "mode")


_MODE_ORDER = {"clean": 0, "train": 1, "test": 2}


def _summary_order(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """Per model and metric: the clean baseline first, then mechanism, mode, epsilon."""
    eps = r["epsilon"]
    return (
        r["model"],
        r["metric"],
        r["mechanism"] != "none",
        r["mechanism"],
        _MODE_ORDER.get(r["mode"], 9),
        -1.0 if math.isnan(eps) else eps,
    )


def _results(name: str, rows: list[dict[str, Any]], **kw: Any) -> Results:
    return Results(name, KEYS, rows, order=_summary_order, own_interval="Hanley-McNeil (one run)", **kw)


def summarize(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mean and 95% interval per (model, mechanism, epsilon, mode, metric), the clean baseline first."""
    return _results("", [dict(r) for r in rows]).summary()


# ----------------------------------------------------------------------------- helpers
class _Run:
    """Shared state of one evaluation (progress, rows, privatization)."""

    def __init__(self, task: TaskData, emb: Embedding, cfg: EvaluationConfig, report: ExperimentProgress) -> None:
        self.task, self.emb, self.cfg, self.report = task, emb, cfg, report
        self.rows: list[dict[str, Any]] = []
        randomness = cfg.randomness()
        self.entropy = randomness.entropy
        self.rng = randomness.generator
        self.seed_of = randomness.seed

    def row(self, **kw: Any) -> None:
        base = {
            "task": self.task.name,
            "model": "",
            "mechanism": "none",
            "epsilon": math.nan,
            "mode": "clean",
            "repeat": 0,
            "metric": "",
            "value": math.nan,
            "ci_low": math.nan,
            "ci_high": math.nan,
            "n_train": 0,
            "n_test": 0,
            "tokens": 0,
            "changed_rate": math.nan,
            "oov_rate": math.nan,
            "privatize_seconds": math.nan,
            "privatize_peak_mb": math.nan,
        }
        base.update(kw)
        self.rows.append(base)

    def privatize(
        self, privatizer: Privatizer, texts: Sequence[str], rng: np.random.Generator, what: str
    ) -> tuple[list[str], PrivatizeStats, float, float]:
        """Privatized texts, their statistics, the seconds taken and the peak memory (MiB, see :func:`peak_rss`)."""
        out: list[str] = []
        stats = PrivatizeStats()
        step = self.cfg.batch_texts
        with peak_rss() as peak, self.report.bar(len(texts), what) as advance:
            t0 = time.perf_counter()
            for i in range(0, len(texts), step):
                part, st = privatizer.privatize_batch_with_stats(texts[i : i + step], rng)
                out.extend(part)
                stats += st
                advance(len(part))
            seconds = time.perf_counter() - t0
        return out, stats, seconds, peak.mib


class _Peak:
    mib: float = math.nan


def _status_kib(field_name: str) -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return float(line.split()[1])
    except OSError:
        pass
    return math.nan


@contextmanager
def peak_rss() -> Iterator[_Peak]:
    """Peak resident memory added by the block, in MiB (``.mib`` once it ends; NaN where not measurable).

    Linux: the process's high-water mark (``VmHWM``) is reset through ``/proc/self/clear_refs``
    before the block, and ``VmHWM - VmRSS(before)`` is read after it. It counts everything the
    block touches: numpy buffers, artefacts built on first use (neighbour tables, output sets)
    and pages of the memory-mapped embedding read for the first time. Elsewhere: NaN.
    """
    import gc

    peak = _Peak()
    # garbage of earlier work collected now, not during the block: freed there, it would lower
    # the resident set under the block's own allocations and hide their peak
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        before = _status_kib("VmRSS")
    except OSError:
        before = math.nan
    try:
        yield peak
    finally:
        peak.mib = max(0.0, (_status_kib("VmHWM") - before) / 1024.0) if not math.isnan(before) else math.nan


def truncate_words(texts: Sequence[str], max_words: int) -> list[str]:
    """Each text cut after its first ``max_words`` word tokens (the separator after the last one is dropped)."""
    out = []
    for t in texts:
        parts = split_words(t)
        out.append(t if len(parts) <= 2 * max_words + 1 else "".join(parts[: 2 * max_words]))
    return out


def _priv_fields(stats: PrivatizeStats, seconds: float, peak_mib: float) -> dict[str, Any]:
    known = stats.tokens - stats.oov
    return {
        "privatize_peak_mb": peak_mib,
        "tokens": stats.tokens,
        "changed_rate": stats.changed / known if known else math.nan,
        "oov_rate": stats.oov_rate,
        "privatize_seconds": seconds,
    }


def _draw(
    n_total: int, size: int | None, halves: bool, rng: np.random.Generator, name: str
) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint index sets (the second empty when ``halves`` is False)."""
    if size is None:
        size = n_total // 2 if halves else n_total
    need = 2 * size if halves else size
    if size < 1 or need > n_total:
        allowed = f"at most {n_total // 2 if halves else n_total} (the data have {n_total:,} rows"
        allowed += "; membership inference needs two disjoint sets of this size)" if halves else ")"
        raise InvalidParameterError(name, size, allowed)
    perm = rng.permutation(n_total)
    return np.sort(perm[:size]), np.sort(perm[size:need])


# ----------------------------------------------------------------------------- classification
def _classification(run: _Run) -> None:
    cfg, task = run.cfg, run.task
    train: Split = task.train
    test: Split = task.test
    k = len(task.classes)
    mia = cfg.membership
    splits = []
    for r in range(cfg.repeats):
        rng = run.rng(r, 0)
        tr1, tr2 = _draw(len(train), cfg.train_size, mia, rng, "train_size")
        te1, te2 = _draw(len(test), cfg.test_size, mia, rng, "test_size")
        parts = (train.take(tr1), train.take(tr2), test.take(te1), test.take(te2))
        if cfg.max_words is not None:
            parts = tuple(p.with_texts(truncate_words(p.texts, cfg.max_words)) for p in parts)  # type: ignore[assignment]
        splits.append(parts)

    def factory(model: str, seed: int) -> Callable[[], TextClassifier]:
        return lambda: make_model(model, k, seed, **dict(cfg.model_options.get(model, {})))

    clean: dict[tuple[int, str], TextClassifier] = {}
    attacks: dict[tuple[int, str], object] = {}
    for r, (TR1, TR2, TE1, TE2) in enumerate(splits):
        for mi, model in enumerate(cfg.models):
            m = factory(model, run.seed_of(r, 1, mi))().fit(TR1.texts, TR1.labels)
            clean[r, model] = m
            size = {"n_train": len(TR1), "n_test": len(TE1), "repeat": r, "model": model}
            run.row(metric="accuracy", value=accuracy(m.predict_proba(TE1.texts), TE1.labels), **size)
            if mia:
                atk = shadow_attack(
                    factory(model, run.seed_of(r, 2, mi)),
                    TE2,
                    TE1,
                    seed=run.seed_of(r, 3, mi),
                    label_feature=cfg.label_feature,
                )
                attacks[r, model] = atk
                res = membership_inference(m, TR1, TR2, atk, label_feature=cfg.label_feature)
                run.row(metric="mia_auc", value=res.auc, ci_low=res.ci_low, ci_high=res.ci_high, **size)
    for j, (mech_name, make_mech) in enumerate(cfg.mechanisms.items()):
        for ei, eps in enumerate(cfg.epsilons):
            privatizer = _privatizer(make_mech(run.emb, eps), cfg.oov)
            for r, (TR1, TR2, TE1, _TE2) in enumerate(splits):
                common = {"mechanism": mech_name, "epsilon": eps, "repeat": r, "n_train": len(TR1), "n_test": len(TE1)}
                prng = run.rng(r, 10 + j, ei)
                if "train" in cfg.modes:
                    texts, st, sec, mem = run.privatize(
                        privatizer, TR1.texts, prng, f"{mech_name} eps={eps:g} repeat {r + 1}: train"
                    )
                    pf = _priv_fields(st, sec, mem)
                    for mi, model in enumerate(cfg.models):
                        m = factory(model, run.seed_of(r, 1, mi))().fit(texts, TR1.labels)
                        run.row(
                            mode="train",
                            model=model,
                            metric="accuracy",
                            value=accuracy(m.predict_proba(TE1.texts), TE1.labels),
                            **common,
                            **pf,
                        )
                        if mia:
                            res = membership_inference(m, TR1, TR2, attacks[r, model], label_feature=cfg.label_feature)
                            run.row(
                                mode="train",
                                model=model,
                                metric="mia_auc",
                                value=res.auc,
                                ci_low=res.ci_low,
                                ci_high=res.ci_high,
                                **common,
                                **pf,
                            )
                if "test" in cfg.modes:
                    texts, st, sec, mem = run.privatize(
                        privatizer, TE1.texts, prng, f"{mech_name} eps={eps:g} repeat {r + 1}: test"
                    )
                    pf = _priv_fields(st, sec, mem)
                    for model in cfg.models:
                        run.row(
                            mode="test",
                            model=model,
                            metric="accuracy",
                            value=accuracy(clean[r, model].predict_proba(texts), TE1.labels),
                            **common,
                            **pf,
                        )


# ----------------------------------------------------------------------------- ranking
def _ranking(run: _Run) -> list[str]:
    cfg, task = run.cfg, run.task
    train: QAPairs = task.train
    test: QAPairs = task.test
    notes = ["membership inference is not run for answer ranking (no classifier outputs to attack)"]
    q_names = sorted(set(test.questions))
    q_index = {q: i for i, q in enumerate(q_names)}
    a_names = sorted(set(test.answers))
    a_index = {a: i for i, a in enumerate(a_names)}
    tq = np.array([q_index[q] for q in test.questions])
    ta = np.array([a_index[a] for a in test.answers])
    with_rel = np.unique(tq[test.relevant])
    model = "tfidf-ranker"
    for r in range(cfg.repeats):
        rng = run.rng(r, 0)
        tr_idx, _ = _draw(len(train), cfg.train_size, False, rng, "train_size")
        q_sel, _ = _draw(len(with_rel), cfg.test_size, False, rng, "test_size")
        questions = with_rel[q_sel]
        # candidates: each question's labelled answers + random other answers
        cq, ca, cr = [], [], []
        for q in questions.tolist():
            own = np.flatnonzero(tq == q)
            cq.extend([q] * len(own))
            ca.extend(ta[own].tolist())
            cr.extend(test.relevant[own].tolist())
            banned = set(ta[own].tolist())
            neg = rng.choice(len(a_names), size=min(cfg.negatives + len(banned), len(a_names)), replace=False)
            negs = [a for a in neg.tolist() if a not in banned][: cfg.negatives]
            cq.extend([q] * len(negs))
            ca.extend(negs)
            cr.extend([False] * len(negs))
        cand_q, cand_a, rel = np.array(cq), np.array(ca), np.array(cr, dtype=bool)
        used_q = np.unique(cand_q)
        used_a = np.unique(cand_a)
        train_texts = sorted(
            {train.questions[i] for i in tr_idx.tolist()} | {train.answers[i] for i in tr_idx.tolist()}
        )
        size = {"n_train": len(tr_idx), "n_test": len(questions), "repeat": r, "model": model}

        def score(
            ranker: TfidfRanker,
            qt: Mapping[int, str],
            at: Mapping[int, str],
            cand_q: np.ndarray = cand_q,
            cand_a: np.ndarray = cand_a,
            rel: np.ndarray = rel,
        ) -> tuple[float, float]:
            s = ranker.score([qt[q] for q in cand_q.tolist()], [at[a] for a in cand_a.tolist()])
            return ranking_scores(s, rel, cand_q)

        clean_q = {q: q_names[q] for q in used_q.tolist()}
        clean_a = {a: a_names[a] for a in used_a.tolist()}
        base = TfidfRanker().fit(train_texts)
        mp, mrr = score(base, clean_q, clean_a)
        run.row(metric="map", value=mp, **size)
        run.row(metric="mrr", value=mrr, **size)
        for j, (mech_name, make_mech) in enumerate(cfg.mechanisms.items()):
            for ei, eps in enumerate(cfg.epsilons):
                privatizer = _privatizer(make_mech(run.emb, eps), cfg.oov)
                prng = run.rng(r, 10 + j, ei)
                common = {"mechanism": mech_name, "epsilon": eps, **size}
                if "train" in cfg.modes:
                    texts, st, sec, mem = run.privatize(
                        privatizer, train_texts, prng, f"{mech_name} eps={eps:g} repeat {r + 1}: train"
                    )
                    ranker = TfidfRanker().fit(texts)
                    mp, mrr = score(ranker, clean_q, clean_a)
                    pf = _priv_fields(st, sec, mem)
                    run.row(mode="train", metric="map", value=mp, **common, **pf)
                    run.row(mode="train", metric="mrr", value=mrr, **common, **pf)
                if "test" in cfg.modes:
                    keys = [("q", q) for q in used_q.tolist()] + [("a", a) for a in used_a.tolist()]
                    raw = [clean_q[i] if kind == "q" else clean_a[i] for kind, i in keys]
                    texts, st, sec, mem = run.privatize(
                        privatizer, raw, prng, f"{mech_name} eps={eps:g} repeat {r + 1}: test"
                    )
                    pq = {i: t for (kind, i), t in zip(keys, texts, strict=True) if kind == "q"}
                    pa = {i: t for (kind, i), t in zip(keys, texts, strict=True) if kind == "a"}
                    mp, mrr = score(base, pq, pa)
                    pf = _priv_fields(st, sec, mem)
                    run.row(mode="test", metric="map", value=mp, **common, **pf)
                    run.row(mode="test", metric="mrr", value=mrr, **common, **pf)
    return notes


def run_evaluation(
    task: TaskData,
    embedding: Vocabulary,
    config: EvaluationConfig,
    *,
    show_progress: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> Results:
    """Run the whole grid; see the module docstring for the protocol."""
    embedding = Embedding.check(embedding)
    run = _Run(task, embedding, config, ExperimentProgress(show_progress, log))
    notes: list[str] = []
    if task.kind == "ranking":
        notes = _ranking(run)
    else:
        if len(task.classes) < 2:
            raise InvalidParameterError("task", task.name, "labelled data with at least two classes")
        _classification(run)
    cfg = config
    settings = {
        "task": task.name,
        "kind": task.kind,
        "embedding": embedding.name,
        "mechanisms": list(cfg.mechanisms),
        "epsilons": list(cfg.epsilons),
        "models": list(cfg.models) if task.kind == "classification" else ["tfidf-ranker"],
        "modes": list(cfg.modes),
        "repeats": cfg.repeats,
        "seed": cfg.describe_random_state(run.entropy),
        "entropy": run.entropy,
        "train_size": cfg.train_size,
        "test_size": cfg.test_size,
        "membership": cfg.membership and task.kind == "classification",
        "oov": cfg.oov,
        "max_words": cfg.max_words,
        "batch_texts": cfg.batch_texts,
        "mechanism_info": {
            name: mechanism_info(make(embedding, cfg.epsilons[0]), getattr(make, "options", None))
            for name, make in cfg.mechanisms.items()
        },
    }
    return _results(task.name, run.rows, settings=settings, notes=notes)


def mechanism_info(mechanism: Mechanism, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a results file records of a mechanism: its registry name, metric, the form of its guarantee
    (:attr:`Mechanism.guarantee_form`) and the ``options`` it was made with (plain JSON values only),
    enough for ``make_mechanism(name, embedding, epsilon, **options)`` to rebuild it."""
    return {
        "name": mechanism.name,
        "metric": str(mechanism.metric),
        "guarantee_form": type(mechanism).guarantee_form,
        "options": {k: v for k, v in (options or {}).items() if v is None or isinstance(v, str | int | float | bool)},
    }


def _privatizer(mechanism: Any, oov: str) -> Privatizer:
    """An experiment's Privatizer. The default ``oov="random"`` is the library's; ``oov="keep"`` (not private:
    out-of-vocabulary words pass verbatim) is an explicit measured setting here, not a release, so no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return Privatizer(mechanism, oov=oov, check_strength=False)
