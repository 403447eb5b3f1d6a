"""User-level provenance audit (Song and Shmatikov, KDD 2019; seed 003 section 6, Tables 3-4).

Question: "was this user's data used to train this text-generation model?" The auditor
only sees the model's next-word predictions.

Model. A word-level bigram language model with interpolated smoothing,
``P(w | v) = lam * c(v, w) / c(v) + (1 - lam) * P_uni(w)`` with an add-one unigram
(:class:`BigramLM`; numpy/scipy). Song and Shmatikov used LSTM models; a smoothed n-gram
model memorises its training users the same way (rare bigrams of a user rank high) and
trains in a fraction of a second.

Features (Song and Shmatikov's rank features). For every word of a user's texts, the rank of
the true next word among the whole vocabulary under the model's prediction given the
previous word (1 = the most likely); the user's feature vector is the normalised
histogram of these ranks in log2 bins (1, 2, 3-4, 5-8, ..., and a bin for words the model
never saw).

Protocol (per repeat, users drawn at random without overlap):

- the *target* users are split into members and non-members; the target model is trained
  on the members' texts, transformed by the mechanism under audit (``privatize``) or a
  non-private baseline (:mod:`deniable.experiments.baselines`);
- ``shadows`` shadow models are trained, each on a random half of the disjoint *shadow*
  users' clean texts (the auditor does not know the perturbation); their in/out users
  label the auditor's training features;
- the auditor (the MLP of :func:`deniable.experiments.models.attack_model`) scores every
  target user's features, computed from the model's predictions on the user's *original*
  texts. Metrics: AUC (Hanley-McNeil interval for one run), and precision, recall and accuracy
  of "member" at score >= 0.5 (Clopper-Pearson intervals for one run); t-intervals over repeats.

The search logs the paper used (AOL, Pass et al. 2006) are not available; the users here are
20 Newsgroups senders and the six Enron mailboxes (:func:`~deniable.experiments.data.load_user_corpus`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from .._errors import InvalidParameterError
from .._validation import check_int, check_probability
from ..embedding import Embedding
from ..privatizer import Privatizer
from ..text import words
from .baselines import BASELINES, Baseline, make_baseline
from .data import UserCorpus
from .harness import KEYS, MechanismFactory
from .metrics import auc, auc_interval, proportion_interval
from .models import attack_model
from .results import ExperimentProgress, ExperimentRandomness, Results

__all__ = ["BigramLM", "audit_users", "rank_features", "score_target", "train_auditor", "user_audit"]

#: rank histogram bins: [1], [2], [3, 4], [5, 8], ... up to 2^(BINS-2), then everything above, then unseen words
BINS = 14


def _tokens(texts: Sequence[str]) -> list[list[str]]:
    return [[w.lower() for w in words(t)] for t in texts]


@dataclass
class BigramLM:
    """An interpolated bigram language model over the words of its training texts."""

    lam: float = 0.8
    vocab: dict[str, int] = field(default_factory=dict)
    _counts: Any = field(default=None, repr=False)
    _uni: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0), repr=False)

    def fit(self, texts: Sequence[str]) -> BigramLM:
        check_probability("lam", self.lam)
        toks = _tokens(texts)
        vocab: dict[str, int] = {"<s>": 0}
        for ws in toks:
            for w in ws:
                vocab.setdefault(w, len(vocab))
        self.vocab = vocab
        prev, nxt = self._pairs(toks)
        v = len(vocab)
        c = sp.csr_matrix((np.ones(prev.size), (prev, nxt)), shape=(v, v))
        c.sum_duplicates()
        self._counts = c
        uni = np.bincount(nxt, minlength=v).astype(np.float64) + 1.0
        self._uni = uni / uni.sum()
        return self

    def _pairs(self, toks: list[list[str]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        get = self.vocab.get
        prev: list[int] = []
        nxt: list[int] = []
        for ws in toks:
            ids = [0, *(get(w, -1) for w in ws)]
            prev.extend(ids[:-1])
            nxt.extend(ids[1:])
        return np.array(prev, dtype=np.int64), np.array(nxt, dtype=np.int64)

    def ranks(self, texts: Sequence[str]) -> npt.NDArray[np.int64]:
        """The rank of every true next word under ``P(. | previous word)`` (1 = most likely); 0 = unseen word.

        One value per word of ``texts`` (in order; the first word of a text follows ``<s>``). A
        previous word the model never saw, or one never followed, falls back to the unigram part.
        """
        if self._counts is None:
            raise InvalidParameterError("model", "unfitted", "a fitted BigramLM")
        prev, nxt = self._pairs(_tokens(texts))
        out = np.zeros(nxt.size, dtype=np.int64)
        base = (1 - self.lam) * self._uni
        sorted_base = np.sort(base)
        v = base.size
        seen = nxt >= 0
        c = self._counts
        totals = np.asarray(c.sum(axis=1)).ravel()
        # every scored word: how many vocabulary words beat it on the unigram part alone
        order = np.argsort(prev, kind="stable")
        order = order[seen[order]]
        ctxs, starts = np.unique(prev[order], return_index=True)
        bounds = np.r_[starts, order.size]
        for ctx, a, b in zip(ctxs.tolist(), bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            at = order[a:b]
            w = nxt[at]
            s = base[w]
            above = v - np.searchsorted(sorted_base, s, side="right")
            if ctx >= 0 and totals[ctx] > 0:
                lo, hi = c.indptr[ctx], c.indptr[ctx + 1]
                cols, vals = c.indices[lo:hi], c.data[lo:hi] * (self.lam / totals[ctx])
                pos = np.minimum(np.searchsorted(cols, w), cols.size - 1)
                s = s + np.where(cols[pos] == w, vals[pos], 0.0)
                row = base[cols]
                # the context's followers: replace their unigram-only comparison by the full score
                above = (
                    v
                    - np.searchsorted(sorted_base, s, side="right")
                    - (row[None, :] > s[:, None]).sum(axis=1)
                    + (row[None, :] + vals[None, :] > s[:, None]).sum(axis=1)
                )
            out[at] = above + 1
        return out

    def ranks_by_group(self, groups: Sequence[Sequence[str]]) -> list[npt.NDArray[np.int64]]:
        """:meth:`ranks` of each group of texts (e.g. each user's), in one pass."""
        flat = [t for g in groups for t in g]
        r = self.ranks(flat)
        sizes = [sum(len(words(t)) for t in g) for g in groups]
        return np.split(r, np.cumsum(sizes)[:-1])


def rank_features(ranks: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The normalised histogram of ranks in log2 bins (last bin: unseen words, rank 0)."""
    r = np.asarray(ranks, dtype=np.int64)
    if r.size == 0:
        return np.zeros(BINS)
    b = np.where(r > 0, np.minimum(np.ceil(np.log2(np.maximum(r, 1))).astype(np.int64), BINS - 2), BINS - 1)
    return np.bincount(b, minlength=BINS).astype(np.float64) / r.size


def _user_features(model: BigramLM, texts_by_user: Sequence[Sequence[str]]) -> npt.NDArray[np.float64]:
    return np.stack([rank_features(r) for r in model.ranks_by_group(texts_by_user)])


def train_auditor(shadow_users: Sequence[Sequence[str]], *, shadows: int = 3, seed: int = 0) -> Any:
    """The auditor: the attack MLP trained on the rank features of ``shadows`` shadow models, each
    trained on a random half of ``shadow_users`` (each user's texts), labelled in / out."""
    check_int("shadows", shadows)
    if len(shadow_users) < 4:
        raise InvalidParameterError("shadow users", len(shadow_users), "at least 4")
    rng = np.random.default_rng(seed)
    X, y = [], []
    for _ in range(shadows):
        inside = rng.permutation(len(shadow_users)) < len(shadow_users) // 2
        lm = BigramLM().fit([t for u, ts in enumerate(shadow_users) if inside[u] for t in ts])
        X.append(_user_features(lm, shadow_users))
        y.append(inside.astype(np.int64))
    Xa, ya = np.concatenate(X), np.concatenate(y)
    return attack_model(seed, batch_size=min(64, len(ya))).fit(Xa, ya)


def score_target(
    auditor: Any, target: BigramLM, members: Sequence[Sequence[str]], non_members: Sequence[Sequence[str]]
) -> dict[str, float]:
    """Score every user's *original* texts against ``target``: auc (with auc_low / auc_high) and the
    counts behind precision, recall and accuracy of "member" at score >= 0.5."""
    if not members or not non_members:
        raise InvalidParameterError(
            "users", f"{len(members)} / {len(non_members)}", "at least 1 member and 1 non-member"
        )
    users = [*members, *non_members]
    truth = np.r_[np.ones(len(members), dtype=bool), np.zeros(len(non_members), dtype=bool)]
    scores = auditor.predict_proba(_user_features(target, users))[:, 1]
    pred = scores >= 0.5
    a = auc(scores, truth)
    lo, hi = auc_interval(a, int(truth.sum()), int((~truth).sum()))
    return {
        "auc": a,
        "auc_low": lo,
        "auc_high": hi,
        "tp": int((pred & truth).sum()),
        "predicted": int(pred.sum()),
        "members": int(truth.sum()),
        "correct": int((pred == truth).sum()),
        "users": len(users),
    }


def audit_users(
    target: BigramLM,
    members: Sequence[Sequence[str]],
    non_members: Sequence[Sequence[str]],
    shadow_users: Sequence[Sequence[str]],
    *,
    shadows: int = 3,
    seed: int = 0,
) -> dict[str, float]:
    """:func:`train_auditor` on ``shadow_users``, then :func:`score_target` (each user: their original texts)."""
    return score_target(train_auditor(shadow_users, shadows=shadows, seed=seed), target, members, non_members)


def _metric_rows(res: dict[str, float]) -> list[dict[str, Any]]:
    """precision, recall, accuracy (Clopper-Pearson 95%) and auc (Hanley-McNeil 95%)."""
    rows = [{"metric": "auc", "value": res["auc"], "ci_low": res["auc_low"], "ci_high": res["auc_high"]}]
    for metric, k, n in (
        ("precision", res["tp"], res["predicted"]),
        ("recall", res["tp"], res["members"]),
        ("accuracy", res["correct"], res["users"]),
    ):
        # n = 0 (nobody predicted a member): precision 0 by convention (seed 003 Table 4), no interval
        lo, hi = proportion_interval(int(k), int(n))
        rows.append({"metric": metric, "value": k / n if n else 0.0, "ci_low": lo, "ci_high": hi})
    return rows


def user_audit(
    corpus: UserCorpus,
    embedding: Embedding,
    mechanisms: Mapping[str, MechanismFactory],
    epsilons: Sequence[float],
    *,
    baselines: Sequence[str] = BASELINES,
    repeats: int = 3,
    shadows: int = 3,
    max_words: int | None = None,
    oov: str = "random",
    random_state: int | np.random.Generator | None = None,
    show_progress: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> Results:
    """The user-level audit for every baseline and every (mechanism, epsilon) (see the module docstring).

    Rows have the harness's setting columns (``model`` = "bigram", ``mechanism`` (a baseline
    name or a mechanism), ``epsilon`` (NaN for baselines), ``mode`` = "train") and the metrics
    auc, precision, recall, accuracy. Lower is better (privacy loss).
    """
    for b in baselines:
        if b not in BASELINES:
            raise InvalidParameterError("baselines", b, "any of " + ", ".join(BASELINES))
    check_int("repeats", repeats)
    n_users = corpus.users
    if n_users < 8:
        raise InvalidParameterError("corpus", f"{n_users} users", "at least 8 users (target and shadow sides)")
    texts_by_user: list[list[str]] = [[] for _ in range(n_users)]
    for t, u in zip(corpus.authors.texts, corpus.authors.labels.tolist(), strict=True):
        texts_by_user[u].append(t if max_words is None else " ".join(words(t)[:max_words]))
    randomness = ExperimentRandomness.from_random_state(random_state)
    report = ExperimentProgress(show_progress, log)
    privatizers = {
        (name, eps): Privatizer(make(embedding, eps), oov=oov, check_strength=False)
        for name, make in mechanisms.items()
        for eps in epsilons
    }
    transforms: list[tuple[str, float, Baseline]] = [(b, math.nan, make_baseline(b, embedding)) for b in baselines]
    for (name, eps), priv in privatizers.items():
        transforms.append((name, eps, priv.privatize_batch))
    rows: list[dict[str, Any]] = []
    with report.bar(repeats * len(transforms), "user audit") as advance:
        for r in range(repeats):
            rng = randomness.generator(r, 0)
            perm = rng.permutation(n_users)
            half = n_users // 2
            target, shadow = perm[:half], perm[half:]
            members, non_members = target[: half // 2], target[half // 2 :]
            member_texts = [t for u in members for t in texts_by_user[u]]
            auditor = train_auditor([texts_by_user[u] for u in shadow], shadows=shadows, seed=randomness.seed(r, 2))
            for ti, (name, eps, transform) in enumerate(transforms):
                trained = transform(member_texts, randomness.generator(r, 1, ti))
                res = score_target(
                    auditor,
                    BigramLM().fit(trained),
                    [texts_by_user[u] for u in members],
                    [texts_by_user[u] for u in non_members],
                )
                base = {
                    "model": "bigram",
                    "mechanism": name,
                    "epsilon": eps,
                    "mode": "train",
                    "repeat": r,
                    "n_train": len(members),
                    "n_test": res["users"],
                }
                rows += [{**base, **m} for m in _metric_rows(res)]
                advance(1)
    settings = {
        "attack": "user-audit",
        "corpus": corpus.name,
        "users": n_users,
        "documents": len(corpus),
        "embedding": embedding.name,
        "baselines": list(baselines),
        "mechanisms": list(mechanisms),
        "epsilons": list(epsilons),
        "repeats": repeats,
        "shadows": shadows,
        "max_words": max_words,
        "entropy": randomness.entropy,
    }
    return Results(
        f"{corpus.name} user-level audit",
        KEYS,
        rows,
        settings=settings,
        notes=[
            "privacy loss (lower is better): the auditor's precision, recall, accuracy and AUC at telling "
            "members (users whose texts trained the model) from non-members",
            "original: the texts unchanged; nearest, decoys, decoys-noise: non-private baselines (docs/audit.md)",
        ],
        own_interval="Clopper-Pearson / Hanley-McNeil (one run)",
    )
