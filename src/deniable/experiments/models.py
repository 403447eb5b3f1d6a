"""Models the harness trains: text classifiers, the membership-inference attack model, an answer ranker.

- :class:`TfidfLogistic`: TF-IDF (word 1-2 grams) + logistic regression (scikit-learn).
- :class:`FastTextClassifier`: the fastText architecture (Joulin et al. 2017), the
  classifier seed 004 used: hashed word n-grams (unigrams by default) -> averaged embeddings -> linear
  softmax, trained with Adam (lazy, sparse rows) in mini-batches. Pure numpy/scipy.
- :func:`attack_model`: the MLP of seed 004 App. C (two hidden layers of 64 ReLU
  units, Adam, batch 64, 20 epochs; scikit-learn).
- :class:`TfidfRanker`: scores (question, answer) by the cosine of TF-IDF vectors
  fitted on the training side; used for MAP / MRR on InsuranceQA.

Every model takes a ``seed`` (models are experiment code: nothing is released) and
exposes ``fit(texts, labels)`` and ``predict_proba(texts) -> (n, classes)``.
scikit-learn (the ``eval`` extra) is imported only when a model is built.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from .._errors import DeniableError, InvalidParameterError
from .._validation import check_choice, check_int, check_positive
from ..text import words

__all__ = [
    "MODELS",
    "FastTextClassifier",
    "TextClassifier",
    "TfidfLogistic",
    "TfidfRanker",
    "attack_model",
    "make_model",
]

#: scikit-learn vectorizers split text with the library's tokenizer (deniable.text.words)
_TOKENS: dict[str, Any] = {"tokenizer": words, "token_pattern": None}


def _sklearn() -> Any:
    try:
        import sklearn
    except ImportError:  # pragma: no cover - depends on the environment
        raise DeniableError(
            "evaluation needs scikit-learn, which is not installed: pip install 'deniable[eval]'"
        ) from None
    return sklearn


class TextClassifier(Protocol):
    """What the harness needs of a classifier."""

    def fit(self, texts: Sequence[str], labels: npt.ArrayLike) -> TextClassifier: ...

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray: ...


def _check_fit_input(texts: Sequence[str], labels: npt.ArrayLike, n_classes: int | None) -> tuple[np.ndarray, int]:
    y = np.asarray(labels, dtype=np.int64)
    if len(texts) != len(y) or len(y) == 0:
        raise InvalidParameterError(
            "labels", f"{len(y)} labels", f"one label per text ({len(texts)} texts), at least one"
        )
    k = int(y.max()) + 1 if n_classes is None else n_classes
    if y.min() < 0 or y.max() >= k:
        raise InvalidParameterError("labels", "out of range", f"integers in [0, {k})")
    return y, k


@dataclass
class TfidfLogistic:
    """TF-IDF (sublinear tf, word uni+bigrams) + L2 logistic regression.

    ``n_classes`` fixes the width of :meth:`predict_proba` even when the training
    labels miss a class (columns of absent classes are 0).
    """

    n_classes: int | None = None
    C: float = 10.0
    max_features: int = 100_000
    ngram_max: int = 2
    seed: int = 0
    _pipe: Any = field(default=None, init=False, repr=False)
    _seen: np.ndarray | None = field(default=None, init=False, repr=False)

    def fit(self, texts: Sequence[str], labels: npt.ArrayLike) -> TfidfLogistic:
        _sklearn()
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline

        y, k = _check_fit_input(texts, labels, self.n_classes)
        self.n_classes = k
        seen = np.unique(y)
        self._seen = seen
        vec = TfidfVectorizer(
            **_TOKENS,
            ngram_range=(1, self.ngram_max),
            sublinear_tf=True,
            max_features=self.max_features,
            dtype=np.float32,
        )
        if len(seen) == 1:
            self._pipe = None
            return self
        clf = LogisticRegression(C=self.C, max_iter=2000, random_state=self.seed)
        self._pipe = make_pipeline(vec, clf).fit(list(texts), y)
        return self

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        if self._seen is None or self.n_classes is None:
            raise DeniableError("the model is not fitted")
        out = np.zeros((len(texts), self.n_classes))
        if self._pipe is None:
            out[:, int(self._seen[0])] = 1.0
            return out
        out[:, self._seen] = self._pipe.predict_proba(list(texts))
        return out


@dataclass
class FastTextClassifier:
    """fastText-style classifier: mean of hashed uni+bigram embeddings -> linear softmax.

    Defaults follow seed 004 App. C where it is specific (20 epochs, batch 64, Adam)
    and fastText's paper otherwise (10 hidden units, word unigrams hashed into 2^18
    buckets); the learning rate is 0.01 rather than PyTorch's default 0.001 because the
    training sets here are small subsamples (see docs/evaluation.md).
    """

    n_classes: int | None = None
    dim: int = 10
    buckets: int = 2**18
    ngram_max: int = 1
    epochs: int = 20
    batch_size: int = 64
    lr: float = 0.01
    seed: int = 0
    _vec: Any = field(default=None, init=False, repr=False)
    _params: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        check_int("dim", self.dim)
        check_int("buckets", self.buckets, minimum=16)
        check_int("epochs", self.epochs)
        check_int("batch_size", self.batch_size)
        check_positive("lr", self.lr)

    def _features(self, texts: Sequence[str]) -> sp.csr_matrix:
        if self._vec is None:
            _sklearn()
            from sklearn.feature_extraction.text import HashingVectorizer

            self._vec = HashingVectorizer(
                **_TOKENS,
                ngram_range=(1, self.ngram_max),
                n_features=self.buckets,
                alternate_sign=False,
                norm="l1",
                dtype=np.float32,
            )
        X = self._vec.transform(list(texts))
        return sp.csr_matrix(X, dtype=np.float32)

    def fit(self, texts: Sequence[str], labels: npt.ArrayLike) -> FastTextClassifier:
        y, k = _check_fit_input(texts, labels, self.n_classes)
        self.n_classes = k
        X = self._features(texts)
        rng = np.random.default_rng(self.seed)
        d = self.dim
        E = rng.uniform(-1.0 / d, 1.0 / d, size=(self.buckets, d)).astype(np.float32)
        W = np.zeros((d, k), dtype=np.float32)
        b = np.zeros(k, dtype=np.float32)
        mE, vE = np.zeros_like(E), np.zeros_like(E)
        mW, vW, mb, vb = np.zeros_like(W), np.zeros_like(W), np.zeros_like(b), np.zeros_like(b)
        b1, b2, eps_adam, lr = 0.9, 0.999, 1e-8, self.lr
        Y = np.eye(k, dtype=np.float32)[y]
        n = X.shape[0]
        t = 0
        for _ in range(self.epochs):
            order = rng.permutation(n)
            for start in range(0, n, self.batch_size):
                idx = order[start : start + self.batch_size]
                Xb = X[idx]
                cols, inv = np.unique(Xb.indices, return_inverse=True)
                Xs = sp.csr_matrix((Xb.data, inv.ravel(), Xb.indptr), shape=(len(idx), len(cols)))
                Er = E[cols]
                H = Xs @ Er
                logits = H @ W + b
                logits -= logits.max(axis=1, keepdims=True)
                P = np.exp(logits)
                P /= P.sum(axis=1, keepdims=True)
                G = (P - Y[idx]) / len(idx)
                gW = H.T @ G
                gb = G.sum(axis=0)
                gE = Xs.T @ (G @ W.T)
                t += 1
                c1, c2 = 1 - b1**t, 1 - b2**t
                for p, g, m, v in ((W, gW, mW, vW), (b, gb, mb, vb)):
                    m *= b1
                    m += (1 - b1) * g
                    v *= b2
                    v += (1 - b2) * g * g
                    p -= lr * (m / c1) / (np.sqrt(v / c2) + eps_adam)
                # lazy Adam: only the embedding rows present in the batch move
                m_r = b1 * mE[cols] + (1 - b1) * gE
                v_r = b2 * vE[cols] + (1 - b2) * gE * gE
                mE[cols] = m_r
                vE[cols] = v_r
                E[cols] = Er - lr * (m_r / c1) / (np.sqrt(v_r / c2) + eps_adam)
        self._params = {"E": E, "W": W, "b": b}
        return self

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        if not self._params:
            raise DeniableError("the model is not fitted")
        X = self._features(texts)
        logits = (X @ self._params["E"]) @ self._params["W"] + self._params["b"]
        logits -= logits.max(axis=1, keepdims=True)
        P = np.exp(logits.astype(np.float64))
        return np.asarray(P / P.sum(axis=1, keepdims=True))


#: --model name -> constructor(n_classes=, seed=)
MODELS: dict[str, Callable[..., TextClassifier]] = {
    "fasttext": FastTextClassifier,
    "tfidf": TfidfLogistic,
}


def make_model(name: str, n_classes: int, seed: int, **options: Any) -> TextClassifier:
    """A fresh, unfitted classifier called ``name`` (``fasttext`` or ``tfidf``)."""
    check_choice("model", name, MODELS)
    return MODELS[name](n_classes=n_classes, seed=seed, **options)


def attack_model(seed: int, *, epochs: int = 20, batch_size: int = 64) -> Any:
    """The membership-inference attack model of seed 004 App. C (scikit-learn MLP).

    Two hidden layers of 64 ReLU units, Adam with PyTorch's defaults (lr 1e-3,
    betas 0.9/0.999), batch 64, ``epochs`` passes (no early stopping). ``batch_size`` is
    lowered by the caller for tiny training sets.
    """
    _sklearn()
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    class _Quiet(MLPClassifier):
        def fit(self, X: Any, y: Any) -> Any:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                return super().fit(X, y)

    mlp = _Quiet(
        hidden_layer_sizes=(64, 64),
        activation="relu",
        solver="adam",
        learning_rate_init=1e-3,
        batch_size=batch_size,
        max_iter=epochs,
        shuffle=True,
        random_state=seed,
        early_stopping=False,
        tol=0.0,
        n_iter_no_change=epochs + 1,
    )
    return make_pipeline(FunctionTransformer(np.asarray), mlp)


@dataclass
class TfidfRanker:
    """Rank answers by TF-IDF cosine with the question; the vectorizer is fitted on training text.

    A deliberately simple ranker: training-time privatization changes the vocabulary
    and the IDF weights it learns; test-time privatization changes the queries and
    the candidate answers.
    """

    ngram_max: int = 1
    sublinear_tf: bool = True
    _vec: Any = field(default=None, init=False, repr=False)

    def fit(self, texts: Sequence[str]) -> TfidfRanker:
        _sklearn()
        from sklearn.feature_extraction.text import TfidfVectorizer

        if not texts:
            raise InvalidParameterError("texts", 0, "at least one training text")
        self._vec = TfidfVectorizer(**_TOKENS, ngram_range=(1, self.ngram_max), sublinear_tf=self.sublinear_tf).fit(
            list(texts)
        )
        return self

    def score(self, questions: Sequence[str], answers: Sequence[str]) -> np.ndarray:
        """Cosine similarity of each (question, answer) pair (rows are L2-normalised)."""
        if self._vec is None:
            raise DeniableError("the ranker is not fitted")
        Q = self._vec.transform(list(questions))
        A = self._vec.transform(list(answers))
        return np.asarray(Q.multiply(A).sum(axis=1)).ravel()


def check_model_names(names: Sequence[str]) -> list[str]:
    """Validate a list of model names."""
    out = [check_choice("model", n, MODELS) for n in names]
    if not out:
        raise InvalidParameterError("model", "", "at least one of " + ", ".join(MODELS))
    return out


__all__ += ["check_model_names"]
