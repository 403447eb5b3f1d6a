"""``deniable explain WORD``: what a mechanism does to one word."""

from __future__ import annotations

from typing import Annotated

import typer

from .._errors import InvalidParameterError
from .._validation import check_epsilon
from . import _options as opt
from ._common import (
    MechanismFlags,
    build_mechanism,
    load_embedding_option,
    mechanism_command,
    seeded,
)
from .mechanisms import mechanism_flag_help


@mechanism_command("explain")
def explain_cmd(
    word: Annotated[str, typer.Argument(help="The word to explain.")],
    epsilon: Annotated[float, opt.epsilon("Privacy parameter (> 0).")],
    mechanism: Annotated[str, opt.mechanism(mechanism_flag_help())] = "madlib",
    top: Annotated[int, typer.Option("--top", "-k", help="How many likely outputs to list.")] = 10,
    against: Annotated[
        str | None,
        typer.Option(
            "--against",
            "-a",
            help="Comma-separated alternative words w' for the bound eps*d(w,w') (default: the likeliest outputs).",
        ),
    ] = None,
    samples: Annotated[int, typer.Option("--samples", "-n", help="S_w = distinct outputs in this many draws.")] = 1000,
    draws: Annotated[
        int, typer.Option("--draws", help="Sampled mechanisms: draws used to estimate the probabilities.")
    ] = 10000,
    eta: opt.EtaOpt = 0.05,
    embedding: opt.EmbeddingOpt = None,
    vocab_size: opt.VocabSizeOpt = None,
    seed: Annotated[int | None, opt.seed("Reproducible draws (sampled mechanisms).")] = None,
    *,
    mechanism_flags: MechanismFlags,
) -> None:
    """Print WORD's likely outputs with probabilities, N_w, S_w and the guarantee against alternatives.

    Exact for tem; estimated from --draws draws (with confidence intervals) for madlib and brr.
    """
    from ..calibrate import explain

    mechanism_flags.for_mechanism(mechanism)  # fail fast: an unknown name or a flag it does not take
    check_epsilon(epsilon, "--epsilon")
    for name, value in (("--top", top), ("--samples", samples), ("--draws", draws)):
        if value < 1:
            raise InvalidParameterError(name, value, "an integer >= 1")
    emb = load_embedding_option(embedding, vocab_size)
    lookup = word if word in emb.index_of or not emb.is_lowercase else word.lower()
    if lookup not in emb.index_of:
        raise InvalidParameterError("WORD", "<not shown>", "a word in the embedding's vocabulary")
    alts = None
    if against:
        alts = [
            a.strip() if a.strip() in emb.index_of or not emb.is_lowercase else a.strip().lower()
            for a in against.split(",")
            if a.strip()
        ]
        missing = sum(a not in emb.index_of for a in alts)
        if missing:
            raise InvalidParameterError("--against", f"<{missing} word(s) not shown>", "words in the vocabulary")
    mech = build_mechanism(mechanism, emb, epsilon, mechanism_flags)
    ex = explain(mech, lookup, top=top, against=alts, samples=samples, draws=draws, eta=eta, rng=seeded(seed))
    typer.echo(ex.render())
    from ..calibrate.table import strength  # on a typical text, from the public calibration (never from WORD)

    typer.echo(f"\n  typical text: {strength(mech).sentence()}")
