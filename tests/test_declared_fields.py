"""Settings passed once, by their declared fields: cli._config.from_options and _validation.int_field."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from deniable._errors import InvalidParameterError
from deniable._validation import check_int_fields, int_field
from deniable.cli._config import from_options


@dataclass(frozen=True)
class _Settings:
    input: str
    epsilon: float
    quiet: bool = False
    batch_size: int = 1000


def test_from_options_fills_fields_by_name_and_keywords_win() -> None:
    parsed = {"input": "a.csv", "epsilon": "10", "quiet": True, "engine": "local", "mechanism_flags": object()}
    got = from_options(_Settings, parsed, epsilon=10.0)
    assert got == _Settings(input="a.csv", epsilon=10.0, quiet=True)  # batch_size: its default; engine: not a field


def test_from_options_missing_required_field_is_an_error() -> None:
    with pytest.raises(TypeError):
        from_options(_Settings, {"epsilon": 1.0})


@dataclass(frozen=True)
class _Bounded:
    size: int = int_field(10, minimum=2)
    top: int | None = int_field(None, minimum=1)
    free: int = -5  # no declared bound: not checked

    def __post_init__(self) -> None:
        check_int_fields(self)


def test_int_field_checks_declared_bounds() -> None:
    assert _Bounded(size=2, top=None).size == 2
    with pytest.raises(InvalidParameterError, match="size=1 is not valid: an integer >= 2"):
        _Bounded(size=1)
    with pytest.raises(InvalidParameterError, match="top=0"):
        _Bounded(top=0)
    # None only where it is the default
    with pytest.raises(InvalidParameterError, match="size is needed: an integer >= 2"):
        _Bounded(size=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="size=True"):
        _Bounded(size=True)
