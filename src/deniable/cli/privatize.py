"""``deniable privatize``: text files in, privatized text files out."""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from .._errors import InvalidParameterError, NotPrivateWarning, WeakPrivacyWarning
from .._validation import check_epsilon
from ..budget import BUDGET_FILE_NAME
from . import _options as opt
from ._common import (
    MechanismFlags,
    err,
    load_embedding_option,
    mechanism_command,
    seeded,
    warn_seed,
)
from ._config import from_options
from .mechanisms import mechanism_flag_help


def describe_parameters(described: dict[str, object]) -> str:
    """``key=value`` pairs of a mechanism's ``describe()`` (e.g. TEM's gamma and where it came from)."""
    parts = []
    for key, value in described.items():
        if key in ("mechanism", "epsilon"):
            continue
        parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return ", ".join(parts)


@mechanism_command("privatize")
def privatize_cmd(
    input: Annotated[str, opt.input_file("Input file (txt, csv, tsv, jsonl, parquet; .gz ok) or - for stdin.")],
    output: Annotated[str, opt.output("Output file (same format) or - for stdout.")],
    epsilon: Annotated[
        str,
        opt.epsilon(
            "Privacy parameter (> 0), or auto with --target: its meaning depends on the embedding and the "
            "mechanism; every summary says how much of a typical text it leaves unchanged."
        ),
    ],
    mechanism: Annotated[
        str,
        opt.mechanism(
            mechanism_flag_help("Default madlib (multivariate Laplace). ")
            + " Their options are listed below, by mechanism."
        ),
    ] = "madlib",
    column: Annotated[
        list[str] | None, opt.column("Text column to privatize (csv/tsv/jsonl/parquet); repeat for several.")
    ] = None,
    format: opt.FormatOpt = None,
    embedding: opt.EmbeddingOpt = None,
    vocab_size: opt.VocabSizeOpt = None,
    vocabulary: opt.VocabularyOpt = "words",
    oov: Annotated[
        str,
        opt.oov(
            "Out-of-vocabulary words: random (default; a uniformly random vocabulary word, protected), "
            "drop (removed with one adjacent space), or keep (released verbatim: NOT protected, warns)."
        ),
    ] = "random",
    case: Annotated[
        str,
        typer.Option(
            "--case",
            help="Case of output words: sentence (default; capital at the start of the text and of each sentence, "
            "a function of the punctuation only), lower, or keep (copies each input token's case pattern: NOT "
            "protected, warns).",
        ),
    ] = "sentence",
    batch_size: Annotated[int, opt.batch_size("Records per batch (memory is bounded by this).")] = 1000,
    seed: Annotated[int | None, opt.seed("Reproducible output for experiments. Seeded output is NOT private.")] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="With --epsilon auto: the largest epsilon whose upper bound keeps a typical text's tokens left "
            'unchanged ("unchanged<=0.5", "unchanged<=20%"), recovered by an attacker who knows the mechanism '
            '("recovered<=0.2") or recovered among its less common words, outside the 200 most frequent '
            '("recovered_content<=0.1") at most at this share, read from the calibration table of the '
            "mechanism on this embedding (public data only; `deniable prepare --calibration` builds it, else it "
            "is measured once, with a notice).",
        ),
    ] = None,
    run_key_file: Annotated[
        Path | None,
        typer.Option(
            "--run-key-file",
            help="Reproduce a run: read its secret run key from this file (readable by its owner only: chmod 600; "
            "a key that is not random is refused), or, when the file does not exist, write this run's fresh key "
            "there (mode 0600). The same key over the SAME input gives the same release whatever --batch-size, "
            "so recomputing it is not a second release (the manifest's keyed input digest lets inspect-manifest "
            "tell); whoever holds the key can recompute the noise: keep it like a password. Default: a fresh key "
            "from the OS, never written.",
        ),
    ] = None,
    input_label: Annotated[
        str | None,
        typer.Option(
            "--input-label",
            help="Name of the input in the run manifest's ledger entry (e.g. customers-2026), so that "
            "`deniable inspect-manifest --budget` adds up releases of the same data under different paths. "
            "Default: a hash of the input path.",
        ),
    ] = None,
    budget: Annotated[
        float | None,
        typer.Option(
            "--budget",
            help="Refuse the run (exit 2, nothing written, before any noise is drawn) if the releases of this "
            "input recorded in the budget file plus this one would exceed this epsilon per word (sequential "
            "composition; a re-run with the same --run-key-file over the same input costs nothing). "
            "Records the release in the budget file. See docs/budget.md.",
        ),
    ] = None,
    budget_file: Annotated[
        Path | None,
        typer.Option(
            "--budget-file",
            help=f"With --budget: the file that records the releases (default: {BUDGET_FILE_NAME} in the "
            "output's folder; needed when writing to standard output).",
        ),
    ] = None,
    quiet: Annotated[bool, opt.quiet("No progress bar or summary.")] = False,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="local (default: this process) or spark[:MASTER] (default master local[*]): Parquet, CSV, JSONL "
            "or txt files or folders in, a partitioned output folder out (written atomically, with _SUCCESS and "
            "_MANIFEST.json). Needs deniable[spark] and a --embedding path every executor can read.",
        ),
    ] = "local",
    *,
    mechanism_flags: MechanismFlags,
) -> None:
    """Privatize the words of a file with a metric-DP mechanism.

    Each word token is replaced independently by a random word near it in the
    embedding; punctuation, spacing and line breaks are kept exactly. For
    csv/tsv/jsonl/parquet, only the --column columns change; rows, order and
    every other column are kept.
    """
    parsed = dict(locals())  # the options as given, passed on by name
    from ..privatizer import CASE_POLICIES, OOV_POLICIES

    eps_value = _epsilon_arg(epsilon, target)
    options = mechanism_flags.for_mechanism(mechanism)  # fail fast on a flag that does not apply, before loading
    if oov not in OOV_POLICIES:
        raise InvalidParameterError("--oov", oov, "one of " + ", ".join(OOV_POLICIES))
    if case not in CASE_POLICIES:
        raise InvalidParameterError("--case", case, "one of " + ", ".join(CASE_POLICIES))
    if batch_size < 1:
        raise InvalidParameterError("--batch-size", batch_size, "an integer >= 1")
    engine_name, _, master = engine.partition(":")
    if engine_name not in ("local", "spark") or (engine_name == "local" and master):
        raise InvalidParameterError("--engine", engine, "local or spark[:MASTER]")
    if run_key_file is not None and seed is not None:
        raise InvalidParameterError("--run-key-file", "with --seed", "one of --run-key-file or --seed")
    if budget_file is not None and budget is None:
        raise InvalidParameterError("--budget-file", str(budget_file), "given only with --budget")
    key = _run_key(run_key_file)
    accountant = _budget(budget, budget_file, input, output, input_label, column, eps_value, key, engine_name)
    run = from_options(_Run, parsed, epsilon=eps_value, options=options, run_key=key, accountant=accountant)
    t0 = time.perf_counter()
    priv, totals = _spark(run, master or "local[*]") if engine_name == "spark" else _local(run)
    if not quiet:
        _summary(priv, totals, mechanism, options, vocabulary, time.perf_counter() - t0)
        if accountant is not None:
            scope = input_label if input_label is not None else (None if input == "-" else Path(input))
            spent = accountant.total(scope)
            err.print(
                f"budget: epsilon {spent:g} of {accountant.epsilon:g} per word spent on this input "
                f"({max(0.0, accountant.epsilon - spent):g} remains), recorded in {accountant.path}",
                highlight=False,
            )


def _summary(priv: Any, totals: Any, mechanism: str, options: dict[str, Any], vocabulary: str, dt: float) -> None:
    """The run's summary on stderr: counts, strength, parameters, policies and what is not protected."""
    mech = priv.mechanism
    err.print(
        f"privatized {totals.texts:,} texts, {totals.tokens:,} word tokens "
        f"({totals.changed:,} changed) with {mechanism} at epsilon={float(mech.epsilon):g} in {dt:.1f}s",
        highlight=False,
    )
    _print_strength(mech, options)
    err.print(f"mechanism parameters: {describe_parameters(mech.describe())}", highlight=False)
    policy = priv.describe()
    err.print(
        f"policies: oov={priv.oov}, case={priv.case}, vocabulary={vocabulary} ({policy['vocabulary_size']:,} words)",
        highlight=False,
    )
    for item in policy["not_protected"]:
        style = "yellow" if item.endswith("=keep)") else "dim"
        err.print(f"[{style}]not protected: {item}[/]", highlight=False)
    if not _prepared(mech):
        err.print(
            f"[dim]tip: `deniable prepare -m {mechanism}` builds this mechanism's tables for the whole "
            "vocabulary once (input-independent; TEM: 1.5 min measured on 2 idle cores; memory-mapped by later runs); "
            "without them every new word costs a scan of the vocabulary[/]",
            highlight=False,
        )
    if totals.oov:
        action = {
            "keep": "kept as they were (NOT protected)",
            "drop": "dropped",
            "random": "replaced by random words",
        }[priv.oov]
        err.print(
            f"[yellow]{totals.oov:,} out-of-vocabulary tokens ({totals.oov_rate:.1%}) were {action}[/]",
            highlight=False,
        )


def _run_key(path: Path | None) -> Any:
    """``--run-key-file``: the key stored there, or a fresh one written there (0600, atomically); None without it."""
    import tempfile

    from .._random import RunKey
    from ..io._files import cleanup_on_signals

    if path is None:
        return None
    if path.exists():  # refused: unreadable, not a key, a weak key, or readable by others (never echoed)
        return RunKey.from_file(path, name="--run-key-file")
    key = RunKey.new()
    # written whole into a temporary readable by its owner only (mkstemp: 0600), then linked into
    # place: a killed run leaves no half-written key, and an existing key is never overwritten
    with cleanup_on_signals():
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(key.hex() + "\n")
            os.link(tmp, path)
        except FileExistsError:
            return _run_key(path)  # another run wrote it meanwhile: that key
        finally:
            os.unlink(tmp)
    return key


def _budget(
    budget: float | None,
    budget_file: Path | None,
    input: str,
    output: str,
    input_label: str | None,
    column: list[str] | None,
    epsilon: float | str,
    key: Any,
    engine: str,
) -> Any:
    """``--budget``: the budget file's accountant, after a first check made before anything loads.

    The release is refused here when it would exceed the budget as a new release; the one case
    that waits for the embedding is a run key already recorded for this input (perhaps a
    reproduction, free: :func:`deniable.api.privatize_file` tells by the keyed input digest).
    """
    import math

    from ..api import input_id
    from ..budget import UNLABELLED, BudgetAccountant, BudgetError, simple_release

    if budget is None:
        return None
    if not (budget > 0 and math.isfinite(budget)):
        raise InvalidParameterError("--budget", budget, "an epsilon per word > 0")
    if budget_file is None:
        if output == "-":
            raise InvalidParameterError("--budget-file", None, "a file to record releases in when writing to -")
        folder = Path(output).resolve().parent
        budget_file = folder / BUDGET_FILE_NAME
    if not budget_file.parent.is_dir():
        raise InvalidParameterError("--budget-file", str(budget_file), "a file in an existing folder")
    acc = BudgetAccountant(budget, path=budget_file)
    ident = input_id(input, input_label) or UNLABELLED
    if isinstance(epsilon, float):  # as a new release (epsilon auto: checked once resolved, still before noise)
        columns = list(dict.fromkeys(column or [])) or (["value"] if engine == "spark" else ["(text)"])
        try:
            acc.check(release=simple_release(epsilon, ident, columns), name="--budget")
        except BudgetError:
            if key is None or engine == "spark" or not acc.has_run_key(ident, key.id):
                raise
    return acc


def _epsilon_arg(epsilon: str, target: str | None) -> float | str:
    """``--epsilon`` as a number, or ``"auto"`` (then ``--target`` is required and checked here, before loading)."""
    from ..calibrate.table import parse_target

    if epsilon.strip().lower() == "auto":
        if target is None:
            raise InvalidParameterError("--target", None, 'a target with --epsilon auto, e.g. "unchanged<=0.5"')
        parse_target(target, "--target")
        return "auto"
    if target is not None:
        raise InvalidParameterError("--target", target, "given only with --epsilon auto")
    try:
        value = float(epsilon)
    except ValueError:
        raise InvalidParameterError("--epsilon", epsilon, "a number > 0, or auto with --target") from None
    return check_epsilon(value, "--epsilon")


def _target_upper(res: Any) -> float:
    """The chosen point's upper bound of the measure the target bounds."""
    hi = res.target.upper(res.point)
    return float(res.point.unchanged_high if hi is None else hi)


def _print_strength(mech: Any, options: dict[str, Any]) -> None:
    """How strong the setting is, in words (from the public calibration, never from the input)."""
    from ..calibrate.table import resolution_of, strength

    res = resolution_of(mech)
    if res is not None:
        nxt = f"; epsilon={res.next_point.epsilon:g} would not" if res.next_point else ""
        err.print(
            f"epsilon=auto: {float(mech.epsilon):g} is the largest calibrated epsilon that meets {res.target} "
            f"(upper bound {_target_upper(res):.1%}{nxt})",
            highlight=False,
        )
    st = strength(mech, options=options)
    err.print(f"strength: {st.sentence()}", highlight=False)
    warning = st.warning()
    if warning:
        err.print(f"[yellow]{warning}[/]", highlight=False)


@dataclass(frozen=True)
class _Run:
    """One run as the command line gives it: what either engine reads (a field named as an option
    of the command is filled from it: :func:`~deniable.cli._config.from_options`)."""

    input: str
    output: str
    format: str | None
    column: list[str] | None
    epsilon: float | str
    target: str | None
    mechanism: str
    options: dict[str, Any]
    embedding: str | None
    vocab_size: int | None
    vocabulary: str
    oov: str
    case: str
    seed: int | None
    batch_size: int
    quiet: bool
    run_key: Any = None  # a deniable.RunKey, or None: fresh from the OS
    input_label: str | None = None
    accountant: Any = None  # --budget: a deniable.budget.BudgetAccountant over the budget file


def _local(run: _Run) -> tuple[Any, Any]:
    """``--engine local``: the file in this process, with its run manifest."""
    from .._errors import DataError
    from ..api import privatize_file
    from ..io import detect_format
    from ..io._formats import check_output_name
    from ..mechanisms import make_mechanism
    from ..privatizer import Privatizer

    detect_format(run.input, run.format)  # fail fast on an unknown format, before loading anything
    check_output_name(run.output)  # and on -o "" (or a folder-like name)
    if run.input != "-" and not Path(run.input).is_file():
        raise DataError(f"input file {run.input} does not exist or is not a file")
    warn_seed(run.seed)
    from .._threads import init_local

    init_local()  # 1 BLAS thread; the decode split across the usable cores (docs/performance.md)
    emb = load_embedding_option(run.embedding, run.vocab_size, run.vocabulary)
    target = run.target if run.epsilon == "auto" else None
    mech = make_mechanism(run.mechanism, emb, run.epsilon, target=target, **run.options)
    with warnings.catch_warnings():  # the summary states what is not protected, and WEAK
        warnings.simplefilter("ignore", NotPrivateWarning)
        warnings.simplefilter("ignore", WeakPrivacyWarning)
        priv = Privatizer(mech, oov=run.oov, case=run.case, check_strength=False)
    totals = privatize_file(
        run.input,
        run.output,
        priv,
        columns=run.column,
        format=run.format,
        batch_size=run.batch_size,
        random_state=seeded(run.seed) if run.seed is not None else None,
        show_progress=None if not run.quiet else False,
        embedding=run.embedding,
        vocabulary=run.vocabulary,
        run_key=run.run_key,
        input_label=run.input_label,
        accountant=run.accountant,
        budget_name="--budget",
    )
    return priv, totals


def _spark(run: _Run, master: str) -> tuple[Any, Any]:
    """``--engine spark`` on ``master``: a file or folder in, a partitioned folder (with its manifest)
    out (Spark partitions the input: no ``--batch-size``)."""
    from .._errors import DataError
    from ..calibrate.table import attach_resolution, resolve_epsilon
    from ..integrations import BatchPrivatizer
    from ..integrations.spark import privatize_path
    from ..io import detect_format

    epsilon = run.epsilon
    resolution = None
    if epsilon == "auto":  # resolved once, on the driver; every executor gets the number
        emb = load_embedding_option(run.embedding, run.vocab_size, run.vocabulary)
        resolution = resolve_epsilon(emb, run.mechanism, str(run.target), run.options)
        epsilon = resolution.epsilon
    if run.input == "-" or run.output == "-":
        raise InvalidParameterError("--engine", "spark", "local when reading stdin or writing stdout")
    if not run.output:
        raise InvalidParameterError("--output", run.output, "an output folder name")
    src = Path(run.input)
    if not src.exists():
        raise DataError(f"input {run.input} does not exist")
    if run.format is None and src.is_dir():
        raise InvalidParameterError("--format", None, "parquet, csv, jsonl or txt for an input folder")
    fmt = detect_format(run.input, run.format)
    if fmt == "tsv":
        raise InvalidParameterError("--format", fmt, "parquet, csv, jsonl or txt with --engine spark")
    columns = ["value"] if fmt == "txt" else list(run.column or [])
    if not columns:
        raise InvalidParameterError("--column", None, f"at least one text column for {fmt} input")
    warn_seed(run.seed)
    embedding = run.embedding
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        batch = BatchPrivatizer(
            mechanism=run.mechanism,
            epsilon=float(epsilon),
            options=run.options,
            embedding=str(Path(embedding).resolve()) if embedding and Path(embedding).exists() else embedding,
            vocab_size=run.vocab_size,
            vocabulary=run.vocabulary,
            oov=run.oov,
            case=run.case,
            columns=tuple(columns),
            seed=run.seed,
            run_key=run.run_key,
            accountant=run.accountant if run.accountant is not None else None,
            dataset=run.input_label if run.input_label is not None else Path(run.input),
        )
    stats = privatize_path(run.input, run.output, batch, format=fmt, master=master, input_label=run.input_label)
    priv = batch.privatizer()
    if resolution is not None:
        attach_resolution(priv.mechanism, resolution)
    return priv, stats


def _prepared(mech: Any) -> bool:
    """Whether the prepared artefacts that speed ``mech`` up are in place (TEM's k-NN tables)."""
    from ..artefacts import ArtefactError, open_artefact
    from ..mechanisms.tem import TruncatedExponential

    if not isinstance(mech, TruncatedExponential):
        return True
    planned = TruncatedExponential.prepared_artefacts(mech.embedding, {"metric": mech.metric})
    try:
        return all(open_artefact(mech.embedding, kind, params) is not None for kind, params in planned)
    except ArtefactError:  # damaged: the run already failed with the error and how to rebuild
        return True
