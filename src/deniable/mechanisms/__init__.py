"""Word mechanisms and the registry that builds them by name (CLI, service, harness, Privatizer)."""

from __future__ import annotations

from .base import Mechanism
from .registry import (
    EPSILON,
    Option,
    check_epsilon_option,
    make_mechanism,
    mechanism_class,
    mechanism_names,
    options_of,
    register,
    unregister,
    validate_options,
)

__all__ = [
    "EPSILON",
    "Mechanism",
    "Option",
    "check_epsilon_option",
    "make_mechanism",
    "mechanism_class",
    "mechanism_names",
    "options_of",
    "register",
    "unregister",
    "validate_options",
]
