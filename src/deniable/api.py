"""Privatize a file, and the run manifest written beside every output.

:func:`privatize_file` is what ``deniable privatize`` calls; the engines
(:mod:`deniable.integrations`) write the same :func:`run_manifest` beside their output.
A manifest records how an output was made -- mechanism and its parameters, embedding
fingerprint, vocabulary / OOV / case policies, counts, library version, start and end
time, engine -- and never any text (nor a value derived from one text).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import DataError, NotPrivateWarning, WeakPrivacyWarning
from ._random import RandomState, RunKey
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
    "run_manifest",
    "write_manifest",
]

MANIFEST_SUFFIX = ".manifest.json"
#: The manifest's name inside an output folder (Spark-style partitioned output).
MANIFEST_FOLDER_NAME = "_MANIFEST.json"
MANIFEST_VERSION = 1


def now() -> str:
    """The current UTC time, ISO 8601 (seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def manifest_path(output: str | Path) -> Path:
    """``<output>.manifest.json`` beside a file, ``<output>/_MANIFEST.json`` inside a folder."""
    out = Path(output)
    if out.is_dir():
        return out / MANIFEST_FOLDER_NAME
    return out.with_name(out.name + MANIFEST_SUFFIX)


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

    mech = privatizer.mechanism
    emb = mech.embedding
    policy = privatizer.describe()
    manifest: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "library": "deniable",
        "version": __version__,
        "engine": engine,
        "mechanism": _jsonable(mech.describe()),
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
        "case_sensitive_vocabulary": policy["case_sensitive_vocabulary"],
        "not_protected": policy["not_protected"],
        # how strong the setting is, from the public calibration (never from the input)
        "privacy": _privacy(privatizer),
        "seeded": seeded,
        "run_key_origin": run_key_origin if run_key_origin is not None else ("seed" if seeded else None),
        "format": format,
        "columns": list(columns or []),
        # only what the output itself reveals (it keeps every text and its word tokens): how many
        # tokens changed or were out of vocabulary depends on the input beyond the guarantee, so it
        # is shown to the operator on stderr and never persisted beside a release
        "counts": {"texts": stats.texts, "tokens": stats.tokens},
        "release": {
            "input": input,
            "columns": list(columns or []),
            "records": stats.texts,
            "epsilon_per_word": float(mech.epsilon),
            "mechanism": mech.describe().get("mechanism", type(mech).__name__),
            "metric": mech.describe().get("metric"),
            "run_key_id": run_key_id,
            "run_key_origin": run_key_origin if run_key_origin is not None else ("seed" if seeded else None),
            "input_digest": dict(input_digest) if input_digest else None,
        },
        "started": started,
        "finished": finished,
    }
    if extra:
        manifest.update(_jsonable(dict(extra)))
    return manifest


def _privacy(privatizer: Privatizer) -> dict[str, Any]:
    """Epsilon, the target it was chosen for (``epsilon="auto"``) and the expected share of a
    typical text's tokens released unchanged, with a plain-words statement (calibrate.table)."""
    from .calibrate.table import resolution_of, strength

    out = strength(privatizer.mechanism).describe()
    res = resolution_of(privatizer.mechanism)
    if res is not None:
        out["auto"] = res.describe()
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def write_manifest(path: str | Path, manifest: Mapping[str, Any]) -> Path:
    """Write ``manifest`` to ``path`` atomically (a temporary beside it, then a rename)."""
    dst = Path(path)
    fd, tmp = tempfile.mkstemp(prefix="." + dst.name + ".", suffix=".tmp", dir=dst.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, sort_keys=False)
            f.write("\n")
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dst


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_manifest(path: str | Path) -> dict[str, Any]:
    """A manifest: ``path`` itself, or the manifest of the output ``path`` names."""
    p = Path(path)
    if not p.name.endswith(MANIFEST_SUFFIX) and p.name != MANIFEST_FOLDER_NAME:
        p = manifest_path(p)
    if not p.is_file():
        raise DataError(f"no manifest at {p}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise DataError(f"{p} is not a JSON manifest") from None
    if not isinstance(data, dict) or "manifest_version" not in data:
        raise DataError(f"{p} is not a deniable run manifest")
    return data


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

    transform_file(
        src, dst, fn, columns=columns, format=format, batch_size=batch_size, show_progress=show_progress, keyed=True
    )
    if manifest and str(dst) != "-":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)
            m = run_manifest(
                privatizer,
                totals,
                started=started,
                finished=now(),
                embedding=embedding,
                vocabulary=vocabulary,
                columns=columns,
                format=fmt,
                seeded=random_state is not None or privatizer.random_state is not None,
                run_key_id=key.id if key is not None else None,
                input=input_id(src, input_label),
                run_key_origin=key.origin if key is not None else "seed",
                input_digest=digest.hexdigests() if digest is not None else None,
            )
        write_manifest(manifest_path(dst), m)
    return totals


@dataclass
class LedgerEntry:
    """What several releases spent on the words of one column of one input."""

    input: str | None
    column: str
    releases: int
    epsilon: float
    records: list[int]
    mechanisms: list[str]
    metrics: list[str]
    manifests: list[str]

    def describe(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "column": self.column,
            "releases": self.releases,
            "epsilon_per_word": self.epsilon,
            "records": self.records,
            "mechanisms": self.mechanisms,
            "metrics": self.metrics,
            "manifests": self.manifests,
        }


def privacy_ledger(
    manifests: Sequence[str | Path | Mapping[str, Any]], budget: float | None = None
) -> tuple[list[LedgerEntry], list[str]]:
    """Sum what the releases described by ``manifests`` spent per input and column; and warnings.

    Composition: a word released ``k`` times at epsilons ``e_1..e_k`` (independent noise)
    is protected at ``e_1 + ... + e_k``, as by one release at that epsilon. The ledger never
    undercounts: two manifests of a column are ONE release (a recomputation, a re-run with
    the exported key: the same noise, so the same output) only when they provably are --
    the same run key id, the same mechanism and parameters (:func:`_release_params`), and
    the same keyed input digest of that column (the same texts at the same positions).
    Anything else -- another batch size is the same release; a line inserted, another
    mechanism or epsilon, a manifest without a digest (engines, old manifests, seeds) -- is
    counted as a release of its own. A manifest without an input id (standard input
    without --input-label) cannot be matched and is its own input.
    ``budget``: warn where a column's total exceeds it (like diffprivlib's BudgetAccountant).
    """
    groups: dict[tuple[str | None, str, int], dict[str, Any]] = {}
    warnings_: list[str] = []
    for i, item in enumerate(manifests):
        m = dict(item) if isinstance(item, Mapping) else read_manifest(item)
        name = str(item) if not isinstance(item, Mapping) else f"manifest {i + 1}"
        rel = m.get("release") or {}
        eps = rel.get("epsilon_per_word", (m.get("mechanism") or {}).get("epsilon"))
        if not isinstance(eps, int | float):
            raise DataError(f"{name}: no epsilon in the manifest")
        inp = rel.get("input")
        cols = rel.get("columns", m.get("columns")) or ["(text)"]
        records = int(rel.get("records", (m.get("counts") or {}).get("texts", 0)) or 0)
        key_id = rel.get("run_key_id")
        found = rel.get("input_digest")
        digests: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        params = _release_params(m, eps)
        mech = rel.get("mechanism") or (m.get("mechanism") or {}).get("mechanism") or "?"
        metric = rel.get("metric") or (m.get("mechanism") or {}).get("metric") or "?"
        for col in cols:
            g = groups.setdefault(
                (inp, col, i if inp is None else -1),
                {"runs": {}, "records": set(), "mechs": set(), "metrics": set(), "files": [], "keys": {}},
            )
            digest = digests.get(col)
            if key_id and isinstance(digest, str) and digest:
                run: Any = (key_id, params, digest)  # provably the same noise on the same texts
                seen = g["keys"].setdefault(key_id, set())
                seen.add(run)
                if len(seen) == 2:
                    warnings_.append(
                        f"{name}: run key {key_id} was used over another input or with other parameters for "
                        f"column {col}: counted as separate releases (a run key belongs to one input)"
                    )
            else:
                run = f"manifest:{i}"  # nothing proves it is another's recomputation: a release of its own
            g["runs"][run] = float(eps)
            g["records"].add(records)
            g["mechs"].add(mech)
            g["metrics"].add(metric)
            g["files"].append(name)
    entries = []
    for (inp, col, _), g in groups.items():
        total = sum(g["runs"].values())
        entry = LedgerEntry(
            inp, col, len(g["runs"]), total, sorted(g["records"]), sorted(g["mechs"]), sorted(g["metrics"]), g["files"]
        )
        entries.append(entry)
        where = f"input {inp or '(unknown)'} column {col}"
        if entry.releases > 1:
            warnings_.append(
                f"{where} was released {entry.releases} times: each word of it is protected at "
                f"epsilon {total:g} in total (the epsilons add up), not at any one release's epsilon"
            )
            if len(g["metrics"]) > 1:
                warnings_.append(
                    f"{where}: releases under different metrics ({', '.join(entry.metrics)}) add up per metric"
                )
            if len(g["records"]) > 1:
                warnings_.append(f"{where}: the releases cover different numbers of records (the input changed?)")
        if budget is not None and total > budget:
            warnings_.append(f"{where}: epsilon {total:g} spent, over the budget of {budget:g}")
        if inp is None:
            warnings_.append(f"{', '.join(g['files'])}: no input id, cannot be matched with other releases")
    return entries, warnings_


def _release_params(manifest: Mapping[str, Any], eps: float) -> str:
    """What the output depends on besides the key and the input: mechanism and its parameters,
    embedding, policies (a canonical string). The decode's description is left out: the same
    noise decoded otherwise is post-processing of one release."""
    mech = {k: v for k, v in dict(manifest.get("mechanism") or {}).items() if k != "decode"}
    emb = dict(manifest.get("embedding") or {})
    fields = {
        "mechanism": mech,
        "epsilon": float(eps),
        "options": manifest.get("options"),
        "embedding": emb.get("fingerprint"),
        "vocabulary": manifest.get("vocabulary"),
        "oov": manifest.get("oov"),
        "case": manifest.get("case"),
    }
    return json.dumps(fields, sort_keys=True, default=str)


def input_id(src: str | Path | None, label: str | None = None) -> str | None:
    """The input's public id in a ledger: the user's ``label`` (``dataset:LABEL``), else a hash of its path.

    Never derived from the content: a content hash would let anyone holding a guessed
    file confirm it was the input. ``None`` for standard input without a label.
    """
    if label is not None:
        return f"dataset:{label}"
    if src is None or str(src) == "-":
        return None
    path = os.path.realpath(os.fspath(src))
    return "path:" + hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:16]


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
        priv = Privatizer(mech, oov=oov, case=case)
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
    if present:
        chosen: list[str] = [values[i] for i in present]  # type: ignore[misc]
        if key is None:
            out = priv.privatize_batch(chosen, rng)
        else:  # each text its own stream: (its row, its column, its text), as privatize_file keys them
            names = [""] if column is None else ([column] if isinstance(column, str) else list(dict.fromkeys(column)))
            rows = len(values) // len(names)
            gens = [key.record_generator(i % rows, names[i // rows], t) for i, t in zip(present, chosen, strict=True)]
            out, _ = priv.privatize_batch_with_stats(chosen, generators=gens)
        for i, text in zip(present, out, strict=True):
            result[i] = text
    return rebuild(result)


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
        # one label (a str, or e.g. the int labels of pd.DataFrame(rows)), or a list / tuple of them
        cols = list(column) if isinstance(column, list | tuple) else [column]
        for c in cols:
            if not isinstance(c, Hashable) or isinstance(c, list | tuple):
                raise InvalidParameterError("column", type(c).__name__, "a column label, or a list of them")
        cols = list(dict.fromkeys(cols))
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
