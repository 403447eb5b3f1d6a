"""``deniable audit``: check a mechanism's claimed guarantee on sampled word pairs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .._errors import InvalidParameterError
from .._validation import check_epsilon
from . import _options as opt
from ._common import (
    MechanismFlags,
    build_mechanism,
    err,
    load_embedding_option,
    mechanism_command,
)
from .mechanisms import mechanism_flag_help


@mechanism_command("audit")
def audit_cmd(
    epsilon: Annotated[float, opt.epsilon("The claimed privacy parameter (> 0).")],
    mechanism: Annotated[str, opt.mechanism(mechanism_flag_help())] = "madlib",
    pairs: Annotated[
        int, typer.Option("--pairs", "-p", help="Word pairs to test (half nearest neighbours, half random).")
    ] = 20,
    draws: Annotated[int, typer.Option("--draws", "-n", help="Black-box: outputs drawn per word.")] = 20_000,
    alpha: Annotated[
        float, typer.Option("--alpha", help="Black-box: chance of flagging a correct mechanism (Bonferroni).")
    ] = 1e-3,
    outputs: Annotated[int, typer.Option("--outputs", help="Black-box: outputs tested per pair and direction.")] = 10,
    method: Annotated[
        str, typer.Option("--method", help="auto (exact where the mechanism has a distribution), exact or black-box.")
    ] = "auto",
    frequent: Annotated[
        int | None, typer.Option("--frequent", help="Draw pairs among the first N (most frequent) words.")
    ] = None,
    out: Annotated[str | None, opt.out_folder("Folder for audit.csv, audit.md and settings.json.")] = None,
    seed: Annotated[int | None, opt.seed("Reproducible pairs and draws (an audit releases nothing).")] = None,
    embedding: opt.EmbeddingOpt = None,
    vocab_size: opt.VocabSizeOpt = None,
    *,
    mechanism_flags: MechanismFlags,
) -> None:
    """Test log Pr[M(w)=y] - log Pr[M(w')=y] <= epsilon * d(w, w') on sampled word pairs.

    Exact (every output) where the mechanism states its distribution (tem); otherwise
    black-box: Clopper-Pearson bounds from --draws draws per word with a Bonferroni union
    bound, so a correct mechanism is flagged with probability at most --alpha. Exit code 1
    when a violation is found.
    """
    from ..experiments.audit import METHODS, audit_mechanism

    mechanism_flags.for_mechanism(mechanism)  # fail fast: an unknown name or a flag it does not take
    check_epsilon(epsilon, "--epsilon")
    for name, value, low in (("--pairs", pairs, 1), ("--draws", draws, 10), ("--outputs", outputs, 1)):
        if value < low:
            raise InvalidParameterError(name, value, f"an integer >= {low}")
    if frequent is not None and frequent < 2:
        raise InvalidParameterError("--frequent", frequent, "an integer >= 2")
    if not 0 < alpha < 1:
        raise InvalidParameterError("--alpha", alpha, "a number in (0, 1)")
    if method not in METHODS:
        raise InvalidParameterError("--method", method, "one of " + ", ".join(METHODS))
    out_dir = Path(out) if out is not None else None
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise InvalidParameterError("--out", out, "a folder (it exists and is a file)")
    emb = load_embedding_option(embedding, vocab_size)
    mech = build_mechanism(mechanism, emb, epsilon, mechanism_flags)
    result = audit_mechanism(
        mech,
        pairs=pairs,
        draws=draws,
        alpha=alpha,
        outputs=outputs,
        method=method,
        frequent=frequent,
        random_state=seed,
    )
    typer.echo(result.render(), nl=False)
    if out_dir is not None:
        result.write(out_dir)
        err.print(f"results written to {out_dir}", highlight=False)
    if not result.passed:
        raise typer.Exit(1)
