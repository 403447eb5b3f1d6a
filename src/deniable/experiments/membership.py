"""Membership inference exactly as seed 004, Appendix C (after Shokri et al. 2017).

Four disjoint sets: TR1 and TR2 from the training side, TE1 and TE2 from the test side.

- target model T: trained on (privatized) TR1 -- the model whose utility is measured;
- shadow model S: the same kind of model, trained on clean TE2;
- attack model A (an MLP, 2 x 64 ReLU): trained on S's outputs for TE2 (label "in")
  and TE1 ("out");
- evaluation: A scores T's outputs for TR1 ("in") and TR2 ("out"); the AUC of those
  scores is the attack's success (0.5 = no leakage).

The attacker queries T with the *original* TR1 records (it wants to know whether a
record it holds was used; it never sees the privatized copy). Features are T's (or
S's) output probability vector, as in App. C; ``label_feature=True`` also appends
the one-hot true label (Shokri et al.'s per-class information), a stronger attack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .data import Split
from .metrics import auc, auc_interval
from .models import TextClassifier, attack_model

__all__ = ["MembershipResult", "attack_features", "membership_inference", "shadow_attack", "train_attack"]


@dataclass(frozen=True)
class MembershipResult:
    """AUC of the attack with its Hanley-McNeil 95% interval and the set sizes."""

    auc: float
    ci_low: float
    ci_high: float
    n_in: int
    n_out: int


def attack_features(model: TextClassifier, data: Split, *, label_feature: bool = False) -> np.ndarray:
    """The model's output probabilities for ``data`` (and the one-hot label if asked)."""
    p = np.asarray(model.predict_proba(data.texts), dtype=np.float64)
    if label_feature:
        p = np.hstack([p, np.eye(p.shape[1])[data.labels]])
    return p


def _in_then_out(model: TextClassifier, inside: Split, outside: Split, label_feature: bool) -> np.ndarray:
    """The attack's inputs: ``model``'s features of the member rows, then of the non-member rows."""
    return np.vstack(
        [
            attack_features(model, inside, label_feature=label_feature),
            attack_features(model, outside, label_feature=label_feature),
        ]
    )


def train_attack(
    shadow: TextClassifier, te2: Split, te1: Split, *, seed: int, label_feature: bool = False, epochs: int = 20
) -> object:
    """Fit the attack MLP on the shadow model's outputs: TE2 = in (its training set), TE1 = out."""
    X = _in_then_out(shadow, te2, te1, label_feature)
    y = np.r_[np.ones(len(te2), dtype=np.int64), np.zeros(len(te1), dtype=np.int64)]
    return attack_model(seed, epochs=epochs, batch_size=min(64, len(y))).fit(X, y)


def membership_inference(
    target: TextClassifier,
    tr1: Split,
    tr2: Split,
    attack: object,
    *,
    label_feature: bool = False,
) -> MembershipResult:
    """Score the trained ``attack`` on ``target``'s outputs for TR1 (in) and TR2 (out)."""
    X = _in_then_out(target, tr1, tr2, label_feature)
    members = np.r_[np.ones(len(tr1), dtype=bool), np.zeros(len(tr2), dtype=bool)]
    scores = attack.predict_proba(X)[:, 1]  # type: ignore[attr-defined]
    a = auc(scores, members)
    lo, hi = auc_interval(a, len(tr1), len(tr2))
    return MembershipResult(a, lo, hi, len(tr1), len(tr2))


def shadow_attack(
    make: Callable[[], TextClassifier], te2: Split, te1: Split, *, seed: int, label_feature: bool = False
) -> object:
    """Train the shadow model (``make()`` on clean TE2) and the attack model on its outputs."""
    shadow = make().fit(te2.texts, te2.labels)
    return train_attack(shadow, te2, te1, seed=seed, label_feature=label_feature)
