"""Shared CLI pieces: the app, error handling, embedding and mechanism options."""

from __future__ import annotations

import sys
import warnings
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape

from .._errors import DeniableError, InvalidParameterError, NotPrivateWarning

if TYPE_CHECKING:
    from ..embedding import Embedding
    from ..mechanisms.base import Mechanism

app = typer.Typer(
    name="deniable",
    help="Privatize text with metric differential privacy (multivariate Laplace, TEM, BRR), "
    "calibrate epsilon, and evaluate what privacy costs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

# soft_wrap: an error is one line, also when stderr is a file or a pipe (no wrap at 80 columns).
err = Console(stderr=True, soft_wrap=True)

EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_DATA = 3

# Options shared by the commands that build an embedding and a mechanism.
EmbeddingOpt = Annotated[
    str | None, typer.Option("--embedding", help="Embedding file or folder (default: built-in GloVe 6B 50-d).")
]
VocabSizeOpt = Annotated[
    int | None, typer.Option("--vocab-size", help="Keep only the N most frequent words of the embedding.")
]
MetricOpt = Annotated[str | None, typer.Option("--metric", help="tem: euclidean, manhattan, chebyshev or angular.")]
GammaOpt = Annotated[float | None, typer.Option("--gamma", help="tem: truncation threshold.")]
BetaOpt = Annotated[float | None, typer.Option("--beta", help="tem: sets gamma (Theorem 3; default 1e-3).")]
BitsOpt = Annotated[int | None, typer.Option("--bits", help="brr: code length (64, 128, 256 or 512).")]
BinarizerOpt = Annotated[str | None, typer.Option("--binarizer", help="brr: autoencoder, simhash or itq.")]


@app.callback()
def _root() -> None:
    """Privatize text with metric differential privacy."""


def run_app(argv: list[str] | None = None) -> int:
    """Run the typer app; map our errors to a message and a non-zero exit code.

    Usage errors (unknown option, missing argument) exit with 2 via click; our own
    errors print one line (never user text) and exit with 2 (bad parameter) or 3 (bad data).
    Any other exception is a bug: only its type is printed (its message could quote the
    input) and the exit code is 1. Output files are written atomically, so a failed run
    leaves none behind.
    """
    try:
        app(args=argv, standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except DeniableError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return EXIT_USAGE if isinstance(exc, InvalidParameterError) else EXIT_DATA
    except KeyboardInterrupt:
        err.print("aborted")
        return 130
    except Exception as exc:  # last resort: never a traceback, never the message (it may hold user text)
        err.print(
            f"[bold red]error:[/] unexpected internal error ({escape(type(exc).__name__)}); "
            "its message is not shown because it may contain input text. Please report it.",
            highlight=False,
        )
        return EXIT_INTERNAL
    return 0


def warn_seed(seed: int | None) -> None:
    if seed is not None:
        err.print(
            f"[yellow]warning:[/] --seed {seed} makes the output reproducible; seeded output is "
            "NOT private. Use it for experiments only."
        )


def seeded(seed: int | None) -> np.random.Generator:
    """A generator for ``--seed`` (warning printed once, by the caller) or the secure default."""
    from .._random import check_random_state, seeded_generator

    if seed is None:
        return check_random_state(None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return seeded_generator(seed)


def load_embedding_option(embedding: str | None, vocab_size: int | None) -> Embedding:
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
        "brr": {"bits", "binarizer", "index"},
    }.get(mechanism, set())
    out: dict[str, Any] = {}
    for key, value in given.items():
        if value is None:
            continue
        if key not in applies:
            raise InvalidParameterError(f"--{key}", value, f"not an option of --mechanism {mechanism}")
        out[key] = value
    return out


def build_mechanism(mechanism: str, embedding: Any, epsilon: float, **options: Any) -> Mechanism:
    from ..mechanisms import make_mechanism

    check_mechanism_name(mechanism)
    return make_mechanism(mechanism, embedding, epsilon, **mechanism_options(mechanism, **options))


def check_mechanism_name(mechanism: str) -> str:
    """Fail fast (before loading an embedding) on an unknown ``--mechanism``."""
    from ..mechanisms import MECHANISMS

    if mechanism not in MECHANISMS:
        raise InvalidParameterError("--mechanism", mechanism, "one of " + ", ".join(sorted(MECHANISMS)))
    return mechanism


def stderr_is_tty() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())
