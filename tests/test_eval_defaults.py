"""Evaluation is private by default: out-of-vocabulary words are replaced (``oov="random"``), not kept.

``--oov keep`` passes out-of-vocabulary words through verbatim, which leaks (the user-level audit
of docs/audit.md measured AUC 0.88 at epsilon 1 with keep against 0.43 with random), so it must
stay an explicit opt-in of ``deniable evaluate`` and of the library's experiment entry points.
"""

from __future__ import annotations

import csv
import inspect
import json
from pathlib import Path

import numpy as np
import pytest

from fake_mechanisms import run_cli

#: Every vocabulary word of the toy embedding; the class is carried only by an OOV marker.
FILLER = ["hockey", "nasa", "the", "game", "orbit", "great"]
MARKERS = {"alpha": "zqxalpha", "beta": "zqxbeta"}  # not in the toy vocabulary


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Train / test CSVs whose label is readable only from an out-of-vocabulary marker word."""
    from conftest import write_labelled_csvs

    def row(i: int, rng: np.random.Generator) -> list[str]:
        label = "alpha" if i % 2 else "beta"
        return [MARKERS[label] + " " + " ".join(rng.choice(FILLER, 5)), label]

    return write_labelled_csvs(tmp_path_factory.mktemp("oovdata"), row)


def _evaluate(files: dict[str, Path], out: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, float]:
    args = [
        "evaluate", "--task", "file", "--data", str(files["train"]), "--test", str(files["test"]),
        "--embedding", str(files["emb"]), "--mechanism", "madlib", "--epsilon", "1e9", "--model", "tfidf",
        "--mode", "test", "--repeats", "1", "--no-membership", "--no-plots", "--seed", "0", "-q",
        "--out", str(out), *extra,
    ]  # fmt: skip
    code, _, stderr = run_cli(args, capsys)
    assert code == 0, stderr
    with open(out / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {r["mode"]: float(r["mean"]) for r in rows if r["metric"] == "accuracy"}


def test_cli_default_replaces_oov_words(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --oov, the OOV marker that carries the label is replaced: test-time accuracy falls to chance.

    At epsilon 1e9 madlib returns every vocabulary word unchanged, so the only difference between
    the clean and the privatized test texts is what happens to the OOV marker.
    """
    default = _evaluate(files, tmp_path / "default", capsys)
    settings = json.loads((tmp_path / "default" / "settings.json").read_text())
    assert settings["oov"] == "random"
    assert default["clean"] == 1.0  # the marker separates the classes
    assert 0.2 <= default["test"] <= 0.8  # replaced by random vocabulary words: chance (60 balanced rows)

    kept = _evaluate(files, tmp_path / "keep", capsys, "--oov", "keep")  # the explicit, non-private opt-in
    assert json.loads((tmp_path / "keep" / "settings.json").read_text())["oov"] == "keep"
    assert kept["test"] == 1.0


def test_library_defaults_are_random() -> None:
    from deniable.experiments import EvaluationConfig
    from deniable.experiments.authorship import authorship_attack
    from deniable.experiments.provenance import user_audit

    cfg = EvaluationConfig(mechanisms={"madlib": lambda emb, eps: None}, epsilons=[1.0])
    assert cfg.oov == "random"
    for fn in (authorship_attack, user_audit):
        assert inspect.signature(fn).parameters["oov"].default == "random", fn.__name__


def test_cli_help_says_keep_is_not_private(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run_cli(["evaluate", "--help"], capsys)
    assert code == 0
    text = " ".join(stdout.split())
    assert "--oov" in text and "NOT private" in text
