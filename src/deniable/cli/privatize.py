"""``deniable privatize``: text files in, privatized text files out."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer

from .._errors import InvalidParameterError, NotPrivateWarning
from .._validation import check_epsilon
from . import _options as opt
from ._common import (
    MechanismFlags,
    err,
    load_embedding_option,
    mechanism_command,
    seeded,
    warn_seed,
)
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
    format: Annotated[
        str | None, opt.file_format("txt, csv, tsv, jsonl or parquet (default: from the file name; stdin: txt).")
    ] = None,
    embedding: Annotated[
        str | None,
        opt.embedding(
            "Embedding: GloVe/fastText text file, word2vec .bin(.gz) or a saved folder. "
            "Default: built-in GloVe 6B 50-d."
        ),
    ] = None,
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
            help="With --epsilon auto: the largest epsilon that leaves at most this share of a typical text's "
            'tokens unchanged, e.g. "unchanged<=0.5" or "unchanged<=20%", read from the calibration table of the '
            "mechanism on this embedding (public data only; `deniable prepare --calibration` builds it, else it "
            "is measured once, with a notice).",
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
    from ..io import detect_format
    from ..privatizer import CASE_POLICIES, OOV_POLICIES, Privatizer

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
    if engine_name == "spark":
        t0 = time.perf_counter()
        priv, totals = _spark(
            input,
            output,
            format,
            column,
            eps_value,
            target,
            mechanism,
            options,
            embedding,
            vocab_size,
            vocabulary,
            oov,
            case,
            seed,
            master or "local[*]",
        )
    else:
        detect_format(input, format)  # fail fast on an unknown format, before loading anything
        if input != "-" and not Path(input).is_file():
            from .._errors import DataError

            raise DataError(f"input file {input} does not exist or is not a file")
        warn_seed(seed)
        t0 = time.perf_counter()
        emb = load_embedding_option(embedding, vocab_size, vocabulary)
        from ..mechanisms import make_mechanism

        mech = make_mechanism(mechanism, emb, eps_value, target=target if eps_value == "auto" else None, **options)
        with warnings.catch_warnings():  # the summary below states what is not protected
            warnings.simplefilter("ignore", NotPrivateWarning)
            priv = Privatizer(mech, oov=oov, case=case)
        from ..api import privatize_file

        totals = privatize_file(
            input,
            output,
            priv,
            columns=column,
            format=format,
            batch_size=batch_size,
            random_state=seeded(seed) if seed is not None else None,
            show_progress=None if not quiet else False,
            embedding=embedding,
            vocabulary=vocabulary,
        )
    if not quiet:
        _summary(priv, totals, mechanism, options, vocabulary, time.perf_counter() - t0)


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
            "vocabulary once (input-independent, a few minutes, memory-mapped by later runs); "
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


def _print_strength(mech: Any, options: dict[str, Any]) -> None:
    """How strong the setting is, in words (from the public calibration, never from the input)."""
    from ..calibrate.table import resolution_of, strength

    res = resolution_of(mech)
    if res is not None:
        nxt = f"; epsilon={res.next_point.epsilon:g} would not" if res.next_point else ""
        err.print(
            f"epsilon=auto: {float(mech.epsilon):g} is the largest calibrated epsilon that meets {res.target} "
            f"(upper bound {res.point.unchanged_high:.1%}{nxt})",
            highlight=False,
        )
    st = strength(mech, options=options)
    err.print(f"strength: {st.sentence()}", highlight=False)
    warning = st.warning()
    if warning:
        err.print(f"[yellow]{warning}[/]", highlight=False)


def _spark(
    input: str,
    output: str,
    format: str | None,
    column: list[str] | None,
    epsilon: float | str,
    target: str | None,
    mechanism: str,
    options: dict[str, Any],
    embedding: str | None,
    vocab_size: int | None,
    vocabulary: str,
    oov: str,
    case: str,
    seed: int | None,
    master: str,
) -> tuple[Any, Any]:
    """``--engine spark``: a file or folder in, a partitioned folder (with its manifest) out."""
    from .._errors import DataError
    from ..calibrate.table import attach_resolution, resolve_epsilon
    from ..integrations import BatchPrivatizer
    from ..integrations.spark import privatize_path
    from ..io import detect_format

    resolution = None
    if epsilon == "auto":  # resolved once, on the driver; every executor gets the number
        emb = load_embedding_option(embedding, vocab_size, vocabulary)
        resolution = resolve_epsilon(emb, mechanism, str(target), options)
        epsilon = resolution.epsilon
    if input == "-" or output == "-":
        raise InvalidParameterError("--engine", "spark", "local when reading stdin or writing stdout")
    src = Path(input)
    if not src.exists():
        raise DataError(f"input {input} does not exist")
    if format is None and src.is_dir():
        raise InvalidParameterError("--format", None, "parquet, csv, jsonl or txt for an input folder")
    fmt = detect_format(input, format)
    if fmt == "tsv":
        raise InvalidParameterError("--format", fmt, "parquet, csv, jsonl or txt with --engine spark")
    columns = ["value"] if fmt == "txt" else list(column or [])
    if not columns:
        raise InvalidParameterError("--column", None, f"at least one text column for {fmt} input")
    warn_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        batch = BatchPrivatizer(
            mechanism=mechanism,
            epsilon=float(epsilon),
            options=options,
            embedding=str(Path(embedding).resolve()) if embedding and Path(embedding).exists() else embedding,
            vocab_size=vocab_size,
            vocabulary=vocabulary,
            oov=oov,
            case=case,
            columns=tuple(columns),
            seed=seed,
        )
    stats = privatize_path(input, output, batch, format=fmt, master=master)
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
