"""The ``deniable`` command line (typer + rich).

Each command lives in its own module and registers itself on :data:`app`.
"""

from __future__ import annotations

import sys

from . import audit as _audit  # noqa: E402,F401
from . import bow as _bow  # noqa: E402,F401
from . import calibrate as _calibrate  # noqa: E402,F401
from . import compare as _compare  # noqa: E402,F401
from . import device as _device  # noqa: E402,F401
from . import evaluate as _evaluate  # noqa: E402,F401
from . import explain as _explain  # noqa: E402,F401
from . import manifest as _manifest  # noqa: E402,F401
from . import mechanisms as _mechanisms  # noqa: E402,F401

# Command modules register themselves on import (one line each).
from . import prepare as _prepare  # noqa: E402,F401
from . import privatize as _privatize  # noqa: E402,F401
from . import serve as _serve  # noqa: E402,F401
from ._common import app, run_app

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    sys.exit(run_app(argv))
