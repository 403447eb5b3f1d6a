"""Privatize a file, and the run manifest written beside every output.

:func:`privatize_file` is what ``deniable privatize`` calls; the engines
(:mod:`deniable.integrations`) write the same :func:`run_manifest` beside their output.
A manifest records how an output was made -- mechanism and its parameters, embedding
fingerprint, vocabulary / OOV / case policies, counts, library version, start and end
time, engine -- and never any text (nor a value derived from one text).
"""

from __future__ import annotations

import io
import os
import threading
import warnings
from collections.abc import Hashable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import DataError, NotPrivateWarning, WeakPrivacyWarning
from ._random import RandomState, RunKey
from .budget import (  # the ledger and the manifest files live with the budget; re-exported here
    MANIFEST_FOLDER_NAME,
    MANIFEST_SUFFIX,
    UNLABELLED,
    BudgetAccountant,
    LedgerEntry,
    dataset_id,
    input_id,
    manifest_path,
    privacy_ledger,
    read_manifest,
    write_manifest,
)
from .budget import jsonable as _jsonable
from .io import MAX_RECORD_CHARS

if TYPE_CHECKING:
    from .privatizer import Privatizer, PrivatizeStats

__all__ = [
    "LOAD_LOG_ENV",
    "MANIFEST_FOLDER_NAME",
    "MANIFEST_SUFFIX",
    "LedgerEntry",
    "cached_privatizer",
    "clear_cache",
    "input_id",
    "load_count",
    "manifest_path",
    "privacy_ledger",
    "privatize",
    "privatize_file",
    "read_manifest",
    "release_fields",
    "run_manifest",
    "write_manifest",
]

MANIFEST_VERSION = 1


def now() -> str:
    """The current UTC time, ISO 8601 (seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_manifest(
    privatizer: Privatizer,
    stats: PrivatizeStats,
    *,
    started: str,
    finished: str,
    engine: str = "local",
    embedding: str | None = None,
    vocabulary: str | None = None,
    columns: Sequence[str] | None = None,
    format: str | None = None,
    seeded: bool = False,
    extra: Mapping[str, Any] | None = None,
    run_key_id: str | None = None,
    input: str | None = None,
    run_key_origin: str | None = None,
    input_digest: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The manifest of a run: parameters, fingerprints, policies and counts -- never text.

    ``release`` is the run's entry in a privacy ledger (``deniable inspect-manifest A B
    ...`` sums them): the epsilon spent on every word of each record it covers, the
    columns and the number of records, the input's public id (:func:`input_id`), the
    run key's public id and origin (``os``: fresh; ``file`` / ``given``: supplied by the
    user; ``seed``), and ``input_digest``: per column, a digest of the input keyed by the
    run's secret (:class:`deniable._random.InputDigest`; pseudo-random without the key).
    Two manifests are one release only when key id, parameters and input digest all match
    (:func:`privacy_ledger`).
    """
    from ._version import __version__

    core = release_fields(
        privatizer,
        records=stats.texts,
        embedding=embedding,
        vocabulary=vocabulary,
        columns=columns,
        seeded=seeded,
        run_key_id=run_key_id,
        input=input,
        run_key_origin=run_key_origin,
        input_digest=input_digest,
    )
    policy = privatizer.describe()
    manifest: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "library": "deniable",
        "version": __version__,
        "engine": engine,
        "mechanism": core["mechanism"],
        "embedding": core["embedding"],
        "vocabulary": vocabulary,
        "oov": privatizer.oov,
        "case": privatizer.case,
        "case_sensitive_vocabulary": policy["case_sensitive_vocabulary"],
        "not_protected": policy["not_protected"],
        # how strong the setting is, from the public calibration (never from the input)
        "privacy": _privacy(privatizer),
        "seeded": seeded,
        "run_key_origin": core["release"]["run_key_origin"],
        "format": format,
        "columns": list(columns or []),
        # only what the output itself reveals (it keeps every text and its word tokens): how many
        # tokens changed or were out of vocabulary depends on the input beyond the guarantee, so it
        # is shown to the operator on stderr and never persisted beside a release
        "counts": {"texts": stats.texts, "tokens": stats.tokens},
        "release": core["release"],
        "started": started,
        "finished": finished,
    }
    if extra:
        manifest.update(_jsonable(dict(extra)))
    return manifest


def release_fields(
    privatizer: Privatizer,
    *,
    records: int | None,
    embedding: str | None = None,
    vocabulary: str | None = None,
    columns: Sequence[str] | None = None,
    seeded: bool = False,
    run_key_id: str | None = None,
    input: str | None = None,
    run_key_origin: str | None = None,
    input_digest: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The fields of a run manifest the privacy ledger reads (:func:`privacy_ledger`): the
    mechanism and its parameters, the embedding, the policies and the ``release`` entry.

    :func:`run_manifest` writes them; the budget (:mod:`deniable.budget`) builds the same
    fields for a release before it is made, so that both are matched by one rule.
    """
    mech = privatizer.mechanism
    emb = mech.embedding
    described = mech.describe()
    origin = run_key_origin if run_key_origin is not None else ("seed" if seeded else None)
    return {
        "manifest_version": MANIFEST_VERSION,
        "mechanism": _jsonable(described),
        "embedding": {
            "source": embedding or "glove-6b-50d",
            "name": emb.name,
            "fingerprint": emb.fingerprint,
            "size": emb.size,
            "dim": emb.dim,
        },
        "vocabulary": vocabulary,
        "oov": privatizer.oov,
        "case": privatizer.case,
        "release": {
            "input": input,
            "columns": list(columns or []),
            "records": records,
            "epsilon_per_word": float(mech.epsilon),
            "mechanism": described.get("mechanism", type(mech).__name__),
            "metric": described.get("metric"),
            "run_key_id": run_key_id,
            "run_key_origin": origin,
            "input_digest": dict(input_digest) if input_digest else None,
        },
    }


def _privacy(privatizer: Privatizer) -> dict[str, Any]:
    """Epsilon, the target it was chosen for (``epsilon="auto"``) and the expected share of a
    typical text's tokens released unchanged, with a plain-words statement (calibrate.table)."""
    from .calibrate.table import resolution_of, strength

    out = strength(privatizer.mechanism).describe()
    res = resolution_of(privatizer.mechanism)
    if res is not None:
        out["auto"] = res.describe()
    return out


def privatize_file(
    src: str | Path,
    dst: str | Path,
    privatizer: Privatizer,
    *,
    columns: Sequence[str] | None = None,
    format: str | None = None,
    batch_size: int = 1000,
    random_state: RandomState = None,
    show_progress: bool | None = None,
    manifest: bool = True,
    embedding: str | None = None,
    vocabulary: str | None = None,
    run_key: RunKey | str | None = None,
    input_label: str | None = None,
    accountant: BudgetAccountant | None = None,
    budget_name: str = "accountant",
) -> PrivatizeStats:
    """Privatize the text of ``src`` (its ``columns``) into ``dst``; return the counts.

    The output is written atomically (:func:`deniable.io.transform_file`), then the run
    manifest ``<dst>.manifest.json`` (not for ``dst="-"``, nor with ``manifest=False``).
    ``embedding`` and ``vocabulary`` only label the manifest (where the embedding came
    from); its fingerprint is always computed from the embedding itself.

    Randomness: without ``random_state`` (and a Privatizer without one) each value draws
    from its own stream of (the run key, its record's position, its column, its text):
    ``run_key=None`` makes a fresh key from the OS (a new, independent run); passing the
    same key (:meth:`RunKey.hex`) again over the SAME input reproduces the same output,
    whatever ``batch_size`` (re-running a failed job releases nothing new), and the
    manifest's keyed input digest lets the ledger tell such a re-run from a new release.
    ``input_label`` names the input in the manifest's ledger entry (:func:`input_id`).

    ``accountant`` (a :class:`~deniable.budget.BudgetAccountant`): the release is checked
    against its budget before any noise is drawn (:class:`~deniable.budget.BudgetError`,
    nothing written), recorded, and taken back if the run fails. Without one, nothing is
    charged (the command line charges its ``--budget`` file).
    """
    from ._random import check_random_state
    from .io import detect_format, transform_file
    from .privatizer import PrivatizeStats

    fmt = detect_format(src, format)
    key: RunKey | None = None
    if random_state is not None:
        rng = check_random_state(random_state, stacklevel=2)
    else:
        rng = None
        if privatizer.random_state is None:
            key = RunKey.check(run_key)
    started = now()
    totals = PrivatizeStats()
    digest = key.input_digest() if key is not None else None
    seeded = random_state is not None or privatizer.random_state is not None
    reservation = None
    label = input_id(src, input_label)
    fields: dict[str, Any] = {  # the release's ledger fields (the keyed input digest is added once read)
        "embedding": embedding,
        "vocabulary": vocabulary,
        "columns": columns,
        "seeded": seeded,
        "run_key_id": key.id if key is not None else None,
        "input": label,
        "run_key_origin": key.origin if key is not None else "seed",
    }
    if accountant is not None:  # checked and recorded before any noise is drawn
        ident = UNLABELLED if label is None else label
        pre = {**fields, "input": ident}
        cand = release_fields(privatizer, records=None, **pre)
        if key is not None and str(src) != "-" and accountant.would_refuse(cand):
            if accountant.has_run_key(ident, key.id):  # perhaps a reproduction: the keyed digest tells
                found = _input_digest(src, key, columns=columns, format=format, batch_size=batch_size)
                cand = release_fields(privatizer, records=None, input_digest=found, **pre)
        reservation = accountant.reserve(release=cand, name=budget_name)

    def fn(texts: list[str], units: list[tuple[int, str]]) -> list[str]:
        if key is None:
            out, stats = privatizer.privatize_batch_with_stats(texts, rng)
        else:
            assert digest is not None
            gens = []
            for (pos, col), text in zip(units, texts, strict=True):
                gens.append(key.record_generator(pos, col, text))
                digest.add(pos, col or "(text)", text)
            out, stats = privatizer.privatize_batch_with_stats(texts, generators=gens)
        totals.__iadd__(stats)
        return out

    try:
        transform_file(
            src, dst, fn, columns=columns, format=format, batch_size=batch_size, show_progress=show_progress, keyed=True
        )
    except BaseException:
        if reservation is not None:
            reservation.cancel()  # nothing was written: nothing was released
        raise
    written = manifest and str(dst) != "-"
    if not written and reservation is None:
        return totals
    fields["input_digest"] = digest.hexdigests() if digest is not None else None
    if reservation is not None:  # completed with the keyed input digest: a later reproduction is free
        rec = release_fields(privatizer, records=totals.texts, **fields)
        rec["release"]["input"] = rec["release"]["input"] or UNLABELLED  # stdin without a label
        reservation.commit(rec)
    if written:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)
            m = run_manifest(privatizer, totals, started=started, finished=now(), format=fmt, **fields)
        write_manifest(manifest_path(dst), m)
    return totals


class _Discard(io.RawIOBase):
    """A binary sink that keeps nothing (a pass over an input that writes no output)."""

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        return len(memoryview(b))


def _input_digest(
    src: str | Path, key: RunKey, *, columns: Sequence[str] | None, format: str | None, batch_size: int
) -> dict[str, str]:
    """The keyed input digest of ``src`` as :func:`privatize_file` would record it, computed
    before any noise is drawn (one read of the input, nothing written, nothing kept)."""
    from .io import detect_format
    from .io._transform import MAX_RECORD_CHARS as limit
    from .io._transform import _iter, check_columns

    fmt = detect_format(src, format)
    digest = key.input_digest()

    def fn(texts: list[str], units: list[tuple[int, str]]) -> list[str]:
        for (pos, col), text in zip(units, texts, strict=True):
            digest.add(pos, col or "(text)", text)
        return texts

    sink: Any = _Discard()
    if fmt == "parquet":
        import pyarrow as pa

        sink = pa.MockOutputStream()
    for _ in _iter(src, fmt, check_columns(columns, fmt), fn, sink, batch_size, False, limit):
        pass
    return digest.hexdigests()


# ----------------------------------------------------------------- one privatizer per process
#: If set to a folder, each artefact load writes one empty file ``<pid>-<n>`` there (operations
#: and tests count loads per worker; the file names hold no data).
LOAD_LOG_ENV = "DENIABLE_LOAD_LOG"

_privatizers: dict[tuple[Any, ...], Privatizer] = {}
_lock = threading.Lock()
_loads = 0


def load_count() -> int:
    """How many times this process loaded an embedding and built a mechanism for a cached privatizer."""
    return _loads


def clear_cache() -> None:
    """Forget this process's cached privatizers (the next call loads again)."""
    with _lock:
        _privatizers.clear()


def cached_privatizer(
    mechanism: str,
    epsilon: float | str,
    options: Mapping[str, Any],
    embedding: str | None,
    *,
    vocab_size: int | None = None,
    vocabulary: str = "words",
    oov: str = "random",
    case: str = "sentence",
    target: str | None = None,
    local_path: Any = None,
) -> Privatizer:
    """The process's :class:`Privatizer` for these parameters: loaded (memory-mapped) and built once.

    :func:`privatize` and every engine worker (``BatchPrivatizer``) share it.
    ``local_path`` maps ``embedding`` to a path of this machine (Spark's shipped files).
    """
    key = (
        mechanism,
        epsilon if isinstance(epsilon, str) else float(epsilon),
        tuple(sorted((str(k), repr(v)) for k, v in options.items())),
        embedding,
        vocab_size,
        vocabulary,
        oov,
        case,
        target,
    )
    found = _privatizers.get(key)
    if found is not None:
        return found
    with _lock:
        found = _privatizers.get(key)
        if found is None:
            path = local_path(embedding) if local_path is not None else embedding
            found = _privatizers[key] = _load(
                mechanism, epsilon, options, path, vocab_size, vocabulary, oov, case, target
            )
    return found


def _load(
    mechanism: str,
    epsilon: float | str,
    options: Mapping[str, Any],
    embedding: str | None,
    vocab_size: int | None,
    vocabulary: str,
    oov: str,
    case: str,
    target: str | None,
) -> Privatizer:
    global _loads
    from .embedding import load_embedding
    from .mechanisms import make_mechanism
    from .privatizer import Privatizer

    emb = load_embedding(embedding, vocab_size=vocab_size, vocabulary=vocabulary)
    mech = make_mechanism(mechanism, emb, epsilon, target=target, **dict(options))
    with warnings.catch_warnings():  # the caller warned already (driver, or privatize's own check)
        warnings.simplefilter("ignore", NotPrivateWarning)
        warnings.simplefilter("ignore", WeakPrivacyWarning)
        priv = Privatizer(mech, oov=oov, case=case, check_strength=False)
    _loads += 1
    log = os.environ.get(LOAD_LOG_ENV)
    if log:
        Path(log, f"{os.getpid()}-{_loads}").touch()
    return priv


# ------------------------------------------------------------------------- the one-call API
def privatize(
    texts: Any,
    epsilon: float | str,
    mechanism: str = "madlib",
    *,
    column: str | Sequence[str] | None = None,
    embedding: str | None = None,
    vocab_size: int | None = None,
    vocabulary: str = "words",
    oov: str = "random",
    case: str = "sentence",
    target: str | None = None,
    random_state: RandomState = None,
    run_key: RunKey | str | None = None,
    max_record_chars: int | None = MAX_RECORD_CHARS,
    accountant: BudgetAccountant | None = None,
    dataset: str | os.PathLike[str] | None = None,
    **options: Any,
) -> Any:
    """Privatize texts in one call, with the command line's defaults.

    ``texts``: one str (returns a str), a list/tuple of str (returns a list), a pandas
    Series (returns a Series with the same index, name and dtype), or a pandas DataFrame
    with ``column=`` naming its text column(s) (returns a copy with those columns
    privatized; every other column kept; a chosen label that appears twice in the frame
    is a DataError naming it, see :mod:`deniable.io`). Missing values (``None``, NaN,
    ``pd.NA``) stay missing.

    ``epsilon`` is required (a number > 0, or ``"auto"`` with ``target=``, e.g.
    ``"unchanged<=0.5"``); ``mechanism`` (default ``"madlib"``) and its declared
    ``options`` (e.g. ``gamma=`` for ``"tem"``), ``embedding`` (default: the built-in GloVe
    6B 50-d), ``vocab_size``, ``vocabulary``, ``oov`` and ``case`` are as for
    ``deniable privatize``. The embedding and the mechanism are loaded once per process
    and reused by later calls with the same parameters.

    Randomness: ``random_state=None`` (default) draws from a fresh run key from the OS:
    every call is a new, independent release. ``run_key=`` (a :class:`RunKey` or its
    hex) reproduces a call over the SAME texts exactly; an int ``random_state`` is
    reproducible and NOT private (warns).

    A text longer than ``max_record_chars`` characters (default: the command line's limit
    per record, :data:`deniable.io.MAX_RECORD_CHARS`, 4 Mi) is refused before any work
    (:class:`~deniable.DataError` naming its item); pass a larger number, or ``None`` for
    no limit. ``target=`` is given only with ``epsilon="auto"``. A setting under which
    most words come out unchanged warns :class:`~deniable.WeakPrivacyWarning` (the
    command line's ``WEAK``).

    Budget: every call is a release charged to ``accountant`` (a
    :class:`~deniable.budget.BudgetAccountant`; default: the default accountant, which
    records without a ceiling unless one was set) for the data set ``dataset`` (a name, a
    path, or ``None``: all unlabelled releases together), before any noise is drawn: a call
    that would exceed the budget raises :class:`~deniable.budget.BudgetError` and draws
    nothing. Repeating a call with the same ``run_key`` over the same texts costs nothing.
    """
    from ._random import check_random_state
    from ._validation import check_choice, check_epsilon, check_int
    from .calibrate.table import warn_if_weak
    from .mechanisms import validate_options
    from .privatizer import CASE_POLICIES, OOV_POLICIES

    if not (isinstance(epsilon, str) and epsilon == "auto"):
        check_epsilon(epsilon, "epsilon")
        if target is not None:  # the command line refuses it too (--target without --epsilon auto)
            from ._errors import InvalidParameterError

            raise InvalidParameterError("target", target, 'given only with epsilon="auto"')
    elif target is None:
        from ._errors import InvalidParameterError

        raise InvalidParameterError("target", None, 'a target with epsilon="auto", e.g. "unchanged<=0.5"')
    check_choice("vocabulary", vocabulary, ("words", "all"))
    check_choice("oov", oov, OOV_POLICIES)
    check_choice("case", case, CASE_POLICIES)
    if max_record_chars is not None:
        check_int("max_record_chars", max_record_chars, minimum=1)
    opts = dict(validate_options(mechanism, dict(options)))
    acc = BudgetAccountant.load_default(accountant)
    scope = dataset_id(dataset)
    values, rebuild = _as_values(texts, column, max_record_chars)
    rng = None
    if random_state is not None:
        rng = check_random_state(random_state, stacklevel=2)
        if run_key is not None:
            from ._errors import InvalidParameterError

            raise InvalidParameterError("run_key", "a key", "None when random_state is given")
    key = RunKey.check(run_key) if rng is None else None
    emb_label = None if embedding is None else os.fspath(embedding)
    priv = cached_privatizer(
        mechanism,
        epsilon,
        opts,
        emb_label,
        vocab_size=vocab_size,
        vocabulary=vocabulary,
        oov=oov,
        case=case,
        target=target if epsilon == "auto" else None,
    )
    warn_if_weak(priv.mechanism, stacklevel=2)  # at the caller's line; the rule and words of the CLI's WEAK
    present = [i for i, t in enumerate(values) if t is not None]
    result: list[str | None] = list(values)
    names = [""] if column is None else [_label_key(c) for c in _column_labels(column)]
    rows = len(values) // len(names)
    chosen: list[str] = [values[i] for i in present]  # type: ignore[misc]
    digest = None
    if key is not None:  # keyed, as privatize_file keys a file: a repeat of this call is provably the same
        digest = key.input_digest()
        for i, t in zip(present, chosen, strict=True):
            digest.add(i % rows, names[i // rows] or "(text)", t)
    release = release_fields(
        priv,
        records=rows,
        embedding=emb_label,
        vocabulary=vocabulary,
        columns=[n or "(text)" for n in names],
        seeded=rng is not None,
        run_key_id=key.id if key is not None else None,
        input=scope,
        run_key_origin=key.origin if key is not None else "seed",
        input_digest=digest.hexdigests() if digest is not None else None,
    )
    reservation = acc.reserve(release=release)  # BudgetError here: nothing drawn
    try:
        if present:
            if key is None:
                out = priv.privatize_batch(chosen, rng)
            else:  # each text its own stream: (its row, its column, its text), as privatize_file keys them
                gens = [
                    key.record_generator(i % rows, names[i // rows], t) for i, t in zip(present, chosen, strict=True)
                ]
                out, _ = priv.privatize_batch_with_stats(chosen, generators=gens)
            for i, text in zip(present, out, strict=True):
                result[i] = text
    except BaseException:
        reservation.cancel()
        raise
    reservation.commit()
    return rebuild(result)


def _column_labels(column: Any) -> list[Any]:
    """``column=`` as a list of distinct labels: one label (a str, or e.g. the int labels of
    ``pd.DataFrame(rows)``), or a list / tuple of them."""
    from ._errors import InvalidParameterError

    cols = list(column) if isinstance(column, list | tuple) else [column]
    if not cols:
        raise InvalidParameterError("column", "an empty list", "a column label, or a list of at least one")
    for c in cols:
        if not isinstance(c, Hashable) or isinstance(c, list | tuple):
            raise InvalidParameterError("column", type(c).__name__, "a column label, or a list of them")
    return list(dict.fromkeys(cols))


def _label_key(label: Any) -> str:
    """A column label as the text that keys its records' noise (a non-str label cannot equal a str one)."""
    return label if isinstance(label, str) else f"\x00{type(label).__name__}:{label!r}"


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float):
        return value != value  # NaN
    return type(value).__name__ in ("NAType", "NaTType")


def _checked(values: list[Any], name: str, max_chars: int | None = None) -> list[str | None]:
    from ._errors import InvalidParameterError

    out: list[str | None] = []
    for i, v in enumerate(values):
        if _missing(v):
            out.append(None)
        elif isinstance(v, str):
            if max_chars is not None and len(v) > max_chars:
                raise DataError(
                    f"{name}: item {i} is longer than max_record_chars={max_chars:,} characters "
                    "(pass a larger max_record_chars=, or None for no limit)"
                )
            out.append(v)
        else:
            raise InvalidParameterError(name, type(v).__name__, f"str values (item {i})")
    return out


def _as_values(
    texts: Any, column: str | Sequence[str] | None, max_chars: int | None = None
) -> tuple[list[str | None], Any]:
    """The texts as one flat list, and how to put the privatized list back in the caller's shape."""
    from ._errors import InvalidParameterError

    kind = type(texts).__module__.split(".")[0] + "." + type(texts).__name__
    if isinstance(texts, str):
        if column is not None:
            raise InvalidParameterError("column", column, "None for a str")
        return _checked([texts], "texts", max_chars), lambda out: out[0]
    if kind == "pandas.DataFrame":
        if column is None:
            raise InvalidParameterError("column", None, "the text column(s) of the DataFrame")
        cols = _column_labels(column)
        for c in cols:
            if c not in texts.columns:
                raise InvalidParameterError("column", c, "a column of the DataFrame")
        from .io._columns import check_unique_columns

        check_unique_columns(list(texts.columns), cols, "the DataFrame")  # a repeat would be released unchanged
        flat: list[str | None] = []
        for c in cols:
            flat.extend(_checked(texts[c].tolist(), f"column {c!r}", max_chars))
        n = len(texts)

        def frame(out: list[str | None]) -> Any:
            res = texts.copy()
            for j, c in enumerate(cols):
                res[c] = _series_like(texts[c], out[j * n : (j + 1) * n])
            return res

        return flat, frame
    if column is not None:
        raise InvalidParameterError("column", column, "None unless texts is a pandas DataFrame")
    if kind == "pandas.Series":
        return _checked(texts.tolist(), "texts", max_chars), lambda out: _series_like(texts, out)
    if isinstance(texts, (Mapping, bytes, bytearray)) or not hasattr(texts, "__iter__"):
        raise InvalidParameterError(
            "texts", type(texts).__name__, "a str, a list of str, a pandas Series or a DataFrame with column="
        )
    if getattr(texts, "ndim", 1) != 1:
        raise InvalidParameterError("texts", f"an array of shape {texts.shape}", "a 1-d sequence of texts")
    items = texts.tolist() if hasattr(texts, "tolist") else list(texts)
    return _checked(items, "texts", max_chars), lambda out: out


def _series_like(series: Any, values: list[str | None]) -> Any:
    import pandas as pd

    dtype = series.dtype if series.dtype != "float64" else object
    return pd.Series(values, index=series.index, name=series.name, dtype=dtype)
