"""Row j of a release is record j: records without text are kept (as empty documents)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from deniable import DataError, InvalidParameterError
from deniable.bow import load_release
from deniable.bow.records import iter_documents
from deniable.cli import run_app

SECRET = "Zanzibarish"  # a document word that must never appear in messages


def docs(path: Path, **kw: object) -> list[str | None]:
    return [d for batch in iter_documents(path, batch_size=2, **kw) for d in batch]  # type: ignore[arg-type]


def test_jsonl_null_and_missing_text_are_empty_documents(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text(
        "\ufeff"
        + json.dumps({"t": "a rocket"})
        + "\n"
        + json.dumps({"t": None})
        + "\n\n"  # a blank line is not a record
        + json.dumps({"id": 3})
        + "\r\n"
        + json.dumps({"t": SECRET})
        + "\n",
        encoding="utf-8",
    )
    assert docs(p, column="t") == ["a rocket", None, None, SECRET]
    with pytest.raises(InvalidParameterError, match="no record has it"):
        docs(p, column="body")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"t": 5, "x": SECRET}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 1") as err:
        docs(bad, column="t")
    assert SECRET not in str(err.value)


def test_csv_tsv_short_rows_are_empty_documents(tmp_path: Path) -> None:
    p = tmp_path / "d.csv.gz"
    with gzip.open(p, "wt", encoding="utf-8", newline="") as fh:
        fh.write('id,text\r\n1,"a, quoted\nrocket"\r\n2\r\n\r\n3,\r\n4,orbit\r\n')
    assert docs(p, column="text") == ["a, quoted\nrocket", None, "", "orbit"]
    t = tmp_path / "d.tsv"
    t.write_text('id\ttext\n1\t"quoted"\n2\n', encoding="utf-8")
    assert docs(t, column="text") == ['"quoted"', None]
    with pytest.raises(InvalidParameterError, match="header"):
        docs(t, column="body")


def test_parquet_nulls_and_txt_blank_lines_are_kept(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "d.parquet"
    pq.write_table(pa.table({"text": ["a", None, "", "b", None]}), p)
    assert docs(p, column="text") == ["a", None, "", "b", None]
    t = tmp_path / "d.txt"
    t.write_text("a\n\nb\n", encoding="utf-8")
    assert docs(t) == ["a\n", "\n", "b\n"]
    with pytest.raises(InvalidParameterError):
        docs(t, column="text")
    with pytest.raises(InvalidParameterError):
        docs(p)


def test_cli_release_keeps_a_row_for_every_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("rocket\norbit\nhockey\n", encoding="utf-8")
    src = tmp_path / "docs.jsonl"
    records = [{"body": "rocket rocket"}, {"body": None}, {"id": 7}, {"body": f"hockey orbit {SECRET}"}]
    src.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "rel"
    args = ["bow", "privatize", str(src), "-c", "body", "-o", str(out), "-e", "1000", "--strategy", "none"]
    code = run_app([*args, "--vocabulary", str(vocab), "--stop-words", "none", "--seed", "1", "-q"])
    err = capsys.readouterr().err
    assert code == 0, err
    rel = load_release(out)
    assert rel.shape == (4, 3)  # one row per record, the two without text included
    np.testing.assert_array_equal(rel.matrix.toarray(), [[2, 0, 0], [0, 0, 0], [0, 0, 0], [0, 1, 1]])
    code = run_app(["bow", "privatize", str(src), "-o", str(tmp_path / "x"), "-e", "1", "--vocabulary", str(vocab)])
    assert code == 2 and "--column" in capsys.readouterr().err  # a jsonl input needs its text column
    code = run_app(["bow", "privatize", str(src), "-c", "nope", "-o", str(tmp_path / "y"), "-e", "1"])
    assert code == 2 and "--column='nope'" in capsys.readouterr().err  # the subcommand's flag, not "column="
