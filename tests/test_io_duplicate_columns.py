"""A column name that appears twice (issue 40, item 6): `text,text` with `-c text` privatized one
column and released the other verbatim (exit 0); a DataFrame with repeated columns raised a raw
AttributeError. A chosen name that repeats (also as another Unicode form or with spaces around it)
is refused with an error naming the column, exit 3, no output; a repeated name not chosen is kept."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deniable
from deniable import DataError
from deniable.io import read_table
from test_cli_privatize import base, run

SECRET = "zyzzyvasecret"


def _assert_refused(tmp_path: Path, dst: Path, code: int, out: str, err: str, column: str = "text") -> None:
    assert code == 3, err
    assert f"column {column!r} appears" in err and "Traceback" not in err
    assert SECRET not in err and SECRET not in out
    assert not dst.exists() and not list(tmp_path.glob(".*partial"))


@pytest.mark.parametrize(
    "header",
    [
        ["text", "text"],
        ["id", "text", "note", "text"],
        ["text", " text"],  # `text, text`: a reader sees two columns named text
        ["t\u00ebxt", unicodedata.normalize("NFD", "t\u00ebxt")],  # NFC and NFD spellings
    ],
)
@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_a_chosen_column_that_repeats_is_refused(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, header: list[str]
) -> None:
    sep = "," if fmt == "csv" else "\t"
    src, dst = tmp_path / f"in.{fmt}", tmp_path / f"out.{fmt}"
    rows = [sep.join(header), sep.join(f"hockey {SECRET}" for _ in header)]
    src.write_text("\n".join(rows) + "\n", encoding="utf-8")
    code, out, err = run(["privatize", str(src), "-o", str(dst), "-c", header[-1], *base(emb_dir)], capsys)
    _assert_refused(tmp_path, dst, code, out, err, header[-1])
    with pytest.raises(DataError, match="appears 2 times in the header row"):
        read_table(src, columns=[header[-1]])


def test_a_repeated_column_that_is_not_chosen_is_kept(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text("id,id,text\n1,2,hockey puck\n3,4,nasa\n", encoding="utf-8")
    code, _, err = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir, eps="0.001")], capsys)
    assert code == 0, err
    lines = dst.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "id,id,text" and [ln.split(",")[:2] for ln in lines[1:]] == [["1", "2"], ["3", "4"]]
    assert read_table(src, columns=["text"]) == {"text": ["hockey puck", "nasa"]}
    with pytest.raises(DataError, match="column 'id' appears 2 times"):
        read_table(src)  # every column: {column: values} cannot hold both


def test_parquet_with_a_repeated_column(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, dst = tmp_path / "in.parquet", tmp_path / "out.parquet"
    values = [pa.array([f"hockey {SECRET}"]), pa.array([f"puck {SECRET}"]), pa.array(["1"])]
    pq.write_table(pa.Table.from_arrays(values, names=["text", "text", "id"]), src)
    code, out, err = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir)], capsys)
    _assert_refused(tmp_path, dst, code, out, err)
    with pytest.raises(DataError, match="appears 2 times in the Parquet schema"):
        read_table(src)
    assert read_table(src, columns=["id"]) == {"id": ["1"]}
    code, _, err = run(["privatize", str(src), "-o", str(dst), "-c", "id", *base(emb_dir)], capsys)
    assert code == 0, err
    assert pq.ParquetFile(dst).schema_arrow.names == ["text", "text", "id"]


def test_a_dataframe_with_a_repeated_column(emb_dir: Path) -> None:
    df = pd.DataFrame([[f"hockey {SECRET}", f"puck {SECRET}", "nasa"]], columns=["text", "text", "note"])
    with pytest.raises(DataError, match="column 'text' appears 2 times in the DataFrame") as info:
        deniable.privatize(df, epsilon=8, column="text", embedding=str(emb_dir))
    assert SECRET not in str(info.value)
    out = deniable.privatize(df, epsilon=8, column="note", embedding=str(emb_dir))  # not chosen: kept
    assert out.iloc[:, :2].equals(df.iloc[:, :2]) and list(out.columns) == ["text", "text", "note"]


def test_an_engine_batch_with_a_repeated_column(emb_dir: Path) -> None:
    from deniable.integrations import BatchPrivatizer

    batch = BatchPrivatizer(mechanism="madlib", epsilon=5, embedding=str(emb_dir), columns=("text",))
    df = pd.DataFrame([[f"hockey {SECRET}", f"puck {SECRET}"]], columns=["text", "text"])
    with pytest.raises(DataError, match="column 'text' appears 2 times") as info:
        batch.privatize_pandas(df, 0)
    assert SECRET not in str(info.value)
