"""Epsilon in human terms (issue 28, part 1): the calibration table, targets, ``epsilon="auto"``,
and the strength statement of every summary."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_tiny_embedding, make_toy_embedding
from deniable import Embedding, Privatizer
from deniable._errors import InvalidParameterError
from deniable.artefacts import list_artefacts
from deniable.calibrate.table import (
    CALIBRATION_KIND,
    FINE_RATIO,
    FINE_WHEN,
    MAX_POINTS,
    CalibrationPoint,
    CalibrationTable,
    Target,
    _grid_bisected,
    build_table,
    obtain_table,
    open_table,
    parse_target,
    reference_ids,
    resolution_of,
    strength,
)
from deniable.cli import run_app
from deniable.mechanisms import make_mechanism


def _emb(n: int = 300, dim: int = 6, seed: int = 3) -> Embedding:
    r = np.random.default_rng(seed)
    return Embedding([f"w{i}" for i in range(n)], r.normal(size=(n, dim)).astype(np.float32), name=f"rand{n}")


@pytest.fixture(scope="module")
def emb() -> Embedding:
    return _emb()


# -- targets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "share"),
    [("unchanged<=0.5", 0.5), (" unchanged <= 0.25 ", 0.25), ("unchanged<=20%", 0.2), ("unchanged<1e-1", 0.1)],
)
def test_parse_target(text: str, share: float) -> None:
    assert parse_target(text) == Target(share)
    assert parse_target(str(parse_target(text))) == Target(share)  # the canonical text parses back


@pytest.mark.parametrize(
    "text", ["unchanged>=0.5", "unchanged<=1.5", "unchanged<=0", "unchanged<=100%", "N_w<=0.5", "", "0.5", "auto"]
)
def test_bad_target_names_the_parameter(text: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        parse_target(text, "--target")
    assert info.value.name == "--target"


# -- the table: public data only ------------------------------------------------------------------


def test_reference_text_is_zipf_over_ranks_and_fixed() -> None:
    a, b = reference_ids(1000, 20000), reference_ids(1000, 20000)
    assert np.array_equal(a, b)
    counts = np.bincount(a, minlength=1000)
    # Zipf: rank 1 about twice as frequent as rank 2, ten times rank 10 (loose bounds)
    assert 1.6 < counts[0] / counts[1] < 2.5 and 6 < counts[0] / counts[9] < 15


def test_table_is_a_function_of_public_data_only(emb: Embedding) -> None:
    one = build_table(emb, "madlib", tokens=512)
    # privatizing (private) text in between changes nothing: the table never sees input
    p = Privatizer(make_mechanism("madlib", emb, 3.0))
    p.privatize_batch(["w1 w2 w3 secret w4"] * 50)
    two = build_table(emb, "madlib", tokens=512)
    assert one.to_json() == two.to_json()
    assert CalibrationTable.from_json(one.to_json()) == one
    eps = one.epsilons
    assert eps == sorted(eps) and eps[0] == 0.5
    assert all(0 <= p.unchanged_low <= p.unchanged <= p.unchanged_high <= 1 for p in one.points)


def test_prepared_table_is_stored_verified_and_shared(emb: Embedding) -> None:
    assert open_table(emb, "madlib", tokens=256) is None
    built = obtain_table(emb, "madlib", tokens=256)
    again = open_table(emb, "madlib", tokens=256)
    assert again == built
    kinds = [i for i in list_artefacts(emb) if i.kind == CALIBRATION_KIND]
    assert kinds and kinds[0].params["mechanism"] == "madlib"
    # runtime-only options (batch size) share the table; a decode that changes the mechanism does not
    assert open_table(emb, "madlib", {"batch_size": 7}, tokens=256) == built
    assert open_table(emb, "madlib", {"index": "hnsw"}, tokens=256) is None


def test_madlib_curve_is_monotone_with_common_random_numbers(emb: Embedding) -> None:
    table = build_table(emb, "madlib", tokens=512)
    shares = [p.unchanged for p in table.points]
    assert shares == sorted(shares)  # draw by draw: the noise at eps is z0 / eps (docs/calibration.md)
    assert table.monotone()


def test_ray_shortcut_gives_the_table_of_full_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """madlib's exact decode along each token's noise ray (deniable.calibrate._rays): the same table as
    decoding every token at every point, most tokens settled without a decode; the exact faiss index and
    Mahalanobis noise (a linear map of madlib's: a ray too) as well."""
    from deniable.calibrate import _rays

    made: list[_rays.RayDecodes] = []

    class Counting(_rays.RayDecodes):
        def __init__(self, ids: np.ndarray) -> None:
            super().__init__(ids)
            made.append(self)

    monkeypatch.setattr(_rays, "RayDecodes", Counting)
    emb = _emb(400, dim=5, seed=11)
    for name, options in (("madlib", {}), ("madlib", {"index": "flat"}), ("mahalanobis", {})):
        made.clear()
        fast = build_table(emb, name, options, tokens=1024)
        full = build_table(emb, name, options, tokens=1024, ray_shortcut=False)
        assert fast.to_json() == full.to_json()
        (rays,) = made
        assert rays.settled > 2 * rays.decoded  # the point of it
        assert rays.decoded + rays.settled == 1024 * len(fast.points)


def test_ray_shortcut_outputs_are_the_mechanism_s_own() -> None:
    """Point by point, in any order (bracketed, above, below): what mech.privatize releases."""
    from deniable.calibrate._common import statistics_generator
    from deniable.calibrate._rays import RayDecodes

    emb = _emb(300, dim=4, seed=2)
    ids = reference_ids(emb.size, 2000)
    rays = RayDecodes(ids)
    for eps in (4.0, 16.0, 8.0, 5.5, 11.0, 2.0, 30.0, 9.5, 8.0):
        mech = make_mechanism("madlib", emb, eps)
        got = rays.privatize(mech, statistics_generator(7))
        want = mech.privatize(ids, statistics_generator(7))
        assert got is not None and np.array_equal(got, want)
    assert rays.settled > 0


def test_ray_shortcut_stays_out_of_what_it_cannot_prove() -> None:
    """An approximate decode, a non-uniform prior or another mechanism: privatized in full (None)."""
    from deniable.calibrate._common import statistics_generator
    from deniable.calibrate._rays import RayDecodes

    emb = _emb(200, dim=4, seed=4)
    rays = RayDecodes(reference_ids(emb.size, 256))
    for mech in (
        make_mechanism("madlib", emb, 5.0, index="hnsw"),
        make_mechanism("madlib", emb, 5.0, prior="zipf"),
        make_mechanism("tem", emb, 2.0),
        make_mechanism("vickrey", emb, 5.0),
    ):
        assert rays.privatize(mech, statistics_generator(1)) is None
    assert not rays.done


# -- resolution: the largest epsilon whose upper bound meets the target, never past a failure -----


def _point(eps: float, u: float, hi: float | None = None) -> CalibrationPoint:
    return CalibrationPoint(eps, 1000, u, max(0.0, u - 0.02), u + 0.02 if hi is None else hi, None, None)


def _table(points: list[CalibrationPoint]) -> CalibrationTable:
    return CalibrationTable("madlib", {}, "fp", 1000, 0, tuple(points), None)


def test_resolve_uses_the_upper_bound_and_never_jumps_a_failure() -> None:
    t = _table([_point(1, 0.05), _point(2, 0.30), _point(3, 0.49), _point(4, 0.70), _point(5, 0.45), _point(6, 0.9)])
    r = t.resolve("unchanged<=0.5")
    # 3's estimate 0.49 meets 0.5 but its upper bound 0.51 does not: conservative -> 2
    assert r.epsilon == 2 and r.next_point is not None and r.next_point.epsilon == 3
    assert t.resolve("unchanged<=0.52").epsilon == 3  # 5 meets it too, but 4 fails in between
    assert not t.monotone()  # 0.70 then 0.45: reported
    # the wrong-bound twin: choosing by the estimate would have picked 3
    assert max(p.epsilon for p in t.points[:3] if p.unchanged <= 0.5) == 3


def _rec_point(eps: float, u: float, rec: float | None, con: float | None = None) -> CalibrationPoint:
    return CalibrationPoint(eps, 1000, u, u, u, None, None, None, rec, rec, rec, con, con, con, "exact")


def test_grid_is_bisected_where_any_target_measure_moves() -> None:
    """The unchanged share is flat; recovered (or recovered_content) climbs: bisected there, to FINE_RATIO."""
    pts = {e: _rec_point(e, 0.1, r) for e, r in [(1.0, 0.10), (2.0, 0.11), (4.0, 0.40), (8.0, 0.41)]}
    assert _grid_bisected(pts, 100) == [pytest.approx(8**0.5)]  # only 2..4 moves (by 29 points)
    twin = {e: _rec_point(e, 0.1, None, r) for e, r in [(2.0, 0.1), (4.0, 0.4)]}  # recovered_content alone
    assert _grid_bisected(twin, 100) == [pytest.approx(8**0.5)]
    assert _grid_bisected({e: _rec_point(e, 0.1, 0.1) for e in (2.0, 4.0)}, 100) == []  # nothing moves
    close = {2.0: _rec_point(2.0, 0.1, 0.1), 2.0 * FINE_RATIO: _rec_point(2.0 * FINE_RATIO, 0.1, 0.5)}
    assert _grid_bisected(close, 100) == []  # a jump within FINE_RATIO is a jump: never bisected
    wide = {e: _rec_point(e, 0.1, r) for e, r in [(1.0, 0.0), (2.0, 0.02), (3.0, 0.30), (4.0, 0.35)]}
    assert _grid_bisected(wide, 1) == [pytest.approx(6**0.5)]  # no room for all: the largest move first
    assert _grid_bisected(wide, 0) == []


def test_default_grid_steps_stay_within_fine_when_or_fine_ratio() -> None:
    """Every neighbour pair of a default-grid table moves by at most FINE_WHEN in each measure, or is
    FINE_RATIO apart (or the table is at MAX_POINTS): what lets a target land within a step of its bound."""
    table = build_table(_emb(120, seed=5), "tem", tokens=512)
    pts = table.points
    assert len(pts) <= MAX_POINTS
    for a, b in itertools.pairwise(pts):
        moved = max(abs(b.unchanged - a.unchanged), abs((b.recovered or 0) - (a.recovered or 0)))
        assert moved <= FINE_WHEN or b.epsilon / a.epsilon <= FINE_RATIO * (1 + 1e-9) or len(pts) == MAX_POINTS


def test_no_epsilon_meets_the_target_is_an_error_naming_target() -> None:
    t = _table([_point(0.5, 0.6), _point(1, 0.8)])
    with pytest.raises(InvalidParameterError) as info:
        t.resolve("unchanged<=0.5")
    assert info.value.name == "target" and "even epsilon=0.5" in str(info.value)


@settings(max_examples=60, deadline=None)
@given(a=st.floats(0.01, 0.99), b=st.floats(0.01, 0.99))
def test_a_stricter_target_never_gets_a_larger_epsilon(a: float, b: float) -> None:
    shares = [0.0, 0.01, 0.05, 0.2, 0.35, 0.5, 0.62, 0.8, 0.9, 0.97, 0.995]
    t = _table([_point(2.0 ** (i / 2), u) for i, u in enumerate(shares)])
    lo, hi = sorted((a, b))

    def eps(x: float) -> float:
        try:
            return t.resolve(Target(x)).epsilon
        except InvalidParameterError:
            return 0.0

    assert eps(lo) <= eps(hi)
    if eps(hi):
        r = t.resolve(Target(hi))
        assert r.point.unchanged_high <= hi
        assert r.next_point is None or r.next_point.unchanged_high > hi


def test_auto_meets_the_target_when_re_measured(emb: Embedding) -> None:
    """The chosen epsilon re-evaluated on an independent public sample meets the target (with its slack)."""
    mech = make_mechanism("madlib", emb, "auto", target="unchanged<=0.4")
    res = resolution_of(mech)
    assert res is not None and res.point.unchanged_high <= 0.4
    ids = reference_ids(emb.size, 4000, seed=99)
    out = mech.privatize(ids, np.random.default_rng(5))
    assert (out == ids).mean() <= 0.4 + 0.03
    if res.next_point is not None:  # the next grid epsilon fails the target
        assert res.next_point.unchanged_high > 0.4


def test_make_mechanism_auto_errors(emb: Embedding) -> None:
    with pytest.raises(InvalidParameterError) as info:
        make_mechanism("madlib", emb, "auto")
    assert info.value.name == "target"
    with pytest.raises(InvalidParameterError) as info:
        make_mechanism("madlib", emb, 3.0, target="unchanged<=0.5")
    assert info.value.name == "target"
    with pytest.raises(InvalidParameterError) as info:
        make_mechanism("madlib", emb, "automatic")
    assert info.value.name == "epsilon"


# -- strength: every summary, in words -------------------------------------------------------------


def test_strength_warns_when_most_tokens_survive(emb: Embedding) -> None:
    weak = strength(make_mechanism("madlib", emb, 1e6))
    assert weak.expected_unchanged > 0.9 and weak.warning() and "WEAK" in weak.warning()  # type: ignore[operator]
    strong = strength(make_mechanism("madlib", emb, 0.5))
    assert strong.expected_unchanged < 0.2 and strong.warning() is None
    # no curve prepared for this embedding's madlib (an earlier test may have): one point, stored
    assert "calibration table" in strong.source or "1,024 public reference tokens, stored" in strong.source
    again = strength(make_mechanism("madlib", emb, 0.5))  # a new mechanism (a new process) reads the stored point
    assert again.expected_unchanged == strong.expected_unchanged and again.upper == strong.upper
    d = strong.describe()
    assert d["epsilon"] == 0.5 and "statement" in d and "warning" not in d


def test_strength_does_not_depend_on_the_input(emb: Embedding) -> None:
    a = Privatizer(make_mechanism("madlib", emb, 2.0))
    b = Privatizer(make_mechanism("madlib", emb, 2.0))
    a.privatize_batch(["w0 w0 w0"] * 100)
    b.privatize_batch(["w290 w17"] * 3)
    assert strength(a.mechanism) == strength(b.mechanism)


# -- the same epsilon through the CLI, the library and the service; manifest and summary ----------


def test_cli_library_and_service_resolve_the_same_epsilon(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from deniable.service import create_app
    from deniable.service._config import config_from_mapping

    toy = make_toy_embedding()
    target = "unchanged<=0.5"
    lib = make_mechanism("madlib", toy, "auto", target=target, index="exact")
    src = tmp_path / "in.txt"
    src.write_text("the hockey game was great\nnasa launched a rocket\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    code = run_app(
        ["privatize", str(src), "-o", str(out), "--epsilon", "auto", "--target", target, "--index", "exact",
         "--embedding", str(emb_dir)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0
    manifest = json.loads((tmp_path / "out.txt.manifest.json").read_text())
    assert manifest["mechanism"]["epsilon"] == lib.epsilon
    assert manifest["privacy"]["target"] == target and manifest["privacy"]["auto"]["epsilon"] == lib.epsilon
    assert "expected_unchanged" in manifest["privacy"] and manifest["privacy"]["statement"]
    assert f"at epsilon={lib.epsilon:g}" in err and target in err and "strength:" in err

    cfg = config_from_mapping({"mechanisms": {"madlib": {"epsilons": [target, 1e9], "client": {"index": ["exact"]}}}})
    app = create_app(toy, cfg)
    with TestClient(app) as client:
        r = client.post("/v1/privatize", json={"texts": ["the hockey game"], "epsilon": target})
        assert r.status_code == 200, r.text
        info = r.json()["mechanism"]
        assert info["epsilon"] == lib.epsilon and info["target"] == target
        assert info["privacy"]["expected_unchanged"] <= 0.5
        r = client.post("/v1/privatize", json={"texts": ["the hockey game"], "epsilon": 1e9})
        assert r.status_code == 200 and "warning" in r.json()["mechanism"]["privacy"]
        r = client.post("/v1/privatize", json={"texts": ["the game"], "epsilon": "unchanged<=0.4"})
        assert r.status_code == 422
        offered = client.get("/v1/mechanisms").json()["mechanisms"]["madlib"]
        assert any(p["offered"] == target and p["epsilon"] == lib.epsilon for p in offered["privacy"])


def test_service_config_rejects_a_bad_target() -> None:
    from deniable.service._config import config_from_mapping

    with pytest.raises(InvalidParameterError) as info:
        config_from_mapping({"mechanisms": {"madlib": {"epsilons": ["unchanged>=0.5"]}}})
    assert info.value.name == "mechanisms.madlib.epsilons"


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["--epsilon", "auto", "--target", "unchanged>0.5x"], "--target"),
        (["--epsilon", "auto", "--target", "most"], "--target"),
        (["--epsilon", "auto"], "--target"),
        (["--epsilon", "3", "--target", "unchanged<=0.5"], "--target"),
        (["--epsilon", "often"], "--epsilon"),
    ],
)
def test_cli_bad_target_exits_2_naming_the_parameter(
    args: list[str], name: str, emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.txt"
    src.write_text("hockey\n", encoding="utf-8")
    code = run_app(["privatize", str(src), "-o", str(tmp_path / "o.txt"), *args, "--embedding", str(emb_dir)])
    err = capsys.readouterr().err
    assert code == 2 and name in err
    assert not (tmp_path / "o.txt").exists()


def test_cli_summary_states_strength_and_warns(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.txt"
    src.write_text("the hockey game\n", encoding="utf-8")
    code = run_app(["privatize", str(src), "-o", str(tmp_path / "o.txt"), "-e", "1e9", "--embedding", str(emb_dir)])
    err = capsys.readouterr().err
    assert code == 0 and "strength: about 100% of the word tokens" in err and "WEAK" in err
    manifest = json.loads((tmp_path / "o.txt.manifest.json").read_text())
    assert manifest["privacy"]["epsilon"] == 1e9 and manifest["privacy"]["target"] is None
    assert "warning" in manifest["privacy"]


def test_prepare_calibration_cli_and_report(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    args = ["prepare", "--calibration", "-m", "madlib", "--embedding", str(emb_dir), "--report", str(tmp_path / "r")]
    code = run_app(args)
    err = capsys.readouterr().err
    assert code == 0 and "calibration of madlib" in err and "unchanged" in err
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "A typical text against epsilon" in page and (tmp_path / "r" / "curve.png").stat().st_size > 1000
    # prepared: auto now reads it (no notice), and the summary says it comes from the table
    src = tmp_path / "in.txt"
    src.write_text("the hockey game\n", encoding="utf-8")
    code = run_app(
        ["privatize", str(src), "-o", str(tmp_path / "o.txt"), "-e", "auto", "--target", "unchanged<=0.5",
         "--embedding", str(emb_dir)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and "measuring it now" not in err and "calibration table" in err


def test_verdict_says_when_no_epsilon_gives_both() -> None:
    def pt(eps: float, u: float, near: float) -> CalibrationPoint:
        return CalibrationPoint(eps, 4000, u, u - 0.01, u + 0.01, None, None, near)

    salad = _table([pt(2, 0.01, 0.005), pt(3, 0.09, 0.02), pt(4, 0.45, 0.03), pt(5, 0.85, 0.02), pt(6, 0.95, 0.01)])
    text = salad.verdict()
    assert text.startswith("No epsilon gives both") and "epsilon <= 4" in text and "5%" in text
    assert "from 45% at epsilon 4 to 95% at 6" in text
    neighbours = _table([pt(4, 0.05, 0.50), pt(8, 0.40, 0.40), pt(12, 0.80, 0.15)])
    assert "stay related" in neighbours.verdict() and "at epsilon 8" in neighbours.verdict()
    hopeless = _table([pt(1, 0.7, 0.1)])
    assert "cannot hide most words" in hopeless.verdict()


def test_engines_resolve_on_the_driver_to_the_same_epsilon(emb_dir: Path) -> None:
    import pickle

    from deniable.integrations import BatchPrivatizer

    target = "unchanged<=0.5"
    lib = make_mechanism("madlib", make_toy_embedding(), "auto", target=target)
    batch = BatchPrivatizer.for_columns("text", "madlib", "auto", target=target, embedding=str(emb_dir))
    assert batch.epsilon == lib.epsilon and batch.describe()["target"] == target
    worker = pickle.loads(pickle.dumps(batch))  # what an executor gets: the number, no table needed
    assert worker.epsilon == lib.epsilon
    out, _ = worker.privatize_texts(["the hockey game", None])
    assert out[1] is None and isinstance(out[0], str)
    assert resolution_of(worker.privatizer().mechanism) is not None
    assert strength(worker.privatizer().mechanism).target == target
    with pytest.raises(InvalidParameterError) as info:
        BatchPrivatizer(epsilon="auto", embedding=str(emb_dir))
    assert info.value.name == "target"
    with pytest.raises(InvalidParameterError) as info:
        BatchPrivatizer(epsilon=3.0, target=target, embedding=str(emb_dir))
    assert info.value.name == "target"


def test_the_strength_estimate_is_measured_once_and_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    import deniable.calibrate.table as table
    from deniable.artefacts import list_artefacts

    emb = make_tiny_embedding(300, 4, seed=91)  # an embedding no other test calibrates
    calls = []
    real = table.evaluate_point
    monkeypatch.setattr(table, "evaluate_point", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = strength(make_mechanism("madlib", emb, 2.0))
    second = strength(make_mechanism("madlib", emb, 2.0))  # as the next CLI run: a new mechanism
    assert len(calls) == 1 and second == first and "stored" in first.source
    stored = [a for a in list_artefacts(emb) if a.kind == "calibration"]
    assert len(stored) == 1 and stored[0].params["epsilons"] == [2.0] and stored[0].params["tokens"] == 1024
    strength(make_mechanism("madlib", emb, 3.0))  # another epsilon: another point
    assert len(calls) == 2


def test_a_default_mechanism_reads_the_table_prepared_for_its_defaults() -> None:
    # TEM derives gamma from beta; the table is keyed by the options as given ({}), not by that gamma
    emb = make_tiny_embedding(400, 4, seed=92)
    obtain_table(emb, "tem", {})
    assert strength(make_mechanism("tem", emb, 4.0)).source.startswith("calibration table")
