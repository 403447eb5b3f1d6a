"""deniable.io's record layer: read_table / iter_batches with the missing= policy, and round trips."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deniable import DataError, InvalidParameterError
from deniable.io import iter_batches, read_table, transform_file

ROWS = [{"text": "a game", "y": "1"}, {"text": None, "y": "2"}, {"text": "rocket", "y": "3"}]


def write(path: Path, fmt: str) -> Path:
    if fmt in ("csv", "csv.gz"):
        opener = gzip.open if fmt.endswith(".gz") else open
        # a BOM, a blank line (not a row) and a short row (no text cell: an absent value)
        with opener(path, "wt", newline="", encoding="utf-8") as fh:  # type: ignore[operator]
            fh.write("\ufeffy,text\r\n1,a game\r\n\r\n2\r\n3,rocket\r\n")
    elif fmt == "jsonl":
        path.write_text("\n".join(json.dumps({k: v for k, v in r.items() if v is not None}) for r in ROWS) + "\n\n")
    else:
        pq.write_table(pa.table({"y": [r["y"] for r in ROWS], "text": [r["text"] for r in ROWS]}), path)
    return path


@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "jsonl", "parquet"])
def test_missing_policies_agree_across_formats(tmp_path: Path, fmt: str) -> None:
    p = write(tmp_path / f"d.{fmt}", fmt)
    assert read_table(p, columns=["text", "y"], missing="empty") == {
        "text": ["a game", None, "rocket"],
        "y": ["1", "2", "3"],
    }
    assert read_table(p, columns=["text", "y"], missing="skip") == {"text": ["a game", "rocket"], "y": ["1", "3"]}
    with pytest.raises(DataError, match=r"(line|row) \d.*no value for column 'text'"):
        read_table(p, columns=["text"])
    assert read_table(p, columns=["y"], limit=2) == {"y": ["1", "2"]}
    assert [b["y"] for b in iter_batches(p, columns=["y"], batch_size=2)] == [["1", "2"], ["3"]]
    with pytest.raises(InvalidParameterError, match="missing"):
        read_table(p, missing="none")
    with pytest.raises(InvalidParameterError) as info:
        read_table(p, columns=["nope"], missing="empty")  # jsonl: known once no record has it
    assert info.value.name == "column" and "--" not in str(info.value)


def test_columns_none_reads_every_column(tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text('{"a": "x", "n": 5, "f": 1.5, "b": true}\n{"a": "y", "n": 6, "f": 2, "b": false}\n')
    assert read_table(p) == {"a": ["x", "y"], "n": ["5", "6"], "f": ["1.5", "2"], "b": ["true", "false"]}
    p.write_text('{"a": [1]}\n')
    with pytest.raises(DataError, match="line 1: column 'a' holds a list"):
        read_table(p)
    t = tmp_path / "d.txt"
    t.write_text("a\r\n\nb")
    assert read_table(t) == {"text": ["a", "", "b"]}
    q = tmp_path / "d.parquet"
    pq.write_table(pa.table({"n": [1, 2], "s": ["a", "b"]}), q)
    assert read_table(q) == {"n": ["1", "2"], "s": ["a", "b"]}
    c = tmp_path / "d.csv"
    c.write_text("a,b\n")
    assert read_table(c) == {"a": [], "b": []}


def test_csv_extra_fields_are_an_error_when_reading(tmp_path: Path) -> None:
    p = tmp_path / "d.csv"
    p.write_text("a,b\n1,2\n3,4,5\n")
    with pytest.raises(DataError, match=r"row 3 \(line 3\) has 3 fields"):
        read_table(p)


# ----------------------------------------------------------------- round trips
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
HYP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@HYP
@given(texts=st.lists(TEXT, min_size=1, max_size=5))
def test_csv_jsonl_parquet_round_trip(tmp_path: Path, texts: list[str]) -> None:
    for fmt in ("csv", "jsonl", "parquet", "csv.gz", "jsonl.gz"):
        src, dst = tmp_path / f"in.{fmt}", tmp_path / f"out.{fmt}"
        if fmt.startswith("csv"):
            opener = gzip.open if fmt.endswith(".gz") else open
            with opener(src, "wt", newline="", encoding="utf-8") as fh:  # type: ignore[operator]
                csv.writer(fh).writerows([["id", "text"], *[[str(i), t] for i, t in enumerate(texts)]])
        elif fmt.startswith("jsonl"):
            body = "".join(
                json.dumps({"text": t, "id": i}, ensure_ascii=i % 2 == 0) + "\n" for i, t in enumerate(texts)
            )
            src.write_bytes(gzip.compress(body.encode(), mtime=0) if fmt.endswith(".gz") else body.encode())
        else:
            pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), src)
        transform_file(src, dst, lambda ts: ts, columns=["text"])
        if fmt == "parquet":
            assert pq.read_table(dst).equals(pq.read_table(src))
        else:
            unzip = gzip.decompress if fmt.endswith(".gz") else bytes
            assert unzip(dst.read_bytes()) == unzip(src.read_bytes()), fmt
        assert read_table(src, columns=["text"])["text"] == texts, fmt


@HYP
@given(lines=st.lists(TEXT.map(lambda t: t.replace("\n", "").replace("\r", "")), min_size=1, max_size=5))
def test_txt_and_tsv_round_trip(tmp_path: Path, lines: list[str]) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    data = "\n".join(lines).encode()
    if not data:
        return
    src.write_bytes(data)
    transform_file(src, dst, lambda ts: ts)
    assert dst.read_bytes() == data
    cells = [line.replace("\t", " ") for line in lines]
    tsv, tsv_out = tmp_path / "in.tsv", tmp_path / "out.tsv"
    tsv.write_bytes(("id\ttext\n" + "".join(f"{i}\t{c}\n" for i, c in enumerate(cells))).encode())
    transform_file(tsv, tsv_out, lambda ts: ts, columns=["text"])
    assert tsv_out.read_bytes() == tsv.read_bytes()
    assert read_table(tsv, columns=["text"])["text"] == cells
