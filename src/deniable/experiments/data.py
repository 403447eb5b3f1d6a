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

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import DataError, DeniableError, InvalidParameterError
from .._validation import check_choice, check_int
from ..io import detect_format, read_table

__all__ = [
    "RECIPES",
    "USER_CORPORA",
    "QAPairs",
    "Split",
    "TaskData",
    "UserCorpus",
    "load_corpus",
    "load_hf",
    "load_labelled",
    "load_task",
    "load_user_corpus",
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
def _read(path: Path, fmt: str, columns: Sequence[str], missing: str = "skip") -> dict[str, list[str | None]]:
    """``columns`` of a CSV/TSV/JSONL/Parquet file (through :mod:`deniable.io`)."""
    if fmt == "txt":
        raise InvalidParameterError("format", fmt, "csv, tsv, jsonl or parquet (plain text has no labels)")
    if not path.is_file():
        raise DataError(f"data file {path} does not exist or is not a file")
    return read_table(path, format=fmt, columns=list(columns), missing=missing)


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
    table = _read(p, fmt, [text_column, label_column])  # rows without text or label are skipped
    texts: list[str] = []
    labels: list[str] = []
    for t, lab in zip(table[text_column], table[label_column], strict=True):
        assert t is not None and lab is not None
        if not lab.strip():
            continue
        texts.append(t)
        labels.append(lab)
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
#: Where a recipe's data comes from, and how to evaluate on a file of one's own (the CLI's flags).
DATA_HINT = (
    "the built-in recipes read public data sets you download yourself (nothing is downloaded for you; "
    "the project's checkout keeps them in ../shared/data, outside the repository; docs/evaluation.md lists "
    "each recipe's files); to evaluate on your own labelled CSV: deniable evaluate --task file --data train.csv "
    "--text-column text --label-column label --test-fraction 0.2 -o results/"
)


def _folder(root: str | Path, name: str) -> Path:
    base = Path(root)
    sub = RECIPES[name][0]
    if (base / sub).is_dir():
        return base / sub
    if base.is_dir():
        return base
    raise DataError(f"data folder {base} does not exist ({DATA_HINT})")


def _sst(folder: Path, fine: bool) -> TaskData:
    stem = "stsa.fine" if fine else "stsa.binary"
    out = []
    for part in ("train", "test"):
        path = folder / f"{stem}.{part}"
        texts: list[str] = []
        labels: list[str] = []
        if not path.is_file():
            raise DataError(f"data file {path} does not exist or is not a file")
        lines = read_table(path, format="txt")["text"]
        for lineno, raw in enumerate(lines, start=1):
            line = (raw or "").strip()
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


#: the CFPB files' text and label columns
CFPB_COLUMNS = ("Consumer complaint narrative", "Product")


def _newsgroups(d: Path) -> Split:
    table = _read(d / "20news-19997.jsonl.gz", "jsonl", ["text", "label"], missing="error")
    texts = [_strip_headers(t or "") for t in table["text"]]
    y, names = _encode_labels(table["label"])
    return Split(texts, y, names)


def _enron(d: Path, spam: bool) -> Split:
    table = _read(d / "enron_spam.jsonl.gz", "jsonl", ["text", "label", "user"], missing="empty")
    texts: list[str] = []
    labels: list[str] = []
    for lineno, (t, lab, user) in enumerate(zip(table["text"], table["label"], table["user"], strict=True), 1):
        if t is None or lab is None:
            raise DataError(f"{d / 'enron_spam.jsonl.gz'}: record {lineno} has no text or no label")
        if not spam:
            if lab != "ham" or not user:
                continue
            lab = user
        texts.append(t)
        labels.append(lab)
    y, names = _encode_labels(labels)
    return Split(texts, y, names)


def load_corpus(name: str, folder: str | Path, part: str = "train", classes: Sequence[str] | None = None) -> Split:
    """Every labelled document of one file of a recipe, in file order (before any split).

    ``cfpb`` and ``imdb`` have a ``"train"`` and a ``"test"`` part; ``20newsgroups``,
    ``enron`` and ``enron_spam`` are one file (``part="train"`` reads it all). Labels are
    class names (``classes``, default: the sorted distinct labels).
    """
    if name not in ("cfpb", "imdb", "20newsgroups", "enron", "enron_spam"):
        raise InvalidParameterError("task", name, "cfpb, imdb, 20newsgroups, enron or enron_spam")
    parts = ("train", "test") if name in ("cfpb", "imdb") else ("train",)
    if part not in parts:
        raise InvalidParameterError("part", part, "one of " + ", ".join(parts))
    d = _folder(folder, name)
    if name == "cfpb":
        text, label = CFPB_COLUMNS
        return load_labelled(d / f"{part}.csv.gz", text_column=text, label_column=label, classes=classes)
    if name == "imdb":
        s = load_labelled(d / f"{part}.jsonl.gz", classes=("0", "1"))
        return Split([t.replace("<br />", " ") for t in s.texts], s.labels, ("neg", "pos"))
    if name == "20newsgroups":
        return _newsgroups(d)
    return _enron(d, spam=name == "enron_spam")


def load_task(name: str, folder: str | Path) -> TaskData:
    """Load a built-in recipe from its folder (see the module docstring for the formats)."""
    if name not in RECIPES:
        raise InvalidParameterError("task", name, "one of " + ", ".join(RECIPES))
    d = _folder(folder, name)
    if name in ("imdb", "cfpb"):
        tr = load_corpus(name, d)
        te = load_corpus(name, d, "test", classes=None if name == "imdb" else tr.classes)
        return TaskData(name, "classification", tr, te)
    if name in ("sst2", "sst5"):
        return _sst(d, fine=name == "sst5")
    if name in ("20newsgroups", "enron", "enron_spam"):
        fraction = 0.5 if name == "20newsgroups" else 0.2
        tr, te = split_stratified(load_corpus(name, d), fraction, seed=0)
        return TaskData(name, "classification", tr, te)
    # insuranceqa
    qa = []
    for part in ("validation", "test"):
        table = _read(d / f"{part}.csv.gz", "csv", ["question", "answer", "label"], missing="empty")
        qs = [q or "" for q in table["question"]]
        ans = [a or "" for a in table["answer"]]
        rel = [(lab or "").strip() == "1" for lab in table["label"]]
        qa.append(QAPairs(qs, ans, np.array(rel, dtype=bool)))
    return TaskData(name, "ranking", qa[0], qa[1])


# --------------------------------------------------------------------------- user-grouped corpora
#: corpora with an author per document: 20 Newsgroups (the ``From:`` sender) and the six Enron mailboxes
USER_CORPORA = ("20newsgroups", "enron")


@dataclass(frozen=True)
class UserCorpus:
    """Documents grouped by user: ``authors`` labels each text with its user (indices into
    ``authors.classes``); ``topics`` labels the same texts with a task label (the newsgroup) when the
    corpus has one, for utility. User names stay in ``classes`` and are never logged."""

    name: str
    authors: Split
    topics: Split | None = None

    def __len__(self) -> int:
        return len(self.authors)

    @property
    def users(self) -> int:
        return len(self.authors.classes)

    def describe(self) -> str:
        return f"{self.name}: {len(self):,} documents by {self.users:,} users"

    def take(self, idx: npt.ArrayLike) -> UserCorpus:
        """The documents ``idx`` (same user and topic classes)."""
        return UserCorpus(self.name, self.authors.take(idx), None if self.topics is None else self.topics.take(idx))


def load_user_corpus(name: str, folder: str | Path, *, min_posts: int = 5, max_users: int | None = None) -> UserCorpus:
    """Documents of the users with at least ``min_posts`` documents (the ``max_users`` most prolific).

    - ``20newsgroups``: users are the senders (``From:`` header, in the file's ``sender`` field);
      texts are message bodies (headers stripped: the sender is not in the text); topics are
      the newsgroups. 817 senders have >= 5 posts.
    - ``enron``: users are the six Enron-Spam mailbox owners (ham only; a mailbox also holds
      mail its owner received, so "author" means "mailbox"); no topics.
    """
    check_choice("corpus", name, USER_CORPORA)
    min_posts = check_int("min_posts", min_posts)
    if max_users is not None:
        max_users = check_int("max_users", max_users, minimum=2)
    d = _folder(folder, name)
    topics_raw: list[str] | None = None
    if name == "20newsgroups":
        table = _read(d / "20news-19997.jsonl.gz", "jsonl", ["text", "label", "sender"], missing="empty")
        texts = [_strip_headers(t or "") for t in table["text"]]
        users = [s or "" for s in table["sender"]]
        topics_raw = [lab or "" for lab in table["label"]]
    else:
        split = _enron(d, spam=False)
        texts, users = split.texts, [split.classes[i] for i in split.labels.tolist()]
    counts: dict[str, int] = {}
    for u in users:
        if u:
            counts[u] = counts.get(u, 0) + 1
    kept = sorted((u for u, c in counts.items() if c >= min_posts), key=lambda u: (-counts[u], u))
    if max_users is not None:
        kept = kept[:max_users]
    if len(kept) < 2:
        raise DataError(f"{name}: fewer than two users have at least {min_posts} documents")
    keep = set(kept)
    rows = [i for i, u in enumerate(users) if u in keep]
    classes = tuple(sorted(kept))
    y, _ = _encode_labels([users[i] for i in rows], classes)
    authors = Split([texts[i] for i in rows], y, classes)
    topics = None
    if topics_raw is not None:
        ty, tnames = _encode_labels([topics_raw[i] for i in rows])
        topics = Split(authors.texts, ty, tnames)
    return UserCorpus(name, authors, topics)
