"""``deniable prepare``: build, list or remove the input-independent artefacts mechanisms read."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from . import _options as opt
from ._common import (
    app,
    check_mechanism_name,
    err,
    load_embedding_option,
    parse_list,
)

__all__ = ["prepare_cmd"]


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _epsilons(values: list[str] | None) -> list[float] | None:
    """The ``--epsilon`` values (each may be a comma-separated list) as numbers."""
    if not values:
        return None
    return [e for v in values for e in parse_list("--epsilon", v, float, "number", "1,5,10")]


@app.command("prepare")
def prepare_cmd(
    mechanism: Annotated[list[str] | None, opt.mechanism("Mechanism to prepare for (repeatable; default tem).")] = None,
    embedding: opt.EmbeddingOpt = None,
    vocab_size: opt.VocabSizeOpt = None,
    vocabulary: opt.VocabularyOpt = "words",
    metric: Annotated[
        str | None, typer.Option("--metric", help="tem: euclidean (default), manhattan, chebyshev or angular.")
    ] = None,
    bits: Annotated[int | None, opt.bits("brr: code length (64, 128, 256 or 512; default 256).")] = None,
    binarizer: Annotated[str | None, opt.binarizer("brr: autoencoder (default), simhash (random) or itq.")] = None,
    binarizer_seed: Annotated[
        int | None, opt.binarizer_seed("brr: seed of the binarizer's training (default 0).")
    ] = None,
    index: Annotated[
        str | None,
        typer.Option(
            "--index",
            help="brr: hnsw also prepares the binary HNSW index of the codes; madlib: auto (default) or hnsw "
            "prepare the HNSW index, exact or flat nothing.",
        ),
    ] = None,
    epsilon: Annotated[
        list[str] | None,
        opt.epsilon(
            "madlib (index auto): also record the default decode's choice at this epsilon; tem: also "
            "the far bounds (once, for every epsilon: fewer proposals at small epsilon) and the envelope "
            "totals at this epsilon (most tokens then cost one lookup; at small epsilon with the far layouts "
            "of the 16,384 most frequent words). Repeatable, or a comma-separated list."
        ),
    ] = None,
    list_: Annotated[
        bool, typer.Option("--list", help="Show the prepared artefacts (all embeddings) with their size.")
    ] = False,
    remove: Annotated[
        bool,
        typer.Option(
            "--remove",
            help="Delete the prepared artefacts of this embedding (of --mechanism if given), and what interrupted "
            "builds left in the cache (of every embedding; never a build that is running).",
        ),
    ] = False,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Build again even when a verified copy exists.")] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Hash every prepared artefact (all embeddings) whole against its manifest; exit 3 if one is "
            "damaged. (Opening one hashes a file whole only the first time, or after it changed.)",
        ),
    ] = False,
    calibration: Annotated[
        bool,
        typer.Option(
            "--calibration",
            help="Build the calibration table of each --mechanism instead (with --metric / --index / brr's "
            "options): the share of a typical text's tokens released unchanged against epsilon, on public "
            "reference text only; `privatize --epsilon auto --target` and every summary read it.",
        ),
    ] = False,
    report: Annotated[
        str | None,
        typer.Option("--report", help="With --calibration: write the curve (PNG) and index.html into this folder."),
    ] = None,
    ngram: Annotated[
        str | None,
        typer.Option(
            "--ngram",
            help="Train the bigram model of this PUBLIC text file (one text per line, UTF-8, .gz allowed) over the "
            "embedding's words, keep it in the artefact store (memory-mapped, once per text) and print its "
            "folder on stdout: the PATH of `privatize --decode-prior ngram:PATH` (madlib, mahalanobis). Never the "
            "text you privatize. Alone it prepares nothing else; with --mechanism, those too.",
        ),
    ] = None,
    quiet: Annotated[bool, opt.quiet("No progress bar or report.")] = False,
) -> None:
    """Build the artefacts a mechanism reads, once, for the whole vocabulary.

    They depend on the embedding, the metric and the parameters only (never on text), are
    verified by checksum when read, and are memory-mapped by every later process, so a
    fresh `deniable privatize` or `deniable serve` is fast from its first batch.
    """
    from .._errors import InvalidParameterError
    from ..preparation import prepare

    if list_ + remove + verify > 1:
        raise InvalidParameterError("--list", "with --remove or --verify", "one of --list, --remove or --verify")
    if ngram is not None and (list_ or remove or verify or calibration):
        raise InvalidParameterError("--ngram", "with --list, --remove, --verify or --calibration", "--ngram alone")
    if verify:
        _verify_all(quiet)
        return
    if list_:
        _list_all(quiet)
        return
    names = mechanism or ["tem"]
    given = {
        "bits": bits,
        "binarizer": binarizer,
        "seed": binarizer_seed,
        "index": index,
        "epsilon": _epsilons(epsilon),
    }
    options = {k: v for k, v in given.items() if v is not None}
    for name in names:
        check_mechanism_name(name)  # before loading the embedding
    if calibration and report is not None and not remove:
        from ..report import require_matplotlib

        require_matplotlib()  # before the build, not after it
    emb = load_embedding_option(embedding, vocab_size, vocabulary)
    if ngram is not None:
        _prepare_ngram(emb, ngram, rebuild, quiet)
        if not mechanism:
            return
    if calibration and not remove:
        _calibrate(emb, names, metric, options, rebuild, quiet, report)
        return
    if remove:
        _remove(emb, names if mechanism else None, metric, options, quiet)
        return
    infos = prepare(
        emb,
        names,
        metric=metric or "euclidean",
        options=options,
        show_progress=False if quiet else None,
        rebuild=rebuild,
    )
    if not quiet:
        for info in infos:
            err.print(f"{info.kind}: {_size(info.disk_bytes)} in {info.path} (built in {info.build_seconds:.1f} s)")


def _prepare_ngram(emb: Any, path: str, rebuild: bool, quiet: bool) -> None:
    """``--ngram FILE``: the model of a public text in the store; its folder on stdout (what ``ngram:PATH`` names)."""
    from ..ngram import prepare_ngram

    info = prepare_ngram(emb, path, rebuild=rebuild, show_progress=False if quiet else None)
    typer.echo(str(info.path))
    if not quiet:
        err.print(
            f"ngram: {_size(info.disk_bytes)} in {info.path} (built in {info.build_seconds:.1f} s); decode with it: "
            f"--decode-prior ngram:{info.path}",
            highlight=False,
        )


def _list_all(quiet: bool) -> None:
    """``--list``: one line per prepared artefact (all embeddings) and per interrupted build, on stdout."""
    from ..artefacts import legacy_tem_folders, list_artefacts, stale_temporaries

    infos = list_artefacts()
    for info in infos:
        params = ", ".join(f"{k}={v}" for k, v in sorted(info.params.items()))
        typer.echo(f"{info.kind}\t{info.fingerprint[:12]}\t{_size(info.disk_bytes)}\t{params}\t{info.path}")
    stale = stale_temporaries()
    for tmp in stale:
        typer.echo(f"(interrupted build)\t-\t{_size(tmp.disk_bytes)}\t-\t{tmp.path}")
    if not quiet:
        total = sum(i.disk_bytes for i in infos)
        err.print(f"{len(infos)} prepared artefact(s), {_size(total)}")
    if stale:
        err.print(
            f"[yellow]warning:[/] {len(stale)} interrupted build(s) left {_size(sum(t.disk_bytes for t in stale))} "
            "in the cache; `deniable prepare --remove` deletes them",
            highlight=False,
        )
    legacy = legacy_tem_folders()
    if legacy:
        err.print(
            f"[yellow]warning:[/] {len(legacy)} TEM cache folder(s) of an older version record which words "
            "were privatized (artefacts/*/tem); delete them with `deniable prepare --remove --embedding ...` "
            "or by hand"
        )


def _remove(emb: Any, names: list[str] | None, metric: str | None, options: dict[str, Any], quiet: bool) -> None:
    """``--remove``: this embedding's artefacts (of ``names`` only, if given) and every interrupted build."""
    from ..artefacts import remove_artefacts, remove_temporaries
    from ..preparation import planned_artefacts

    plan = planned_artefacts(emb, names, metric=metric or "euclidean", options=options) if names else None
    leftovers = remove_temporaries()  # of every embedding: never of use, never a running build
    removed = remove_artefacts(emb, plan)
    if not quiet:
        err.print(f"removed {len(removed)} artefact(s), {_size(sum(i.disk_bytes for i in removed))}")
        if leftovers:
            size = _size(sum(t.disk_bytes for t in leftovers))
            err.print(f"removed {len(leftovers)} interrupted build(s), {size}", highlight=False)


def _verify_all(quiet: bool) -> None:
    """``--verify``: every prepared artefact hashed whole; one line each, exit 3 if one is damaged."""
    from .._errors import DataError
    from ..artefacts import verify_artefacts

    results = verify_artefacts()
    damaged = [problem for _, problem in results if problem is not None]
    for info, problem in results:
        typer.echo(f"{'ok' if problem is None else 'DAMAGED'}\t{info.kind}\t{_size(info.disk_bytes)}\t{info.path}")
    if not quiet:
        err.print(f"{len(results) - len(damaged)} of {len(results)} prepared artefact(s) intact", highlight=False)
    if damaged:
        more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
        raise DataError(f"{damaged[0]}{more}; `deniable prepare` with the same options rebuilds it")


def _calibrate(
    emb: Any,
    names: list[str],
    metric: str | None,
    options: dict[str, Any],
    rebuild: bool,
    quiet: bool,
    report: str | None,
) -> None:
    """``--calibration``: build (or find) each mechanism's calibration table and print its curve."""
    from ..artefacts import build_artefact
    from ..calibrate.table import (
        CALIBRATION_KIND,
        TABLE_FILE,
        CalibrationTable,
        calibration_params,
        table_key_options,
    )
    from ..mechanisms import options_of, validate_options

    given = {**options, "metric": metric}  # each mechanism takes the ones it declares
    for name in names:
        declared = {o.name for o in options_of(name)}
        opts = validate_options(name, {k: v for k, v in given.items() if k in declared and v is not None})
        params = calibration_params(name, table_key_options(name, opts))
        info = build_artefact(emb, CALIBRATION_KIND, params, rebuild=rebuild)
        table = CalibrationTable.from_json(info.file(TABLE_FILE).read_text(encoding="utf-8"))
        if report is not None:
            from pathlib import Path

            from ..report import write_report

            folder = Path(report) / name if len(names) > 1 else Path(report)
            page = write_report(folder, [], curve=table, title=f"deniable calibration: {name}", params=params)
            if not quiet:
                err.print(f"report written to {page}", highlight=False)
        if quiet:
            continue
        err.print(f"calibration of {name}: {_size(info.disk_bytes)} in {info.path} ({info.build_seconds:.1f} s)")
        err.print(
            "  epsilon  unchanged (95% upper)  near  mean similarity  attacker recovers: all (upper), less common",
            highlight=False,
        )
        for p in table.points:
            near = "-" if p.near is None else f"{p.near:.1%}"
            sim = "-" if p.similarity is None else f"{p.similarity:.2f}"
            rec = "-" if p.recovered is None else f"{p.recovered:8.1%} ({p.recovered_high:6.1%})"
            con = "-" if p.recovered_content is None else f"{p.recovered_content:.1%}"
            err.print(
                f"  {p.epsilon:7.3g}  {p.unchanged:8.1%} ({p.unchanged_high:6.1%})  {near:>6}  {sim:>5}  "
                f"{rec:>17}  {con:>6}",
                highlight=False,
            )
        err.print(table.verdict(), highlight=False)
