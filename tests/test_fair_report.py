"""The fair comparison (deniable.experiments.fair, ``deniable compare --results``) and the harness's
memory measurement and results reader."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deniable import InvalidParameterError
from deniable.experiments.fair import MechanismInfo, fair_report, merge_results
from deniable.experiments.harness import KEYS, _results
from deniable.experiments.output import read_results, write_results
from fake_mechanisms import run_cli

INFOS = {
    "a": MechanismInfo("a", "euclidean"),
    "b": MechanismInfo("b", "hamming"),
    "c": MechanismInfo("c", "output-set", "only within output sets"),
    "d": MechanismInfo("d", "euclidean"),
}


def _rows(grid: dict[str, list[tuple[float, float, float]]], seed: int = 0) -> list[dict[str, Any]]:
    """Two repeats per setting with values mean +- 0.01 (so the t interval is known)."""
    rows: list[dict[str, Any]] = []
    base = {
        "task": "t",
        "model": "m",
        "n_train": 10,
        "n_test": 10,
        "tokens": 0,
        "ci_low": math.nan,
        "ci_high": math.nan,
    }
    for r, sign in enumerate((-1, 1)):
        rows.append({**base, "mechanism": "none", "epsilon": math.nan, "mode": "clean", "repeat": r,
                     "metric": "accuracy", "value": 0.9 + 0.01 * sign})  # fmt: skip
        rows.append({**base, "mechanism": "none", "epsilon": math.nan, "mode": "clean", "repeat": r,
                     "metric": "mia_auc", "value": 0.7 + 0.01 * sign})  # fmt: skip
        for mech, pts in grid.items():
            for eps, acc, auc in pts:
                common = {**base, "mechanism": mech, "epsilon": eps, "mode": "train", "repeat": r}
                rows.append({**common, "metric": "accuracy", "value": acc + 0.01 * sign})
                rows.append({**common, "metric": "mia_auc", "value": auc + 0.01 * sign})
    return rows


def _results_of(grid: dict[str, list[tuple[float, float, float]]], **settings: Any) -> Any:
    st = {"task": "t", "embedding": "e", "seed": 0, "mechanisms": list(grid), "epsilons": [], "modes": ["train"]}
    st.update(settings)
    return _results("t", _rows(grid), settings=st)


GRID = {
    "a": [(1.0, 0.6, 0.50), (2.0, 0.7, 0.55), (4.0, 0.8, 0.60)],
    "b": [(0.1, 0.55, 0.50), (0.2, 0.65, 0.52), (0.4, 0.75, 0.58)],
    "c": [(1.0, 0.8, 0.51), (4.0, 0.85, 0.53)],
    "d": [(1.0, 0.6, 0.50), (2.0, 0.7, 0.60), (4.0, 0.8, 0.55)],  # AUC not monotone in epsilon
}


def _row(report: Any, matching: str, mech: str, level: float) -> dict[str, Any]:
    found = [
        r
        for r in report.rows
        if r["matching"] == matching and r["mechanism"] == mech and math.isclose(r["level"], level)
    ]
    assert len(found) == 1, (matching, mech, level, found)
    return found[0]


def test_three_matchings() -> None:
    rep = fair_report(_results_of(GRID), INFOS, reference="a", ratios={"b": 0.05}, auc_levels=[0.525, 0.575, 0.7])
    # (a) same metric: the reference's own epsilons, measured values with their t intervals
    r = _row(rep, "same epsilon", "a", 2.0)
    assert r["value"] == pytest.approx(0.7) and r["how"] == "measured" and r["ci_low"] < 0.7 < r["ci_high"]
    assert _row(rep, "same epsilon", "d", 4.0)["value"] == pytest.approx(0.8)
    # (b) other metric: reference epsilon e is the mechanism's e * R
    r = _row(rep, "privacy ratio", "b", 4.0)
    assert r["epsilon"] == pytest.approx(0.2) and r["value"] == pytest.approx(0.65) and r["how"] == "measured"
    assert "0.05" in r["note"] and "hamming" in r["note"]
    r = _row(rep, "privacy ratio", "b", 1.0)  # 0.05 is below b's grid: nothing is extrapolated
    assert math.isnan(r["value"]) and r["how"] == "outside the grid"
    # a guarantee that is not epsilon * d is never put at a matched epsilon
    assert not [x for x in rep.rows if x["mechanism"] == "c" and x["matching"] in ("same epsilon", "privacy ratio")]
    r = _row(rep, "nominal epsilon (not matched)", "c", 4.0)
    assert r["value"] == pytest.approx(0.85) and r["note"] == "only within output sets"
    # (c) AUC 0.525 is half-way (in log epsilon) between a's 1 and 2: epsilon sqrt(2), accuracy 0.65
    r = _row(rep, "membership AUC", "a", 0.525)
    assert r["epsilon"] == pytest.approx(math.sqrt(2)) and r["value"] == pytest.approx(0.65)
    assert r["how"] == "interpolated"
    # a non-monotone AUC curve is made monotone first (isotonic: 0.50, 0.575, 0.575): 0.575 reached at epsilon 2
    r = _row(rep, "membership AUC", "d", 0.575)
    assert r["epsilon"] == pytest.approx(2.0) and r["value"] == pytest.approx(0.7)
    # a level no setting reaches stays empty
    r = _row(rep, "membership AUC", "a", 0.7)
    assert math.isnan(r["value"]) and "not reached" in r["how"]
    # the clean baseline is on every table
    assert _row(rep, "membership AUC", "clean", 0.525)["value"] == pytest.approx(0.9)


def test_missing_ratio_and_bad_reference() -> None:
    rep = fair_report(_results_of(GRID), INFOS, reference="a", auc_levels=[])
    r = _row(rep, "privacy ratio", "b", 2.0)
    assert math.isnan(r["value"]) and "no privacy ratio" in r["note"]
    with pytest.raises(InvalidParameterError, match="reference"):
        fair_report(_results_of(GRID), INFOS, reference="c")
    with pytest.raises(InvalidParameterError, match="reference"):
        fair_report(_results_of(GRID), INFOS, reference="zzz")
    with pytest.raises(InvalidParameterError, match="mechanism info"):
        fair_report(_results_of(GRID), {"a": INFOS["a"]}, reference="a")


def test_default_levels_are_quartiles() -> None:
    rep = fair_report(_results_of(GRID), INFOS, reference="a", ratios={"b": 0.05})
    levels = rep.settings["auc_levels"]
    aucs = [auc for pts in GRID.values() for _, _, auc in pts]
    assert levels == sorted(levels) and min(aucs) <= levels[0] and levels[-1] <= max(aucs)


def test_merge_results() -> None:
    one = _results_of({"a": GRID["a"]}, mechanism_info={"a": {"metric": "euclidean"}})
    two = _results_of({"b": GRID["b"]}, mechanism_info={"b": {"metric": "hamming"}})
    merged = merge_results([one, two])
    assert merged.settings["mechanisms"] == ["a", "b"] and set(merged.settings["mechanism_info"]) == {"a", "b"}
    clean = [r for r in merged.rows if r["mechanism"] == "none"]
    assert len(clean) == 4  # one run's clean baseline (2 repeats x 2 metrics), not two
    with pytest.raises(InvalidParameterError, match="seed differs"):
        merge_results([one, _results_of({"b": GRID["b"]}, seed=1)])
    with pytest.raises(InvalidParameterError, match="a is in two runs"):
        merge_results([one, one])


def test_read_results_round_trip(tmp_path: Path) -> None:
    res = _results_of(GRID, membership=True, repeats=2, oov="keep")
    write_results(res, tmp_path / "out", plots=False)
    back = read_results(tmp_path / "out")
    assert back.keys == KEYS and back.settings["seed"] == 0
    assert [(s["mechanism"], s["metric"], s["mean"]) for s in back.summary()] == [
        (s["mechanism"], s["metric"], pytest.approx(s["mean"])) for s in res.summary()
    ]


def test_peak_rss_counts_an_allocation() -> None:
    # in a fresh process: in the test process, memory that earlier tests freed is returned to the
    # system at any moment (pyarrow's allocator purges in a background thread), which can lower
    # the resident set under the block's allocation and hide its peak
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from deniable.experiments.harness import peak_rss\n"
        "with peak_rss() as peak:\n"
        "    block = np.ones(40 * 2**20 // 8)  # 40 MiB, touched\n"
        "    block.sum()\n"
        "with peak_rss() as idle:\n"
        "    pass\n"
        "print(peak.mib, idle.mib)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    peak, idle = (float(v) for v in out.split())
    if math.isnan(peak):
        pytest.skip("no /proc/self/clear_refs here")
    assert 30 <= peak < 2000
    assert idle < peak


def _toy_data(root: Path) -> dict[str, Path]:
    from conftest import write_labelled_csvs

    sport, space = ["hockey", "soccer", "puck", "goal", "game"], ["nasa", "esa", "rocket", "orbit", "launch"]

    def row(i: int, rng: np.random.Generator) -> list[str]:
        return [" ".join(rng.choice(sport if i % 2 else space, 6)), "sport" if i % 2 else "space"]

    return write_labelled_csvs(root, row)


def test_cli_fair_report_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _toy_data(tmp_path)
    common = ["evaluate", "--task", "file", "--data", str(f["train"]), "--test", str(f["test"]), "--embedding",
              str(f["emb"]), "--seed", "0", "-q", "--model", "tfidf", "--repeats", "2", "--train-size", "20",
              "--test-size", "20", "--mode", "train", "--no-plots"]  # fmt: skip
    runs = {
        "euc": ["--mechanism", "madlib,custext", "--epsilon", "1,10,100", "--custext-k", "3"],
        "brr": ["--mechanism", "brr", "--epsilon", "0.1,1,10", "--bits", "64", "--binarizer", "simhash"],
    }
    for name, extra in runs.items():
        code, _, err = run_cli([*common, *extra, "--out", str(tmp_path / name)], capsys)
        assert code == 0, err
    settings = json.loads((tmp_path / "brr" / "settings.json").read_text())
    assert settings["mechanism_info"]["brr"] == {
        "name": "brr", "metric": "hamming", "guarantee_form": "metric",
        "options": {"bits": 64, "binarizer": "simhash"},
    }  # fmt: skip
    euc = json.loads((tmp_path / "euc" / "settings.json").read_text())["mechanism_info"]
    assert "output set" in euc["custext"]["guarantee_form"] and euc["madlib"]["guarantee_form"] == "metric"
    runs_csv = (tmp_path / "euc" / "runs.csv").read_text()
    assert "privatize_peak_mb" in runs_csv.splitlines()[0]
    out = tmp_path / "fair"
    args = ["compare", "--results", str(tmp_path / "euc"), "--results", str(tmp_path / "brr"), "--out", str(out),
            "--embedding", str(f["emb"]), "--pairs", "500", "--seed", "0", "--auc", "0.5,0.6"]  # fmt: skip
    code, stdout, err = run_cli(args, capsys)
    assert code == 0, err
    for name in ("fair.md", "fair.csv", "fair-epsilon.png", "fair-auc.png", "results.md", "runs.csv"):
        assert (out / name).is_file(), name
    assert "privacy ratio P_d(madlib) / P_d(brr)" in stdout and "MIA AUC 0.5" in stdout
    with open(out / "fair.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    matchings = {(r["mechanism"], r["matching"]) for r in rows}
    assert ("brr", "privacy ratio") in matchings and ("madlib", "same epsilon") in matchings
    assert ("custext", "nominal epsilon (not matched)") in matchings and ("custext", "same epsilon") not in matchings
    # mixing the two modes, and runs on other splits, are refused
    assert run_cli(["compare", "--results", str(tmp_path / "euc"), "-a", "madlib", "-b", "tem"], capsys)[0] == 2
    assert run_cli(["compare", "--results", str(tmp_path / "euc")], capsys)[0] == 2  # no --out
    code, _, err = run_cli([*common, "--seed", "1", "--mechanism", "tem", "--epsilon", "1",
                            "--out", str(tmp_path / "other")], capsys)  # fmt: skip
    assert code == 0, err
    code, _, err = run_cli(["compare", "--results", str(tmp_path / "euc"), "--results", str(tmp_path / "other"),
                            "--out", str(tmp_path / "x")], capsys)  # fmt: skip
    assert code == 2 and "seed differs" in err


def test_ranking_results_compare_map() -> None:
    res = _results_of({"a": GRID["a"]})
    for r in res.rows:
        r["metric"] = {"accuracy": "map", "mia_auc": "mrr"}[r["metric"]]
    rep = fair_report(res, INFOS, reference="a", auc_levels=[])
    assert rep.settings["utility"] == "map" and _row(rep, "same epsilon", "a", 2.0)["value"] == pytest.approx(0.7)
