"""The issue-17 mechanisms from the command line and the service schema: explain, calibrate, privatize."""

from __future__ import annotations

from pathlib import Path

import pytest

from deniable.cli import run_app
from deniable.mechanisms import mechanism_names, options_of

NEW = ["mahalanobis", "vickrey", "exponential", "santext", "santext_plus", "custext", "custext_plus"]


def test_all_are_registered_with_declared_options() -> None:
    assert set(NEW) <= set(mechanism_names())
    flags = {o.cli_flag for m in NEW for o in options_of(m) if o.cli}
    assert {"--lambda", "--vickrey-t", "--custext-k", "--sensitive-fraction", "--replace-p", "--metric"} <= flags


@pytest.mark.parametrize("name", NEW)
def test_explain_runs(name: str, emb_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_app(["explain", "hockey", "-e", "3", "--mechanism", name, "--embedding", str(emb_dir), "--draws", "500"])
    assert code == 0
    out = capsys.readouterr().out
    assert name in out and "N_w" in out


@pytest.mark.parametrize("name", NEW)
def test_calibrate_runs(name: str, emb_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_app(
        [
            "calibrate",
            "-e",
            "1,4",
            "--mechanism",
            name,
            "--embedding",
            str(emb_dir),
            "--words",
            "all",
            "--samples",
            "50",
        ]
    )
    assert code == 0
    assert "epsilon" in capsys.readouterr().out


def test_mechanism_flags_reach_the_constructor(emb_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_app(
        ["explain", "hockey", "-e", "3", "--mechanism", "vickrey", "--vickrey-t", "0.9", "--lambda", "0.5",
         "--embedding", str(emb_dir), "--draws", "300"]
    )  # fmt: skip
    assert code == 0
    assert "metric=mahalanobis" in capsys.readouterr().out
    assert run_app(["explain", "hockey", "-e", "3", "--mechanism", "vickrey", "--vickrey-t", "2",
                    "--embedding", str(emb_dir)]) == 2  # fmt: skip


def test_privatizer_states_what_the_mechanism_does_not_protect() -> None:
    from conftest import make_toy_embedding
    from deniable import Privatizer
    from deniable.mechanisms import make_mechanism

    emb = make_toy_embedding()
    plus = Privatizer(make_mechanism("santext_plus", emb, 2.0)).describe()["not_protected"]
    assert any("non-sensitive" in item for item in plus)
    plain = Privatizer(make_mechanism("santext", emb, 2.0)).describe()["not_protected"]
    assert not any("non-sensitive" in item for item in plain)
