"""Shared pieces of the engine tests: IMDb-like rows and a two-proportion z-test."""

from __future__ import annotations

import math

WORDS = ["the", "hockey", "game", "was", "great", "nasa", "rocket", "launch", "a", "good", "puck", "orbit"]


def imdb_like(n: int, seed: int = 0) -> list[dict[str, object]]:
    """``n`` rows: id, review (toy-vocabulary words + punctuation), label and a number (untouched)."""
    import random

    r = random.Random(seed)
    rows = []
    for i in range(n):
        words = [r.choice(WORDS) for _ in range(r.randint(3, 12))]
        text = " ".join(words).capitalize() + r.choice([".", "!", "?"])
        rows.append({"id": i, "review": text, "label": i % 2, "score": float(i) / 7})
    return rows


def same_share(a: int, n_a: int, b: int, n_b: int, sigmas: float = 4.0) -> bool:
    """Two-proportion z-test: are ``a/n_a`` and ``b/n_b`` within ``sigmas`` standard errors?"""
    p = (a + b) / (n_a + n_b)
    se = math.sqrt(max(p * (1 - p), 1e-12) * (1 / n_a + 1 / n_b))
    return abs(a / n_a - b / n_b) <= sigmas * se


def single_process_changed(emb_dir: object, texts: list[str], epsilon: float) -> tuple[int, int]:
    """(changed, tokens) of the single-process path on ``texts``."""
    from deniable.integrations import BatchPrivatizer

    batch = BatchPrivatizer(mechanism="madlib", epsilon=epsilon, embedding=str(emb_dir), columns=("review",))
    _, stats = batch.privatize_texts(texts)
    return stats.changed, stats.tokens
