"""The ``deniable`` command line (typer + rich).

Each command lives in its own module and registers itself on :data:`app`.
"""

from __future__ import annotations

import sys

# Command modules register themselves on import (one line each).
from . import privatize as _privatize  # noqa: E402,F401
from . import serve as _serve  # noqa: E402,F401
from ._common import app, run_app

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    sys.exit(run_app(argv))
