"""``deniable.sklearn``: :class:`PrivatizeText` (see :mod:`deniable.integrations.sklearn`)."""

from __future__ import annotations

from .integrations.sklearn import PrivatizeText

__all__ = ["PrivatizeText"]
