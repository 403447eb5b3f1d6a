"""File formats: their names, the file-name suffixes that select them, and ``-`` (standard streams)."""

from __future__ import annotations

import os
from pathlib import Path

from .._errors import DataError, InvalidParameterError

FORMATS = ("txt", "csv", "tsv", "jsonl", "parquet")

SUFFIXES = {
    ".txt": "txt",
    ".text": "txt",
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}


def is_std(path: str | Path) -> bool:
    """``-``: standard input or output."""
    return str(path) == "-"


def is_gz(path: str | Path) -> bool:
    return str(path).lower().endswith(".gz")


def suffix_format(path: str | Path) -> tuple[str, str | None]:
    """``(suffix, format)`` of a file name (``.gz`` removed); format ``None`` when the suffix is unknown."""
    name = Path(path).name.lower().removesuffix(".gz")
    suffix = Path(name).suffix
    return suffix, SUFFIXES.get(suffix)


def detect_format(path: str | Path, format: str | None = None) -> str:
    """The format named by ``format`` or guessed from the file name (``-`` means txt)."""
    if format is not None:
        if format not in FORMATS:
            raise InvalidParameterError("format", format, "one of " + ", ".join(FORMATS))
        return format
    if is_std(path):
        return "txt"
    _, fmt = suffix_format(path)
    if fmt is not None:
        return fmt
    if Path(path).is_dir():
        raise DataError(f"input {path} is a folder, not a file")
    raise InvalidParameterError(
        "format", None, f"could not guess it from the name {Path(path).name!r}; pass one of " + ", ".join(FORMATS)
    )


def check_output_name(dst: str | Path) -> None:
    """An output is ``-`` or names a file: not empty, ``.``, ``..`` or a name ending in a slash (a parameter error)."""
    text = os.fspath(dst)
    if is_std(text):
        return
    if Path(text).name in ("", ".", "..") or text.endswith(("/", os.sep)):
        raise InvalidParameterError("output", text, "a file name, or - for standard output")


def check_output_format(dst: str | Path, fmt: str, format: str | None) -> None:
    """The output file's name must not claim another format than the one written.

    A name with a known suffix must name ``fmt``; with ``format=None`` a name with an
    unknown suffix (``out.xlsx``) is refused too. A name without a suffix is accepted.
    """
    check_output_name(dst)
    if is_std(dst) or format is not None:
        return
    suffix, out_fmt = suffix_format(dst)
    if out_fmt is None and suffix:
        raise InvalidParameterError(
            "output", str(dst), f"a {fmt} file name (its suffix {suffix!r} is not a supported format)"
        )
    if out_fmt is not None and out_fmt != fmt:
        raise InvalidParameterError("output", str(dst), f"a {fmt} file like the input")
