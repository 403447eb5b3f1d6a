"""``deniable bow ...``: bag-of-words releases with limited-precision local privacy (seed 002)."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from .._errors import DataError, InvalidParameterError
from .._validation import check_epsilon, check_int
from . import _options as opt
from ._common import app, err, parse_floats, parse_ints, seeded, warn_seed

__all__ = ["bow_app", "parse_size"]

bow_app = typer.Typer(
    help="Bag-of-words releases with (N, eps)-limited-precision local privacy: count vectors, "
    "compression into bins, two-sided geometric noise; and their evaluation (LDA, LSA).",
    no_args_is_help=True,
)
app.add_typer(bow_app, name="bow")

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def parse_size(name: str, text: str) -> int:
    """``"2G"``, ``"500MB"``, ``"1.5GiB"``, ``"1000000"`` -> bytes (powers of 1024)."""
    m = _SIZE.match(text)
    if not m:
        raise InvalidParameterError(name, text, "a size such as 2G, 500M or 1000000 (bytes)")
    unit = m.group(2).lower()
    value = float(m.group(1)) * (1024 ** ("kmgt".index(unit) + 1) if unit else 1)
    if value < 1:
        raise InvalidParameterError(name, text, "at least 1 byte")
    return int(value)


@bow_app.command("privatize")
def privatize_cmd(
    input: Annotated[
        str, opt.input_file("Documents: txt (one per line), csv, tsv, jsonl or parquet (.gz ok), or - for stdin.")
    ],
    output: Annotated[str, opt.output("Release folder to create (matrix.npz, bins.parquet, params.json).")],
    epsilon: Annotated[float, opt.epsilon("Privacy parameter (> 0).")],
    mechanism: Annotated[
        str,
        opt.mechanism(
            "lplp (default): noisy compressed counts, (N, eps)-limited-precision local privacy; syntf: "
            "synthetic term-frequency vectors (Weggenmann and Kerschbaum 2018), eps-DP between any two "
            "documents, one column per vocabulary word."
        ),
    ] = "lplp",
    syntf_length: Annotated[
        int | None,
        typer.Option("--syntf-length", help="syntf: terms in every synthetic vector (public; default 100)."),
    ] = None,
    syntf_neighbours: Annotated[
        int | None,
        opt.syntf_neighbours("syntf: public similarity, each word's k nearest embedding neighbours (0: identity)."),
    ] = None,
    precision: Annotated[
        float,
        typer.Option(
            "--precision",
            "-N",
            help="N: documents within l1 distance N (N word insertions/deletions) are eps-indistinguishable.",
        ),
    ] = 1.0,
    bins: Annotated[
        int,
        typer.Option("--bins", "-k", help="Horizontal compression: number of bins k (ignored with --strategy none)."),
    ] = 500,
    strategy: Annotated[
        str,
        typer.Option(
            "--strategy",
            help="Bin map: frequency (balanced by a public frequency prior), random, "
            "semantic (k-means on the embedding) or none.",
        ),
    ] = "frequency",
    group: Annotated[
        int,
        typer.Option(
            "--group", "-g", help="Vertical compression: sum this many consecutive documents per released row."
        ),
    ] = 1,
    clamp: Annotated[
        bool,
        typer.Option(
            "--clamp/--no-clamp", help="Replace negative noisy counts by 0 (post-processing; biased but sparser)."
        ),
    ] = False,
    column: Annotated[str | None, opt.column("Text column (csv/tsv/jsonl/parquet).")] = None,
    format: opt.FormatOpt = None,
    vocabulary: Annotated[
        str | None,
        opt.vocabulary(
            "A PUBLIC word list: one word per line in frequency order, or a word, a tab and its count. "
            "Default: the embedding's most frequent words."
        ),
    ] = None,
    vocab_size: Annotated[int, opt.vocab_size("Words taken from the embedding for the default vocabulary.")] = 20000,
    stop_words: Annotated[
        str, typer.Option("--stop-words", help="english (drop 318 function words) or none.")
    ] = "english",
    embedding: Annotated[
        str | None,
        opt.embedding("Embedding for the default vocabulary and --strategy semantic. Default: built-in GloVe 6B 50-d."),
    ] = None,
    public_corpus: Annotated[
        str | None,
        typer.Option(
            "--public-corpus", help="A PUBLIC corpus (same formats) whose word counts set the frequency prior."
        ),
    ] = None,
    public_column: Annotated[
        str | None, typer.Option("--public-column", help="Text column of --public-corpus.")
    ] = None,
    map_from_data: Annotated[
        bool,
        typer.Option(
            "--map-from-data",
            help="Compute the frequency map from the input itself. LEAKS word frequencies: "
            "the release is then private only conditionally on the map.",
        ),
    ] = False,
    map_seed: Annotated[
        int | None,
        typer.Option(
            "--map-seed", help="Seed of the random/semantic bin map (public, saved with the release). Default: fresh."
        ),
    ] = None,
    seed: Annotated[
        int | None, opt.seed("Seed of the noise: reproducible output for experiments, NOT private.")
    ] = None,
    batch_size: Annotated[int, opt.batch_size("Documents per batch.")] = 1000,
    max_memory: Annotated[
        str, typer.Option("--max-memory", help="Refuse when the (dense) noisy matrix would exceed this size.")
    ] = "2G",
    report: Annotated[
        str | None,
        typer.Option(
            "--report",
            help="Also write the noise report (computed from the PRIVATE counts: keep it out "
            "of the release) to this JSON file.",
        ),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing release folder.")] = False,
    quiet: Annotated[bool, opt.quiet("No progress bar or summary.")] = False,
) -> None:
    """Release noisy bag-of-words counts with (N, eps)-limited-precision local privacy.

    Documents are counted over a public vocabulary, compressed into k bins (and
    optionally groups of g documents), and every entry of the compressed matrix gets
    two-sided geometric noise with alpha = exp(-eps/N). The input is read in batches;
    the release is dense (rows x k noisy integers) and held in memory until it is
    saved, within --max-memory. Every input record gives one row, an empty one for a
    record without text.
    """
    from ..bow import STRATEGIES, TwoSidedGeometric
    from ..bow.files import file_bin_map, file_privatizer, public_vocabulary, release_file

    eps = check_epsilon(epsilon, "--epsilon")
    syntf = _release_options(
        mechanism,
        {"--syntf-length": syntf_length, "--syntf-neighbours": syntf_neighbours},
        {
            "--precision": precision != 1.0,
            "--bins": bins != 500,
            "--strategy": strategy != "frequency",
            "--group": group != 1,
            "--clamp": clamp,
            "--public-corpus": public_corpus is not None,
            "--public-column": public_column is not None,
            "--map-from-data": map_from_data,
            "--map-seed": map_seed is not None,
            "--report": report is not None,
        },
    )
    if syntf is not None:
        _syntf(
            input, output, eps, syntf, column=column, format=format, vocabulary=vocabulary, vocab_size=vocab_size,
            stop_words=stop_words, embedding=embedding, seed=seed, batch_size=batch_size, overwrite=overwrite,
            quiet=quiet,
        )  # fmt: skip
        return
    if precision <= 0:
        raise InvalidParameterError("--precision", precision, "a number > 0")
    mech = TwoSidedGeometric(eps, precision, clamp=clamp)
    if strategy not in STRATEGIES:
        raise InvalidParameterError("--strategy", strategy, "one of " + ", ".join(STRATEGIES))
    check_int("--bins", bins, minimum=1)
    check_int("--group", group, minimum=1)
    check_int("--batch-size", batch_size, minimum=1)
    check_int("--vocab-size", vocab_size, minimum=1)
    limit = parse_size("--max-memory", max_memory)
    _check_map_source(strategy, map_from_data, public_corpus, input)
    _check_columns(input, format, column, public_corpus, public_column)
    out = _check_paths(input, output, overwrite, report)
    warn_seed(seed)
    t0 = time.perf_counter()
    if stop_words not in ("english", "none"):
        raise InvalidParameterError("--stop-words", stop_words, "'english' or 'none'")
    vocab = public_vocabulary(vocabulary, vocab_size, stop_words, embedding)
    if strategy != "none" and bins > vocab.size:
        raise InvalidParameterError("--bins", bins, f"at most the vocabulary size ({vocab.size})")
    show = False if quiet else None
    bin_map = file_bin_map(
        strategy,
        vocab,
        bins,
        seed=map_seed if map_seed is not None else secrets.randbelow(2**31),
        public_corpus=public_corpus,
        public_column=public_column,
        private_input=input if map_from_data else None,
        column=column,
        format=format,
        batch_size=batch_size,
        show_progress=show,
        embedding=embedding,
    )
    if map_from_data:
        err.print(
            "[yellow]warning:[/] --map-from-data: the bin map is computed from the private documents "
            "and leaks their word frequencies."
        )
    priv = file_privatizer(vocab, mech, bin_map, group=group, max_memory=limit, map_from_data=map_from_data)
    release, noise_report = release_file(
        priv,
        input,
        seeded(seed),
        column=column,
        format=format,
        batch_size=batch_size,
        seeded=seed is not None,
        show_progress=show,
    )
    release.save(out, overwrite=overwrite)
    if report is not None:
        Path(report).write_text(json.dumps(noise_report.as_dict(), indent=2, default=str) + "\n")
    if not quiet:
        err.print(f"{mech.describe()}; {bin_map.strategy} map, k={bin_map.n_bins:,}, g={group}", highlight=False)
        err.print(noise_report.summary(), highlight=False)
        err.print(
            f"wrote {out}/ (matrix.npz, bins.parquet, params.json) in {time.perf_counter() - t0:.1f}s; "
            "the noise report above is computed from the private counts and is not in the release",
            highlight=False,
        )


def _release_options(mechanism: str, given: dict[str, Any], lplp_only: dict[str, bool]) -> dict[str, Any] | None:
    """SynTF's options from its flags (read through its declared options), or None for LPLP.

    A flag of the other release is refused (exit 2): ``--syntf-*`` with lplp, LPLP's flags set
    away from their defaults with syntf (never silently ignored).
    """
    from ..bow.files import RELEASES

    if mechanism not in RELEASES:
        raise InvalidParameterError("--mechanism", mechanism, "one of " + ", ".join(RELEASES))
    declared = {o.cli_flag: o for o in RELEASES[mechanism]}
    for flag, value in given.items():
        if value is not None and flag not in declared:
            raise InvalidParameterError(flag, value, f"given only with --mechanism syntf, not {mechanism}")
    if mechanism == "lplp":
        return None
    for flag, set_ in lplp_only.items():
        if set_:
            raise InvalidParameterError(flag, "given", f"an option of --mechanism lplp, not {mechanism}")
    out: dict[str, Any] = {}
    for flag, o in declared.items():
        value = given.get(flag)
        try:
            out[o.name] = o.check(o.default if value is None else value)
        except InvalidParameterError as exc:
            raise InvalidParameterError(flag, exc.value, exc.allowed) from None
    return out


def _syntf(
    input: str,
    output: str,
    eps: float,
    options: dict[str, Any],
    *,
    column: str | None,
    format: str | None,
    vocabulary: str | None,
    vocab_size: int,
    stop_words: str,
    embedding: str | None,
    seed: int | None,
    batch_size: int,
    overwrite: bool,
    quiet: bool,
) -> None:
    """``bow privatize --mechanism syntf``: SynTF's release of every record, one column per word."""
    from ..bow.files import public_vocabulary, syntf_release_file

    check_int("--batch-size", batch_size, minimum=1)
    check_int("--vocab-size", vocab_size, minimum=1)
    _check_columns(input, format, column, None, None)
    out = _check_paths(input, output, overwrite, None)
    if stop_words not in ("english", "none"):
        raise InvalidParameterError("--stop-words", stop_words, "'english' or 'none'")
    warn_seed(seed)
    t0 = time.perf_counter()
    vocab = public_vocabulary(vocabulary, vocab_size, stop_words, embedding)
    release = syntf_release_file(
        vocab, input, eps, seeded(seed), embedding=embedding, column=column, format=format, batch_size=batch_size,
        seeded=seed is not None, show_progress=False if quiet else None, **options,
    )  # fmt: skip
    release.save(out, overwrite=overwrite)
    if not quiet:
        err.print(
            f"syntf: eps={eps:g} per document, length {options['length']}, "
            f"{release.shape[0]:,} rows x {release.shape[1]:,} words; wrote {out}/ in {time.perf_counter() - t0:.1f}s",
            highlight=False,
        )


def _check_map_source(strategy: str, map_from_data: bool, public_corpus: str | None, input: str) -> None:
    """Where the bin map's frequency prior comes from: a public corpus, the input (opted in), or none."""
    if map_from_data and strategy != "frequency":
        raise InvalidParameterError("--map-from-data", True, "only with --strategy frequency")
    if map_from_data and public_corpus:
        raise InvalidParameterError("--map-from-data", True, "not together with --public-corpus")
    if map_from_data and input == "-":
        raise InvalidParameterError("--map-from-data", True, "a file input (the input is read twice)")
    if public_corpus and strategy != "frequency":
        raise InvalidParameterError("--public-corpus", public_corpus, "only with --strategy frequency")


def _check_columns(
    input: str, format: str | None, column: str | None, public_corpus: str | None, public_column: str | None
) -> None:
    """A text column for a table input (and public corpus), none for plain text."""
    from ..io import detect_format

    fmt = detect_format(input, format)
    if fmt == "txt" and column is not None:
        raise InvalidParameterError("--column", column, "no column for plain text input")
    if fmt != "txt" and column is None:
        raise InvalidParameterError("--column", None, f"the text column of the {fmt} input")
    if public_corpus is not None:
        pfmt = detect_format(public_corpus)
        if (pfmt == "txt") != (public_column is None):
            raise InvalidParameterError(
                "--public-column", public_column, "a text column for a csv/tsv/jsonl/parquet corpus, none for txt"
            )


def _check_paths(input: str, output: str, overwrite: bool, report: str | None) -> Path:
    """The input exists; the release folder is new or empty (or --overwrite); the report lies outside it."""
    if input != "-" and not Path(input).is_file():
        raise DataError(f"input file {input} does not exist or is not a file")
    out = Path(output)
    if out.exists() and not overwrite and (not out.is_dir() or any(out.iterdir())):
        raise InvalidParameterError("--output", output, "a new or empty folder (or pass --overwrite)")
    if report is not None and Path(report).resolve().is_relative_to(out.resolve()):
        raise InvalidParameterError("--report", report, "a path outside the release folder (the report is not private)")
    return out


@bow_app.command("inspect")
def inspect_cmd(
    release: Annotated[str, typer.Argument(help="A release folder written by `deniable bow privatize`.")],
    show_bins: Annotated[int, typer.Option("--show-bins", help="Print the most frequent words of this many bins.")] = 5,
) -> None:
    """Print a release's parameters, shape and bin map summary."""
    import numpy as np

    from ..bow import load_release

    rel = load_release(release)
    typer.echo(json.dumps(rel.params, indent=2, sort_keys=True, default=str))
    sizes = rel.bin_map.bin_sizes()
    typer.echo(
        f"matrix {rel.shape[0]:,} x {rel.shape[1]:,}, {rel.matrix.nnz:,} stored entries; "
        f"words per bin: min {sizes.min()}, median {int(np.median(sizes))}, max {sizes.max()}"
    )
    for b in range(min(show_bins, rel.bin_map.n_bins)):
        typer.echo(f"bin {b}: " + " ".join(rel.bin_words(b, top=8)))


@bow_app.command("evaluate")
def evaluate_cmd(
    output: Annotated[str, opt.output("Folder for results.csv, results.md, summary.md, config.json and plots.")],
    dataset: Annotated[
        list[str] | None, typer.Option("--dataset", "-d", help="cfpb and/or 20newsgroups (repeat).")
    ] = None,
    data_dir: Annotated[
        str | None,
        typer.Option(
            "--data-dir", help="Folder holding cfpb/ and 20newsgroups/ (default: $DENIABLE_DATA or ../shared/data)."
        ),
    ] = None,
    epsilons: Annotated[str, typer.Option("--epsilons", help="Comma-separated eps values.")] = "1,3,10",
    precisions: Annotated[
        str,
        typer.Option(
            "--precisions", help="Comma-separated N values (only eps/N matters; duplicate ratios are skipped)."
        ),
    ] = "1,3",
    bins: Annotated[str, typer.Option("--bins", help="Comma-separated numbers of bins.")] = "50,200,1000",
    strategies: Annotated[
        str,
        typer.Option(
            "--strategies",
            help="Comma-separated: random, frequency (GloVe-rank prior), frequency-heldout (counts of held-out "
            "documents as a same-domain public corpus), frequency-data (NOT private, for comparison), semantic, none.",
        ),
    ] = "random,frequency,frequency-heldout,frequency-data,semantic",
    docs: Annotated[
        int, typer.Option("--docs", help="Documents sampled per data set (train/test split inside).")
    ] = 1500,
    topics: Annotated[int | None, typer.Option("--topics", help="LDA topics (default: number of classes).")] = None,
    lda_iter: Annotated[int, typer.Option("--lda-iter", help="LDA passes (batch variational).")] = 10,
    lda_doc_iter: Annotated[
        int, typer.Option("--lda-doc-iter", help="LDA per-document E-step iterations (scikit-learn's 100 is slow).")
    ] = 20,
    max_nonzero: Annotated[
        int,
        typer.Option(
            "--max-nonzero",
            help="Skip (and record as skipped) private conditions whose clamped release would have more "
            "non-zero entries than this (little compression at small eps/N).",
        ),
    ] = 3_000_000,
    syntf_lengths: Annotated[
        str,
        typer.Option(
            "--syntf-lengths",
            help="SynTF beside LPLP: comma-separated output lengths n (one row per eps and n; the precision "
            "column holds n). Empty: no SynTF rows.",
        ),
    ] = "",
    syntf_neighbours: Annotated[
        int, opt.syntf_neighbours("SynTF's public similarity: k nearest GloVe neighbours (0: identity).")
    ] = 0,
    seeds: Annotated[
        str,
        typer.Option(
            "--seeds", help="Consecutive seeds, one per repeat: 0,1,2 = seed 0, 3 repeats (noise, maps, LDA, split)."
        ),
    ] = "0",
    vocab_size: Annotated[int, opt.vocab_size("Public vocabulary size (GloVe order, minus stop words).")] = 20000,
    plots: opt.PlotsOpt = True,
    from_results: Annotated[
        str | None,
        typer.Option(
            "--from-results",
            help="Fit nothing: re-render the tables and plots of an earlier run's results.csv "
            "into another --output folder.",
        ),
    ] = None,
    quiet: Annotated[bool, opt.quiet("No per-condition lines.")] = False,
) -> None:
    """LDA topics and LSA + random forest on private vs clean bag-of-words (needs deniable\\[eval]).

    Writes results.csv (every fit), results.md (means over seeds), summary.md (one
    table per metric: strategy x bins against eps/N), config.json and one plot per
    data set (needs deniable\\[report]).
    """
    from ..experiments.topics import (
        DATASETS,
        EvalConfig,
        read_results,
        require_sklearn,
        run_evaluation,
        write_results,
    )

    if from_results is not None:
        if Path(from_results).resolve() == (Path(output) / "results.csv").resolve():
            raise InvalidParameterError("--output", output, "another folder than the one holding --from-results")
        previous = read_results(from_results)
        _finish(previous, output, write_results(previous, output), plots=plots, quiet=quiet)
        return
    require_sklearn()
    names = dataset or ["cfpb"]
    for n in names:
        if n not in DATASETS:
            raise InvalidParameterError("--dataset", n, "one of " + ", ".join(DATASETS))
    root = data_dir or os.environ.get("DENIABLE_DATA") or "../shared/data"
    if not Path(root).is_dir():
        raise DataError(f"data folder {root} does not exist (pass --data-dir or set DENIABLE_DATA)")
    seed_list = parse_ints("--seeds", seeds, 0)
    if seed_list != list(range(seed_list[0], seed_list[0] + len(seed_list))):
        raise InvalidParameterError("--seeds", seeds, "consecutive seeds, e.g. 0 or 0,1,2 (repeat r uses seed s0 + r)")
    results = None
    configs: list[EvalConfig] = []
    strat = tuple(s.strip() for s in strategies.split(",") if s.strip())
    for name in names:
        cfg = EvalConfig(
            dataset=name,
            data_dir=str(root),
            n_docs=docs,
            epsilons=parse_floats("--epsilons", epsilons),
            precisions=parse_floats("--precisions", precisions),
            bins=parse_ints("--bins", bins, 2),
            strategies=strat,
            n_topics=topics,
            lda_iter=lda_iter,
            lda_doc_iter=lda_doc_iter,
            max_nonzero=max_nonzero,
            syntf_lengths=parse_ints("--syntf-lengths", syntf_lengths, 1) if syntf_lengths.strip() else (),
            syntf_neighbours=syntf_neighbours,
            vocab_size=vocab_size,
            random_state=seed_list[0],
            repeats=len(seed_list),
        )
        res = run_evaluation(cfg, log=None if quiet else (lambda s: err.print(s, highlight=False)))
        if results is None:
            results = res
        else:
            results.extend(res)
        configs.append(cfg)
        paths = write_results(results, output, configs)  # after each data set: partial results survive
    _finish(results, output, paths, plots=plots, quiet=quiet)


def _finish(results: Any, output: str, paths: list[Path], *, plots: bool, quiet: bool) -> None:
    from ..experiments.topics import plot_results

    if plots:
        paths += plot_results(results, output)
    if not quiet:
        err.print("wrote " + ", ".join(str(p) for p in paths), highlight=False)
