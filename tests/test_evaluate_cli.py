"""``deniable evaluate`` end to end on a tiny synthetic data set with a small saved embedding, and its errors."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from fake_mechanisms import run_cli

SPORT = ["hockey", "soccer", "puck", "goal", "game", "match"]
SPACE = ["nasa", "esa", "rocket", "orbit", "launch"]
SECRET = "Hockey"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from conftest import write_labelled_csvs

    def row(i: int, rng: np.random.Generator) -> list[str]:
        words = SPORT if i % 2 else SPACE
        return [SECRET + " " + " ".join(rng.choice(words, 6)) + "!", "sport" if i % 2 else "space"]

    return write_labelled_csvs(tmp_path_factory.mktemp("evaldata"), row, n=80, header=("review", "topic"))


def base(files: dict[str, Path], out: Path) -> list[str]:
    return [
        "evaluate", "--task", "file", "--data", str(files["train"]), "--test", str(files["test"]),
        "--text-column", "review", "--label-column", "topic", "--embedding", str(files["emb"]),
        "--out", str(out), "--seed", "0", "-q",
    ]  # fmt: skip


def test_cli_writes_tables_and_plots(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "res"
    args = [*base(files, out), "--mechanism", "madlib", "--epsilon", "0.5,1e9", "--model", "tfidf", "--repeats", "2",
            "--train-size", "30", "--test-size", "30", "--batch-texts", "7"]  # fmt: skip
    code, stdout, stderr = run_cli(args, capsys)
    assert code == 0, stderr
    for name in ("results.csv", "runs.csv", "results.md", "settings.json", "accuracy.png", "mia_auc.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert "NOT private" in stderr  # --seed is labelled
    assert "| tfidf | madlib | 1e+09 |" in stdout and "| tfidf | clean | — |" in stdout
    settings = json.loads((out / "settings.json").read_text())
    assert settings["seed"] == 0 and settings["train_size"] == 30 and settings["membership"] is True
    assert settings["batch_texts"] == 7
    with open(out / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    get = {(r["mechanism"], r["epsilon"], r["mode"], r["metric"]): r for r in rows}
    clean = float(get["none", "", "clean", "accuracy"]["mean"])
    assert float(get["madlib", "1e+09", "train", "accuracy"]["mean"]) == clean
    assert float(get["madlib", "1e+09", "test", "accuracy"]["mean"]) == clean
    assert get["madlib", "0.5", "train", "mia_auc"]["n"] == "2"
    md = (out / "results.md").read_text()
    assert "![accuracy against epsilon](accuracy.png)" in md
    for text in (stdout, stderr, md, (out / "runs.csv").read_text()):
        assert SECRET not in text


@pytest.mark.parametrize(
    ("extra", "name"),
    [
        (["--mechanism", "nope"], "--mechanism"),
        (["--epsilon", "-1"], "--epsilon"),
        (["--model", "bert"], "--model"),
        (["--mode", "both"], "--mode"),
        (["--repeats", "0"], "--repeats"),
        (["--train-size", "1000"], "--train-size"),
        (["--task", "mnist"], "--task"),
        (["--mechanism", "madlib", "--gamma", "1"], "--gamma"),
        (["--text-column", "body"], "column"),
        (["--oov", "skip"], "--oov"),
        (["--batch-texts", "0"], "--batch-texts"),
    ],
)
def test_cli_errors_name_the_parameter(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], name: str
) -> None:
    code, _, stderr = run_cli([*base(files, tmp_path / "o"), "--epsilon", "1", "--no-plots", *extra], capsys)
    assert code == 2
    assert name in stderr and SECRET not in stderr


def test_cli_missing_data_and_hf(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    code, _, stderr = run_cli(["evaluate", "--data", str(tmp_path / "none"), "--task", "imdb", "--out", str(tmp_path)],
                          capsys)  # fmt: skip
    assert code == 3 and "does not exist" in stderr
    monkeypatch.setitem(sys.modules, "datasets", None)
    code, _, stderr = run_cli(["evaluate", "--data", "imdb", "--task", "hf", "--out", str(tmp_path / "o")], capsys)
    assert code == 3 and "datasets" in stderr


def test_cli_on_a_slice_of_insuranceqa(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import make_toy_embedding, shared_data

    folder = shared_data("insuranceqa")
    make_toy_embedding().save(tmp_path / "emb")
    out = tmp_path / "qa"
    code, _, stderr = run_cli(
        ["evaluate", "--data", str(folder), "--task", "insuranceqa", "--embedding", str(tmp_path / "emb"),
         "--mechanism", "madlib", "--epsilon", "1e9", "--train-size", "300", "--test-size", "40", "--repeats", "1",
         "--negatives", "9", "--seed", "0", "--out", str(out), "--no-plots", "-q",
         "--oov", "keep"],  # identity at huge epsilon: the toy vocabulary leaves most words out-of-vocabulary
        capsys,
    )  # fmt: skip
    assert code == 0, stderr
    with open(out / "results.csv", newline="") as fh:
        rows = {(r["mode"], r["metric"]): float(r["mean"]) for r in csv.DictReader(fh)}
    assert 0 < rows["clean", "map"] <= 1 and rows["train", "mrr"] == rows["clean", "mrr"]


def test_missing_matplotlib_is_said_before_the_work(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib, plots are refused before any evaluation runs (not after it, losing the work)."""
    import importlib.util

    import deniable.experiments as experiments

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    real_run = experiments.run_evaluation
    ran: list[bool] = []
    monkeypatch.setattr(experiments, "run_evaluation", lambda *a, **k: ran.append(True))
    out = tmp_path / "res"
    args = [*base(files, out), "--mechanism", "madlib", "--epsilon", "1", "--train-size", "30", "--test-size", "30"]
    code, _, stderr = run_cli(args, capsys)
    assert code == 3 and "matplotlib" in stderr and "--no-plots" in stderr
    assert not ran and not out.exists()
    # --no-plots needs no matplotlib: the whole evaluation runs and writes its tables, no plot
    monkeypatch.setattr(experiments, "run_evaluation", real_run)
    code, _, stderr = run_cli([*args, "--no-plots", "--model", "tfidf", "--repeats", "1"], capsys)
    assert code == 0, stderr
    assert (out / "results.csv").is_file() and not list(out.glob("*.png"))
