"""``deniable.spark``: privatize Spark DataFrame columns (see :mod:`deniable.integrations.spark`)."""

from __future__ import annotations

from .integrations.spark import privatize, privatize_path, privatize_udf, privatize_with_counts

__all__ = ["privatize", "privatize_path", "privatize_udf", "privatize_with_counts"]
