"""deniable.calibrate.explain and `deniable explain`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from calibrate_fakes import FiniteMechanism, RefTEM, line_embedding
from deniable import InvalidParameterError
from deniable.calibrate import example_outputs, explain
from deniable.cli import run_app

SECRET = "Zzyzxsecret"


def test_explain_exact_by_hand() -> None:
    emb = line_embedding([0, 1, 2, 3])
    mech = RefTEM(emb, 2.0, gamma=1.5)
    ex = explain(mech, "w1", top=2, samples=10)
    z = 1 + 2 * math.exp(-1) + math.exp(-1.5)
    assert ex.exact and ex.word == "w1" and ex.n_w == pytest.approx(1 / z)
    assert ex.outputs[0].word == "w1"
    assert {o.word for o in ex.outputs[1:]} <= {"w0", "w2"}
    assert ex.outputs[1].probability == pytest.approx(math.exp(-1) / z)
    assert ex.other_mass == pytest.approx(1 - (1 + math.exp(-1)) / z)
    assert ex.ball_size == 3
    # default alternatives: the likeliest other outputs; bound eps * d and its exp
    g = ex.guarantees[0]
    assert g.distance == pytest.approx(1.0) and g.bound == pytest.approx(2.0) and g.ratio == pytest.approx(math.e**2)
    text = ex.render()
    assert "N_w" in text and "exp(eps*d)" in text and "w0" in text


def test_explain_named_alternatives() -> None:
    emb = line_embedding([0, 1, 2, 3])
    ex = explain(RefTEM(emb, 1.0), 0, against=["w3", 2])
    assert [g.other for g in ex.guarantees] == ["w3", "w2"]
    assert [g.bound for g in ex.guarantees] == pytest.approx([3.0, 2.0])


def test_explain_sampled_has_intervals() -> None:
    emb = line_embedding([0, 1, 2])
    mat = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    mech = FiniteMechanism(emb, 1.0, matrix=mat)
    ex = explain(mech, "w0", draws=20000, samples=100, rng=np.random.default_rng(0))
    assert not ex.exact and ex.draws == 20000
    assert ex.n_w_low <= 0.7 <= ex.n_w_high
    assert ex.outputs[0].word == "w0" and ex.outputs[0].low <= 0.7 <= ex.outputs[0].high
    assert ex.s_w_low <= ex.s_w <= ex.s_w_high
    assert mech.calls == [20000]  # one batched call
    assert "[" in ex.render()


def test_explain_unknown_word_not_echoed() -> None:
    emb = line_embedding([0, 1])
    with pytest.raises(InvalidParameterError) as info:
        explain(RefTEM(emb, 1.0), SECRET)
    assert SECRET not in str(info.value)


def test_example_outputs() -> None:
    emb = line_embedding([0, 1, 2, 3])
    mechs = [RefTEM(emb, e) for e in (50.0, 0.1)]
    table = example_outputs(mechs, ["w0", "w3"], draws=5, rng=np.random.default_rng(0))
    assert list(table) == ["w0", "w3"]
    assert list(table["w0"]) == [0.1, 50.0]
    assert all(len(v) == 5 for v in table["w0"].values())
    assert table["w0"][50.0] == ["w0"] * 5


def test_cli_explain(emb_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_app(["explain", "hockey", "-e", "2", "--embedding", str(emb_dir), "--seed", "1", "--draws", "2000"])
    out = capsys.readouterr().out
    assert code == 0
    assert "hockey" in out and "N_w" in out and "guarantee" in out


def test_cli_explain_against_and_errors(emb_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_app(["explain", "HOCKEY", "-e", "2", "--embedding", str(emb_dir), "--against", "puck,nasa"])
    out = capsys.readouterr().out
    assert code == 0 and "puck" in out and "nasa" in out
    code = run_app(["explain", SECRET, "-e", "2", "--embedding", str(emb_dir)])
    captured = capsys.readouterr()
    assert code == 2 and SECRET not in captured.err + captured.out
    code = run_app(["explain", "hockey", "-e", "-1", "--embedding", str(emb_dir)])
    assert code == 2
    code = run_app(["explain", "hockey", "-e", "1", "--embedding", str(emb_dir), "--against", SECRET])
    captured = capsys.readouterr()
    assert code == 2 and SECRET not in captured.err + captured.out
