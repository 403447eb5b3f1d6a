"""``deniable compare``: the privacy ratio between two mechanisms (seed 001)."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import (
    EmbeddingOpt,
    MechanismFlags,
    VocabSizeOpt,
    check_mechanism_name,
    load_embedding_option,
    mechanism_command,
    parse_floats,
)

__all__ = ["compare_cmd"]


@mechanism_command("compare")
def compare_cmd(
    mechanism_a: Annotated[str, typer.Option("--mechanism-a", "-a", help="A registered mechanism, e.g. madlib.")],
    mechanism_b: Annotated[str, typer.Option("--mechanism-b", "-b", help="A registered mechanism, e.g. brr.")],
    epsilon: Annotated[
        str, typer.Option("--epsilon", "-e", help="Epsilon(s) of mechanism A to convert, e.g. 5,10.")
    ] = "10",
    pairs: Annotated[int, typer.Option("--pairs", help="Random word pairs for P_d.")] = 100000,
    embedding: EmbeddingOpt = None,
    vocab_size: VocabSizeOpt = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed of the pair sample (fine: nothing is released).")
    ] = None,
    *,
    mechanism_flags: MechanismFlags,
) -> None:
    """Privacy ratio (seed 001): the epsilon of B that gives it A's privacy-loss bound eps * P_d.

    A mechanism option (e.g. --metric, --bits) applies to whichever of A and B takes it.
    """
    from .._errors import InvalidParameterError
    from ..calibrate.compare import privacy_ratio
    from ..mechanisms import make_mechanism

    names = [check_mechanism_name(mechanism_a), check_mechanism_name(mechanism_b)]
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
