"""Engines beyond one process: Spark, Ray Data, Dask, Hugging Face ``datasets`` and scikit-learn.

Every engine is a thin layer over one picklable batch function,
:class:`BatchPrivatizer`, which loads the embedding (memory-mapped) and builds the
mechanism once per worker process. The engine packages are optional extras
(``pip install 'deniable[spark]'``, ``[ray]``, ``[dask]``, ``[hf]``, ``[sklearn]``) and
are imported only by their own module.
"""

from __future__ import annotations

from ._batch import LOAD_LOG_ENV, BatchPrivatizer, clear_cache, load_count

__all__ = ["LOAD_LOG_ENV", "BatchPrivatizer", "clear_cache", "load_count"]
