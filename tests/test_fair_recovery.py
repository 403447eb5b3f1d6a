"""Matched attacker recovery (issue 41, item 3): the log-epsilon interpolation of a recovery curve, the fair
report's "attacker recovery" rows and ``deniable compare --match recovered``."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deniable import InvalidParameterError
from deniable.experiments.fair import epsilon_at_level, fair_report, recovery_curve
from fake_mechanisms import run_cli
from test_fair_report import GRID, INFOS, _results_of, _row, _toy_data


def test_interpolation_exact_on_a_monotone_curve() -> None:
    eps = [0.5, 1.0, 2.0, 4.0, 8.0]
    # linear in log epsilon: the inverse is exact everywhere on the grid's range
    vals = [0.1 + 0.1 * math.log2(e) for e in eps]
    for level in (0.0, 0.05, 0.1, 0.25, 0.37, 0.4):
        assert epsilon_at_level(eps, vals, level) == pytest.approx(2 ** ((level - 0.1) / 0.1), rel=1e-12)
    # any strictly increasing curve: linear in log epsilon between neighbours, measured points exact
    rng = np.random.default_rng(0)
    curve = np.sort(rng.uniform(0.02, 0.6, len(eps)))
    for i, e in enumerate(eps):
        assert epsilon_at_level(eps, curve, float(curve[i])) == pytest.approx(e, rel=1e-12)
    level = float(curve[1] + 0.3 * (curve[2] - curve[1]))
    assert epsilon_at_level(eps, curve, level) == pytest.approx(math.exp(math.log(1.0) + 0.3 * math.log(2.0)))
    # order of the points does not matter
    assert epsilon_at_level(eps[::-1], curve[::-1], level) == pytest.approx(epsilon_at_level(eps, curve, level))


def test_levels_outside_the_measured_range_are_refused() -> None:
    eps, vals = [1.0, 2.0, 4.0], [0.1, 0.2, 0.4]
    for level in (0.05, 0.41, 1.5, math.nan):
        with pytest.raises(InvalidParameterError, match=r"tem's measured range \[0.1, 0.4\]") as info:
            epsilon_at_level(eps, vals, level, what="recovery", name="tem")
        assert "recovery" in str(info.value)
    with pytest.raises(InvalidParameterError, match="two epsilons or more"):
        epsilon_at_level([1.0], [0.1], 0.1)


def _recovery_rows(curves: dict[str, list[tuple[float, float]]]) -> list[dict[str, Any]]:
    return [
        {"mechanism": m, "epsilon": e, "group": g, "metric": "recovered", "value": v, "ci_low": v - 0.01,
         "ci_high": v + 0.01}
        for m, pts in curves.items() for e, v in pts for g in ("all", "content")
    ]  # fmt: skip


def test_fair_report_at_matched_recovery() -> None:
    rows = _recovery_rows({"a": [(1.0, 0.1), (2.0, 0.2), (4.0, 0.4)], "b": [(0.1, 0.3), (0.4, 0.5)]})
    assert [p["epsilon"] for p in recovery_curve(rows, "a")] == [1.0, 2.0, 4.0]
    rep = fair_report(
        _results_of(GRID), INFOS, reference="a", auc_levels=[], recovery=rows, recovery_levels=[0.3, 0.45]
    )
    r = _row(rep, "attacker recovery", "a", 0.3)
    # recovery 0.3 half-way (in log epsilon) between eps 2 and 4; accuracy there half-way between 0.7 and 0.8
    assert r["epsilon"] == pytest.approx(2**1.5) and r["value"] == pytest.approx(0.75)
    assert r["how"] == "interpolated"
    r = _row(rep, "attacker recovery", "b", 0.45)
    assert r["epsilon"] == pytest.approx(math.exp(math.log(0.1) + 0.75 * math.log(4.0)))
    assert _row(rep, "attacker recovery", "a", 0.45)["how"] == "recovery level outside the measured curve"
    assert math.isnan(_row(rep, "attacker recovery", "b", 0.3)["value"]) is False  # b's range starts at 0.3
    assert _row(rep, "attacker recovery", "c", 0.3)["how"] == "no recovery curve"
    assert _row(rep, "attacker recovery", "clean", 0.3)["how"] == "no privatization"
    assert rep.settings["recovery_levels"] == [0.3, 0.45]
    default = fair_report(_results_of(GRID), INFOS, reference="a", auc_levels=[], recovery=rows)
    assert default.settings["recovery_levels"] == [0.2, 0.3, 0.4]  # quartiles of the measured shares
    with pytest.raises(InvalidParameterError, match="recovery"):
        fair_report(_results_of(GRID), INFOS, reference="a", recovery_levels=[0.3])


def test_cli_matched_recovery_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _toy_data(tmp_path)
    data = ["--task", "file", "--data", str(f["train"]), "--test", str(f["test"]), "--embedding", str(f["emb"]),
            "--seed", "0", "-q", "--train-size", "20", "--no-plots"]  # fmt: skip
    mechs = ["--mechanism", "tem,custext", "--epsilon", "0.5,2,8", "--custext-k", "3"]
    code, _, err = run_cli(["evaluate", *data, *mechs, "--attack", "reconstruction", "--out", str(tmp_path / "rec")],
                           capsys)  # fmt: skip
    assert code == 0, err
    code, _, err = run_cli(["evaluate", *data, *mechs, "--model", "tfidf", "--repeats", "2", "--test-size", "20",
                            "--mode", "train", "--out", str(tmp_path / "util")], capsys)  # fmt: skip
    assert code == 0, err
    with open(tmp_path / "rec" / "results.csv", encoding="utf-8") as fh:
        rec = {(r["mechanism"], float(r["epsilon"])): float(r["value"]) for r in csv.DictReader(fh)
               if r["group"] == "all" and r["metric"] == "recovered"}  # fmt: skip
    lo = max(rec["tem", 0.5], rec["custext", 0.5])
    hi = min(rec["tem", 8.0], rec["custext", 8.0])
    assert lo < hi, rec
    level = round((lo + hi) / 2, 4)
    out = tmp_path / "fair"
    code, stdout, err = run_cli(["compare", "--results", str(tmp_path / "util"), "--out", str(out), "--reference",
                                 "tem", "--auc", "0.5", "--recovery", str(tmp_path / "rec"), "--recovered",
                                 str(level), "--no-plots"], capsys)  # fmt: skip
    assert code == 0, err
    assert f"recovered {level:g}" in stdout and "matched attacker recovery" in stdout
    with open(out / "fair.csv", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["matching"] == "attacker recovery"]
    got = {r["mechanism"]: r for r in rows}
    assert {"tem", "custext", "clean"} <= set(got)
    for m in ("tem", "custext"):
        assert 0.5 <= float(got[m]["epsilon"]) <= 8.0 and got[m]["value"] != "", got[m]
    # two mechanisms lined up at the same recovery, CusText included (no privacy ratio exists for it)
    eps_a = f"{float(got['tem']['epsilon']):.6g}"  # TEM's epsilon at the level: custext's range covers it
    code, stdout, err = run_cli(["compare", "-a", "tem", "-b", "custext", "--epsilon", eps_a, "--match",
                                 "recovered", "--recovery", str(tmp_path / "rec")], capsys)  # fmt: skip
    assert code == 0, err
    assert f"tem epsilon {eps_a} (attacker recovers {100 * level:.1f}%" in stdout
    eps_b = float(stdout.strip().rsplit(" ", 1)[1])
    assert eps_b == pytest.approx(float(got["custext"]["epsilon"]), rel=1e-3)
    code, _, err = run_cli(["compare", "-a", "tem", "-b", "custext", "--epsilon", "0.5", "--match", "recovered",
                            "--recovery", str(tmp_path / "rec")], capsys)  # fmt: skip
    assert code == 2 and "custext's measured range" in err  # TEM's 0.5 recovers less than CusText ever does
    # refusals: outside A's grid, B's range, no curves, a bad --match
    code, _, err = run_cli(["compare", "-a", "tem", "-b", "custext", "--epsilon", "100", "--match", "recovered",
                            "--recovery", str(tmp_path / "rec")], capsys)  # fmt: skip
    assert code == 2 and "--epsilon" in err
    assert run_cli(["compare", "-a", "tem", "-b", "custext", "--match", "recovered"], capsys)[0] == 2
    assert run_cli(["compare", "-a", "tem", "-b", "custext", "--match", "auc"], capsys)[0] == 2
    code, _, err = run_cli(["compare", "--results", str(tmp_path / "util"), "--out", str(tmp_path / "x"),
                            "--reference", "tem", "--recovered", "0.3"], capsys)  # fmt: skip
    assert code == 2 and "--recovery" in err
