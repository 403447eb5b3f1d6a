"""``deniable.sklearn``: :class:`PrivatizeText` (see :mod:`deniable.integrations.sklearn`)."""

from __future__ import annotations

from .integrations.sklearn import EXPECTED_FAILED_CHECKS, PrivatizeText

__all__ = ["EXPECTED_FAILED_CHECKS", "PrivatizeText"]
