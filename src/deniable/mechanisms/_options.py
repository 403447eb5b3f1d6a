"""How a mechanism declares its options: :class:`Option`, and the epsilon every one takes.

Owns the declaration type (name, type, default, bounds or choices, help, whether an untrusted
client may set it) and its checks. Mechanism modules import it from here; the registry
(:mod:`.registry`) reads the declarations and re-exports :class:`Option`.

May import: :mod:`deniable._errors` only.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import InvalidParameterError, NotPrivateWarning

__all__ = [
    "EPSILON",
    "EPSILON_HUGE",
    "OPTION_TYPES",
    "Option",
    "check_epsilon_option",
    "history_free_option",
    "options_given",
    "record_options",
]


#: Declared option types (a ``bool`` is never accepted as a number).
OPTION_TYPES: tuple[type, ...] = (bool, int, float, str, dict)
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object"}


@dataclass(frozen=True)
class Option:
    """One declared option of a mechanism.

    Parameters
    ----------
    name
        The constructor keyword.
    type
        ``int``, ``float``, ``str``, ``bool`` or ``dict``.
    default
        The constructor's default; ``None`` means "unset" and is then an accepted value.
    help
        One line for ``--help``, the service's ``/mechanisms`` and its OpenAPI schema.
    choices
        The allowed values (``str`` or ``int`` options).
    low, high
        Bounds of a number (``None``: unbounded); ``low_open`` / ``high_open`` exclude them.
    client
        Whether an untrusted client (the HTTP service) may set it.
    cli
        Whether the command line gets a flag for it.
    flag
        The flag name (default ``--`` + name with ``_`` -> ``-``).
    objects
        Library callers may also pass an object of another type (an Index, an array of
        codes): it is handed to the constructor, which checks it. Never from a client.
    note
        Appended to the "what is allowed" text of errors (e.g. why a choice is missing).
    at_most_vocabulary
        A count of words that may not exceed the vocabulary size: the mechanism checks it
        where the embedding is known (:meth:`check_vocabulary`), on top of ``high``.
    unprotected
        The values that release input outside the privacy guarantee (e.g. ``oov="keep"``).
        The rule (:meth:`offered_to_clients`): an operator may offer such a value to untrusted
        clients only by an explicit, warned opt-in; every other value is protected.
    """

    name: str
    type: type
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    client: bool = False
    cli: bool = True
    flag: str | None = None
    objects: bool = False
    note: str = ""
    at_most_vocabulary: bool = False
    unprotected: tuple[Any, ...] = ()

    def protected(self, value: object) -> bool:
        """Whether ``value`` stays within the privacy guarantee (not one of :attr:`unprotected`)."""
        return value not in self.unprotected

    def offered_to_clients(self, values: object, *, allow_unprotected: bool, prefix: str = "") -> tuple[Any, ...]:
        """``values`` (one or a list) checked as an operator's offer of this option to untrusted clients.

        The one rule for every client-settable option and policy: the option must be
        client-settable, and a value that is not protected (:attr:`unprotected`) is
        operator-only unless ``allow_unprotected`` (the operator's explicit opt-in, which the
        caller warns about and states). Duplicates dropped, order kept (the first is the default).
        """
        name = prefix + self.name
        if not self.client:
            raise InvalidParameterError(name, "offered", "an option a client may set")
        vals = values if isinstance(values, list | tuple) else [values]
        if not vals:
            raise InvalidParameterError(name, "[]", "at least one value")
        out = tuple(dict.fromkeys(self.check(v, prefix=prefix) for v in vals))
        unsafe = [v for v in out if not self.protected(v)]
        if unsafe and not allow_unprotected:
            shown = ", ".join(repr(v) if isinstance(v, str) else str(v) for v in unsafe)
            raise InvalidParameterError(
                name, shown, "protected values only: set allow_unprotected = true to offer it (NOT protected; warned)"
            )
        return out

    def __post_init__(self) -> None:
        if self.type not in OPTION_TYPES:
            raise TypeError(f"option {self.name}: type must be one of {OPTION_TYPES}")
        if not self.name.isidentifier():
            raise TypeError(f"option {self.name!r}: not a Python identifier")

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def nullable(self) -> bool:
        return self.default is None

    @property
    def json_type(self) -> str:
        return _JSON_TYPES[self.type]

    def allowed(self) -> str:
        """What is allowed, in words (for error messages)."""
        if self.choices is not None:
            text = "one of " + ", ".join(repr(c) if isinstance(c, str) else str(c) for c in self.choices)
        elif self.type in (int, float):
            kind = "an integer" if self.type is int else "a finite number"
            parts = []
            if self.low is not None:
                parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
            if self.high is not None:
                parts.append(f"{'<' if self.high_open else '<='} {self.high:g}")
            if self.at_most_vocabulary:
                parts.append("at most the vocabulary size")
            text = kind + (" " + " and ".join(parts) if parts else "")
        elif self.type is bool:
            text = "true or false"
        elif self.type is dict:
            text = "a mapping of keyword arguments"
        else:
            text = "a string"
        text += " (or unset)" if self.nullable else ""
        return f"{text}; {self.note}" if self.note else text

    def describe(self) -> dict[str, Any]:
        """JSON-able declaration (the service's ``/mechanisms``)."""
        d: dict[str, Any] = {"name": self.name, "type": self.json_type, "default": self.default, "help": self.help}
        if self.choices is not None:
            d["choices"] = list(self.choices)
        if self.low is not None:
            d["minimum" if not self.low_open else "exclusive_minimum"] = self.low
        if self.high is not None:
            d["maximum" if not self.high_open else "exclusive_maximum"] = self.high
        if self.unprotected:
            d["unprotected"] = list(self.unprotected)
        return d

    def check(self, value: object, *, client: bool = False, prefix: str = "") -> Any:
        """The validated value, or :class:`InvalidParameterError` naming the option.

        With ``client=True`` the value is never echoed in the message.
        """
        name = prefix + self.name

        def fail() -> InvalidParameterError:
            return InvalidParameterError(name, _shown(value, client), self.allowed())

        if value is None:
            if self.nullable:
                return None
            raise fail()
        if self.type is bool:
            if not isinstance(value, bool):
                raise fail()
            return value
        if self.type in (int, float):
            return self._check_number(value, fail)
        if self.type is str:
            if not isinstance(value, str):
                if self.objects and not client and not isinstance(value, bool | int | float | Mapping):
                    return value
                raise fail()
            if self.choices is not None and value not in self.choices:
                raise fail()
            return value
        # dict
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise fail()
        return dict(value)

    def check_vocabulary(self, value: Any, size: int) -> Any:
        """``value`` (already :meth:`check`-ed), or :class:`InvalidParameterError` naming the option when it
        exceeds the vocabulary size ``size`` (only for an ``at_most_vocabulary`` option)."""
        if self.at_most_vocabulary and value is not None and value > size:
            raise InvalidParameterError(self.name, value, f"{self.allowed()} ({size:,} words here)")
        return value

    def _check_number(self, value: object, fail: Any) -> Any:
        import numpy as np

        if isinstance(value, bool | np.bool_):
            raise fail()
        if self.type is int:
            if not isinstance(value, int | np.integer):
                raise fail()
            v: float = int(value)
        else:
            if not isinstance(value, int | float | np.integer | np.floating):
                raise fail()
            v = float(value)
            if not math.isfinite(v):
                raise fail()
        if self.choices is not None and v not in self.choices:
            raise fail()
        if self.low is not None and (v < self.low or (self.low_open and v == self.low)):
            raise fail()
        if self.high is not None and (v > self.high or (self.high_open and v == self.high)):
            raise fail()
        return v


def history_free_option(removes: str) -> Option:
    """The ``history_free`` flag: the data-oblivious mode ``deniable serve`` sets wherever it is declared.

    ``removes`` names what the default (fast) path does that history-free mode does not (a
    dedup by distinct word, per-word state kept between calls): the help line says it.
    Library and CLI default: ``False``; never a flag of the command line, never a client's.
    """
    return Option("history_free", bool, False, cli=False, help=f"{removes} (the service's mode)")


def _shown(value: object, client: bool) -> object:
    """What an error message may show of a value: a trusted caller's numbers and short names, else a placeholder."""
    if client:
        return "<not shown>"
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and len(value) <= 40:
        return value  # a trusted caller's parameter (a flag, a name in code), not private text
    return f"<{type(value).__name__}>"


#: The privacy parameter every mechanism takes (finite, > 0).
EPSILON = Option("epsilon", float, default=1.0, low=0.0, low_open=True, client=True, help="Privacy parameter (> 0).")
#: Beyond this epsilon every word is released unchanged (noise below float precision): a warning says so.
EPSILON_HUGE = 1e12


def check_epsilon_option(value: object, *, client: bool = False, name: str = "epsilon") -> float:
    """``epsilon`` as declared (finite, > 0); a huge one warns that nothing will change."""
    try:
        eps = float(EPSILON.check(value, client=client))
    except InvalidParameterError as exc:
        raise InvalidParameterError(name, exc.value, exc.allowed) from None
    if eps >= EPSILON_HUGE:
        warnings.warn(
            f"epsilon={eps:g} is so large that the mechanism releases (almost) every word unchanged: no privacy",
            NotPrivateWarning,
            stacklevel=3,
        )
    return eps


def record_options(mech: object, options: Mapping[str, Any]) -> None:
    """Record on ``mech`` the validated options it was built with (:func:`~deniable.mechanisms.make_mechanism`)."""
    object.__setattr__(mech, "_options_given", dict(options))


def options_given(mech: object) -> dict[str, Any] | None:
    """The options as given to ``make_mechanism`` (before the mechanism derived any), or None: built otherwise."""
    found = getattr(mech, "__dict__", {}).get("_options_given")
    return dict(found) if isinstance(found, dict) else None
