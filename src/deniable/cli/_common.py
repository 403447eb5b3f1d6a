"""Shared CLI pieces: the app, error handling, embedding and mechanism options."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import typer
from rich.console import Console

from .._errors import DeniableError, InvalidParameterError, NotPrivateWarning

app = typer.Typer(
    name="deniable",
    help="Privatize text with metric differential privacy (multivariate Laplace, TEM, BRR), "
    "calibrate epsilon, and evaluate what privacy costs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

err = Console(stderr=True)

EXIT_USAGE = 2
EXIT_DATA = 3


def run_app(argv: list[str] | None = None) -> int:
    """Run the typer app; map our errors to a message and a non-zero exit code."""
    try:
        app(args=argv, standalone_mode=False)
    except DeniableError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
        return EXIT_USAGE if isinstance(exc, InvalidParameterError) else EXIT_DATA
    except (typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        return 130
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            return int(exc.exit_code)
        raise
    return 0


def warn_seed(seed: int | None) -> None:
    if seed is not None:
        err.print(
            f"[yellow]warning:[/] --seed {seed} makes the output reproducible; seeded output is "
            "NOT private. Use it for experiments only."
        )


def seeded(seed: int | None):  # type: ignore[no-untyped-def]
    """A generator for ``--seed`` (warning printed once, by the caller) or the secure default."""
    from .._random import check_random_state, seeded_generator

    if seed is None:
        return check_random_state(None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return seeded_generator(seed)


def load_embedding_option(embedding: str | None, vocab_size: int | None):  # type: ignore[no-untyped-def]
    from ..embeddings import load_embedding

    if vocab_size is not None and vocab_size < 1:
        raise InvalidParameterError("--vocab-size", vocab_size, "an integer >= 1")
    return load_embedding(embedding, vocab_size=vocab_size)


def parse_floats(name: str, text: str) -> list[float]:
    """``"5,7,9"`` -> [5.0, 7.0, 9.0] with a clear error."""
    from .._validation import check_epsilon

    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidParameterError(name, text, "comma-separated numbers, e.g. 5,7,9") from None
    if not values:
        raise InvalidParameterError(name, text, "at least one number")
    return [check_epsilon(v, name) for v in values]


def mechanism_options(
    mechanism: str,
    *,
    index: str | None = None,
    metric: str | None = None,
    gamma: float | None = None,
    beta: float | None = None,
    bits: int | None = None,
    binarizer: str | None = None,
) -> dict[str, Any]:
    """Map the CLI's mechanism options to constructor keyword arguments.

    Options that do not apply to ``mechanism`` are rejected rather than ignored.
    """
    given = {
        "index": index,
        "metric": metric,
        "gamma": gamma,
        "beta": beta,
        "bits": bits,
        "binarizer": binarizer,
    }
    applies = {
        "madlib": {"index"},
        "tem": {"metric", "gamma", "beta"},
        "brr": {"bits", "binarizer"},
    }.get(mechanism, set())
    out: dict[str, Any] = {}
    for key, value in given.items():
        if value is None:
            continue
        if key not in applies:
            raise InvalidParameterError(
                f"--{key}", value, f"not an option of --mechanism {mechanism}"
            )
        out[key] = value
    return out


def build_mechanism(
    mechanism: str, embedding: Any, epsilon: float, **options: Any
):  # type: ignore[no-untyped-def]
    from ..mechanisms import make_mechanism

    return make_mechanism(mechanism, embedding, epsilon, **mechanism_options(mechanism, **options))


def stderr_is_tty() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())
