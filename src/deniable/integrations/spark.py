"""Apache Spark: privatize string columns of a DataFrame (``pip install 'deniable[spark]'``).

One non-deterministic ``Iterator[pd.Series] -> Iterator[pd.DataFrame]`` pandas UDF per
call, a thin layer over :class:`~deniable.integrations.BatchPrivatizer`: each Python
worker loads the embedding once (memory-mapped from a path every executor can read)
and builds the mechanism once; nothing but the small parameter record travels with the
task (the embedding and the index are never broadcast). Each partition draws fresh OS
randomness; an explicit ``seed`` (NOT private) derives one stream per partition id.

Counts (texts, tokens, changed, OOV) come back through a Spark
:class:`~pyspark.sql.Observation` on the action that writes the result.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import typing
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import DataError, InvalidParameterError
from ._batch import BatchPrivatizer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation, SparkSession

    from ..privatizer import PrivatizeStats

__all__ = ["privatize", "privatize_path", "privatize_udf", "privatize_with_counts", "session"]

_STRUCT = "__deniable__"
_COUNTS = ("texts", "tokens", "changed", "oov")


def _import_pyspark() -> Any:
    try:
        import pyspark
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("deniable.spark needs PySpark: pip install 'deniable[spark]'") from exc
    return pyspark


def privatize_udf(batch: BatchPrivatizer) -> Any:
    """The pandas UDF over ``batch.columns``: returns a struct of the new texts and the batch counts."""
    _import_pyspark()
    import pandas as pd
    from pyspark.sql.functions import pandas_udf
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    fields = [StructField(f"c{i}", StringType()) for i in range(len(batch.columns))]
    fields += [StructField(f"_{n}", LongType()) for n in _COUNTS]
    schema = StructType(fields)
    columns = batch.columns

    def run(batches: Iterator[tuple[pd.Series, ...]]) -> Iterator[pd.DataFrame]:
        key = None
        if batch.seed is not None:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            key = ctx.partitionId() if ctx is not None else 0
        rng = batch.generator(key)  # one stream per partition: fresh OS randomness, or seeded per partition id
        for series in batches:
            parts = (series,) if isinstance(series, pd.Series) else tuple(series)
            values = {
                c: [None if v is None or v != v else v for v in s.tolist()] for c, s in zip(columns, parts, strict=True)
            }
            new, stats = batch.privatize_columns(values, rng)
            n = len(parts[0])
            frame = {f"c{i}": pd.Series(new[c], dtype=object) for i, c in enumerate(columns)}
            for name in _COUNTS:  # the batch's totals on its first row, summed by the Observation
                col = [0] * n
                if n:
                    col[0] = getattr(stats, name)
                frame[f"_{name}"] = pd.Series(col, dtype="int64")
            yield pd.DataFrame(frame)

    run.__annotations__ = {
        "batches": Iterator[typing.Tuple[pd.Series, ...]],  # noqa: UP006 - Spark reads this hint at runtime
        "return": Iterator[pd.DataFrame],
    }
    return pandas_udf(run, schema).asNondeterministic()  # type: ignore[call-overload]


def privatize_with_counts(df: DataFrame, batch: BatchPrivatizer) -> tuple[DataFrame, Observation]:
    """``df`` with ``batch.columns`` privatized, and an Observation holding the counts after an action."""
    _import_pyspark()
    from pyspark.sql import Observation
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import StringType

    if not batch.columns:
        raise InvalidParameterError("columns", None, "at least one text column")
    names = df.columns
    for c in batch.columns:
        if c not in names:
            raise InvalidParameterError("columns", c, "a column of the DataFrame")
        if not isinstance(df.schema[c].dataType, StringType):
            raise InvalidParameterError("columns", c, "a string column")
    if _STRUCT in names:
        raise InvalidParameterError("columns", _STRUCT, "a DataFrame without this reserved column")
    udf = privatize_udf(batch)
    obs = Observation(f"deniable-{uuid.uuid4().hex[:8]}")
    with_struct = df.withColumn(_STRUCT, udf(*[df[c] for c in batch.columns]))
    observed = with_struct.observe(obs, *[F.sum(F.col(f"{_STRUCT}._{n}")).alias(n) for n in _COUNTS])
    index = {c: i for i, c in enumerate(batch.columns)}
    out = observed.select(*[F.col(f"{_STRUCT}.c{index[c]}").alias(c) if c in index else observed[c] for c in names])
    return out, obs


def observed_stats(obs: Observation) -> PrivatizeStats:
    """The counts an :func:`privatize_with_counts` Observation collected (after an action)."""
    from ..privatizer import PrivatizeStats

    got = obs.get
    return PrivatizeStats(**{n: int(got.get(n) or 0) for n in _COUNTS})


def privatize(
    df: DataFrame,
    columns: Sequence[str] | str,
    mechanism: str = "madlib",
    epsilon: float = 10.0,
    **params: Any,
) -> DataFrame:
    """``df`` with the string ``columns`` privatized; every other column and the row count kept.

    ``embedding`` must be a path every executor can read (a shared file system, or a
    folder shipped with ``SparkContext.addFile`` / ``--files`` and named by its local
    path), or ``None`` for the built-in GloVe that ``deniable`` installs on every worker.
    ``params``: :meth:`BatchPrivatizer.for_columns` (``embedding``, ``vocabulary``, ``oov``,
    ``case``, ``seed``, ... and the mechanism's declared options, e.g. ``gamma=`` for TEM).
    """
    batch = BatchPrivatizer.for_columns(columns, mechanism, epsilon, **params)
    return privatize_with_counts(df, batch)[0]


# -------------------------------------------------------------------- files (the CLI's engine)
def session(master: str = "local[*]") -> tuple[SparkSession, bool]:
    """The active SparkSession, or a new one on ``master`` (and whether it was created here)."""
    _import_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    builder = SparkSession.builder.master(master).appName("deniable")
    if master.startswith("local"):
        builder = builder.config("spark.pyspark.python", sys.executable)
    builder = builder.config("spark.ui.enabled", "false").config("spark.sql.execution.arrow.pyspark.enabled", "true")
    return builder.getOrCreate(), True


def read(spark: SparkSession, src: str | Path, fmt: str) -> DataFrame:
    """Read a file or folder with Spark; every CSV column is a string."""
    path = str(src)
    if fmt == "parquet":
        return spark.read.parquet(path)
    if fmt == "csv":
        return spark.read.options(header=True, multiLine=True, escape='"').csv(path)
    if fmt == "jsonl":
        return spark.read.json(path)
    if fmt == "txt":
        return spark.read.text(path)
    raise InvalidParameterError("format", fmt, "parquet, csv, jsonl or txt with --engine spark")


def privatize_path(
    src: str | Path,
    dst: str | Path,
    batch: BatchPrivatizer,
    *,
    format: str,
    master: str = "local[*]",
) -> PrivatizeStats:
    """Privatize a file or folder into the folder ``dst`` (partitioned), atomically, with a manifest.

    The result is written to a temporary folder beside ``dst`` (with Spark's ``_SUCCESS``
    marker and ``_MANIFEST.json``) and renamed to ``dst`` only when complete: a failed run
    leaves nothing at ``dst``. For txt input the column is ``value`` (one record per line).
    """
    from ..api import MANIFEST_FOLDER_NAME, now, run_manifest, write_manifest

    out = Path(dst)
    if out.exists():
        raise InvalidParameterError("output", str(out), "a path that does not exist yet (Spark writes a folder)")
    if not out.parent.exists():
        raise DataError(f"output folder {out.parent} does not exist")
    privatizer = batch.privatizer()  # the driver's copy: validates the embedding before Spark starts
    started = now()
    spark, created = session(master)
    tmp = out.with_name(f".{out.name}.deniable-{uuid.uuid4().hex[:12]}.tmp")
    try:
        df = read(spark, src, format)
        result, obs = privatize_with_counts(df, batch)
        writer = result.write.mode("error")
        if format == "parquet":
            writer.parquet(str(tmp))
        elif format == "csv":
            writer.options(header=True, escape='"').csv(str(tmp))
        elif format == "jsonl":
            writer.json(str(tmp))
        else:
            writer.text(str(tmp))
        stats = observed_stats(obs)
        if not (tmp / "_SUCCESS").is_file():
            raise DataError("Spark did not mark the output complete (_SUCCESS missing)")
        manifest = run_manifest(
            privatizer,
            stats,
            started=started,
            finished=now(),
            engine=f"spark:{spark.sparkContext.master}",
            embedding=batch.embedding,
            vocabulary=batch.vocabulary,
            columns=batch.columns,
            format=format,
            seeded=batch.seed is not None,
            extra={"options": batch.options},
        )
        write_manifest(tmp / MANIFEST_FOLDER_NAME, manifest)
        tmp.rename(out)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
        raise
    finally:
        if created:
            spark.stop()
    return stats
