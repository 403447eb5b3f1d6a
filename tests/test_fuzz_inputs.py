"""Hypothesis-driven fuzzing of the input edges (issue 40): ``deniable privatize`` (in process, through
``run_app``) and ``deniable.privatize`` over random formats, nesting depths, column names (repeated,
empty, unicode, differently normalized), closed and empty standard streams, sizes, NFC/NFD text,
control characters, invalid UTF-8, truncated gzip.

Properties: the exit code is 0, 2 or 3 (the library raises a DeniableError, nothing else); no
traceback; no input text in an error message (every cell holds a marker word that must never be
echoed); no output file (nor temporary) after an error; on success, every record is still there.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import os
import sys
import tempfile
import unicodedata
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import deniable
from deniable import DeniableError, text
from deniable.cli import run_app
from deniable.io import read_table

MARK = "Qzxmarkq"  # in every cell; an error message must never hold it
WORDS = ["hockey", "puck", "nasa", "the", "game", "Rocket", MARK]
NFC_WORDS = ["na\u00efve", "caf\u00e9", "\u00c5ngstr\u00f6m", "se\u00f1or"]
ODD = ["\u00e9", "\ufb01", "\u200b", "\x07", "\x1b[31m", "\u202e", "\U0001f600", "\u0308", "\r", "\n", "\t"]
#: examples per test: 60 in the fast suite (DENIABLE_FUZZ_EXAMPLES=1000 for a longer hunt)
FUZZ = settings(
    max_examples=int(os.environ.get("DENIABLE_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],  # no slow "explain"
)


# --------------------------------------------------------------------------- strategies
def _nfd(word: str) -> str:
    return unicodedata.normalize("NFD", word)


tokens = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(NFC_WORDS),
    st.sampled_from(NFC_WORDS).map(_nfd),
    st.sampled_from(ODD),
    st.text(max_size=6),
)
cells = st.builds(
    lambda parts, seps: MARK + "".join(p + s for p, s in zip(parts, seps, strict=False)),
    st.lists(tokens, max_size=8),
    st.lists(st.sampled_from([" ", ", ", ". ", "  ", "-"]), min_size=8, max_size=8),
)
names = st.one_of(
    st.sampled_from(["text", "text ", " text", "", "id", "t\u00ebxt", _nfd("t\u00ebxt"), "T", "\ufb01le", "file"]),
    st.text(min_size=1, max_size=5),
).filter(lambda n: MARK not in n and "\x00" not in n)  # a NUL in a header is a data error of its own


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[str], list[list[str]], str]:
    """A header (names may repeat), its rows, and the chosen column (one of the names, or not)."""
    header = draw(st.lists(names, min_size=1, max_size=4))
    if draw(st.booleans()):
        header.append(draw(st.sampled_from(header)))  # a repeated name
    rows = draw(
        st.lists(
            st.lists(cells, min_size=len(header), max_size=len(header)),
            min_size=draw(st.sampled_from([0, 1, 1, 1])),
            max_size=12,
        )
    )
    chosen = draw(st.sampled_from(header)) if draw(st.integers(0, 3)) else draw(names)
    return header, rows, chosen


def _txt(rows: list[list[str]]) -> bytes:
    return "".join(r[0].replace("\r", " ").replace("\n", " ") + "\n" for r in rows).encode("utf-8", "surrogatepass")


def _csv(header: list[str], rows: list[list[str]], delimiter: str) -> bytes:
    buf = io.StringIO()
    if delimiter == "\t":
        clean = [[c.replace("\t", " ").replace("\r", " ").replace("\n", " ") for c in r] for r in [header, *rows]]
        buf.write("".join("\t".join(r) + "\n" for r in clean))
    else:
        csv.writer(buf).writerows([header, *rows])
    return buf.getvalue().encode("utf-8", "surrogatepass")


def _jsonl(header: list[str], rows: list[list[str]], depth: int) -> bytes:
    lines = []
    for r in rows:
        body = ", ".join(f"{json.dumps(n)}: {json.dumps(c)}" for n, c in zip(header, r, strict=True))  # repeats kept
        lines.append("{" + body + "}")
    if depth:
        nested = "[" * depth + json.dumps(MARK) + "]" * depth
        lines.insert(
            len(lines) // 2, "{" + f'"deep": {nested}, ' + ", ".join(f"{json.dumps(n)}: null" for n in header) + "}"
        )
    return "".join(ln + "\n" for ln in lines).encode("utf-8", "surrogatepass")


def _parquet(header: list[str], rows: list[list[str]], path: Path) -> None:
    arrays = [pa.array([r[i] for r in rows], type=pa.string()) for i in range(len(header))]
    pq.write_table(pa.Table.from_arrays(arrays, names=header), path)


def _corrupt(data: bytes, how: str, at: int) -> bytes:
    at = at % (len(data) + 1)
    insert = {"utf8": b"\xc3\x28", "latin1": b"caf\xe9", "nul": b"\x00", "bom16": b""}.get(how)
    if how == "bom16":
        return b"\xff\xfe" + data
    if insert is None:
        return data
    return data[:at] + insert + data[at:]


# ------------------------------------------------------------------------------ harness
_EMB: list[str] = [""]  # the embedding folder of this module's runs


@pytest.fixture(scope="module")
def emb(tmp_path_factory: pytest.TempPathFactory) -> str:
    from conftest import make_toy_embedding

    path = tmp_path_factory.mktemp("fuzz-emb") / "toy"
    make_toy_embedding().save(path)
    _EMB[0] = str(path)
    return str(path)


@contextlib.contextmanager
def _streams(stdin: bytes | None) -> Iterator[tuple[io.TextIOWrapper, io.StringIO]]:
    """Standard input (``None``: closed, as Python sets it for ``<&-``), output and error of one run."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.StringIO()
    old_in = sys.stdin
    sys.stdin = None if stdin is None else io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        sys.stdin = old_in


def _cli(args: list[str], stdin: bytes | None = b"") -> tuple[int, bytes, str]:
    with _streams(stdin) as (out, err):
        code = run_app(args)
        out.flush()
    return code, out.buffer.getvalue(), err.getvalue()  # type: ignore[attr-defined]


def _check_clean(code: int, out: bytes, err: str, folder: Path, dst: Path | None) -> None:
    assert code in (0, 2, 3), err
    assert "Traceback" not in err and "internal error" not in err, err
    if code:
        assert MARK not in err, err  # (what was streamed to standard output before the error may hold it)
        assert err.startswith("error: ") or "\nerror: " in err, err
        left = sorted(p.name for p in folder.iterdir() if p.name != "in" and not p.name.startswith("in."))
        assert left == [], (left, err)
        assert dst is None or not dst.exists()


def _look(name: str) -> str:
    """How a reader sees a column name: two names that look the same are one name twice."""
    return unicodedata.normalize("NFKC", name).strip()


def _alike(a: Any, b: Any) -> bool:
    """Two column labels a reader takes for one (``'text'`` and ``'text '``, NFC and NFD)."""
    return a == b or (isinstance(a, str) and isinstance(b, str) and _look(a) == _look(b))


def _records(path: Path, fmt: str, column: str) -> int:
    cols = None if fmt == "txt" else [column]
    table = read_table(path, format=fmt, columns=cols, missing="empty")
    return len(next(iter(table.values())))


# --------------------------------------------------------------------------------- CLI
def _write_input(
    folder: Path,
    fmt: str,
    gz: bool,
    table: tuple[list[str], list[list[str]], str],
    corruption: str,
    at: int,
    depth: int,
) -> Path:
    header, rows, _ = table
    src = folder / (f"in.{fmt}" + (".gz" if gz else ""))
    if fmt == "parquet":
        _parquet(header, rows, src)
        if corruption != "none":  # the only corruption a Parquet file gets here: cut short
            src.write_bytes(src.read_bytes()[: at % max(1, src.stat().st_size)])
        return src
    data = {
        "txt": lambda: _txt(rows),
        "csv": lambda: _csv(header, rows, ","),
        "tsv": lambda: _csv(header, rows, "\t"),
        "jsonl": lambda: _jsonl(header, rows, depth),
    }[fmt]()
    data = _corrupt(data, corruption, at)
    if gz:
        data = gzip.compress(data, mtime=0)
        if corruption == "truncate":
            data = data[: at % max(1, len(data))]
    src.write_bytes(data)
    return src


def _privatize_file(
    folder: Path, src: Path, fmt: str, chosen: str, epsilon: str, flags: list[str], to_stdout: bool
) -> tuple[int, str, Path | None]:
    """Run ``deniable privatize`` on ``src``; check the properties every run has; (exit code, stderr, output)."""
    dst = None if to_stdout else folder / src.name.replace("in.", "out.", 1)
    columns = [] if fmt == "txt" else ["-c", chosen]
    args = ["privatize", str(src), "-o", "-" if dst is None else str(dst), "-e", epsilon, "--embedding", _EMB[0]]
    code, out, err = _cli([*args, "-q", *columns, *flags])
    _check_clean(code, out, err, folder, dst)
    if code == 0 and dst is None:
        dst = folder / f"out.{fmt}"  # standard output is never compressed
        dst.write_bytes(out)
    return code, err, dst


formats = st.sampled_from(["txt", "csv", "tsv", "jsonl", "parquet"])
policies = st.lists(st.sampled_from([["--oov", "drop"], ["--oov", "keep"], ["--case", "lower"]]), max_size=2).map(
    lambda pairs: [f for pair in pairs for f in pair]
)


@FUZZ
@given(
    table=tables(),
    fmt=formats,
    gz=st.booleans(),
    corruption=st.sampled_from(["none", "utf8", "latin1", "nul", "bom16", "truncate"]),
    at=st.integers(0, 10_000),
    depth=st.sampled_from([0, 50, 990, 1000, 5000, 100_000]),
    epsilon=st.sampled_from(["8", "1e9", "0", "nan", "-3", "auto", "1e400"]),
    flags=policies,
    to_stdout=st.booleans(),
)
def test_privatize_cli_on_random_files(
    emb: str,
    table: tuple[list[str], list[list[str]], str],
    fmt: str,
    gz: bool,
    corruption: str,
    at: int,
    depth: int,
    epsilon: str,
    flags: list[str],
    to_stdout: bool,
) -> None:
    """Anything (damaged bytes, deep JSON, bad epsilons, any names): exit 0, 2 or 3, cleanly."""
    header, _, chosen = table
    gz = gz and fmt != "parquet"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        src = _write_input(folder, fmt, gz, table, corruption, at, depth)
        code, err, dst = _privatize_file(folder, src, fmt, chosen, epsilon, flags, to_stdout)
        event(f"exit {code}")
        if fmt in ("csv", "tsv", "parquet") and header.count(chosen) > 1:
            assert code != 0, err  # never half a release
        if code == 0:
            assert dst is not None and _records(dst, fmt, chosen) == _records(src, fmt, chosen)


@FUZZ
@given(
    table=tables(),
    fmt=formats,
    gz=st.booleans(),
    epsilon=st.sampled_from(["8", "0.5", "1e9"]),
    flags=policies,
    batch=st.integers(1, 7),
    to_stdout=st.booleans(),
)
def test_privatize_cli_keeps_every_record(
    emb: str,
    table: tuple[list[str], list[list[str]], str],
    fmt: str,
    gz: bool,
    epsilon: str,
    flags: list[str],
    batch: int,
    to_stdout: bool,
) -> None:
    """Well-formed files of any text (NFC/NFD, control characters, emoji) and any header: every record
    privatized; a chosen column whose name repeats is refused naming it (exit 3), a missing one is exit 2."""
    header, rows, chosen = table
    if fmt == "tsv":  # as _csv writes it: a TSV name holds no tab or line break
        header = [h.replace("\t", " ").replace("\r", " ").replace("\n", " ") for h in header]
    gz = gz and fmt != "parquet"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        src = _write_input(folder, fmt, gz, table, "none", 0, 0)
        code, err, dst = _privatize_file(
            folder, src, fmt, chosen, epsilon, [*flags, "--batch-size", str(batch)], to_stdout
        )
        event(f"exit {code}: " + ("repeated" if header.count(chosen) > 1 else ""))
        if not rows and fmt in ("txt", "parquet"):
            assert code == 3  # an empty file, a Parquet file without rows
        elif fmt != "txt" and (chosen not in header or (fmt in ("csv", "tsv") and header == [""])):
            assert code in (2, 3), err  # (a one-column CSV named "" has a blank header line)
        elif fmt != "txt" and chosen.startswith("-"):
            pass  # `-c -x`: click may read -x as an option
        elif fmt in ("csv", "tsv", "parquet") and [_look(h) for h in header].count(_look(chosen)) > 1:
            assert code == 3 and f"column {chosen!r} appears " in err, err  # also as 'text ' or NFD
        elif code:
            assert code == 3 and fmt != "parquet", err  # no records, a text holding a NUL, an empty TSV value
        else:
            assert dst is not None and _records(dst, fmt, chosen) == _records(src, fmt, chosen)


@settings(FUZZ, max_examples=max(1, FUZZ.max_examples // 2))  # few distinct cases
@given(
    stdin=st.one_of(st.none(), st.just(b""), st.builds(_txt, st.lists(st.lists(cells, min_size=1, max_size=1)))),
    fmt=st.sampled_from([None, "txt", "jsonl", "csv", "parquet"]),
    output=st.sampled_from(["-", "out.txt", "", ".", "sub/", "out.xlsx"]),
)
def test_privatize_cli_on_standard_streams(emb: str, stdin: bytes | None, fmt: str | None, output: str) -> None:
    """Closed (None) or empty standard input, odd output names: a usage or data error, or every line privatized."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        dst = None if output in ("-", "", ".", "sub/") else folder / output
        with contextlib.chdir(folder):
            args = ["privatize", "-", "-o", output, "-e", "8", "--embedding", emb, "-q"]
            code, out, err = _cli([*args, *(["--format", fmt] if fmt else [])], stdin)
        event(f"exit {code}")
        _check_clean(code, out, err, folder, dst)
        if output in ("", ".", "sub/"):
            assert code == 2 and "--output" in err
        if stdin is None:
            assert code == 2, err
        if code == 0:
            assert stdin and (fmt in (None, "txt"))
            written = out if dst is None else dst.read_bytes()
            assert written.count(b"\n") == stdin.count(b"\n")


# ------------------------------------------------------------------------ the library
@st.composite
def frames(draw: st.DrawFn) -> pd.DataFrame:
    """A DataFrame whose labels may repeat (or be ints), cells text or missing."""
    header = draw(st.lists(st.one_of(names, st.integers(0, 3)), min_size=1, max_size=4))
    if draw(st.integers(0, 3)) == 0:
        header.append(draw(st.sampled_from(header)))  # a repeated label
    row = st.lists(st.one_of(cells, st.none(), st.just(float("nan"))), min_size=len(header), max_size=len(header))
    return pd.DataFrame(draw(st.lists(row, max_size=6)), columns=header)


texts_in = st.one_of(
    cells,
    st.lists(st.one_of(cells, st.none()), max_size=8),
    st.lists(st.one_of(cells, st.integers(), st.lists(cells, max_size=2)), max_size=4),
    st.lists(cells, max_size=5).map(pd.Series),
    st.lists(cells, min_size=1, max_size=4).map(lambda v: np.array([v, v])),
    st.dictionaries(names, cells, max_size=2),
    st.binary(max_size=8),
)


def _privatize(texts: Any, column: Any, epsilon: Any, emb: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # WEAK at eps 1e9: not what is tested
        return deniable.privatize(texts, epsilon=epsilon, column=column, embedding=emb)


@FUZZ
@given(
    texts=st.one_of(texts_in, frames()),
    column=st.one_of(st.none(), names, st.integers(0, 3), st.lists(st.one_of(names, st.integers(0, 3)), max_size=3)),
    epsilon=st.sampled_from([8, 1e9, 0, -1, float("nan"), float("inf"), "auto", "8", True]),
)
def test_privatize_api_refuses_cleanly(emb: str, texts: Any, column: Any, epsilon: Any) -> None:
    """Anything at all: privatized, or a DeniableError that holds no input text."""
    try:
        _privatize(texts, column, epsilon, emb)
    except DeniableError as exc:
        event(f"refused: {type(exc).__name__}")
        assert MARK not in str(exc)
        return
    event(f"privatized: {type(texts).__name__}")


@st.composite
def valid_calls(draw: st.DrawFn) -> tuple[Any, Any]:
    """Texts and a column that fits them (a DataFrame's own labels, which may repeat)."""
    kind = draw(st.sampled_from(["str", "list", "series", "frame"]))
    if kind == "str":
        return draw(cells), None
    if kind == "list":
        return draw(st.lists(st.one_of(cells, st.none()), max_size=8)), None
    if kind == "series":
        return pd.Series(draw(st.lists(st.one_of(cells, st.none()), max_size=8)), dtype=object), None
    df = draw(frames())
    labels = list(df.columns)
    column = draw(st.one_of(st.sampled_from(labels), st.lists(st.sampled_from(labels), min_size=1, max_size=3)))
    return df, column


@FUZZ
@given(call=valid_calls(), epsilon=st.sampled_from([8, 0.5, 1e9]))
def test_privatize_api_keeps_every_record(emb: str, call: tuple[Any, Any], epsilon: float) -> None:
    """Valid calls: the same shape back, missing values still missing; a repeated chosen label is refused."""
    texts, column = call
    chosen = [] if column is None else column if isinstance(column, list) else [column]
    repeated = isinstance(texts, pd.DataFrame) and any(sum(_alike(x, c) for x in texts.columns) > 1 for c in chosen)
    try:
        got = _privatize(texts, column, epsilon, emb)
    except DeniableError as exc:
        assert MARK not in str(exc)
        assert repeated, str(exc)
        assert "appears" in str(exc)
        event("refused: repeated column")
        return
    assert not repeated
    event(f"privatized: {type(texts).__name__}")
    if isinstance(texts, str):
        assert isinstance(got, str)
    elif isinstance(texts, pd.DataFrame):
        assert list(got.columns) == list(texts.columns) and got.index.equals(texts.index)
        assert got.isna().equals(texts.isna())
        others = [i for i, c in enumerate(texts.columns) if c not in chosen]
        assert got.iloc[:, others].equals(texts.iloc[:, others])
    else:
        assert len(got) == len(texts) and [v is None for v in got] == [pd.isna(v) for v in texts]


# ------------------------------------------------------------------- Unicode normalization
letters = st.text(alphabet=st.sampled_from([*"abcnaive", "\u00ef", "\u00e9", "\u00c5", "\u00f1", "\u1e69", " ", ","]))


@FUZZ
@given(s=letters)
def test_a_word_is_one_token_in_nfc_and_nfd(s: str) -> None:
    """``na\u0308ive`` (NFD) is one word, as ``naïve`` (NFC) is: the same tokens in either form."""
    nfc, nfd = unicodedata.normalize("NFC", s), unicodedata.normalize("NFD", s)
    assert [unicodedata.normalize("NFC", w) for w in text.words(nfd)] == text.words(nfc)
