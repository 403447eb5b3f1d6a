"""Loaders of labelled text: generic files (CSV, JSONL.gz, Parquet), Hugging Face, and the shared-data recipes."""

from __future__ import annotations

import csv
import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deniable._errors import DataError, DeniableError, InvalidParameterError
from deniable.experiments import load_hf, load_labelled, load_task, split_stratified

ROWS = [("good game, great match", "pos"), ("the rocket was bad", "neg"), ("a fine goal", "pos"), ("", "neg")]


def write_all(tmp: Path) -> dict[str, Path]:
    paths = {"csv": tmp / "d.csv", "jsonl": tmp / "d.jsonl.gz", "parquet": tmp / "d.parquet"}
    with open(paths["csv"], "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "body", "y"])
        for i, (t, y) in enumerate(ROWS):
            w.writerow([i, t, y])
    with gzip.open(paths["jsonl"], "wt", encoding="utf-8") as fh:
        for t, y in ROWS:
            fh.write(json.dumps({"body": t, "y": y}) + "\n")
    pq.write_table(pa.table({"body": [t for t, _ in ROWS], "y": [y for _, y in ROWS]}), paths["parquet"])
    return paths


def test_generic_formats_agree(tmp_path: Path) -> None:
    for fmt, path in write_all(tmp_path).items():
        s = load_labelled(path, text_column="body", label_column="y")
        assert s.classes == ("neg", "pos"), fmt
        assert s.texts == [t for t, _ in ROWS], fmt
        assert s.labels.tolist() == [1, 0, 1, 0], fmt


def test_numeric_labels_sort_numerically(tmp_path: Path) -> None:
    p = tmp_path / "n.jsonl"
    p.write_text("\n".join(json.dumps({"text": "x", "label": v}) for v in (10, 2, 1)) + "\n", encoding="utf-8")
    s = load_labelled(p)
    assert s.classes == ("1", "2", "10") and s.labels.tolist() == [2, 1, 0]


def test_loader_errors(tmp_path: Path) -> None:
    paths = write_all(tmp_path)
    for path in paths.values():
        with pytest.raises(InvalidParameterError) as exc:
            load_labelled(path, text_column="text", label_column="y")
        assert exc.value.name == "column" and exc.value.value == "text"
    with pytest.raises(DataError, match="does not exist"):
        load_labelled(tmp_path / "missing.csv")
    with pytest.raises(InvalidParameterError, match="format"):
        load_labelled(tmp_path / "d.txt")
    with pytest.raises(DataError, match="not among the training classes"):
        load_labelled(paths["csv"], text_column="body", label_column="y", classes=("pos",))


def test_hf_without_datasets_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails as if not installed
    with pytest.raises(DeniableError, match="datasets"):
        load_hf("imdb", split="train")


def test_stratified_split() -> None:
    from deniable.experiments import Split

    s = Split([str(i) for i in range(100)], np.r_[np.zeros(80), np.ones(20)].astype(np.int64), ("a", "b"))
    tr, te = split_stratified(s, 0.25, seed=0)
    assert len(te) == 25 and int(te.labels.sum()) == 5 and len(tr) == 75
    assert not set(tr.texts) & set(te.texts)


@pytest.mark.data
@pytest.mark.parametrize(
    ("task", "classes", "n_train"),
    [("imdb", 2, 25_000), ("sst2", 2, 6_920), ("cfpb", 8, 10_000), ("enron", 6, None), ("20newsgroups", 20, None)],
)
def test_recipes_on_shared_data(task: str, classes: int, n_train: int | None) -> None:
    from conftest import shared_data
    from deniable.experiments.data import RECIPES

    root = shared_data(RECIPES[task][0]).parent
    data = load_task(task, root)
    assert len(data.classes) == classes
    if n_train is not None:
        assert len(data.train) == n_train
    assert len(data.test) > 0 and set(np.unique(data.train.labels)) == set(range(classes))
    if task == "20newsgroups":  # headers (which name the group) are stripped
        assert not any(t.startswith("Xref:") or "Newsgroups:" in t[:300] for t in data.train.texts[:200])
    if task == "imdb":
        assert not any("<br />" in t for t in data.train.texts[:500])


@pytest.mark.data
def test_insuranceqa_recipe() -> None:
    from conftest import shared_data

    data = load_task("insuranceqa", shared_data("insuranceqa"))  # the data set's own folder works too
    assert data.kind == "ranking" and len(data.test) == 5_042 and int(data.test.relevant.sum()) == 2_521
