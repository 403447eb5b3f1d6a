"""The CLI names the cause of an error (never the input's text), --debug shows the traceback,
and long one-time work is announced on stderr (issues 27 and 28)."""

from __future__ import annotations

import errno
import gzip
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deniable._progress import building
from deniable.cli._common import _BuildNotices, _cause, _failing_package
from fake_mechanisms import run_cli as run

SECRET = "zyzzyva-secret"


def _args(src: Path, dst: Path, emb_dir: Path) -> list[str]:
    return ["privatize", str(src), "-o", str(dst), "-e", "5", "--embedding", str(emb_dir), "-q"]


@pytest.mark.parametrize("where", [1, 3])
def test_an_embedding_that_is_not_utf8_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: int
) -> None:
    lines = [b"hockey 1 2", b"soccer 3 4", b"game 5 6"]
    lines[where - 1] = b"caf\xe9 1 2"
    emb = tmp_path / "vectors.txt"
    emb.write_bytes(b"\n".join(lines) + b"\n")
    src = tmp_path / "in.txt"
    src.write_text(f"hockey {SECRET}\n", encoding="utf-8")
    code, _, err = run(_args(src, tmp_path / "o.txt", emb), capsys)
    assert code == 3 and f"line {where}: not valid UTF-8" in err and "internal" not in err


def test_a_damaged_gzip_embedding_is_a_data_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emb = tmp_path / "vectors.txt.gz"
    emb.write_bytes(gzip.compress(b"".join(b"w%d 1 2\n" % i for i in range(500)))[:60])
    src = tmp_path / "in.txt"
    src.write_text("hockey\n", encoding="utf-8")
    code, _, err = run(_args(src, tmp_path / "o.txt", emb), capsys)
    assert code == 3 and "damaged or truncated" in err


def test_output_onto_a_folder_or_under_a_file(
    tmp_path: Path, emb_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.txt"
    src.write_text(f"hockey {SECRET}\n", encoding="utf-8")
    (tmp_path / "folder").mkdir()
    code, _, err = run(_args(src, tmp_path / "folder", emb_dir), capsys)
    assert code == 2 and "is a directory" in err and str(tmp_path / "folder") in err and "internal" not in err
    code, _, err = run(_args(src, src / "o.txt", emb_dir), capsys)
    assert code == 2 and "not a directory" in err and SECRET not in err
    assert list(tmp_path.glob("*.partial")) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["folder", "in.txt"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_output_into_a_read_only_folder(tmp_path: Path, emb_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.txt"
    src.write_text("hockey\n", encoding="utf-8")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, _, err = run(_args(src, ro / "o.txt", emb_dir), capsys)
    finally:
        ro.chmod(0o755)
    assert code == 2 and "permission denied" in err and "writable" in err


def _raiser(exc: BaseException):  # type: ignore[no-untyped-def]
    def fail(*_a: object, **_k: object) -> None:
        raise exc

    return fail


@pytest.mark.parametrize(
    ("exc", "code", "says"),
    [
        (
            PermissionError(errno.EACCES, "Permission denied", "/data/out/o.txt"),
            2,
            "permission denied: /data/out/o.txt",
        ),
        (
            FileNotFoundError(errno.ENOENT, "No such file or directory", "/data/x"),
            2,
            "no such file or directory: /data/x",
        ),
        (OSError(errno.ENOSPC, "No space left on device"), 3, "no space left on device (free some disk space"),
        (OSError(errno.EROFS, "Read-only file system", "/mnt/o.txt"), 2, "read-only file system: /mnt/o.txt"),
        (MemoryError(), 3, "out of memory"),
    ],
)
def test_known_causes_are_named_without_the_message(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    emb_dir: Path,
    capsys: pytest.CaptureFixture[str],
    exc: BaseException,
    code: int,
    says: str,
) -> None:
    import deniable.api

    monkeypatch.setattr(deniable.api, "privatize_file", _raiser(exc))
    src = tmp_path / "in.txt"
    src.write_text("hockey\n", encoding="utf-8")
    got, _, err = run(_args(src, tmp_path / "o.txt", emb_dir), capsys)
    assert got == code and says in err and "internal" not in err and "Traceback" not in err


def test_a_broken_optional_package_is_named_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, emb_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if pyarrow failed to import
    src = tmp_path / "in.parquet"
    src.write_bytes(b"PAR1")
    code, _, err = run([*_args(src, tmp_path / "o.parquet", emb_dir), "-c", "text"], capsys)
    assert code == 3 and "'pyarrow'" in err and "pip install --force-reinstall pyarrow" in err


def test_the_failing_package_is_found_in_the_traceback() -> None:
    # pyarrow built for another numpy: the ImportError has no name, it comes from inside the package
    code = compile(
        "raise ImportError('numpy.core.multiarray failed to import')", "/v/site-packages/pyarrow/lib.py", "exec"
    )
    try:
        exec(code)
    except ImportError as exc:
        assert _failing_package(exc) == "pyarrow"
        message, status = _cause(exc)  # type: ignore[misc]
        assert "numpy.core" not in message and status == 3


@pytest.mark.parametrize("how", ["none", "flag", "flag-after", "env"])
def test_debug_shows_the_traceback_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    emb_dir: Path,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    import deniable.api

    monkeypatch.setattr(deniable.api, "privatize_file", _raiser(RuntimeError(f"bad token {SECRET}")))
    monkeypatch.delenv("DENIABLE_DEBUG", raising=False)
    src = tmp_path / "in.txt"
    src.write_text("hockey\n", encoding="utf-8")
    args = _args(src, tmp_path / "o.txt", emb_dir)
    if how == "flag":
        args = ["--debug", *args]
    elif how == "flag-after":
        args = [*args, "--debug"]
    elif how == "env":
        monkeypatch.setenv("DENIABLE_DEBUG", "1")
    code, _, err = run(args, capsys)
    assert code == 1 and "unexpected internal error (RuntimeError)" in err
    if how == "none":
        assert SECRET not in err and "Traceback" not in err and "--debug" in err
    else:
        assert "Traceback" in err and SECRET in err and "may quote input text" in err


def test_long_builds_are_announced_once_and_their_end_said_short_ones_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logger = logging.getLogger("deniable")
    handler = _BuildNotices(after=0.1)
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with building("deniable: a quick build"):
            pass
        with building("deniable: a long build (once)"):
            with building("deniable: a part of it"):  # nested: the outermost line only
                time.sleep(0.4)
        time.sleep(0.2)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0] == "deniable: a long build (once)" and len(lines) == 2
    assert re.fullmatch(r"deniable: a long build \(once\): done in 0\.[4-9] s", lines[1])


def test_the_cli_announces_a_long_build_off_a_terminal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, emb_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`deniable prepare` piped: the TEM tables' build (made slow here) is one line on stderr."""
    from deniable.mechanisms.tem import _tables

    original = _tables.build_knn_artefact

    def slow(*args: object, **kwargs: object) -> object:
        time.sleep(1.3)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    import deniable.artefacts as prep

    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(prep._KINDS, _tables.KNN_KIND, slow)
    code, _, err = run(["prepare", "--embedding", str(emb_dir), "-q"], capsys)
    said = " ".join(err.split())
    assert code == 0 and "building the k-NN tables TEM samples from" in said and re.search(r": done in \d+\.\d s", said)
    code, _, err = run(["prepare", "--embedding", str(emb_dir), "-q"], capsys)  # prepared: nothing to say
    assert code == 0 and err == ""


# -- issue 40: deep JSON, closed standard streams, -o "", a closed pipe ---------------------------
_CLI = [sys.executable, "-c", "from deniable.cli import main; main()"]


@pytest.mark.parametrize("depth", [sys.getrecursionlimit() - 40, sys.getrecursionlimit(), 100_000])
def test_deeply_nested_jsonl_is_a_data_error_naming_the_line(
    tmp_path: Path, emb_dir: Path, capsys: pytest.CaptureFixture[str], depth: int
) -> None:
    """Before: 100,000 nested arrays were exit 1 (RecursionError). Near the parser's limit either way is clean."""
    from deniable import DataError
    from deniable.io import read_table

    src, dst = tmp_path / "in.jsonl", tmp_path / "o.jsonl"
    deep = "[" * depth + "]" * depth
    src.write_text(f'{{"text": "hockey {SECRET}"}}\n{{"text": "nasa", "x": {deep}}}\n', encoding="utf-8")
    code, out, err = run([*_args(src, dst, emb_dir), "-c", "text"], capsys)
    assert code in (0, 3) and "Traceback" not in err and "internal" not in err and SECRET not in err + out
    if depth == 100_000:
        assert code == 3 and "line 2: arrays or objects nested too deeply" in err
        with pytest.raises(DataError, match="line 2: arrays or objects nested too deeply"):
            read_table(src, columns=["text"])
    if code:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


@pytest.mark.parametrize("output", ["", ".", "..", "sub/"])
def test_an_output_that_names_no_file_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, emb_dir: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    """Before: -o "" was 'device or resource busy: .' after loading everything."""
    (tmp_path / "sub").mkdir()
    src = tmp_path / "in.txt"
    src.write_text("hockey\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["privatize", "in.txt", "-o", output, "-e", "5", "--embedding", str(emb_dir), "-q"], capsys)
    assert code == 2 and f"--output={output!r} is not valid: a file name, or - for standard output" in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["in.txt", "sub"]


@pytest.mark.parametrize("stream", ["stdin", "stdout"])
def test_a_closed_standard_stream_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, emb_dir: Path, capsys: pytest.CaptureFixture[str], stream: str
) -> None:
    """Before: `deniable privatize - -o out.txt <&-` was exit 1 (AttributeError). Python sets a closed one to None."""
    src, dst = tmp_path / "in.txt", tmp_path / "o.txt"
    src.write_text("hockey\n", encoding="utf-8")
    monkeypatch.setattr(sys, stream, None)
    args = ["-", "-o", str(dst)] if stream == "stdin" else [str(src), "-o", "-"]
    code, _, err = run(["privatize", *args, "-e", "5", "--embedding", str(emb_dir), "-q"], capsys)
    flag = "INPUT" if stream == "stdin" else "--output"
    assert code == 2 and f"{flag}='-' is not valid" in err and f"standard {stream[3:]}put open (it is closed)" in err
    assert not dst.exists()


def test_a_closed_stdin_in_a_real_process(tmp_path: Path, emb_dir: Path) -> None:
    dst = tmp_path / "o.txt"
    args = ["privatize", "-", "-o", str(dst), "-e", "8", "--embedding", str(emb_dir), "-q"]
    proc = subprocess.run(["sh", "-c", 'exec "$@" <&-', "sh", *_CLI, *args], capture_output=True, timeout=300)
    assert proc.returncode == 2 and b"standard input open (it is closed)" in proc.stderr, proc.stderr
    assert not dst.exists()


def test_a_closed_pipe_stops_quietly_with_141(tmp_path: Path, emb_dir: Path) -> None:
    """Before: `deniable privatize big.txt -o - | head -c 10` ended with exit 1 and no message.
    Now: no message and 141 (128 + SIGPIPE), as a Unix tool stopped by a closed pipe."""
    src = tmp_path / "big.txt"
    src.write_text("hockey puck goal the game was great\n" * 40_000, encoding="utf-8")
    args = ["privatize", str(src), "-o", "-", "-e", "8", "--embedding", str(emb_dir), "-q"]
    proc = subprocess.Popen([*_CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    head = proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 141 and len(head) == 10
    assert err == b""  # no traceback, no "Exception ignored" from the flush at exit


def test_a_broken_pipe_in_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, emb_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import deniable.api

    monkeypatch.setattr(deniable.api, "privatize_file", _raiser(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    src = tmp_path / "in.txt"
    src.write_text("hockey\n", encoding="utf-8")
    code, _, err = run(_args(src, tmp_path / "o.txt", emb_dir), capsys)
    assert code == 141 and err == ""
