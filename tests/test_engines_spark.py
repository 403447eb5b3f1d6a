"""Spark (local[2]): deniable.spark.privatize, loads per worker, and ``deniable privatize --engine spark``."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from _engine_helpers import imdb_like, same_share, single_process_changed

pytest.importorskip("pyspark", reason="needs deniable[spark] (pyspark)")
pytest.importorskip("pandas", reason="needs pandas")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")


@pytest.fixture(scope="session")
def load_log(tmp_path_factory):
    return tmp_path_factory.mktemp("loads")


@pytest.fixture(scope="session")
def spark(load_log):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["DENIABLE_LOAD_LOG"] = str(load_log)  # inherited by the Python workers
    session = (
        SparkSession.builder.master("local[2]")
        .appName("deniable-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    os.environ.pop("DENIABLE_LOAD_LOG", None)


@pytest.fixture(scope="module")
def rows():
    return imdb_like(3000)


@pytest.fixture(scope="module")
def frame(spark, rows):
    return spark.createDataFrame(rows, "id long, review string, label long, score double").repartition(4)


def test_identity_at_huge_epsilon_keeps_everything(frame, rows, emb_dir):
    import deniable.spark

    out = deniable.spark.privatize(
        frame, ["review"], "madlib", 1e9, embedding=str(emb_dir), case="keep", oov="keep"
    ).orderBy("id")
    got = [r.asDict() for r in out.collect()]
    assert out.columns == ["id", "review", "label", "score"]
    assert got == rows


def test_changed_share_agrees_with_single_process(frame, rows, emb_dir):
    from deniable.integrations import BatchPrivatizer
    from deniable.integrations.spark import observed_stats, privatize_with_counts

    batch = BatchPrivatizer(mechanism="madlib", epsilon=3.0, embedding=str(emb_dir), columns=("review",))
    out, obs = privatize_with_counts(frame, batch)
    got = out.orderBy("id").collect()
    stats = observed_stats(obs)
    assert len(got) == len(rows) and stats.texts == len(rows)
    assert [(r.id, r.label, r.score) for r in got] == [(r["id"], r["label"], r["score"]) for r in rows]
    assert [len(r.review.split()) for r in got] == [len(r["review"].split()) for r in rows]
    changed, tokens = single_process_changed(emb_dir, [r["review"] for r in rows], 3.0)
    assert stats.tokens == tokens
    assert 0 < stats.changed < tokens
    assert same_share(stats.changed, stats.tokens, changed, tokens)


def test_worker_loads_once(frame, emb_dir, load_log):
    import deniable.spark

    before = set(os.listdir(load_log))
    out = deniable.spark.privatize(frame.repartition(8), "review", "madlib", 4.321, embedding=str(emb_dir))
    assert out.count() == 3000
    new = set(os.listdir(load_log)) - before
    per_pid = Counter(name.split("-")[0] for name in new)
    assert per_pid and all(n == 1 for n in per_pid.values())


def test_rejects_non_string_column(frame, emb_dir):
    import deniable.spark
    from deniable import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="string"):
        deniable.spark.privatize(frame, ["score"], embedding=str(emb_dir))


def test_cli_engine_spark_parquet(spark, tmp_path, rows, emb_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from deniable.cli import main

    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows[:500]), src)
    dst = tmp_path / "out"
    args = ["privatize", str(src), "-o", str(dst), "-c", "review", "-e", "3", "--embedding", str(emb_dir)]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--engine", "spark", "-q"])
    assert exc.value.code == 0
    assert (dst / "_SUCCESS").is_file()
    manifest = json.loads((dst / "_MANIFEST.json").read_text())
    assert manifest["counts"]["texts"] == 500 and manifest["engine"].startswith("spark:")
    back = pq.read_table(dst).to_pylist()
    assert sorted(r["id"] for r in back) == list(range(500))
    # a failing run leaves nothing at the output
    with pytest.raises(SystemExit) as exc:
        main(
            [
                *args[:-5],
                "-c",
                "score",
                "-o",
                str(tmp_path / "bad"),
                "--embedding",
                str(emb_dir),
                "-e",
                "3",
                "--engine",
                "spark",
                "-q",
            ]
        )
    assert exc.value.code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet", "out"]


@pytest.mark.data
def test_real_imdb(spark, emb_dir):
    import deniable.spark
    from conftest import shared_data

    path = shared_data("imdb") / "train.jsonl.gz"
    df = spark.read.json(str(path)).limit(2000).cache()
    out = deniable.spark.privatize(df, ["text"], "madlib", 5.0, embedding=str(emb_dir))
    a = df.select("id", "label", "rating", "movie").orderBy("id").collect()
    b = out.select("id", "label", "rating", "movie").orderBy("id").collect()
    assert a == b and out.count() == 2000
    assert Path(path).is_file()


def test_embedding_shipped_with_addfile(spark, frame, rows, emb_dir, tmp_path):
    """An embedding folder shipped with SparkContext.addFile is named ``sparkfiles:NAME`` and found on every worker."""
    import shutil

    import deniable.spark

    shipped = tmp_path / "shipped-embedding"
    shutil.copytree(emb_dir, shipped)
    spark.sparkContext.addFile(str(shipped), recursive=True)  # "sparkfiles:NAME" is no path: only SparkFiles finds it
    out = deniable.spark.privatize(
        frame, ["review"], "madlib", 1e9, embedding="sparkfiles:shipped-embedding", case="keep", oov="keep"
    ).orderBy("id")
    assert [r.asDict() for r in out.collect()] == rows


# ------------------------------------------------------------------ releases that do not multiply
def test_recomputation_releases_the_same_text(frame, emb_dir):
    """Two actions on one privatized DataFrame (over a shuffled frame) agree; a new run does not."""
    import deniable.spark

    out = deniable.spark.privatize(frame, ["review"], "madlib", 3.0, embedding=str(emb_dir))
    first = {r.id: r.review for r in out.collect()}
    again = {r.id: r.review for r in out.orderBy("id").collect()}
    some = {r.id: r.review for r in out.filter("label = 1").collect()}
    assert first == again and all(first[i] == t for i, t in some.items()) and len(some) == 1500
    new = {
        r.id: r.review
        for r in deniable.spark.privatize(frame, ["review"], "madlib", 3.0, embedding=str(emb_dir)).collect()
    }
    assert sum(first[i] != new[i] for i in first) > 1000  # separate runs are independent


def test_recomputation_without_shuffle_keeps_the_order(spark, rows, emb_dir):
    import deniable.spark

    df = spark.createDataFrame(rows[:600], "id long, review string, label long, score double")
    out = deniable.spark.privatize(df, "review", "madlib", 3.0, embedding=str(emb_dir))
    a, b = out.collect(), out.collect()
    assert a == b and [r.id for r in a] == list(range(600))  # no shuffle: nothing re-sorted


def test_cli_engine_spark_jsonl_keeps_nulls_and_spreads(spark, tmp_path, rows, emb_dir):
    from deniable.cli import main

    src = tmp_path / "in.jsonl"
    with src.open("w") as f:
        for r in rows[:400]:
            f.write(json.dumps({**r, "review": None if r["id"] % 10 == 0 else r["review"]}) + "\n")
    dst = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["privatize", str(src), "-o", str(dst), "-c", "review", "-e", "3", "--embedding", str(emb_dir),
              "--engine", "spark", "-q"])  # fmt: skip
    assert exc.value.code == 0
    parts = sorted(dst.glob("part-*"))
    assert len([p for p in parts if p.stat().st_size]) >= 2  # one input file, more than one task
    back = [json.loads(line) for p in parts for line in p.read_text().splitlines()]
    assert [r["id"] for r in back] == list(range(400))  # the input's order, across the part files
    nulls = [r for r in back if r["id"] % 10 == 0]
    assert nulls and all("review" in r and r["review"] is None for r in nulls)
    m = json.loads((dst / "_MANIFEST.json").read_text())
    assert m["release"]["records"] == 360 and m["release"]["run_key_id"] and m["release"]["input"].startswith("path:")


def test_session_sets_the_worker_python(spark, monkeypatch):
    from deniable.integrations.spark import session

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    session()
    assert os.environ["PYSPARK_PYTHON"] == sys.executable == os.environ["PYSPARK_DRIVER_PYTHON"]


def test_keyed_determinism_arrow_batch_size_does_not_change_the_release(spark, rows, emb_dir):
    """The same run key over the same partitions: the same text whatever the Arrow batch size
    (keyed per batch, a smaller batch gave every record fresh noise: a second, uncounted release)."""
    import deniable.spark
    from deniable._random import RunKey

    df = spark.createDataFrame(rows[:300], "id long, review string, label long, score double")
    key = RunKey.new().hex()
    conf = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(conf)
    outs = []
    try:
        for size in ("10000", "7"):
            spark.conf.set(conf, size)
            out = deniable.spark.privatize(df, "review", "madlib", 3.0, embedding=str(emb_dir), run_key=key)
            outs.append({r.id: r.review for r in out.collect()})
    finally:
        spark.conf.set(conf, before)
    assert outs[0] == outs[1]


def test_ledger_counts_every_spark_manifest(spark, tmp_path, rows, emb_dir):
    """Another partitioning of the same rows is another release: Spark manifests carry no input
    digest, so the ledger counts each one (never undercounts)."""
    from deniable.api import privacy_ledger
    from deniable.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows[:100]))
    key = tmp_path / "run.key"
    outs = []
    for name in ("a", "b"):
        with pytest.raises(SystemExit) as exc:
            main(["privatize", str(src), "-o", str(tmp_path / name), "-c", "review", "-e", "3", "--embedding",
                  str(emb_dir), "--engine", "spark", "-q", "--run-key-file", str(key)])  # fmt: skip
        assert exc.value.code == 0
        outs.append(str(tmp_path / name))
    (entry,), _ = privacy_ledger(outs)
    assert entry.releases == 2 and entry.epsilon == 6.0
    assert json.loads((tmp_path / "a" / "_MANIFEST.json").read_text())["release"]["run_key_origin"] == "os"


SCRIPT = """
import sys
from pyspark.sql import SparkSession
import deniable.spark
spark = (SparkSession.builder.master("local[1]").appName("deniable-venv-not-activated")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.enabled", "false").getOrCreate())
df = spark.createDataFrame([(1, "the hockey game"), (2, "nasa rocket")], "id long, review string")
out = deniable.spark.privatize(df, ["review"], "madlib", 1e9, embedding=sys.argv[1], case="keep", oov="keep")
print("ROWS", sorted(r.review for r in out.collect()), spark.sparkContext.pythonExec == sys.executable)
spark.stop()
"""


def test_script_run_by_the_venv_python_without_activating_it(tmp_path, emb_dir):
    """``.venv/bin/python script.py`` with the venv's bin off PATH: Spark's workers would run the
    system ``python3`` (``No module named 'pandas'``) unless privatize sets them to sys.executable."""
    import subprocess

    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    here = Path(sys.executable).parent
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != here)
    drop = ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "DENIABLE_LOAD_LOG")
    env = {k: v for k, v in os.environ.items() if k not in drop} | {"PATH": path}
    done = subprocess.run(
        [sys.executable, str(script), str(emb_dir)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ROWS ['nasa rocket', 'the hockey game'] True" in done.stdout


def test_worker_python_keeps_the_users_choice(monkeypatch):
    from deniable.integrations.spark import worker_python

    class Conf(dict):
        def get(self, key, default=None):  # SparkConf.get's signature
            return super().get(key, default)

    class Context:
        def __init__(self, exe, conf):
            self.pythonExec, self._conf = exe, Conf(conf)

        def getConf(self):  # noqa: N802 - PySpark's name
            return self._conf

    class Session:
        def __init__(self, sc):
            self.sparkContext = sc

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    default = Context("python3", {})
    assert worker_python(Session(default)) == sys.executable == default.pythonExec
    chosen = Context("python3", {"spark.pyspark.python": "/opt/py/bin/python"})
    assert worker_python(Session(chosen)) == "/opt/py/bin/python" == chosen.pythonExec
    own = Context("/usr/bin/python3.11", {})
    assert worker_python(Session(own)) == "/usr/bin/python3.11" == own.pythonExec
    monkeypatch.setenv("PYSPARK_PYTHON", "/somewhere/python")
    env = Context("python3", {})
    assert worker_python(Session(env)) == "python3" == env.pythonExec  # the user's environment decides
