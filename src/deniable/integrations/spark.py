"""Apache Spark: privatize string columns of a DataFrame (``pip install 'deniable[spark]'``).

One non-deterministic ``Iterator[pd.Series] -> Iterator[pd.DataFrame]`` pandas UDF per
call, a thin layer over :class:`~deniable.integrations.BatchPrivatizer`: each Python
worker loads the embedding once (memory-mapped from a path every executor can read)
and builds the mechanism once; nothing but the small parameter record travels with the
task (the embedding and the index are never broadcast).

Randomness is keyed, not fresh: each row's text draws from its own ChaCha20 stream of
(the run key, its partition id and position in the partition, its column, its text), so
every recomputation of the same DataFrame -- a second action, a task retry, speculative
execution, another Arrow batch size -- releases the same text again instead of new noise.
Another partitioning of the same rows is another release (a row's position changed): the
ledger counts every Spark manifest as its own release (it carries no input digest).
This needs each partition's rows in the same order every time it is computed: Spark
guarantees that for a partition read from files or local data and transformed row by
row; after a shuffle it guarantees only the same set of rows, so when the plan below the
UDF has an exchange the rows are first sorted within their partition by the text
columns (then the other orderable columns), which makes the order a function of the set.

Counts (texts, tokens, changed, OOV) come back through a Spark
:class:`~pyspark.sql.Observation` on the action that writes the result.
"""

from __future__ import annotations

import contextlib
import os
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

__all__ = ["privatize", "privatize_path", "privatize_udf", "privatize_with_counts", "session", "worker_python"]

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
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        first = 0  # the position of the batch's first row in the partition
        for series in batches:
            parts = (series,) if isinstance(series, pd.Series) else tuple(series)
            values = {
                c: [None if v is None or v != v else v for v in s.tolist()] for c, s in zip(columns, parts, strict=True)
            }
            n = len(parts[0])
            new, stats = batch.privatize_columns(values, positions=[(partition, first + i) for i in range(n)])
            first += n
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


def privatize_with_counts(
    df: DataFrame, batch: BatchPrivatizer, *, stable_order: bool = False
) -> tuple[DataFrame, Observation]:
    """``df`` with ``batch.columns`` privatized, and an Observation holding the counts after an action.

    ``stable_order=True``: the caller guarantees each partition's rows come in the same
    order every time (nothing is re-sorted).
    """
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
    worker_python(df.sparkSession)  # before the UDF is made: PySpark copies the python into it
    udf = privatize_udf(batch)
    obs = Observation(f"deniable-{uuid.uuid4().hex[:8]}")
    if not stable_order:
        df = _stable_order(df, batch.columns)
    with_struct = df.withColumn(_STRUCT, udf(*[df[c] for c in batch.columns]))
    observed = with_struct.observe(obs, *[F.sum(F.col(f"{_STRUCT}._{n}")).alias(n) for n in _COUNTS])
    index = {c: i for i, c in enumerate(batch.columns)}
    out = observed.select(*[F.col(f"{_STRUCT}.c{index[c]}").alias(c) if c in index else observed[c] for c in names])
    return out, obs


def _stable_order(df: DataFrame, columns: Sequence[str]) -> DataFrame:
    """``df``, sorted within its partitions when a shuffle makes their row order vary between computations.

    Keyed noise names rows by their position in a partition; after an exchange Spark
    recomputes the same set of rows per partition but not necessarily in the same order.
    Sorting by the text columns first (rows tied there carry the same texts, so a tie
    in any order gives each text the same stream) then by every other orderable column
    makes the order a function of the set. Without an exchange (files, local data,
    row-by-row transformations) the order is already stable and is kept.
    """
    from pyspark.sql.types import BinaryType, BooleanType, DataType, DateType, NumericType, StringType, TimestampType

    try:
        plan = df._jdf.queryExecution().executedPlan().toString()  # classic sessions
        shuffled = "Exchange" in plan
    except Exception:  # Spark Connect has no JVM plan here: assume the worst
        shuffled = True
    if not shuffled:
        return df

    def orderable(t: DataType) -> bool:
        return isinstance(t, StringType | NumericType | BooleanType | DateType | TimestampType | BinaryType)

    rest = [f.name for f in df.schema.fields if f.name not in columns and orderable(f.dataType)]
    return df.sortWithinPartitions(*columns, *rest)


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


#: what PySpark's SparkContext takes as the worker python when $PYSPARK_PYTHON is unset
_PYSPARK_DEFAULT_PYTHON = "python3"


def worker_python(spark: SparkSession) -> str | None:
    """Make ``spark``'s Python workers run this interpreter (``sys.executable``) unless the user chose one.

    PySpark fixes the workers' python when its SparkContext starts: ``$PYSPARK_PYTHON``, else
    ``python3`` from the ``PATH`` -- from a venv that is not activated, the system python,
    without pandas or deniable (``No module named 'pandas'`` in the first task). A choice of
    the user's is kept: ``$PYSPARK_PYTHON`` or ``spark.pyspark.python`` set, or a context whose
    python is not PySpark's default (which ``spark.pyspark.python`` then names, as PySpark
    itself does not apply it to UDF workers). Returns the workers' python (``None`` on Spark
    Connect, where the server chooses it).
    """
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext on the client
        return None
    current = getattr(sc, "pythonExec", None)
    if current is None:
        return None
    if os.environ.get("PYSPARK_PYTHON") or current != _PYSPARK_DEFAULT_PYTHON:
        return str(current)  # the user's choice
    chosen = sc.getConf().get("spark.pyspark.python", None) or sys.executable
    sc.pythonExec = chosen
    return chosen


# -------------------------------------------------------------------- files (the CLI's engine)
def session(master: str = "local[*]") -> tuple[SparkSession, bool]:
    """The active SparkSession, or a new one on ``master`` (and whether it was created here)."""
    _import_pyspark()
    from pyspark.sql import SparkSession

    # PySpark 4 starts its Python workers with $PYSPARK_PYTHON (not spark.pyspark.python): without
    # it a CLI run from a venv that is not activated fails in the first task. Only when unset.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    builder = SparkSession.builder.master(master).appName("deniable")
    if master.startswith("local"):  # one machine: the driver listens on loopback only
        builder = builder.config("spark.pyspark.python", sys.executable)
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
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


def spread(df: DataFrame, parallelism: int) -> DataFrame:
    """``df`` split into at least ``parallelism`` partitions, keeping the row order.

    One input file (a gzip file, a multi-line CSV, a Parquet file of one row group) is
    read as one task; privatizing it in one task would use one core. The rows are
    numbered in input order, range-partitioned on that number and sorted by it within
    each partition, so the part files hold the input's rows in order and every
    recomputation sees each partition's rows in the same order (keyed noise).
    """
    from pyspark.sql import functions as F  # noqa: N812

    if parallelism <= 1 or df.rdd.getNumPartitions() >= parallelism:
        return df
    order = "__deniable_row__"
    numbered = df.withColumn(order, F.monotonically_increasing_id())
    return numbered.repartitionByRange(parallelism, order).sortWithinPartitions(order).drop(order)


def privatize_path(
    src: str | Path,
    dst: str | Path,
    batch: BatchPrivatizer,
    *,
    format: str,
    master: str = "local[*]",
    input_label: str | None = None,
) -> PrivatizeStats:
    """Privatize a file or folder into the folder ``dst`` (partitioned), atomically, with a manifest.

    The result is written to a temporary folder beside ``dst`` (with Spark's ``_SUCCESS``
    marker and ``_MANIFEST.json``) and renamed to ``dst`` only when complete: a failed run
    leaves nothing at ``dst``. For txt input the column is ``value`` (one record per line).
    One input file is spread over the cluster's parallelism (:func:`spread`), keeping the
    row order. ``input_label`` names the input in the manifest's ledger entry.
    """
    from ..api import MANIFEST_FOLDER_NAME, input_id, now, run_manifest, write_manifest

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
        df = spread(read(spark, src, format), spark.sparkContext.defaultParallelism)
        result, obs = privatize_with_counts(df, batch, stable_order=True)
        writer = result.write.mode("error")
        if format == "parquet":
            writer.parquet(str(tmp))
        elif format == "csv":
            writer.options(header=True, escape='"').csv(str(tmp))
        elif format == "jsonl":
            writer.option("ignoreNullFields", "false").json(str(tmp))  # a null stays a null, not a lost key
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
            run_key_id=batch.run.id,
            input=input_id(src, input_label),
            run_key_origin=batch.run.origin,
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
