"""``deniable audit`` on the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deniable.cli._common import run_app


def test_cli_audit_tem_exact(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "audit"
    code = run_app(
        ["audit", "-m", "tem", "-e", "2", "--embedding", str(emb_dir), "--pairs", "6", "--seed", "1", "--out", str(out)]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    assert "PASS" in text and "exact" in text
    settings = json.loads((out / "settings.json").read_text())
    assert settings["passed"] is True and settings["method"] == "exact"


def test_cli_audit_madlib_black_box(emb_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_app(
        [
            "audit",
            "-m",
            "madlib",
            "-e",
            "1",
            "--embedding",
            str(emb_dir),
            "--pairs",
            "4",
            "--draws",
            "2000",
            "--seed",
            "2",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0 and "black-box" in text and "Clopper-Pearson" in text


def test_cli_audit_errors(emb_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_app(["audit", "-m", "madlib", "-e", "1", "--embedding", str(emb_dir), "--draws", "1"]) == 2
    assert "--draws" in capsys.readouterr().err
    assert run_app(["audit", "-m", "madlib", "-e", "1", "--embedding", str(emb_dir), "--method", "exact"]) == 2
    assert run_app(["audit", "-m", "nope", "-e", "1", "--embedding", str(emb_dir)]) == 2
