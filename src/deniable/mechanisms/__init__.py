"""Word mechanisms and the registry the CLI and the Privatizer use to build them by name."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._errors import InvalidParameterError
from .base import Mechanism

if TYPE_CHECKING:
    from ..embedding import Embedding

__all__ = ["MECHANISMS", "Mechanism", "make_mechanism", "mechanism_class"]

#: --mechanism name -> "module:Class" (imported lazily, so optional parts load only when used)
MECHANISMS: dict[str, str] = {
    "madlib": "deniable.mechanisms.laplace:MultivariateLaplace",
    "tem": "deniable.mechanisms.tem:TruncatedExponential",
    "brr": "deniable.mechanisms.brr:BinaryRandomizedResponse",
}


def mechanism_class(name: str) -> type[Mechanism]:
    """The class registered under ``name``."""
    if not isinstance(name, str) or name not in MECHANISMS:
        raise InvalidParameterError("mechanism", name, "one of " + ", ".join(sorted(MECHANISMS)))
    module, cls = MECHANISMS[name].split(":")
    found: type[Mechanism] = getattr(importlib.import_module(module), cls)
    return found


def make_mechanism(name: str, embedding: Embedding, epsilon: float, **options: Any) -> Mechanism:
    """Build the mechanism called ``name`` (e.g. "madlib", "tem", "brr")."""
    return mechanism_class(name)(embedding, epsilon=epsilon, **options)  # type: ignore[call-arg]
