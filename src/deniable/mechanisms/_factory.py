"""Building a mechanism from its registered name: options validated, epsilon given or chosen.

Owns :func:`make_mechanism`, the one constructor the CLI, the service, the engines and the
API call. ``epsilon="auto"`` is resolved here from a calibration table
(:mod:`deniable.calibrate.table`), which is why this is not in the registry: the calibration
builds mechanisms itself and so imports the registry, never this module.

May import: :mod:`.registry`, :mod:`deniable.calibrate.table` (lazily, for ``"auto"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import InvalidParameterError
from ._options import record_options
from .registry import _shown, check_epsilon_option, mechanism_class, validate_options

if TYPE_CHECKING:
    from ..embedding import Vocabulary
    from .base import Mechanism

__all__ = ["make_mechanism"]


def make_mechanism(
    name: str, embedding: Vocabulary, epsilon: float | str, *, target: object = None, **options: Any
) -> Mechanism:
    """Build the mechanism called ``name`` (e.g. "madlib", "tem", "brr"): validate, then construct.

    ``epsilon="auto"`` with ``target="unchanged<=0.5"`` (at most that share of a typical
    text's tokens released unchanged) takes the epsilon from the calibration table of
    ``name`` on ``embedding`` (public data only; measured and stored once when it was not
    prepared): see :mod:`deniable.calibrate.table`. The choice is recorded on the mechanism
    (``deniable.calibrate.table.resolution_of``) for summaries and manifests, and so are the
    options as given (``_options.options_given``: what a calibration table is keyed by, before
    the mechanism derives any, e.g. TEM's gamma from beta).
    """
    cls = mechanism_class(name)
    checked = validate_options(name, options)
    if isinstance(epsilon, str) and epsilon == "auto":
        if target is None:
            raise InvalidParameterError("target", None, 'a target with epsilon="auto", e.g. "unchanged<=0.5"')
        from ..calibrate.table import attach_resolution, parse_target, resolve_epsilon

        resolution = resolve_epsilon(embedding, name, parse_target(target), checked)
        mech = cls(embedding, epsilon=resolution.epsilon, **checked)  # type: ignore[call-arg]
        attach_resolution(mech, resolution)
    else:
        if target is not None:
            raise InvalidParameterError("target", _shown(target, False), 'given only with epsilon="auto"')
        mech = cls(embedding, epsilon=check_epsilon_option(epsilon), **checked)  # type: ignore[call-arg]
    record_options(mech, checked)
    return mech
