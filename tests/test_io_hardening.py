"""Files and inputs (issue 13): killed runs, file modes, broken gzip, ragged rows, encodings, huge records.

Each behaviour here was wrong before: a killed run left its ``.partial`` file, outputs
were 0600, a truncated ``.gz`` crashed, and ragged rows, NUL bytes, UTF-16/Latin-1
input, unknown output suffixes and unbounded records were accepted silently.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deniable import DataError, InvalidParameterError
from deniable.io import MAX_RECORD_CHARS, transform_file
from test_cli_privatize import SECRET, base, run


def ident(texts: list[str]) -> list[str]:
    return texts


def no_partials(folder: Path) -> bool:
    return [p for p in folder.iterdir() if p.name.endswith(".partial")] == []


# ------------------------------------------------------------ killed runs
def _dead_pid() -> int:
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except OSError:
            pass
        pid += 1


def test_stale_partial_files_of_the_same_output_are_removed(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("the game\n", encoding="utf-8")
    old_style = tmp_path / ".out.txt.k2j4h5g6.partial"  # what a killed older version leaves
    dead = tmp_path / f".out.txt.{_dead_pid()}-abcdefgh.partial"
    live = tmp_path / f".out.txt.{os.getppid()}-abcdefgh.partial"  # a run writing right now
    other = tmp_path / ".out.txt.gz.k2j4h5g6.partial"  # another output's temporary
    for p in (old_style, dead, live, other):
        p.write_bytes(b"partial")
    transform_file(src, dst, ident)
    assert dst.read_bytes() == b"the game\n"
    assert not old_style.exists() and not dead.exists()
    assert live.exists() and other.exists()


_KILLED = """
import signal, sys, time
from pathlib import Path
from deniable.io import transform_file

# a shell's background job starts with SIGINT ignored, and Python keeps that; the test is
# about what a run does when interrupted, so give the child the interactive default
signal.signal(signal.SIGINT, signal.default_int_handler)

def slow(texts):
    Path(sys.argv[3]).write_text("started")
    time.sleep(60)
    return texts

transform_file(sys.argv[1], sys.argv[2], slow, batch_size=1)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_killed_run_removes_its_partial_file(tmp_path: Path, sig: int) -> None:
    src, dst, marker = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "started"
    src.write_text("the game\n" * 5, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(src), str(dst), str(marker)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert not no_partials(tmp_path)  # the temporary exists while the run is going
        proc.send_signal(sig)
        assert proc.wait(timeout=30) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not dst.exists()
    assert no_partials(tmp_path)


# ------------------------------------------------------------------- modes
def test_output_has_the_mode_of_a_normal_write(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("the game\n", encoding="utf-8")
    old = os.umask(0o022)
    try:
        transform_file(src, tmp_path / "new.txt", ident)
        existing = tmp_path / "old.txt"
        existing.write_text("x")
        os.chmod(existing, 0o640)
        transform_file(src, existing, ident)
    finally:
        os.umask(old)
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o644
    assert existing.stat().st_mode & 0o777 == 0o640


def test_cache_artefacts_have_the_mode_of_a_normal_write(tmp_path: Path) -> None:
    from deniable._cache import atomic_path

    old = os.umask(0o022)
    try:
        atomic_path(tmp_path / "a.bin", lambda p: p.write_bytes(b"x"))
    finally:
        os.umask(old)
    assert (tmp_path / "a.bin").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]


# -------------------------------------------------------------------- gzip
@pytest.mark.parametrize("fmt", ["txt", "csv", "jsonl"])
def test_truncated_gzip_is_a_data_error_naming_file_and_offset(tmp_path: Path, fmt: str) -> None:
    src, dst = tmp_path / f"in.{fmt}.gz", tmp_path / f"out.{fmt}.gz"
    line = {"txt": "the game\n", "csv": "a game\n", "jsonl": json.dumps({"text": "the game"}) + "\n"}[fmt]
    head = "text\n" if fmt == "csv" else ""
    data = gzip.compress((head + line * 20_000).encode(), mtime=0)
    src.write_bytes(data[: len(data) // 2])
    cols = None if fmt == "txt" else ["text"]
    with pytest.raises(DataError, match=r"truncated or not valid gzip.*at byte \d+") as info:
        transform_file(src, dst, ident, columns=cols)
    assert str(src) in str(info.value)
    assert not dst.exists() and no_partials(tmp_path)


def test_truncated_gzip_exits_3_from_the_cli(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, dst = tmp_path / "in.txt.gz", tmp_path / "out.txt.gz"
    data = gzip.compress(f"{SECRET} game\n".encode() * 5000, mtime=0)
    src.write_bytes(data[:-30])
    rc, out, err = run(["privatize", str(src), "-o", str(dst), *base(emb_dir)], capsys)
    assert rc == 3, err
    assert "truncated" in err and SECRET not in err + out
    assert not dst.exists() and no_partials(tmp_path)


# ------------------------------------------------------------------- rows
def test_csv_row_with_extra_fields_is_a_data_error(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text(f"id,text\n1,game\n2,{SECRET},{SECRET}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"row 3 \(line 3\) has 3 fields but the header has 2") as info:
        transform_file(src, dst, ident, columns=["text"])
    assert SECRET not in str(info.value) and not dst.exists()


def test_csv_row_without_the_text_column_is_a_data_error(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.tsv", tmp_path / "out.tsv"
    src.write_text(f"text\tid\n{SECRET}\t1\n\n{SECRET}\n", encoding="utf-8")  # the blank line is kept as is
    with pytest.raises(DataError, match=r"row 4 .*1 fields but the header has 2") as info:
        transform_file(src, dst, ident, columns=["id"])
    assert SECRET not in str(info.value) and not dst.exists()


def test_csv_blank_lines_are_still_kept(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_bytes(b"id,text\r\n1,game\r\n\r\n2,rocket\r\n")
    transform_file(src, dst, ident, columns=["text"])
    assert dst.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("name", ["out.xlsx", "out.docx.gz", "out.csv"])
def test_output_name_of_another_format_is_refused(tmp_path: Path, name: str) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / name
    src.write_text("the game\n", encoding="utf-8")
    with pytest.raises(InvalidParameterError, match="output"):
        transform_file(src, dst, ident)
    assert not dst.exists() and no_partials(tmp_path)
    transform_file(src, tmp_path / "plain", ident)  # no suffix: no claim, accepted
    assert (tmp_path / "plain").read_bytes() == b"the game\n"


def test_xlsx_output_exits_2_from_the_cli(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.xlsx"
    src.write_text(f"{SECRET} game\n", encoding="utf-8")
    rc, out, err = run(["privatize", str(src), "-o", str(dst), *base(emb_dir)], capsys)
    assert rc == 2 and ".xlsx" in err and SECRET not in err + out
    assert not dst.exists()


# --------------------------------------------------------------- encodings
@pytest.mark.parametrize("fmt", ["txt", "csv", "jsonl"])
def test_nul_byte_is_a_data_error(tmp_path: Path, fmt: str) -> None:
    src, dst = tmp_path / f"in.{fmt}", tmp_path / f"out.{fmt}"
    body = {"txt": b"ok\nga\x00me\n", "csv": b"text\nok\nga\x00me\n", "jsonl": b'{"text": "ok"}\n{"text": "a\x00"}\n'}
    src.write_bytes(body[fmt])
    with pytest.raises(DataError, match=r"line [23] holds a NUL byte"):
        transform_file(src, dst, ident, columns=None if fmt == "txt" else ["text"])
    assert not dst.exists()


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_input_is_named(tmp_path: Path, encoding: str) -> None:
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    data = f"text\n{SECRET}\n".encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    src.write_bytes(data)
    kind = "UTF-32" if encoding == "utf-32" else "UTF-16"
    with pytest.raises(DataError, match=f"looks like {kind}") as info:
        transform_file(src, dst, ident, columns=["text"])
    assert SECRET not in str(info.value)


def test_utf16_without_bom_and_latin1_are_named(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_bytes("game\ncafé\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"line 2 is not valid UTF-8 .*Latin-1"):
        transform_file(src, dst, ident)
    src.write_bytes("caf\u00e9 \u4e2d\n".encode("utf-16-le"))
    with pytest.raises(DataError, match="UTF-16"):
        transform_file(src, dst, ident)


# ------------------------------------------------------------------ memory
def test_record_over_the_limit_is_refused_by_default(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.txt", tmp_path / "out.txt"
    with open(src, "w", encoding="utf-8") as fh:
        fh.write("the game\n")
        fh.write("game " * (MAX_RECORD_CHARS // 5 + 1))
        fh.write("\n")
    calls: list[int] = []

    def fn(texts: list[str]) -> list[str]:
        calls.append(max(len(t) for t in texts))
        return texts

    with pytest.raises(DataError, match=r"line 2 is longer than max_record_chars="):
        transform_file(src, dst, fn, batch_size=1)
    assert calls == [8]  # the long line never reached the transform (the first: its text, without "\n")
    assert not dst.exists() and no_partials(tmp_path)


@pytest.mark.parametrize("fmt", ["txt", "csv", "tsv", "jsonl", "parquet"])
def test_max_record_chars_names_the_record(tmp_path: Path, fmt: str) -> None:
    src, dst = tmp_path / f"in.{fmt}", tmp_path / f"out.{fmt}"
    long = "a game, " * 20  # 160 characters
    texts = ["the game", long, "rocket"]
    if fmt == "txt":
        src.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    elif fmt == "csv":
        with open(src, "w", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerows([["text"], *[[t.replace(", ", ",\n")] for t in texts]])
    elif fmt == "tsv":
        src.write_text("text\n" + "".join(t + "\n" for t in texts), encoding="utf-8")
    elif fmt == "jsonl":
        src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    else:
        pq.write_table(pa.table({"text": texts}), src)
    cols = None if fmt == "txt" else ["text"]
    with pytest.raises(DataError, match="longer than max_record_chars=100") as info:
        transform_file(src, dst, ident, columns=cols, max_record_chars=100)
    where = {"txt": "line 2", "tsv": "line 3", "jsonl": "line 2", "parquet": "row 2", "csv": "line"}[fmt]
    assert where in str(info.value)
    assert not dst.exists()
    transform_file(src, dst, ident, columns=cols, max_record_chars=1000)
    with pytest.raises(InvalidParameterError, match="max_record_chars"):
        transform_file(src, dst, ident, columns=cols, max_record_chars=0)


def test_cli_errors_name_parameters_as_flags_library_does_not(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text("text\nthe game\n", encoding="utf-8")
    with pytest.raises(InvalidParameterError) as info:
        transform_file(src, tmp_path / "o.csv", ident, columns=["body"])
    assert info.value.name == "column" and "--" not in str(info.value)


def test_folder_or_nameless_input_says_what_is_wrong(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder is a data error (exit 3) naming it; a name with no known suffix asks for --format (exit 2)."""
    folder, nameless, dst = tmp_path / "notes", tmp_path / "notes2", tmp_path / "out.txt"
    folder.mkdir()
    nameless.write_text(f"{SECRET} game\n", encoding="utf-8")
    rc, out, err = run(["privatize", str(folder), "-o", str(dst), *base(emb_dir)], capsys)
    assert rc == 3 and "is a folder, not a file" in err and "Traceback" not in err
    rc, out, err = run(["privatize", str(nameless), "-o", str(dst), *base(emb_dir)], capsys)
    assert rc == 2 and "--format is needed" in err and "None" not in err and SECRET not in err + out
    assert not dst.exists() and no_partials(tmp_path)
    with pytest.raises(DataError, match="is a folder"):
        transform_file(folder, dst, ident)
