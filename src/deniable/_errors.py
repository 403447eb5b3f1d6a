"""One exception hierarchy for everything deniable raises on purpose.

Messages name the parameter, the offending value and what is allowed. They never
contain the user's text (a row number or a column name is fine, a token is not).
"""

from __future__ import annotations

__all__ = [
    "DataError",
    "DeniableError",
    "EmbeddingError",
    "InvalidParameterError",
    "NotPrivateWarning",
    "ResourceLimitError",
    "WeakPrivacyWarning",
]


class DeniableError(Exception):
    """Base class of every error raised by deniable."""


class InvalidParameterError(DeniableError, ValueError):
    """A parameter has a value outside what is allowed."""

    def __init__(self, name: str, value: object, allowed: str) -> None:
        self.name = name
        self.value = value
        self.allowed = allowed
        # None is how a caller (or a flag) leaves a value out: say it is needed, not "=None"
        problem = f"{name} is needed" if value is None else f"{name}={value!r} is not valid"
        super().__init__(f"{problem}: {allowed}")


class DataError(DeniableError, ValueError):
    """Input data (a file, a column, a row) cannot be used."""


class EmbeddingError(DataError):
    """An embedding file or artefact is malformed or does not match."""


class ResourceLimitError(DeniableError, MemoryError):
    """A pre-computation would need more memory or disk than allowed."""


class NotPrivateWarning(UserWarning):
    """Issued when output is not protected as the defaults protect it: reproducible (seeded), so
    not private, or released again on every recomputation (Ray without ``id_column``)."""


class WeakPrivacyWarning(UserWarning):
    """Issued when a setting protects little: most words of a typical text would come out unchanged
    (the command line's ``WEAK`` line; the rule is :meth:`deniable.calibrate.table.Strength.weak`,
    measured on public reference text only, never on the input)."""
