"""scikit-learn: :class:`PrivatizeText`, a transformer that privatizes a list of texts.

Drops into a :class:`~sklearn.pipeline.Pipeline` before a vectorizer. ``fit`` learns
nothing from the data (it only validates the parameters); the mechanism is built lazily
from the parameters, once per process (:class:`~deniable.integrations.BatchPrivatizer`'s
cache), and is never pickled nor cloned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from .._errors import InvalidParameterError
from .._random import check_random_state
from ._batch import BatchPrivatizer

__all__ = ["PrivatizeText"]


class PrivatizeText(TransformerMixin, BaseEstimator):
    """Privatize texts with a metric-DP word mechanism.

    Parameters
    ----------
    mechanism, epsilon, options
        A registered mechanism name, its epsilon and its declared options (a dict).
    embedding
        ``None`` (built-in GloVe 6B 50-d) or a path (a saved folder is memory-mapped).
    vocab_size, vocabulary, oov, case
        As for :func:`deniable.load_embedding` and :class:`deniable.Privatizer`.
    random_state
        ``None`` (default): fresh cryptographically secure randomness on every
        ``transform``. An int: the same output on every call, NOT private (warns). A numpy
        Generator: drawn from, so successive calls differ.

    ``transform(X)`` takes an iterable of strings (a list, a 1-d array, a pandas Series,
    a one-column DataFrame or ``(n, 1)`` array as a ``ColumnTransformer`` passes it) and
    returns a list of strings of the same length; a DataFrame with several columns is
    refused (name the text column).

    Each ``transform`` call is a new release with fresh noise: transforming the same
    texts twice releases them twice (the epsilons add up). Choosing ``epsilon`` by
    cross-validated accuracy always picks the largest (least private) value offered: fix
    the privacy first (docs/engines.md, "Choosing epsilon in a pipeline").
    """

    def __init__(
        self,
        mechanism: str = "madlib",
        epsilon: float = 10.0,
        *,
        options: Mapping[str, Any] | None = None,
        embedding: str | None = None,
        vocab_size: int | None = None,
        vocabulary: str = "words",
        oov: str = "random",
        case: str = "sentence",
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.options = options
        self.embedding = embedding
        self.vocab_size = vocab_size
        self.vocabulary = vocabulary
        self.oov = oov
        self.case = case
        self.random_state = random_state

    def _batch(self) -> BatchPrivatizer:
        return BatchPrivatizer(
            mechanism=self.mechanism,
            epsilon=self.epsilon,
            options=dict(self.options or {}),
            embedding=self.embedding,
            vocab_size=self.vocab_size,
            vocabulary=self.vocabulary,
            oov=self.oov,
            case=self.case,
        )

    def fit(self, X: Any = None, y: Any = None) -> PrivatizeText:  # noqa: N803 - scikit-learn's name
        """Validate the parameters; nothing is learned from ``X``."""
        self._batch()
        if self.random_state is not None:
            check_random_state(self.random_state, stacklevel=2)  # an int warns here
        self.is_fitted_ = True
        return self

    def transform(self, X: Any) -> list[str]:  # noqa: N803
        """The privatized texts (one mechanism call for the whole ``X``)."""
        texts = _texts(X)
        batch = self._batch()
        rng = None if self.random_state is None else check_random_state(self.random_state, stacklevel=2)
        out, _ = batch.privatize_texts(texts, rng)
        return out  # type: ignore[return-value]

    def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> list[str]:  # noqa: N803
        return self.fit(X, y).transform(X)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.requires_fit = False
        tags.non_deterministic = self.random_state is None
        return tags


def _texts(X: Any) -> list[str]:  # noqa: N803
    if isinstance(X, str):
        raise InvalidParameterError("X", "a str", "an iterable of texts (wrap one text in a list)")
    if hasattr(X, "columns") and hasattr(X, "iloc"):  # a DataFrame: iterating it would give its column names
        if len(X.columns) != 1:
            raise InvalidParameterError(
                "X", f"a DataFrame with {len(X.columns)} columns", "a Series or a DataFrame with one text column"
            )
        X = X.iloc[:, 0]  # noqa: N806
    if isinstance(X, np.ndarray) and X.ndim == 2 and X.shape[1] == 1:  # one column, e.g. from a ColumnTransformer
        X = X[:, 0]  # noqa: N806
    if isinstance(X, np.ndarray) and X.ndim != 1:
        raise InvalidParameterError("X", f"an array of shape {X.shape}", "a 1-d sequence of texts")
    if not isinstance(X, Iterable):
        raise InvalidParameterError("X", type(X).__name__, "an iterable of texts")
    values = list(X.tolist() if hasattr(X, "tolist") else X)
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise InvalidParameterError("X", type(v).__name__, f"str values (item {i})")
    return values
