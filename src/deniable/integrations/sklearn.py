"""scikit-learn: :class:`PrivatizeText`, a transformer that privatizes text columns.

Follows scikit-learn's conventions: 1-D input (a list, a 1-D array, a pandas Series) gives
1-D output (what a text vectorizer takes next in a :class:`~sklearn.pipeline.Pipeline`),
2-D input (a DataFrame or an array of one or more text columns, as a
:class:`~sklearn.compose.ColumnTransformer` passes ``["col"]``) gives 2-D output with the
same columns; :meth:`~PrivatizeText.get_feature_names_out` is one-to-one and
:meth:`~PrivatizeText.set_output` gives numpy (``"default"``) or pandas (``"pandas"``:
a DataFrame for 2-D input, a Series for 1-D input, so a vectorizer can still follow).

Releases are keyed, not fresh: a fitted transformer is one *run* of a
:class:`~deniable.integrations.BatchPrivatizer` (a :class:`~deniable._random.RunKey`),
and each text draws from its own stream of (the run key, its column, its text), whatever
its row or batch. The same text in the same column of the same run always gives the
same output: privatizing it again is not a new release. ``run_key=`` (a parameter, so it
survives :func:`~sklearn.base.clone`) makes every refit under ``cross_val_score`` /
``GridSearchCV`` reuse one release; without it each fit is a new run, and a text that
another run of this process already privatized is counted and warned about
(:class:`~deniable.NotPrivateWarning`).
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._errors import InvalidParameterError, NotPrivateWarning
from .._random import RunKey
from .._validation import check_choice
from ._batch import BatchPrivatizer, _isnull

__all__ = ["EXPECTED_FAILED_CHECKS", "ON_TRANSFORM", "PrivatizeText"]

#: what :meth:`PrivatizeText.transform` does (``fit_transform`` always privatizes)
ON_TRANSFORM = ("privatize", "passthrough")
_OUTPUTS = ("default", "pandas")
#: a record keyed by its column and text only (never by its row): a tuple never equals a row index
_TEXT_UNIT = (2**64 - 2,)


# auto_wrap_output_keys=None: our own set_output (a Series for 1-D input), not scikit-learn's wrapper
class PrivatizeText(TransformerMixin, BaseEstimator, auto_wrap_output_keys=None):  # type: ignore[call-arg]
    """Privatize text columns with a metric-DP word mechanism.

    Parameters
    ----------
    mechanism, epsilon, options
        A registered mechanism name, its epsilon and its declared options (a dict).
    embedding
        ``None`` (built-in GloVe 6B 50-d) or a path (a saved folder is memory-mapped).
    vocab_size, vocabulary, oov, case
        As for :func:`deniable.load_embedding` and :class:`deniable.Privatizer`.
    on_transform
        ``"privatize"`` (default): ``transform`` privatizes too (with the fitted run's key:
        a text seen in ``fit_transform`` comes out as it did there). ``"passthrough"``:
        only ``fit_transform`` (what ``Pipeline.fit`` calls) privatizes; ``transform`` (what
        ``predict`` and ``score`` call) returns the texts unchanged: the model is trained on
        private text and evaluated or used on clean text (the train-private / test-clean
        protocol). The default protects: nothing leaves this step unprivatized unless asked.
    run_key
        ``None`` (default): each fit is a new run with a fresh key from the OS (held in
        memory only, never pickled). A :class:`~deniable.RunKey` or its 64 hex digits: every
        fit and every clone (``cross_val_score``, ``GridSearchCV``) privatizes a text the
        same way, so refitting on overlapping folds is one release, not one per fold. A key
        given here is pickled with the estimator: whoever holds it and a privatized text can
        test guesses; ``set_params(run_key=None)`` before sharing a model.
    random_state
        ``None`` (default): as ``run_key``. An int: the run key is derived from it, the
        output reproducible, NOT private (warns). A numpy Generator: each fit draws its key
        from it (reproducible if the generator is seeded).

    Each fitted run releases each distinct text of each column at most once; releasing
    the same texts under another run (another fit without ``run_key``, another epsilon)
    adds up, and this process warns about it. Choosing ``epsilon`` by cross-validated
    accuracy always picks the largest (least private) value offered: fix the privacy first
    (docs/engines.md, "Choosing epsilon in a pipeline").
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
        on_transform: str = "privatize",
        run_key: RunKey | str | None = None,
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
        self.on_transform = on_transform
        self.run_key = run_key
        self.random_state = random_state

    # -- the run ------------------------------------------------------------------------------
    def _new_run(self) -> BatchPrivatizer:
        check_choice("on_transform", self.on_transform, ON_TRANSFORM)
        seed = None
        key = self.run_key
        rs = self.random_state
        if rs is not None:
            if key is not None:
                raise InvalidParameterError("random_state", "a value", "None when run_key is given")
            if isinstance(rs, np.random.Generator):
                key = RunKey(rs.bytes(32), seeded=True)
            elif isinstance(rs, int | np.integer) and not isinstance(rs, bool):
                seed = int(rs)
            else:
                raise InvalidParameterError(
                    "random_state", type(rs).__name__, "None (secure, from the OS), an int seed, or a numpy Generator"
                )
        return BatchPrivatizer(
            mechanism=self.mechanism,
            epsilon=self.epsilon,
            options=dict(self.options or {}),
            embedding=self.embedding,
            vocab_size=self.vocab_size,
            vocabulary=self.vocabulary,
            oov=self.oov,
            case=self.case,
            seed=seed,
            run_key=key,
            accountant=False,  # charged below, text-keyed: a refit under the same run_key is no new release
        )

    def _charged(self, run: BatchPrivatizer) -> BatchPrivatizer:
        """Charge the default accountant (:mod:`deniable.budget`) for this run, before any text is
        released: over budget raises :class:`~deniable.budget.BudgetError`. Records are keyed by
        column and text only, so a refit with the same ``run_key`` and parameters reproduces the
        same release and costs nothing; each fit without one is a new release."""
        run.charge(None, None, text_keyed=True)
        return run

    def _run(self) -> BatchPrivatizer:
        run = self.__dict__.get("_privatizer")
        if run is None:  # unpickled: the key was not pickled; a given key or seed rebuilds the same run
            run = self._charged(self._new_run())
            self._privatizer = run
            self.run_key_id_ = run.run.id
        return run

    def fit(self, X: Any, y: Any = None) -> PrivatizeText:  # noqa: N803 - scikit-learn's name
        """Start a run (validate the parameters, make the run key) and record the columns; nothing
        is learned from the texts and nothing is released."""
        table = _Table.of(X)
        if table.rows == 0:
            raise InvalidParameterError(
                "X", "0 rows", "at least one text to fit on: 0 sample(s) while a minimum of 1 is required."
            )
        run = self._charged(self._new_run())
        self._privatizer = run
        self.run_key_id_ = run.run.id
        self.n_features_in_ = table.width
        if table.names is not None:
            self.feature_names_in_ = np.asarray(table.names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return self

    def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> Any:  # noqa: N803
        """Fit, then privatize ``X`` (always, whatever ``on_transform``): what ``Pipeline.fit`` calls."""
        return self.fit(X, y)._release(X)

    def transform(self, X: Any) -> Any:  # noqa: N803
        """``X`` privatized with the fitted run (``on_transform="privatize"``) or unchanged (``"passthrough"``)."""
        check_is_fitted(self, "run_key_id_")
        if self.on_transform == "passthrough":
            table = self._check_width(_Table.of(X))
            return self._wrap(table, table.columns)
        return self._release(X)

    def _check_width(self, table: _Table) -> _Table:
        if table.width != self.n_features_in_:
            raise InvalidParameterError(
                "X", f"{table.width} columns", f"{self.n_features_in_} text column(s), as in fit"
            )
        names = getattr(self, "feature_names_in_", None)
        if names is not None and table.names is not None and list(table.names) != list(names):
            raise InvalidParameterError("X", "other column names", "the columns seen in fit, in that order")
        return table

    def _release(self, X: Any) -> Any:  # noqa: N803
        table = self._check_width(_Table.of(X))
        run = self._run()
        names = [str(c) for c in self.get_feature_names_out()]
        flat: list[str | None] = []
        cols: list[str] = []
        for name, values in zip(names, table.columns, strict=True):
            flat.extend(values)
            cols.extend([name] * len(values))
        out, _ = run.privatize_texts(flat, positions=[_TEXT_UNIT] * len(flat), column=cols)
        _note_release(run, flat, cols)  # once released (a refused batch released nothing)
        n = table.rows
        return self._wrap(table, [out[i * n : (i + 1) * n] for i in range(table.width)])

    # -- scikit-learn's conventions -----------------------------------------------------------------
    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """The output columns: the input's (one-to-one), ``x0, x1, ...`` where it had no names."""
        check_is_fitted(self, "n_features_in_")
        names = getattr(self, "feature_names_in_", None)
        if input_features is None:
            if names is not None:
                return np.asarray(names, dtype=object)
            return np.asarray([f"x{i}" for i in range(self.n_features_in_)], dtype=object)
        given = [str(c) for c in input_features]
        if len(given) != self.n_features_in_:
            raise InvalidParameterError("input_features", f"{len(given)} names", f"{self.n_features_in_} names")
        if names is not None and given != [str(c) for c in names]:
            raise InvalidParameterError("input_features", "other names", "feature_names_in_")
        return np.asarray(given, dtype=object)

    def set_output(self, *, transform: str | None = None) -> PrivatizeText:
        """``"default"`` (numpy object arrays) or ``"pandas"`` (a DataFrame for 2-D input, a Series
        for 1-D input); ``None`` keeps the current setting. ``Pipeline.set_output`` and
        ``ColumnTransformer.set_output`` call it."""
        if transform is None:
            return self
        check_choice("transform", transform, _OUTPUTS)
        self._sklearn_output_config = {"transform": transform}  # clone copies this attribute
        return self

    def _output(self) -> str:
        chosen = getattr(self, "_sklearn_output_config", {}).get("transform", "default")
        if chosen == "default":
            from sklearn import get_config

            chosen = get_config().get("transform_output", "default")
        if chosen not in _OUTPUTS:
            raise InvalidParameterError("transform_output", chosen, "default or pandas for PrivatizeText")
        return str(chosen)

    def _wrap(self, table: _Table, columns: list[list[Any]]) -> Any:
        names = list(self.get_feature_names_out())
        if self._output() == "pandas":
            import pandas as pd

            if table.one_d:
                return pd.Series(columns[0], index=table.index, name=names[0], dtype=object)
            return pd.DataFrame(dict(zip(names, columns, strict=True)), index=table.index, dtype=object)
        if table.one_d:
            out = np.empty(table.rows, dtype=object)
            out[:] = columns[0]
            return out
        out = np.empty((table.rows, table.width), dtype=object)
        for j, values in enumerate(columns):
            out[:, j] = values
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = dict(super().__getstate__())
        state.pop("_privatizer", None)  # its key: never pickled (a given run_key is, as a parameter)
        return state

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.one_d_array = False  # the tag means 1-D only (2-D is accepted too)
        tags.input_tags.two_d_array = True
        tags.input_tags.string = True
        tags.input_tags.allow_nan = True  # a missing text stays missing
        tags.requires_fit = True
        tags.non_deterministic = self.run_key is None and self.random_state is None
        tags.transformer_tags.preserves_dtype = []
        return tags


_NUMERIC = (
    "scikit-learn's generic check feeds numeric X; a text transformer refuses non-str values "
    "(InvalidParameterError naming the column and row)"
)
#: scikit-learn's estimator checks that cannot apply to a text transformer, and why, for
#: ``check_estimator(PrivatizeText(), expected_failed_checks=EXPECTED_FAILED_CHECKS)`` and
#: ``parametrize_with_checks(..., expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS)``.
#: Every other check it runs passes. Their text versions are tests/test_sklearn.py.
EXPECTED_FAILED_CHECKS: dict[str, str] = {
    **{
        name: _NUMERIC
        for name in (
            "check_fit_score_takes_y",
            "check_estimators_overwrite_params",
            "check_dont_overwrite_parameters",
            "check_estimators_fit_returns_self",
            "check_readonly_memmap_input",
            "check_n_features_in_after_fitting",
            "check_estimators_dtypes",
            "check_dtype_object",
            "check_estimators_pickle",
            "check_f_contiguous_array_estimator",
            "check_transformer_data_not_an_array",
            "check_transformer_general",
            "check_dict_unchanged",
            "check_fit_idempotent",
            "check_fit_check_is_fitted",
            "check_n_features_in",
            "check_fit2d_predict1d",
        )
    },
    "check_positive_only_tag_during_fit": _NUMERIC + " (negative numbers are no more text than positive ones)",
    "check_complex_data": _NUMERIC + " (complex numbers: refused as not text, with our wording)",
    "check_fit2d_1sample": "one text is a valid input (nothing is estimated from the data); numeric X is refused",
    "check_fit2d_1feature": "one text column is the usual input; numeric X is refused",
}


# ------------------------------------------------------------------------ input as a table
class _Table:
    """Text input as columns: ``one_d`` (a list, 1-D array, Series) or a 2-D table."""

    __slots__ = ("columns", "index", "names", "one_d", "rows", "width")

    def __init__(self, columns: list[list[Any]], names: list[str] | None, one_d: bool, index: Any) -> None:
        self.columns = columns
        self.names = names
        self.one_d = one_d
        self.index = index
        self.width = len(columns)
        self.rows = len(columns[0]) if columns else 0

    @classmethod
    def of(cls, X: Any) -> _Table:  # noqa: N803
        if hasattr(X, "tocsr") and hasattr(X, "nnz"):  # scipy.sparse
            raise InvalidParameterError("X", "a sparse matrix", "texts: sparse input is not supported")
        if X is None or isinstance(X, str | bytes):
            what = "None" if X is None else type(X).__name__
            raise InvalidParameterError("X", what, "a 1-D or 2-D collection of texts (wrap one text in a list)")
        if hasattr(X, "columns") and hasattr(X, "iloc"):  # a pandas DataFrame
            labels = list(X.columns)
            if len(set(labels)) != len(labels):
                raise InvalidParameterError("X", "a DataFrame with repeated column names", "unique column names")
            names = [str(c) for c in labels] if all(isinstance(c, str) for c in labels) else None
            cols = [_strings(X.iloc[:, j].tolist(), names[j] if names else j) for j in range(len(labels))]
            if not cols:
                raise InvalidParameterError("X", "a DataFrame with no columns", "at least one text column")
            return cls(cols, names, False, X.index)
        if hasattr(X, "to_numpy") and hasattr(X, "index") and getattr(X, "ndim", 1) == 1:  # a pandas Series
            name = X.name if isinstance(X.name, str) else None
            return cls([_strings(X.tolist(), 0)], [name] if name is not None else None, True, X.index)
        if not isinstance(X, np.ndarray) and hasattr(X, "__array__") and not isinstance(X, list | tuple):
            X = np.asarray(X)  # noqa: N806 - an array-like
        if not isinstance(X, np.ndarray):
            if not isinstance(X, Iterable):
                raise InvalidParameterError("X", type(X).__name__, "a 1-D or 2-D collection of texts")
            values = list(X)
            if values and all(isinstance(v, list | tuple | np.ndarray) for v in values):
                X = np.empty((len(values), len(values[0])), dtype=object)  # noqa: N806
                for i, row in enumerate(values):
                    if len(row) != X.shape[1]:
                        raise InvalidParameterError("X", f"a ragged table (row {i})", "rows of one length")
                    X[i, :] = list(row)
            else:
                return cls([_strings(values, 0)], None, True, None)
        if X.ndim == 1:
            return cls([_strings(X.tolist(), 0)], None, True, None)
        if X.ndim == 2 and X.shape[1] == 0:  # scikit-learn's wording, which its checks look for
            raise InvalidParameterError(
                "X", f"an array of shape {X.shape}", f"0 feature(s) (shape={X.shape}) while a minimum of 1 is required."
            )
        if X.ndim != 2:
            raise InvalidParameterError("X", f"an array of shape {X.shape}", "a 1-D or 2-D collection of texts")
        return cls([_strings(X[:, j].tolist(), j) for j in range(X.shape[1])], None, False, None)


def _strings(values: list[Any], column: str | int) -> list[str | None]:
    out: list[str | None] = []
    for i, v in enumerate(values):
        if _isnull(v):
            out.append(None)
        elif isinstance(v, str):
            out.append(v)
        else:
            where = f"column {column!r}" if isinstance(column, str) else f"column {column}"
            raise InvalidParameterError("X", type(v).__name__, f"str values or missing ({where}, row {i})")
    return out


# -------------------------------------------------------- texts released again in this process
_SECRET = os.urandom(32)  # this process's: the registry below is never written anywhere
_LIMIT = 1 << 20  # texts remembered per process (about 100 MB at most); beyond it, no warning
_SEEN: dict[bytes, bytes] = {}
_LOCK = threading.Lock()


def _note_release(run: BatchPrivatizer, texts: list[str | None], columns: list[str]) -> None:
    """Warn when texts this process already privatized under another stream are privatized again.

    Remembers, per text, a keyed digest of the stream that first released it (run key id,
    mechanism parameters, column) in memory: a text released again by the same run and
    column is the same release; by another run, another column or other parameters it
    is a new one, and the epsilons add up.
    """
    stream_of: dict[str, bytes] = {}
    again = total = 0
    with _LOCK:
        for text, column in zip(texts, columns, strict=True):
            if text is None:
                continue
            total += 1
            stream = stream_of.get(column)
            if stream is None:
                ident = repr((run.run.id, run.key, column)).encode("utf-8", "surrogatepass")
                stream = stream_of[column] = hashlib.blake2b(ident, key=_SECRET, digest_size=16).digest()
            digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), key=_SECRET, digest_size=16).digest()
            first = _SEEN.get(digest)
            if first is None:
                if len(_SEEN) < _LIMIT:
                    _SEEN[digest] = stream
            elif first != stream:
                again += 1
    if again:
        warnings.warn(
            f"PrivatizeText: {again} of {total} texts were already privatized in this process by another "
            "run (another fit without run_key, e.g. a cross_val_score or GridSearchCV refit, or other "
            "parameters): each is a new release and the epsilons add up. Pass run_key=RunKey.new() so "
            "every refit reuses one release (docs/engines.md, 'Train private, test clean').",
            NotPrivateWarning,
            stacklevel=4,  # _note_release <- _release <- fit_transform / transform <- the caller
        )
