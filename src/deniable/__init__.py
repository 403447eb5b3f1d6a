"""deniable: privatize text with metric differential privacy.

Quick start::

    import deniable
    deniable.privatize(["The hockey game was great!"], epsilon=10)   # a list, a Series, df + column=

    emb = deniable.load_embedding()                      # GloVe 6B 50-d, built in
    mech = deniable.MultivariateLaplace(emb, epsilon=10)
    deniable.Privatizer(mech).privatize("The hockey game was great!")

Heavy or optional parts (faiss indexes, TEM tables, evaluation, plots) are imported
on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import (
    DataError,
    DeniableError,
    EmbeddingError,
    InvalidParameterError,
    NotPrivateWarning,
    ResourceLimitError,
    WeakPrivacyWarning,
)
from ._random import RunKey, check_random_state, secure_generator, seeded_generator
from ._version import __version__
from .embedding import Embedding, load_embedding
from .preparation import prepare

__all__ = [
    "BinaryRandomizedResponse",
    "BudgetAccountant",
    "BudgetError",
    "DataError",
    "DeniableError",
    "Embedding",
    "EmbeddingError",
    "InvalidParameterError",
    "Mechanism",
    "MultivariateLaplace",
    "NotPrivateWarning",
    "Privatizer",
    "ResourceLimitError",
    "RunKey",
    "TruncatedExponential",
    "WeakPrivacyWarning",
    "__version__",
    "bow",
    "calibrate",
    "check_random_state",
    "experiments",
    "load_embedding",
    "make_mechanism",
    "prepare",
    "privacy_ledger",
    "privatize",
    "secure_generator",
    "seeded_generator",
]

_LAZY = {
    "Mechanism": ("deniable.mechanisms.base", "Mechanism"),
    "MultivariateLaplace": ("deniable.mechanisms.laplace", "MultivariateLaplace"),
    "TruncatedExponential": ("deniable.mechanisms.tem", "TruncatedExponential"),
    "BinaryRandomizedResponse": ("deniable.mechanisms.brr", "BinaryRandomizedResponse"),
    "make_mechanism": ("deniable.mechanisms", "make_mechanism"),
    "Privatizer": ("deniable.privatizer", "Privatizer"),
    "privatize": ("deniable.api", "privatize"),
    "BudgetAccountant": ("deniable.budget", "BudgetAccountant"),
    "BudgetError": ("deniable.budget", "BudgetError"),
    "privacy_ledger": ("deniable.api", "privacy_ledger"),
    "calibrate": ("deniable.calibrate", None),
    "experiments": ("deniable.experiments", None),
    "bow": ("deniable.bow", None),
}

if TYPE_CHECKING:
    from . import bow, calibrate, experiments
    from .api import privacy_ledger, privatize
    from .budget import BudgetAccountant, BudgetError
    from .mechanisms import make_mechanism
    from .mechanisms.base import Mechanism
    from .mechanisms.brr import BinaryRandomizedResponse
    from .mechanisms.laplace import MultivariateLaplace
    from .mechanisms.tem import TruncatedExponential
    from .privatizer import Privatizer


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'deniable' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
