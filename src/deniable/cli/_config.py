"""A command's parsed options handed to a settings dataclass once, by name.

A command that passes many of its options on to one settings object (a run, an evaluation's
config) does not list them a second time: :func:`from_options` fills each declared field of
the dataclass from the command's option of the same name (``parsed = dict(locals())``, the
first line of the command), so the names are written once, in the dataclass. The values a
command parses into something else (``--epsilon`` as numbers, ``--seed`` as
``random_state``) are given as keywords.

May import the standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def from_options(cls: type[T], parsed: Mapping[str, Any], **values: Any) -> T:
    """``cls(...)`` with each field from ``values``, else from the parsed option of its name (else its default)."""
    names = [f.name for f in fields(cls) if f.init]
    given = {name: parsed[name] for name in names if name in parsed and name not in values}
    return cls(**given, **values)
