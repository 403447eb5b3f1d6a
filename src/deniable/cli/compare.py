"""``deniable compare``: the privacy ratio between two mechanisms (seed 001), or a fair report of evaluation runs."""

from __future__ import annotations

from typing import Annotated

import typer

from . import _options as opt
from ._common import (
    MechanismFlags,
    check_mechanism_name,
    load_embedding_option,
    mechanism_command,
    parse_floats,
)

__all__ = ["compare_cmd"]


def check_metric_guarantee(option: str, name: str) -> str:
    """Refuse (exit code 2) a mechanism whose guarantee is not ``epsilon * d`` over the whole vocabulary:
    seed 001's privacy ratio means nothing for it. Decided by the class's ``guarantee_form``."""
    from .._errors import InvalidParameterError
    from ..mechanisms import mechanism_class

    form = mechanism_class(name).guarantee_form
    if form != "metric":
        raise InvalidParameterError(
            option,
            name,
            f"a mechanism whose guarantee is epsilon * d over the whole vocabulary; {name}'s is not ({form}), "
            "so the privacy ratio would compare unlike things. Compare it at matched membership-inference "
            "AUC instead: deniable evaluate ..., then deniable compare --results DIR",
        )
    return name


@mechanism_command("compare")
def compare_cmd(
    mechanism_a: Annotated[
        str | None, typer.Option("--mechanism-a", "-a", help="A registered mechanism, e.g. madlib.")
    ] = None,
    mechanism_b: Annotated[
        str | None, typer.Option("--mechanism-b", "-b", help="A registered mechanism, e.g. brr.")
    ] = None,
    epsilon: Annotated[str, opt.epsilon("Epsilon(s) of mechanism A to convert, e.g. 5,10.")] = "10",
    pairs: Annotated[int, typer.Option("--pairs", help="Random word pairs for P_d.")] = 100000,
    embedding: opt.EmbeddingOpt = None,
    vocab_size: opt.VocabSizeOpt = None,
    seed: Annotated[int | None, opt.seed("Seed of the pair sample (fine: nothing is released).")] = None,
    results: Annotated[
        list[str] | None,
        typer.Option(
            "--results",
            "-r",
            help="Fair-report mode: a `deniable evaluate` output folder (repeat for several runs on the same splits).",
        ),
    ] = None,
    out: Annotated[str | None, opt.out_folder("Fair-report mode: folder for fair.md, fair.csv, plots.")] = None,
    reference: Annotated[
        str, typer.Option("--reference", help="Fair-report mode: the reference mechanism (epsilon * d).")
    ] = "madlib",
    auc: Annotated[
        str | None,
        typer.Option("--auc", help="Fair-report mode: MIA AUC levels to match, e.g. 0.52,0.55 (default: quartiles)."),
    ] = None,
    plots: Annotated[bool, opt.plots("Fair-report mode: write PNG plots.")] = True,
    match: Annotated[
        str,
        typer.Option(
            "--match",
            help="With -a/-b: ratio (seed 001's privacy ratio, epsilon * d mechanisms only) or recovered (the "
            "epsilon of B at which the unigram attacker recovers as many words as from A, read from --recovery).",
        ),
    ] = "ratio",
    recovery: Annotated[
        list[str] | None,
        typer.Option(
            "--recovery",
            help="A `deniable evaluate --attack reconstruction` output folder (repeatable): the recovery curves "
            "used by --match recovered and, in fair-report mode, the 'attacker recovery' rows.",
        ),
    ] = None,
    recovered: Annotated[
        str | None,
        typer.Option(
            "--recovered",
            help="Fair-report mode: shares of words recovered to match, e.g. 0.1,0.3 (default: quartiles).",
        ),
    ] = None,
    *,
    mechanism_flags: MechanismFlags,
) -> None:
    """Privacy ratio (seed 001): the epsilon of B that gives it A's privacy-loss bound eps * P_d.

    A mechanism option (e.g. --metric, --bits) applies to whichever of A and B takes it.
    Only mechanisms whose guarantee is epsilon * d over the whole vocabulary can be compared
    this way; the others (CusText/CusText+: output sets; SanText+: non-sensitive words are
    released unchanged with probability 1 - p) are refused with exit code 2.

    With --results DIR (one or more `deniable evaluate` folders on the same splits) and --out:
    every mechanism side by side at matched privacy instead - (a) the same epsilon where the
    metric is the reference's, (b) the epsilon matched by this privacy ratio where it differs
    (e.g. BRR's Hamming), (c) the same membership-inference AUC (interpolated on each
    mechanism's epsilon grid), (d) with --recovery, the same share of words recovered by the
    unigram attacker (docs/attacker.md); every row says which. Writes fair.md, fair.csv,
    fair-*.png and the merged results.

    With -a/-b --match recovered --recovery DIR: A's recovered share at each --epsilon
    (interpolated in log epsilon on A's curve), and the epsilon of B with the same share; any
    mechanism (CusText too). Levels outside a curve's measured range are refused (exit 2).
    """
    from .._errors import InvalidParameterError

    if results:
        if mechanism_a or mechanism_b:
            raise InvalidParameterError("--results", "with -a/-b", "either --results (fair report) or -a and -b")
        _fair_report(results, out, reference, auc, pairs, embedding, vocab_size, seed, plots, recovery, recovered)
        return
    if not mechanism_a or not mechanism_b:
        raise InvalidParameterError("--mechanism-a/-b", "missing", "two mechanisms (or --results DIR)")
    if match not in ("ratio", "recovered"):
        raise InvalidParameterError("--match", match, "ratio or recovered")
    if recovered:
        raise InvalidParameterError("--recovered", recovered, "fair-report mode (--results); with -a/-b use --epsilon")
    if match == "recovered":
        _match_recovered(mechanism_a, mechanism_b, parse_floats("--epsilon", epsilon), recovery)
        return
    from ..calibrate.compare import privacy_ratio
    from ..mechanisms import make_mechanism

    names = [check_mechanism_name(mechanism_a, "--mechanism-a"), check_mechanism_name(mechanism_b, "--mechanism-b")]
    for option, name in zip(("--mechanism-a", "--mechanism-b"), names, strict=True):
        check_metric_guarantee(option, name)
    options = mechanism_flags.for_mechanisms(names)
    eps_list = parse_floats("--epsilon", epsilon)
    if pairs < 2:
        raise InvalidParameterError("--pairs", pairs, "an integer >= 2")
    emb = load_embedding_option(embedding, vocab_size)
    mechs = [make_mechanism(m, emb, 1.0, **options[m]) for m in names]
    r = privacy_ratio(mechs[0], mechs[1], pairs=pairs, rng=seed)
    say = typer.echo
    say(f"P_d A ({mechanism_a}, {r.a.metric}) = {r.a.mean:.6g} +- {r.a.std_error:.2g}")
    say(f"P_d B ({mechanism_b}, {r.b.metric}) = {r.b.mean:.6g} +- {r.b.std_error:.2g}")
    say(f"R = P_dA / P_dB = {r.ratio:.6g} +- {r.std_error:.2g} ({r.a.pairs:,} pairs)")
    for eps in eps_list:
        say(f"{mechanism_a} epsilon {eps:g} <-> {mechanism_b} epsilon {r.epsilon_b(eps):.6g}")


def _match_recovered(a: str, b: str, eps_list: list[float], folders: list[str] | None) -> None:
    """``--match recovered``: B's epsilon at A's recovered share, both by log-epsilon interpolation."""
    from .._errors import InvalidParameterError
    from ..experiments.fair import _at, epsilon_at_level, read_recovery, recovery_curve

    if not folders:
        raise InvalidParameterError("--recovery", None, "a reconstruction result folder for --match recovered")
    rows = [r for f in folders for r in read_recovery(f)]
    curves = {}
    for option, name in (("--mechanism-a", a), ("--mechanism-b", b)):
        curves[name] = recovery_curve(rows, name)
        if len(curves[name]) < 2:
            raise InvalidParameterError(option, name, "a mechanism measured at two epsilons or more in --recovery")
    say = typer.echo
    for eps in eps_list:
        share, lo, hi, how = _at(curves[a], eps)
        if how == "outside the grid":
            grid = [p["epsilon"] for p in curves[a]]
            raise InvalidParameterError(
                "--epsilon", eps, f"an epsilon within {a}'s measured {min(grid):g}..{max(grid):g}"
            )
        eps_b = epsilon_at_level(
            [p["epsilon"] for p in curves[b]], [p["mean"] for p in curves[b]], share, what="recovery", name=b
        )
        say(
            f"{a} epsilon {eps:g} (attacker recovers {100 * share:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}], {how}) "
            f"<-> {b} epsilon {eps_b:.4g}"
        )


def _fair_report(
    folders: list[str],
    out: str | None,
    reference: str,
    auc: str | None,
    pairs: int,
    embedding: str | None,
    vocab_size: int | None,
    seed: int | None,
    plots: bool,
    recovery: list[str] | None = None,
    recovered: str | None = None,
) -> None:
    import shlex
    import sys

    from .._errors import InvalidParameterError
    from ..experiments.fair import (
        MechanismInfo,
        fair_report,
        merge_results,
        privacy_ratios,
        read_recovery,
        write_fair_report,
    )
    from ..experiments.output import read_results

    if not out:
        raise InvalidParameterError("--out", None, "a folder for the fair report")
    if pairs < 2:
        raise InvalidParameterError("--pairs", pairs, "an integer >= 2")
    levels = parse_floats("--auc", auc) if auc else None
    merged = merge_results([read_results(f) for f in folders], names=folders)
    recorded = merged.settings.get("mechanism_info", {})
    missing = [m for m in merged.settings.get("mechanisms", []) if m not in recorded]
    if missing:
        raise InvalidParameterError("--results", ", ".join(missing), "runs whose settings.json records mechanism_info")
    infos = {m: MechanismInfo.from_settings(m, i) for m, i in recorded.items()}
    if reference not in infos:
        raise InvalidParameterError("--reference", reference, "a mechanism of the runs: " + ", ".join(infos))
    ratios = {}
    if any(i.plain and i.metric != infos[reference].metric for i in infos.values()):
        emb = load_embedding_option(embedding, vocab_size)
        if emb.name != merged.settings.get("embedding"):
            raise InvalidParameterError(
                "--embedding", emb.name, f"the runs' embedding ({merged.settings.get('embedding')})"
            )
        for name, r in privacy_ratios(infos, emb, reference=reference, pairs=pairs, rng=seed).items():
            typer.echo(f"privacy ratio P_d({reference}) / P_d({name}) = {r.ratio:.6g} +- {r.std_error:.2g}")
            ratios[name] = r.ratio
    if recovered and not recovery:
        raise InvalidParameterError("--recovered", recovered, "--recovery DIR (reconstruction results) beside it")
    rec_rows = [r for f in recovery or [] for r in read_recovery(f)]
    rec_levels = parse_floats("--recovered", recovered) if recovered else None
    report = fair_report(
        merged, infos, reference=reference, ratios=ratios, auc_levels=levels, recovery=rec_rows,
        recovery_levels=rec_levels,
    )  # fmt: skip
    command = "deniable " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["compare"] else ""
    paths = write_fair_report(merged, report, out, plots=plots, command=command)
    sys.stdout.write(paths["fair_markdown"].read_text(encoding="utf-8"))
