"""Word mechanisms and the registry that builds them by name (CLI, service, harness, Privatizer).

The registry's public names are re-exported from :mod:`deniable.mechanisms.registry`, whose
``__all__`` is the one list of them, with :func:`make_mechanism` (:mod:`._factory`: it resolves
``epsilon="auto"`` through the calibration, which itself imports the registry).
"""

from __future__ import annotations

from . import registry
from ._factory import make_mechanism
from .base import Mechanism
from .registry import *  # noqa: F403  (the registry's __all__ is the one list of its names)

__all__ = ["Mechanism", "make_mechanism", *registry.__all__]
