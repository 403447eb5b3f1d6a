"""Small validators shared by every public constructor (scikit-learn style messages)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import field, fields
from typing import TYPE_CHECKING, Any

from ._errors import InvalidParameterError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "check_choice",
    "check_epsilon",
    "check_int",
    "check_int_fields",
    "check_positive",
    "check_probability",
    "int_field",
]


def check_positive(name: str, value: object, *, allow_zero: bool = False) -> float:
    """A finite real number > 0 (or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            import numpy as np

            if isinstance(value, np.integer | np.floating):
                value = float(value)
            else:
                raise TypeError
        except TypeError:
            raise InvalidParameterError(name, value, f"a finite real number {'>=' if allow_zero else '>'} 0") from None
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise InvalidParameterError(name, value, f"a finite real number {'>=' if allow_zero else '>'} 0")
    return v


def check_epsilon(value: object, name: str = "epsilon") -> float:
    """The privacy parameter: a finite number > 0."""
    return check_positive(name, value)


def check_probability(name: str, value: object, *, open_interval: bool = True) -> float:
    """A number in (0, 1) (or [0, 1])."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidParameterError(name, value, "a number in (0, 1)") from None
    ok = (0 < v < 1) if open_interval else (0 <= v <= 1)
    if not math.isfinite(v) or not ok or isinstance(value, bool):
        raise InvalidParameterError(name, value, "a number in (0, 1)" if open_interval else "a number in [0, 1]")
    return v


def check_int(name: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer within [minimum, maximum]."""
    import numpy as np

    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidParameterError(name, value, _range_text(minimum, maximum))
    v = int(value)
    if v < minimum or (maximum is not None and v > maximum):
        raise InvalidParameterError(name, value, _range_text(minimum, maximum))
    return v


def int_field(default: int | None, *, minimum: int) -> Any:
    """A dataclass field holding an integer >= ``minimum`` (or ``None`` where that is the default),
    declared beside its default; :func:`check_int_fields` checks it."""
    return field(default=default, metadata={"minimum": minimum})


def check_int_fields(obj: DataclassInstance) -> None:
    """Check each field of ``obj`` declared with :func:`int_field` (:func:`check_int`, naming the field)."""
    for f in fields(obj):
        if "minimum" in f.metadata:
            value = getattr(obj, f.name)
            if value is not None or f.default is not None:
                check_int(f.name, value, minimum=f.metadata["minimum"])


def _range_text(minimum: int, maximum: int | None) -> str:
    if maximum is None:
        return f"an integer >= {minimum}"
    return f"an integer in [{minimum}, {maximum}]"


def check_bool(name: str, value: object) -> bool:
    """``True`` or ``False`` (not a truthy number or string)."""
    if not isinstance(value, bool):
        raise InvalidParameterError(name, value, "True or False")
    return value


def check_choice(name: str, value: object, choices: Iterable[str]) -> str:
    """One of a fixed set of names."""
    options = list(choices)
    if not isinstance(value, str) or value not in options:
        raise InvalidParameterError(name, value, "one of " + ", ".join(repr(c) for c in options))
    return value
