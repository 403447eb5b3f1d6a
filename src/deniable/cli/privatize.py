"""``deniable privatize``: text files in, privatized text files out."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Annotated

import typer

from .._errors import InvalidParameterError, NotPrivateWarning
from .._validation import check_epsilon
from ._common import (
    MechanismFlags,
    VocabularyOpt,
    build_mechanism,
    check_mechanism_name,
    err,
    load_embedding_option,
    mechanism_command,
    seeded,
    warn_seed,
)


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
    input: Annotated[str, typer.Argument(help="Input file (txt, csv, tsv, jsonl, parquet; .gz ok) or - for stdin.")],
    output: Annotated[str, typer.Option("--output", "-o", help="Output file (same format) or - for stdout.")],
    epsilon: Annotated[
        float,
        typer.Option(
            "--epsilon", "-e", help="Privacy parameter (> 0). Calibrate it: its meaning depends on the embedding."
        ),
    ],
    mechanism: Annotated[
        str,
        typer.Option(
            "--mechanism",
            "-m",
            help="madlib (multivariate Laplace), tem (truncated exponential), brr (binary randomized response) "
            "or another registered mechanism. Its options are listed below, by mechanism.",
        ),
    ] = "madlib",
    column: Annotated[
        list[str] | None,
        typer.Option("--column", "-c", help="Text column to privatize (csv/tsv/jsonl/parquet); repeat for several."),
    ] = None,
    format: Annotated[
        str | None,
        typer.Option(
            "--format", "-f", help="txt, csv, tsv, jsonl or parquet (default: from the file name; stdin: txt)."
        ),
    ] = None,
    embedding: Annotated[
        str | None,
        typer.Option(
            "--embedding",
            help="Embedding: GloVe/fastText text file, word2vec .bin(.gz) or a saved folder. "
            "Default: built-in GloVe 6B 50-d.",
        ),
    ] = None,
    vocab_size: Annotated[
        int | None, typer.Option("--vocab-size", help="Keep only the N most frequent words of the embedding.")
    ] = None,
    vocabulary: VocabularyOpt = "words",
    oov: Annotated[
        str,
        typer.Option(
            "--oov",
            help="Out-of-vocabulary words: random (default; a uniformly random vocabulary word, protected), "
            "drop (removed with one adjacent space), or keep (released verbatim: NOT protected, warns).",
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
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="Records per batch (memory is bounded by this).")
    ] = 1000,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Reproducible output for experiments. Seeded output is NOT private.")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or summary.")] = False,
    *,
    mechanism_flags: MechanismFlags,
) -> None:
    """Privatize the words of a file with a metric-DP mechanism.

    Each word token is replaced independently by a random word near it in the
    embedding; punctuation, spacing and line breaks are kept exactly. For
    csv/tsv/jsonl/parquet, only the --column columns change; rows, order and
    every other column are kept.
    """
    from ..io import detect_format, transform_file
    from ..privatizer import CASE_POLICIES, OOV_POLICIES, Privatizer

    check_epsilon(epsilon, "--epsilon")
    check_mechanism_name(mechanism)
    mechanism_flags.for_mechanism(mechanism)  # fail fast on a flag that does not apply, before loading
    if oov not in OOV_POLICIES:
        raise InvalidParameterError("--oov", oov, "one of " + ", ".join(OOV_POLICIES))
    if case not in CASE_POLICIES:
        raise InvalidParameterError("--case", case, "one of " + ", ".join(CASE_POLICIES))
    if batch_size < 1:
        raise InvalidParameterError("--batch-size", batch_size, "an integer >= 1")
    detect_format(input, format)  # fail fast on an unknown format, before loading anything
    if input != "-" and not Path(input).is_file():
        from .._errors import DataError

        raise DataError(f"input file {input} does not exist or is not a file")
    warn_seed(seed)
    t0 = time.perf_counter()
    emb = load_embedding_option(embedding, vocab_size, vocabulary)
    mech = build_mechanism(mechanism, emb, epsilon, mechanism_flags)
    with warnings.catch_warnings():  # the summary below states what is not protected
        warnings.simplefilter("ignore", NotPrivateWarning)
        priv = Privatizer(mech, oov=oov, case=case)
    rng = seeded(seed)
    from ..privatizer import PrivatizeStats

    totals = PrivatizeStats()

    def fn(texts: list[str]) -> list[str]:
        out, stats = priv.privatize_batch_with_stats(texts, rng)
        totals.__iadd__(stats)
        return out

    show = None if not quiet else False
    transform_file(input, output, fn, columns=column, format=format, batch_size=batch_size, show_progress=show)
    if not quiet:
        dt = time.perf_counter() - t0
        err.print(
            f"privatized {totals.texts:,} texts, {totals.tokens:,} word tokens "
            f"({totals.changed:,} changed) with {mechanism} at epsilon={epsilon:g} in {dt:.1f}s",
            highlight=False,
        )
        err.print(f"mechanism parameters: {describe_parameters(mech.describe())}", highlight=False)
        policy = priv.describe()
        err.print(
            f"policies: oov={oov}, case={case}, vocabulary={vocabulary} ({policy['vocabulary_size']:,} words)",
            highlight=False,
        )
        for item in policy["not_protected"]:
            style = "yellow" if item.endswith("=keep)") else "dim"
            err.print(f"[{style}]not protected: {item}[/]", highlight=False)
        if totals.oov:
            action = {
                "keep": "kept as they were (NOT protected)",
                "drop": "dropped",
                "random": "replaced by random words",
            }[oov]
            err.print(
                f"[yellow]{totals.oov:,} out-of-vocabulary tokens ({totals.oov_rate:.1%}) were {action}[/]",
                highlight=False,
            )
