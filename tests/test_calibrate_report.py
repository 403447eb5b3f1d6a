"""`deniable calibrate` and the HTML/PNG report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from calibrate_fakes import RefTEM
from deniable import Embedding
from deniable.calibrate import choose_epsilon, neighbour_distances, plausible_deniability
from deniable.cli import run_app

PNG = b"\x89PNG\r\n\x1a\n"


def test_write_report(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from deniable.report import write_report

    words = ["<script>alert(1)</script>", "b&b", "plain"] + [f"w{i}" for i in range(40)]
    vec = np.random.default_rng(0).normal(size=(len(words), 3)).astype(np.float32)
    emb = Embedding(words, vec)
    choice = choose_epsilon(lambda e: RefTEM(emb, e), [1, 4, 16], samples=100)
    geo = neighbour_distances(emb, ks=(1, 2, 5, 10))
    examples = {words[0]: {1.0: ["b&b", "plain"], 16.0: [words[0]]}}
    page = write_report(
        tmp_path / "rep", [e.stats for e in choice.evaluations], geometry=geo, examples=examples, choice=choice
    )
    html = page.read_text()
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    for name in ("histograms.png", "averages.png", "neighbours.png"):
        assert (tmp_path / "rep" / name).read_bytes()[:8] == PNG
        assert name in html
    assert "Choosing epsilon" in html and "Example outputs" in html
    csv_lines = (tmp_path / "rep" / "stats.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 3 * len(words)


def test_plots_alone(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from deniable.report import plot_averages, plot_histograms

    emb = Embedding([f"w{i}" for i in range(30)], np.random.default_rng(1).normal(size=(30, 2)).astype(np.float32))
    stats = [plausible_deniability(RefTEM(emb, e), samples=50) for e in (1.0, 3.0)]
    assert plot_histograms(stats, tmp_path / "h.png").read_bytes()[:8] == PNG
    assert plot_averages(stats, tmp_path / "a.png").read_bytes()[:8] == PNG


def test_cli_calibrate_report(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    rep = tmp_path / "calib"
    args = ["calibrate", "-m", "madlib", "-e", "0.5,2,8", "--embedding", str(emb_dir), "--words", "all"]
    args += ["--samples", "100", "--seed", "3", "--report", str(rep), "--geometry-words", "18", "--quiet"]
    args += ["--examples", "hockey,nasa,notaword"]
    code = run_app(args)
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "N_w mean" in out.out and "monotone" in out.out
    assert "H (bits) median" in out.out  # piped: the table is not cut to 80 columns
    assert "1 example word(s) not in the vocabulary" in out.err and "notaword" not in out.err
    html = (rep / "index.html").read_text()
    assert "hockey" in html and "Embedding geometry" in html
    assert all((rep / n).is_file() for n in ("histograms.png", "averages.png", "neighbours.png", "stats.csv"))


def test_cli_calibrate_without_report(emb_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_app(["calibrate", "-e", "1,4", "--embedding", str(emb_dir), "--words", "5", "--samples", "20", "-q"])
    assert code == 0
    assert "constraints:" in capsys.readouterr().out


def test_cli_report_without_matplotlib_is_refused_before_the_work(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """calibrate --report and prepare --calibration --report check for matplotlib first (exit 3, no work done)."""
    import importlib.util

    import deniable.calibrate
    import deniable.preparation

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    calls: list[str] = []
    monkeypatch.setattr(deniable.calibrate, "choose_epsilon", lambda *a, **k: calls.append("choose"))
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    common = ["--embedding", str(emb_dir), "--report", str(tmp_path / "rep"), "-q"]
    assert run_app(["calibrate", "-e", "1,4", "--words", "5", *common]) == 3
    assert "matplotlib" in capsys.readouterr().err
    assert run_app(["prepare", "--calibration", "-m", "tem", *common]) == 3
    assert "matplotlib" in capsys.readouterr().err
    assert not calls and not (tmp_path / "rep").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    "extra",
    [["--words", "zero"], ["--words", "0"], ["-e", "1,x"], ["--samples", "0"], ["-m", "nope"], ["--gamma", "1"]],
)
def test_cli_calibrate_errors(emb_dir: Path, extra: list[str]) -> None:
    args = ["calibrate", "-e", "1", "--embedding", str(emb_dir), *extra]
    assert run_app(args) == 2


def _brute_force_knn(codes: np.ndarray, ids: np.ndarray, ks: tuple[int, ...]) -> np.ndarray:
    from deniable.metrics import hamming

    d = hamming(codes[ids][:, None, :], codes[None, :, :]).astype(float)
    d[np.arange(ids.size), ids] = np.inf  # not its own neighbour
    return np.sort(d, axis=1)[:, np.asarray(ks) - 1]


def test_hamming_neighbour_distances_from_codes_alone() -> None:
    from deniable.binarize.device import CodeVocabulary
    from deniable.mechanisms.brr import SharedCodesWarning

    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, (60, 4), dtype=np.uint8)
    codes[7] = codes[3]  # a shared code: distance 0 to the k = 1 neighbour
    words = [f"w{i}" for i in range(60)]
    dev = CodeVocabulary(words, codes)
    geo = neighbour_distances(dev, None, ks=(1, 2, 5, 10), metric="hamming")  # the artefact's own codes
    assert geo.metric == "hamming" and geo.index == "flat" and not geo.sampled
    assert np.array_equal(geo.distances, _brute_force_knn(codes, np.arange(60), (1, 2, 5, 10)))
    assert geo.at(1)[3] == 0 and geo.at(1)[7] == 0
    assert "Hamming distance (bits)" in geo.describe() and geo.label == "Hamming distance (bits)"
    # one histogram bin per whole number of bits
    counts, edges = geo.histogram(10, bins=60)
    assert np.all(np.diff(edges) == 1) and np.all(edges % 1 == 0.5) and counts.sum() == 60
    # a float embedding with the mechanism's codes, on a sample: same distances for the sampled words
    emb = Embedding(words, rng.normal(size=(60, 3)).astype(np.float32))
    sample = neighbour_distances(emb, 20, ks=(1, 3), metric="hamming", codes=codes, rng=rng)
    assert sample.sampled and len(sample) == 20
    assert np.array_equal(sample.distances, _brute_force_knn(codes, sample.ids, (1, 3)))
    # percentiles and table are the shared summary
    assert [r["k"] for r in sample.table()] == [1, 3]
    from deniable import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="codes"):
        neighbour_distances(emb, 5, metric="hamming")  # a float embedding needs the codes
    with pytest.raises(InvalidParameterError, match="codes"):
        neighbour_distances(emb, 5, codes=codes)  # codes only with metric="hamming"
    with pytest.raises(InvalidParameterError, match="codes"):
        neighbour_distances(emb, 5, metric="hamming", codes=codes[:10])
    with pytest.warns(SharedCodesWarning):  # the mechanism's codes are what the report uses
        from deniable import BinaryRandomizedResponse

        BinaryRandomizedResponse(emb, 1.0, binarizer=codes)


@pytest.mark.filterwarnings("ignore::deniable.mechanisms.brr.SharedCodesWarning")
@pytest.mark.parametrize("source", ["device", "float"])
def test_cli_calibrate_brr_report_uses_hamming_distances(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str
) -> None:
    """brr's report plots Hamming distances between its codes, also from a device artefact alone."""
    pytest.importorskip("matplotlib")
    from deniable import BinaryRandomizedResponse
    from deniable.binarize.device import load_device_artefact
    from deniable.embedding import load_embedding

    mech = BinaryRandomizedResponse(load_embedding(str(emb_dir)), 1.0, bits=64, binarizer="simhash")
    dev = tmp_path / "dev"
    mech.export_device(dev)
    rep = tmp_path / "rep"
    if source == "device":
        emb = ["--embedding", str(dev)]
    else:
        emb = ["--embedding", str(emb_dir), "--bits", "64", "--binarizer", "simhash"]
    args = ["calibrate", "-m", "brr", "-e", "1,4", *emb, "--words", "all", "--samples", "30", "--seed", "2"]
    args += ["--report", str(rep), "--geometry-words", "18", "--quiet", "--examples", "hockey"]
    code = run_app(args)
    out = capsys.readouterr()
    assert code == 0, out.err
    html = (rep / "index.html").read_text()
    assert "Hamming distance (bits) to the k-th nearest other word" in html and "euclidean" not in html
    assert (rep / "neighbours.png").read_bytes()[:8] == PNG
    codes = np.asarray(load_device_artefact(dev).codes)
    expected = _brute_force_knn(codes, np.arange(18), (1, 2, 5, 10))
    p5_at_k1 = f'<td class="l">1</td><td class="">{np.percentile(expected[:, 0], 5):,.4g}</td>'
    assert p5_at_k1 in html
