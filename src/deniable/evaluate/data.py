"""Labelled text for evaluation: generic file / Hugging Face loaders and recipes for the shared data sets.

A :class:`TaskData` holds a train and a test :class:`Split` (texts + integer labels
+ class names), or, for answer ranking, :class:`QAPairs`. Files are read from the
path the user gives; nothing is downloaded. Error messages name files, rows and
columns, never the text.

Recipes (``load_task(name, folder)``; ``folder`` is the data set's folder or its
parent, e.g. ``../shared/data``):

=============  =====================================================================
imdb           ``imdb/{train,test}.jsonl.gz``, ``text`` / ``label`` (0 neg, 1 pos); ``<br />``
               tags become spaces
sst2 / sst5    ``sst/stsa.{binary,fine}.{train,test}``: ``"<label> <sentence>"`` lines
20newsgroups   ``20newsgroups/20news-19997.jsonl.gz``, 20 groups; headers are stripped
               (they name the group) and a stratified 50/50 split is drawn with seed 0
enron          ``enron_spam/enron_spam.jsonl.gz``: ham e-mails labelled by mailbox
               (6 classes, as in seed 003); stratified 80/20 split, seed 0
enron_spam     the same file, ham vs spam; stratified 80/20 split, seed 0
cfpb           ``cfpb/{train,test}.csv.gz``: narrative -> product (8 classes)
insuranceqa    ``insuranceqa/{validation,test}.csv.gz``: (question, answer, label)
               pairs; validation is the training side (train.csv is absent)
=============  =====================================================================
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import DataError, DeniableError, InvalidParameterError
from ..io import detect_format

__all__ = [
    "RECIPES",
    "QAPairs",
    "Split",
    "TaskData",
    "load_hf",
    "load_labelled",
    "load_task",
    "split_stratified",
]

#: recipe name -> (folder name, kind)
RECIPES: dict[str, tuple[str, str]] = {
    "imdb": ("imdb", "classification"),
    "sst2": ("sst", "classification"),
    "sst5": ("sst", "classification"),
    "20newsgroups": ("20newsgroups", "classification"),
    "enron": ("enron_spam", "classification"),
    "enron_spam": ("enron_spam", "classification"),
    "cfpb": ("cfpb", "classification"),
    "insuranceqa": ("insuranceqa", "ranking"),
}


@dataclass(frozen=True)
class Split:
    """Texts with integer labels (indices into ``classes``)."""

    texts: list[str]
    labels: npt.NDArray[np.int64]
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.labels):
            raise DataError(f"{len(self.texts)} texts but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, idx: npt.ArrayLike) -> Split:
        """The rows ``idx`` (an index array), same classes."""
        ii = np.asarray(idx, dtype=np.int64)
        return Split([self.texts[i] for i in ii.tolist()], self.labels[ii], self.classes)

    def with_texts(self, texts: Sequence[str]) -> Split:
        """The same labels with other (e.g. privatized) texts."""
        return Split(list(texts), self.labels, self.classes)


@dataclass(frozen=True)
class QAPairs:
    """(question, answer, relevant) pairs for answer ranking."""

    questions: list[str]
    answers: list[str]
    relevant: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return len(self.questions)


@dataclass(frozen=True)
class TaskData:
    """A named task: ``kind`` is ``"classification"`` (train/test are Splits) or ``"ranking"`` (QAPairs)."""

    name: str
    kind: str
    train: Any
    test: Any

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(self.train.classes) if self.kind == "classification" else ("irrelevant", "relevant")

    def describe(self) -> str:
        return f"{self.name} ({self.kind}): {len(self.train):,} train / {len(self.test):,} test rows"


# --------------------------------------------------------------------------- readers
def _open_text(path: Path) -> io.TextIOBase:
    if not path.is_file():
        raise DataError(f"data file {path} does not exist or is not a file")
    raw = gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="strict", newline="")


def _records(path: Path, fmt: str, columns: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Yield dicts holding ``columns`` from a CSV/TSV/JSONL/Parquet file."""
    if fmt in ("csv", "tsv"):
        with _open_text(path) as fh:
            reader = csv.DictReader(fh, delimiter="\t" if fmt == "tsv" else ",")
            try:
                header = reader.fieldnames or []
                for c in columns:
                    if c not in header:
                        raise InvalidParameterError(
                            "column", c, "a column of the file: " + ", ".join(repr(h) for h in header)
                        )
                yield from reader
            except (csv.Error, UnicodeDecodeError) as exc:
                raise DataError(f"{path}: unreadable CSV near row {reader.line_num} ({type(exc).__name__})") from None
    elif fmt == "jsonl":
        with _open_text(path) as fh:
            try:
                for lineno, line in enumerate(fh, start=1):
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError:
                        raise DataError(f"{path}: line {lineno} is not valid JSON") from None
                    if not isinstance(obj, dict):
                        raise DataError(f"{path}: line {lineno} is not a JSON object")
                    for c in columns:
                        if c not in obj:
                            raise InvalidParameterError(
                                "column", c, f"a key of every record (missing on line {lineno})"
                            )
                    yield obj
            except UnicodeDecodeError:
                raise DataError(f"{path} is not valid UTF-8") from None
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not path.is_file():
            raise DataError(f"data file {path} does not exist or is not a file")
        try:
            table = pq.read_table(str(path))
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"{path} is not a readable Parquet file ({type(exc).__name__})") from None
        for c in columns:
            if c not in table.column_names:
                raise InvalidParameterError("column", c, "a column of the file: " + ", ".join(table.column_names))
        yield from table.select(list(columns)).to_pylist()
    else:
        raise InvalidParameterError("format", fmt, "csv, tsv, jsonl or parquet (plain text has no labels)")


def _encode_labels(raw: Sequence[Any], classes: Sequence[str] | None = None) -> tuple[np.ndarray, tuple[str, ...]]:
    names = [str(v) for v in raw]
    if classes is None:
        uniq = sorted(
            set(names), key=lambda s: (not s.lstrip("-").isdigit(), int(s) if s.lstrip("-").isdigit() else 0, s)
        )
        classes = tuple(uniq)
    lookup = {c: i for i, c in enumerate(classes)}
    unknown = [n for n in names if n not in lookup]
    if unknown:
        raise DataError(f"{len(unknown)} label(s) not among the training classes ({len(classes)} classes)")
    return np.fromiter((lookup[n] for n in names), dtype=np.int64, count=len(names)), tuple(classes)


def load_labelled(
    path: str | Path,
    *,
    text_column: str = "text",
    label_column: str = "label",
    format: str | None = None,
    classes: Sequence[str] | None = None,
) -> Split:
    """Read a labelled CSV / TSV / JSONL (``.gz`` too) / Parquet file.

    Rows whose text or label is missing (null / empty label) are skipped. Labels are
    read as strings and mapped to ``classes`` (default: the sorted distinct labels,
    numbers in numeric order).
    """
    p = Path(path)
    fmt = detect_format(p, format)
    texts: list[str] = []
    labels: list[Any] = []
    for row in _records(p, fmt, [text_column, label_column]):
        t, y = row.get(text_column), row.get(label_column)
        if t is None or y is None or (isinstance(y, str) and not y.strip()):
            continue
        if not isinstance(t, str):
            raise DataError(f"{p}: column {text_column!r} holds {type(t).__name__} values, not text")
        texts.append(t)
        labels.append(y)
    if not texts:
        raise DataError(f"{p} has no rows with both {text_column!r} and {label_column!r}")
    y, cls = _encode_labels(labels, classes)
    return Split(texts, y, cls)


def load_hf(
    name: str,
    *,
    split: str,
    text_column: str = "text",
    label_column: str = "label",
    classes: Sequence[str] | None = None,
) -> Split:
    """A split of a Hugging Face ``datasets`` data set that is available locally (cache or folder).

    The optional ``datasets`` library is not a dependency of deniable; this raises a
    clear error when it is missing. Nothing is downloaded (offline mode is forced).
    """
    import os

    try:
        import datasets
    except ImportError:
        raise DeniableError(
            "loading a Hugging Face data set needs the 'datasets' library, which is not installed "
            "(pip install datasets); or export the data to CSV/JSONL/Parquet and pass the file"
        ) from None
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as exc:  # pragma: no cover - depends on the local cache
        raise DataError(
            f"Hugging Face data set {name!r} split {split!r} is not available locally ({type(exc).__name__})"
        ) from None
    for c in (text_column, label_column):
        if c not in ds.column_names:
            raise InvalidParameterError("column", c, "a column of the data set: " + ", ".join(ds.column_names))
    texts = [str(t) for t in ds[text_column]]
    y, cls = _encode_labels(list(ds[label_column]), classes)
    return Split(texts, y, cls)


def split_stratified(data: Split, test_fraction: float, seed: int = 0) -> tuple[Split, Split]:
    """A stratified random split (fixed ``seed``: a data split, not a privacy draw)."""
    rng = np.random.default_rng(seed)
    test_idx: list[np.ndarray] = []
    train_idx: list[np.ndarray] = []
    for c in range(len(data.classes)):
        idx = np.flatnonzero(data.labels == c)
        rng.shuffle(idx)
        k = round(len(idx) * test_fraction)
        test_idx.append(idx[:k])
        train_idx.append(idx[k:])
    tr = np.sort(np.concatenate(train_idx))
    te = np.sort(np.concatenate(test_idx))
    return data.take(tr), data.take(te)


# --------------------------------------------------------------------------- recipes
def _folder(root: str | Path, name: str) -> Path:
    base = Path(root)
    sub = RECIPES[name][0]
    if (base / sub).is_dir():
        return base / sub
    if base.is_dir():
        return base
    raise DataError(f"data folder {base} does not exist")


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    yield from _records(path, "jsonl", [])


def _sst(folder: Path, fine: bool) -> TaskData:
    stem = "stsa.fine" if fine else "stsa.binary"
    out = []
    for part in ("train", "test"):
        path = folder / f"{stem}.{part}"
        texts: list[str] = []
        labels: list[str] = []
        with _open_text(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                line = line.strip()
                if not line:
                    continue
                lab, _, sent = line.partition(" ")
                if not lab.isdigit():
                    raise DataError(f"{path}: line {lineno} does not start with a label")
                texts.append(sent)
                labels.append(lab)
        out.append((texts, labels))
    classes = tuple(str(i) for i in range(5 if fine else 2))
    tr = Split(out[0][0], _encode_labels(out[0][1], classes)[0], classes)
    te = Split(out[1][0], _encode_labels(out[1][1], classes)[0], classes)
    return TaskData("sst5" if fine else "sst2", "classification", tr, te)


_HEADER_END = re.compile(r"\r?\n\r?\n")


def _strip_headers(message: str) -> str:
    """The body of a news message (everything after the first blank line)."""
    m = _HEADER_END.search(message)
    return message[m.end() :] if m else message


def load_task(name: str, folder: str | Path) -> TaskData:
    """Load a built-in recipe from its folder (see the module docstring for the formats)."""
    if name not in RECIPES:
        raise InvalidParameterError("task", name, "one of " + ", ".join(RECIPES))
    d = _folder(folder, name)
    if name == "imdb":
        parts = []
        for part in ("train", "test"):
            s = load_labelled(d / f"{part}.jsonl.gz", classes=("0", "1"))
            parts.append(Split([t.replace("<br />", " ") for t in s.texts], s.labels, ("neg", "pos")))
        return TaskData(name, "classification", parts[0], parts[1])
    if name in ("sst2", "sst5"):
        return _sst(d, fine=name == "sst5")
    if name == "cfpb":
        tr = load_labelled(d / "train.csv.gz", text_column="Consumer complaint narrative", label_column="Product")
        te = load_labelled(
            d / "test.csv.gz", text_column="Consumer complaint narrative", label_column="Product", classes=tr.classes
        )
        return TaskData(name, "classification", tr, te)
    if name == "20newsgroups":
        texts: list[str] = []
        labels: list[Any] = []
        for row in _jsonl_rows(d / "20news-19997.jsonl.gz"):
            texts.append(_strip_headers(str(row["text"])))
            labels.append(row["label"])
        y, names = _encode_labels(labels)
        tr, te = split_stratified(Split(texts, y, names), 0.5, seed=0)
        return TaskData(name, "classification", tr, te)
    if name in ("enron", "enron_spam"):
        texts = []
        labels = []
        for row in _jsonl_rows(d / "enron_spam.jsonl.gz"):
            if name == "enron":
                if row.get("label") != "ham" or not row.get("user"):
                    continue
                labels.append(row["user"])
            else:
                labels.append(row["label"])
            texts.append(str(row["text"]))
        y, names = _encode_labels(labels)
        tr, te = split_stratified(Split(texts, y, names), 0.2, seed=0)
        return TaskData(name, "classification", tr, te)
    # insuranceqa
    qa = []
    for part in ("validation", "test"):
        path = d / f"{part}.csv.gz"
        qs, ans, rel = [], [], []
        for row in _records(path, "csv", ["question", "answer", "label"]):
            qs.append(row["question"])
            ans.append(row["answer"])
            rel.append(str(row["label"]).strip() == "1")
        qa.append(QAPairs(qs, ans, np.array(rel, dtype=bool)))
    return TaskData(name, "ranking", qa[0], qa[1])
