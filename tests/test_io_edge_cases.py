"""Edge cases of ``deniable privatize``'s readers and writers (audit fixes).

Every failure must be a clean error naming the row or line (never the text), exit
non-zero and leave no output file.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from test_cli_privatize import SECRET, base, run  # the CLI helpers of the main CLI tests


def assert_clean_failure(tmp_path: Path, dst: Path, out: str, err: str) -> None:
    assert SECRET not in err and SECRET not in out
    assert "Traceback" not in err
    assert not dst.exists()
    assert list(tmp_path.glob(".*partial")) == []


# ----------------------------------------------------------------- csv / tsv
def test_csv_cell_larger_than_default_field_limit(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = "the hockey game, " * 11_000  # ~187 KB: above csv's default 131,072 limit
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    with open(src, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([["id", "text"], ["1", big], ["2", "nasa"]])
    rc, _, err = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir)], capsys)
    assert rc == 0, err
    assert dst.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "txt"])
def test_utf8_bom_is_stripped_and_written_back(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    body = {
        "csv": "text,id\r\nthe hockey game,1\r\nnasa,2\r\n",
        "tsv": "text\tid\nthe hockey game\t1\n",
        "jsonl": '{"text": "the hockey game", "id": 1}\n',
        "txt": "the hockey game\nnasa\n",
    }[fmt]
    data = b"\xef\xbb\xbf" + body.encode("utf-8")
    src, dst = tmp_path / f"in.{fmt}", tmp_path / f"out.{fmt}"
    src.write_bytes(data)
    cols = [] if fmt == "txt" else ["--column", "text"]
    rc, _, err = run(["privatize", str(src), "-o", str(dst), *cols, *base(emb_dir)], capsys)
    assert rc == 0, err
    assert dst.read_bytes() == data


def test_iter_texts_strips_the_bom(tmp_path: Path) -> None:
    from deniable.io import iter_texts

    src = tmp_path / "in.txt"
    src.write_bytes(b"\xef\xbb\xbfthe game\n")
    assert [t for batch in iter_texts(src) for t in batch] == ["the game\n"]


def test_tsv_round_trips_quotes_byte_for_byte(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = b'id\ttext\tnote\n1\t"quoted" hockey\t5" screen\n2\tsay "hi\t""\n3\t\t"a, b"\n'
    src, dst = tmp_path / "in.tsv", tmp_path / "out.tsv"
    src.write_bytes(data)
    rc, _, err = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir)], capsys)
    assert rc == 0, err
    assert dst.read_bytes() == data


def test_tsv_single_column_emptied_by_oov_drop(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An emptied one-column value would be written as a blank line, which reads back as no record
    (found by tests/test_fuzz_inputs.py): a data error naming the row, no output. CSV can hold it."""
    src, dst = tmp_path / "in.tsv", tmp_path / "out.tsv"
    src.write_bytes(b"text\nzzzz\n\nthe game\n")
    rc, _, err = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir), "--oov", "drop"], capsys)
    assert rc == 3 and "row 2: the output value is empty" in err and "zzzz" not in err
    assert not dst.exists() and not list(tmp_path.glob(".*partial"))
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_bytes(b"text\nzzzz\n\nthe game\n")
    rc, _, err = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir), "--oov", "drop"], capsys)
    assert rc == 0, err
    assert dst.read_bytes() == b'text\n""\n\nthe game\n'  # the blank line (no record) kept as it was


def test_txt_line_emptied_by_oov_drop_keeps_its_line(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line whose every word is dropped stays a (blank) line: before, its line break went with the
    dropped word and two records became one (found by tests/test_fuzz_inputs.py)."""
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_bytes(b"zzzz\r\nthe zzzz\nzzzz")
    rc, _, err = run(["privatize", str(src), "-o", str(dst), *base(emb_dir), "--oov", "drop"], capsys)
    assert rc == 0, err
    assert dst.read_bytes() == b"\r\nthe\n"


def test_tsv_output_that_needs_a_tab_is_a_data_error(tmp_path: Path) -> None:
    from deniable import DataError
    from deniable.io import transform_file

    src, dst = tmp_path / "in.tsv", tmp_path / "out.tsv"
    src.write_bytes(f"id\ttext\n1\t{SECRET}\n2\tok\n".encode())
    with pytest.raises(DataError, match="row 3") as info:
        transform_file(src, dst, lambda ts: [t.replace("ok", "a\tb") for t in ts], columns=["text"])
    assert SECRET not in str(info.value)
    assert not dst.exists() and list(tmp_path.glob(".*partial")) == []


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_duplicate_column_is_privatized_once(tmp_path: Path, fmt: str) -> None:
    from deniable.io import transform_file

    src, dst = tmp_path / f"in.{fmt}", tmp_path / f"out.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.table({"text": ["ab", "cd"], "id": [1, 2]}), src)
    elif fmt == "csv":
        src.write_bytes(b"text,id\nab,1\ncd,2\n")
    else:
        src.write_bytes(b'{"text": "ab"}\n{"text": "cd"}\n')
    seen: list[str] = []

    def fn(texts: list[str]) -> list[str]:
        seen.extend(texts)
        return [t + "!" for t in texts]

    stats = transform_file(src, dst, fn, columns=["text", "id", "text"] if fmt == "csv" else ["text", "text"])
    seen_text = [t for t in seen if t not in ("1", "2")]
    assert seen_text == ["ab", "cd"] and stats.values == len(seen)


# --------------------------------------------------------------------- jsonl
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
def test_jsonl_non_finite_numbers_are_rejected(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(f'{{"text": "{SECRET}", "x": 1}}\n{{"text": "{SECRET}", "x": {value}}}\n', encoding="utf-8")
    rc, out, err = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir)], capsys)
    assert rc == 3, err
    assert "line 2" in err
    assert_clean_failure(tmp_path, dst, out, err)


JSONL_LINES = (
    '{"text":"the game","x":[1,2.5,1e300],"y":{"a":null}}\r\n'
    '  { "id" : 1.0e5 , "name": "caf\\u00e9", "text" : "hockey game",  "n": 0.1000, "z": -0E+2 }\n'
    '{"text": "the game", "note": "x", "text": "hockey"}\n'
    '{"id": 12345678901234567890123, "text": null}\n'
    "\n"
    '{"text": ""}\n'
)


def test_jsonl_other_bytes_unchanged(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only the text values are rewritten: numbers, escapes, spacing, repeated keys stay as they were."""
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(JSONL_LINES, encoding="utf-8")
    rc, _, err = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir)], capsys)
    assert rc == 0, err
    assert dst.read_bytes() == src.read_bytes()  # eps = 1e9: no word changes, so no byte changes


def test_jsonl_rewrites_only_the_text_tokens(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(JSONL_LINES, encoding="utf-8")
    rc, _, err = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir, eps="0.001")], capsys)
    assert rc == 0, err
    out_lines = dst.read_text(encoding="utf-8").splitlines(keepends=True)
    in_lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(out_lines) == len(in_lines)
    for a, b in zip(in_lines, out_lines, strict=True):
        if not a.strip():
            assert a == b
            continue
        before, after = json.loads(a), json.loads(b)
        assert {k: v for k, v in before.items() if k != "text"} == {k: v for k, v in after.items() if k != "text"}
        # put the original text tokens back: the rest of the line must be the input, byte for byte
        restored = b
        for old, new in zip(
            re.findall(r'"text"\s*:\s*("(?:[^"\\]|\\.)*")', a),
            re.findall(r'"text"\s*:\s*("(?:[^"\\]|\\.)*")', b),
            strict=True,
        ):
            restored = restored.replace(new, old, 1)
        assert restored == a


@pytest.mark.parametrize("escape", [r"\ud800", r"\udfff x", r"\ude00\ud83d"])
def test_jsonl_lone_surrogate_is_a_data_error(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], escape: str
) -> None:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"text": SECRET}) + "\n" + '{"text": "' + SECRET + escape + '"}\n', encoding="utf-8")
    rc, out, err = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir)], capsys)
    assert rc == 3, err
    assert "line 2" in err
    assert_clean_failure(tmp_path, dst, out, err)


def test_jsonl_valid_surrogate_pair_and_escaped_backslash_are_fine(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"text": "game \\ud83d\\ude00 \\\\ud800"}\n', encoding="utf-8")
    rc, _, err = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir)], capsys)
    assert rc == 0, err
    assert json.loads(dst.read_text(encoding="utf-8")) == {"text": "game 😀 \\ud800"}


# ------------------------------------------------------------------- parquet
def test_parquet_invalid_utf8_is_a_data_error(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = pa.array([SECRET.encode(), b"ok", SECRET.encode() + b"\xff\xfe"], pa.binary()).view(pa.string())
    src, dst = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": raw}), src)
    rc, out, err = run(
        ["privatize", str(src), "-o", str(dst), "-c", "text", "--batch-size", "2", *base(emb_dir)], capsys
    )
    assert rc == 3, err
    assert "row 3" in err and "UTF-8" in err
    assert_clean_failure(tmp_path, dst, out, err)


# ----------------------------------------------------------------------- cli
def test_unexpected_error_prints_only_its_type(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from deniable.privatizer import Privatizer

    def boom(self: Privatizer, texts: list[str], rng: object = None) -> object:
        raise RuntimeError(f"internal failure on {texts[0]}")

    monkeypatch.setattr(Privatizer, "privatize_batch_with_stats", boom)
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text(f"{SECRET} game\n", encoding="utf-8")
    rc, out, err = run(["privatize", str(src), "-o", str(dst), *base(emb_dir)], capsys)
    assert rc not in (0, 2, 3)
    assert "RuntimeError" in err
    assert_clean_failure(tmp_path, dst, out, err)


def test_error_lines_do_not_wrap(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.csv"
    src.write_text(",".join(f"column_number_{i}" for i in range(12)) + "\nok\n", encoding="utf-8")
    args = ["privatize", str(src), "-o", str(tmp_path / "o.csv"), "-c", "nope", "-e", "1", "-q"]
    rc, _, err = run([*args, "--embedding", str(emb_dir)], capsys)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and len(err.strip()) > 80
