"""Word mechanisms and the registry that builds them by name (CLI, service, harness, Privatizer).

The registry's public names are re-exported from :mod:`deniable.mechanisms.registry`, whose
``__all__`` is the one list of them.
"""

from __future__ import annotations

from . import registry
from .base import Mechanism
from .registry import *  # noqa: F403  (the registry's __all__ is the one list of its names)

__all__ = ["Mechanism", *registry.__all__]
