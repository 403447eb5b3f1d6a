"""``deniable calibrate``: plausible-deniability statistics over a grid of epsilons, and a report."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._errors import InvalidParameterError
from ..mechanisms.base import Mechanism
from . import _options as opt
from ._common import (
    MechanismFlags,
    build_mechanism,
    err,
    load_embedding_option,
    mechanism_command,
    parse_floats,
    seeded,
    stdout_console,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from ..calibrate.choose import EpsilonChoice
    from ..calibrate.geometry import NeighbourDistances

DEFAULT_EXAMPLES = "encryption,hockey,spacecraft"


@mechanism_command("calibrate")
def calibrate_cmd(
    epsilon: Annotated[str, opt.epsilon("Comma-separated epsilons to evaluate, e.g. 5,7,9,11.")],
    mechanism: Annotated[str, opt.mechanism("madlib, tem or brr. TEM statistics are exact.")] = "madlib",
    report: Annotated[
        str | None,
        typer.Option("--report", "-r", help="Folder for the PNG plots, stats.csv and index.html."),
    ] = None,
    words: Annotated[
        str,
        typer.Option(
            "--words",
            "-w",
            help="How many words to analyse: a uniform random sample of N words, or 'all'. "
            "Sampled mechanisms cost --samples draws per word.",
        ),
    ] = "1000",
    samples: Annotated[
        int, typer.Option("--samples", "-n", help="Draws per word; S_w = distinct outputs among them.")
    ] = 1000,
    eta: opt.EtaOpt = 0.05,
    max_unchanged: Annotated[
        float, typer.Option("--max-unchanged", help="Constraint: N_w <= this (for every word, see --percentile).")
    ] = 0.5,
    min_support: Annotated[
        float, typer.Option("--min-support", help="Constraint: S_w >= this (for every word, see --percentile).")
    ] = 10.0,
    percentile: Annotated[
        float,
        typer.Option("--percentile", help="100 = worst case over the words; 95 lets 5% of words fail."),
    ] = 100.0,
    geometry_words: Annotated[
        int,
        typer.Option("--geometry-words", help="Words sampled for the k-th neighbour distances (0: skip)."),
    ] = 2000,
    examples: Annotated[
        str, typer.Option("--examples", help="Comma-separated words for the table of example outputs ('' for none).")
    ] = DEFAULT_EXAMPLES,
    example_draws: Annotated[int, typer.Option("--example-draws", help="Example outputs per word and epsilon.")] = 4,
    embedding: opt.EmbeddingOpt = None,
    vocab_size: opt.VocabSizeOpt = None,
    seed: Annotated[
        int | None, opt.seed("Reproducible word sample and draws (fine here: calibration releases no data).")
    ] = None,
    quiet: Annotated[bool, opt.quiet("No progress bars.")] = False,
    *,
    mechanism_flags: MechanismFlags,
) -> None:
    """Measure plausible deniability (N_w, S_w, eta-support, entropies) over a grid of epsilons.

    Prints a summary per epsilon and the largest epsilon meeting the constraints; with
    --report, also writes histograms of N_w and S_w per epsilon, their averages and
    worst cases against epsilon, the k-th neighbour distance percentiles in the
    mechanism's metric (brr: Hamming distances between the binary codes, in bits),
    example outputs and one HTML page. TEM is exact over the chosen words
    (--words all for the whole vocabulary); madlib and brr are sampled (--samples draws
    per word, with confidence intervals). Calibrate with the decode you deploy: with
    --index hnsw (~3x faster) the statistics are those of the HNSW-decoded mechanism,
    which rarely returns isolated words, so worst-case N_w comes out far lower than
    with exact decode.
    """
    from ..calibrate import choose_epsilon

    mechanism_flags.for_mechanism(mechanism)  # fail fast: an unknown name or a flag it does not take
    eps_list = parse_floats("--epsilon", epsilon)
    n_words = _words_arg(words)
    if samples < 1:
        raise InvalidParameterError("--samples", samples, "an integer >= 1")
    if geometry_words < 0:
        raise InvalidParameterError("--geometry-words", geometry_words, "an integer >= 0 (0 skips)")
    if example_draws < 1:
        raise InvalidParameterError("--example-draws", example_draws, "an integer >= 1")
    if report is not None:
        from ..report import require_matplotlib

        require_matplotlib()  # before the work, not after it
    show = False if quiet else None
    rng = seeded(seed)
    t0 = time.perf_counter()
    emb = load_embedding_option(embedding, vocab_size)
    mechs: dict[float, Mechanism] = {}

    def factory(e: float) -> Mechanism:
        if e not in mechs:
            mechs[e] = build_mechanism(mechanism, emb, e, mechanism_flags)
        return mechs[e]

    choice = choose_epsilon(
        factory,
        eps_list,
        max_unchanged=max_unchanged,
        min_support=min_support,
        percentile=percentile,
        words=n_words,
        samples=samples,
        eta=eta,
        rng=rng,
        show_progress=show,
    )
    _print_table(mechanism, emb.size, choice)
    if choice.epsilon is not None:
        _print_strength(factory(choice.epsilon))
    if report is None:
        return
    page = _write_report(
        Path(report),
        mechanism,
        emb,
        choice,
        factory,
        eps_list,
        geometry_words=geometry_words,
        examples=examples,
        example_draws=example_draws,
        rng=rng,
        show=show,
        seed=seed,
    )
    err.print(f"report written to {page} ({time.perf_counter() - t0:.0f} s in all)", highlight=False)


def _words_arg(words: str) -> int | None:
    """``--words``: a number of words, or None for ``all``."""
    if words.strip().lower() == "all":
        return None
    try:
        n_words = int(words)
    except ValueError:
        raise InvalidParameterError("--words", words, "a positive integer or 'all'") from None
    if n_words < 1:
        raise InvalidParameterError("--words", words, "a positive integer or 'all'")
    return n_words


def _print_table(mechanism: str, vocabulary_size: int, choice: EpsilonChoice) -> None:
    """The statistics per epsilon as a table on stdout, and the choice."""
    from rich.table import Table

    stats = [e.stats for e in choice.evaluations]
    out = stdout_console()
    table = Table(title=f"{mechanism}: plausible deniability over {len(stats[0]):,} of {vocabulary_size:,} words")
    for col in ("epsilon", "N_w mean", "N_w max", "S_w mean", "S_w min", "eta-support min", "H (bits) median", "s"):
        table.add_column(col, justify="right")
    for st in stats:
        table.add_row(
            f"{st.epsilon:g}",
            f"{st.n_w.mean():.3f}",
            f"{st.n_w.max():.3f}",
            f"{st.s_w.mean():.1f}",
            f"{st.s_w.min():.1f}",
            f"{int(st.support.min()):,}",
            f"{float(sorted(st.shannon)[len(st) // 2]):.2f}",
            f"{st.seconds:.1f}",
        )
    out.print(table)
    out.print(choice.summary(), highlight=False)


def _print_strength(mech: Mechanism) -> None:
    """The chosen epsilon on a typical text: unchanged share and attacker recovery (public calibration only)."""
    from ..calibrate.table import strength

    stdout_console().print(f"on a typical text: {strength(mech).sentence()}", highlight=False)


def _write_report(
    folder: Path,
    mechanism: str,
    emb: Any,
    choice: EpsilonChoice,
    factory: Callable[[float], Mechanism],
    eps_list: list[float],
    *,
    geometry_words: int,
    examples: str,
    example_draws: int,
    rng: np.random.Generator,
    show: bool | None,
    seed: int | None,
) -> Path:
    """``--report``: the neighbour geometry, the example outputs and the page with the statistics."""
    from ..calibrate import example_outputs
    from ..report import write_report

    geometry = None
    if geometry_words:
        geometry = _geometry(factory(eps_list[0]), min(geometry_words, emb.size), rng, show)
    ex = None
    wanted = [w.strip() for w in examples.split(",") if w.strip()]
    if wanted:
        known = [w for w in wanted if w in emb.index_of]
        if len(known) < len(wanted):
            err.print(f"[yellow]{len(wanted) - len(known)} example word(s) not in the vocabulary were skipped[/]")
        if known:
            ex = example_outputs([factory(e) for e in eps_list], known, draws=example_draws, rng=rng)
    return write_report(
        folder,
        [e.stats for e in choice.evaluations],
        geometry=geometry,
        examples=ex,
        choice=choice,
        title=f"deniable calibration: {mechanism} on {emb.name}",
        params={"seed": seed if seed is not None else "none (secure random)"},
    )


def _geometry(mech: Mechanism, n_words: int, rng: np.random.Generator, show: bool | None) -> NeighbourDistances:
    """k-th neighbour distances in the metric the mechanism's guarantee is stated in.

    brr: Hamming distances between its packed codes (from a device artefact alone too);
    madlib and tem: Euclidean or angular distances between the vectors.
    """
    from ..calibrate.geometry import METRICS, neighbour_distances
    from ..mechanisms.brr import BinaryRandomizedResponse

    emb = mech.embedding
    if isinstance(mech, BinaryRandomizedResponse):
        return neighbour_distances(emb, n_words, metric="hamming", codes=mech.codes, rng=rng, show_progress=show)
    metric = mech.metric
    if metric not in METRICS:
        err.print(
            f"[yellow]note:[/] the report's neighbour distances are Euclidean ({metric} distances are not "
            "available there)",
            highlight=False,
        )
        metric = "euclidean"
    return neighbour_distances(emb, n_words, metric=metric, rng=rng, show_progress=show)
