"""``deniable bow privatize / inspect / evaluate`` end to end, and the evaluation metrics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from deniable import InvalidParameterError
from deniable.bow import BowRelease, load_release
from deniable.cli import run_app
from deniable.cli.bow import parse_size
from fake_mechanisms import run_cli

SECRET = "Puckish"  # a document word that must never appear in messages

TEXTS = [
    f"{SECRET} hockey game puck goal",
    "nasa rocket launch orbit",
    "the game was great, a great match",
    "",
    "esa orbit launch rocket rocket",
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from conftest import make_toy_embedding

    root = tmp_path_factory.mktemp("bowcli")
    emb = make_toy_embedding()
    emb.save(root / "emb")
    (root / "vocab.txt").write_text("\n".join(emb.vocabulary) + "\n", encoding="utf-8")
    (root / "docs.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    (root / "docs.jsonl").write_text(
        "".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(TEXTS)), encoding="utf-8"
    )
    return {
        "root": root,
        "emb": root / "emb",
        "vocab": root / "vocab.txt",
        "txt": root / "docs.txt",
        "jsonl": root / "docs.jsonl",
    }


def privatize_args(files: dict[str, Path], source: str, out: Path, *extra: str) -> list[str]:
    """``bow privatize FILES[SOURCE] -o OUT`` with the test vocabulary, no stop words, seed 3, then EXTRA."""
    common = ["--vocabulary", str(files["vocab"]), "--stop-words", "none", "--seed", "3"]
    return ["bow", "privatize", str(files[source]), "-o", str(out), *common, *extra]


def privatized(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], source: str, out: Path, *extra: str
) -> tuple[BowRelease, str]:
    """Run :func:`privatize_args`, require exit code 0 (stderr shown otherwise): (the release, stderr)."""
    code, _, err = run_cli(privatize_args(files, source, out, *extra), capsys)
    assert code == 0, err
    return load_release(out), err


@pytest.mark.parametrize("strategy", ["random", "frequency", "semantic", "none"])
def test_privatize_writes_a_release(
    files: dict[str, Path], tmp_path: Path, strategy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rel"
    report = tmp_path / "report.json"
    extra = ["--strategy", strategy, "--embedding", str(files["emb"]), "--report", str(report)]
    rel, err = privatized(files, capsys, "txt", out, *"-e 2 -N 2 -k 3 --map-seed 5".split(), *extra)
    k = 18 if strategy == "none" else 3
    assert rel.shape == (len(TEXTS), k)
    assert rel.params["epsilon"] == 2 and rel.params["precision_N"] == 2
    assert rel.bin_map.strategy == strategy
    rep = json.loads(report.read_text())
    assert rep["documents"] == rel.shape[0] and rep["bins"] == k
    assert "signal/noise" in err and SECRET not in err and SECRET.lower() not in err


def test_privatize_jsonl_column_group_and_clamp(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rel"
    rel, _ = privatized(files, capsys, "jsonl", out, *"-c body -e 1 -k 4 -g 2 --clamp -q".split())
    assert rel.shape == (3, 4) and rel.matrix.toarray().min() >= 0
    assert rel.params["clamp_at_zero"] is True and rel.params["group"] == 2


def test_noiseless_cli_release_equals_the_counts(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rel"
    rel, _ = privatized(files, capsys, "jsonl", out, *"-c body -e 1000 --strategy none -q --batch-size 2".split())
    idx = {w: i for i, w in enumerate(rel.vocabulary.words)}
    assert rel.matrix[1, idx["rocket"]] == 1 and rel.matrix[4, idx["rocket"]] == 2
    assert rel.matrix[3].sum() == 0 and rel.matrix[0, idx["hockey"]] == 1


def test_inspect(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rel"
    privatized(files, capsys, "txt", out, "-e", "1", "-k", "3", "-q")
    code, stdout, _ = run_cli(["bow", "inspect", str(out), "--show-bins", "2"], capsys)
    assert code == 0 and "matrix 5 x 3" in stdout and "bin 1:" in stdout


@pytest.mark.parametrize(
    ("extra", "code", "needle"),
    [
        (["--strategy", "kmeans"], 2, "--strategy"),
        (["-k", "0"], 2, "--bins"),
        (["-k", "500"], 2, "--bins"),
        (["--precision", "0"], 2, "--precision"),
        (["--max-memory", "lots"], 2, "--max-memory"),
        (["--strategy", "none", "--max-memory", "1k"], 3, "dense"),
        (["--map-from-data", "--strategy", "random"], 2, "--map-from-data"),
        (["--stop-words", "french"], 2, "--stop-words"),
    ],
)
def test_privatize_errors(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], code: int, needle: str
) -> None:
    got, _, err = run_cli(privatize_args(files, "txt", tmp_path / "o", "-e", "1", "-k", "3", "-q", *extra), capsys)
    assert got == code and needle in err and SECRET not in err
    assert not (tmp_path / "o").exists()


def test_report_must_stay_outside_the_release(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    code, _, err = run_cli(
        privatize_args(files, "txt", out, "-e", "1", "-k", "3", "-q", "--report", str(out / "r.json")), capsys
    )
    assert code == 2 and "--report" in err


def test_map_from_data_is_recorded(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    rel, err = privatized(files, capsys, "txt", out, "-e", "1", "-k", "3", "--map-from-data")
    assert "leaks" in err
    assert "private data" in rel.params["bin_map"]["frequency_source"]
    assert "leaks" in rel.params["map_assumption"]


def test_public_corpus_sets_the_frequency_prior(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    extra = ["--public-corpus", str(files["jsonl"]), "--public-column", "body"]
    rel, _ = privatized(files, capsys, "txt", out, "-e", "1", "-k", "3", "-q", *extra)
    assert "public corpus" in rel.params["bin_map"]["frequency_source"]


def test_parse_size() -> None:
    assert parse_size("x", "2G") == 2 * 2**30
    assert parse_size("x", "1.5k") == 1536
    assert parse_size("x", "500MB") == 500 * 2**20
    assert parse_size("x", "123") == 123


# ------------------------------------------------------------------ evaluation
def test_evaluation_metrics() -> None:
    pytest.importorskip("sklearn")
    from deniable.experiments.topics import chance_jaccard, exclusivity, jaccard_top_words, match_topics, npmi_coherence

    ref = np.array([[0.5, 0.3, 0.1, 0.1, 0.0, 0.0], [0.0, 0.0, 0.1, 0.1, 0.3, 0.5]])
    assert jaccard_top_words(ref, ref[::-1], n=2) == 1.0
    np.testing.assert_array_equal(match_topics(ref, ref[::-1]), [1, 0])
    assert 0.5 < exclusivity(ref, n=2) <= 1.0
    docs = sp.csr_matrix(np.array([[1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1], [0, 0, 1, 1, 0, 0]]))
    assert npmi_coherence(ref, docs, n=2) == pytest.approx(1.0)
    assert chance_jaccard(10, 10) == pytest.approx(1.0)
    assert 0 < chance_jaccard(50, 10) < 0.2


def test_run_evaluation_on_a_toy_corpus(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    from deniable.bow import Vocabulary
    from deniable.experiments.topics import (
        EvalConfig,
        markdown_table,
        read_results,
        run_evaluation,
        summary_tables,
        write_results,
    )

    rng = np.random.default_rng(0)
    sport = ["hockey", "puck", "goal", "game", "match", "soccer"]
    space = ["nasa", "rocket", "orbit", "launch", "esa"]
    texts, labels = [], []
    for i in range(80):
        words = sport if i % 2 else space
        texts.append(" ".join(rng.choice(words, size=12)))
        labels.append("sport" if i % 2 else "space")
    vocab = Vocabulary(tuple(sport + space))
    cfg = EvalConfig(
        dataset="cfpb",
        n_docs=80,
        epsilons=(1.0, 5.0),
        precisions=(1.0,),
        bins=(4,),
        strategies=("random", "frequency-heldout"),
        lda_iter=3,
    )
    with pytest.raises(InvalidParameterError, match="heldout"):
        run_evaluation(cfg, texts=texts, labels=labels, vocabulary=vocab)
    results = run_evaluation(cfg, texts=texts, labels=labels, vocabulary=vocab, heldout=texts[:10])
    rows = results.wide()  # one row per fit, a column per metric
    kinds = [r["kind"] for r in rows]
    assert kinds.count("reference") == 1 and kinds.count("clean") == 2 and kinds.count("private") == 4
    ref = rows[0]
    assert ref["accuracy"] > 0.9 and ref["jaccard"] == 1.0
    for r in rows:
        assert 0 <= r["exclusivity"] <= 1 and -1 <= r["npmi"] <= 1
    paths = write_results(results, tmp_path, cfg)
    assert (tmp_path / "results.csv").read_text().count("\n") == len(rows) + 1
    assert "Jaccard" in markdown_table(results) and len(paths) == 4
    # the CSV reads back into the same results, and tables / plots can be re-rendered from it
    back = read_results(tmp_path / "results.csv")
    assert [(r["kind"], r["strategy"], r["bins"]) for r in back.wide()] == [
        (r["kind"], r["strategy"], r["bins"]) for r in rows
    ]
    np.testing.assert_allclose([r["accuracy"] for r in back.wide()], [r["accuracy"] for r in rows])
    assert markdown_table(back) == markdown_table(results)
    summary = (tmp_path / "summary.md").read_text()
    assert summary.strip() == summary_tables(results) and "eps/N=5 (eps=5, N=1)" in summary
    assert summary.count("| random | 4 |") == 4  # one row per metric table
    code = run_app(
        ["bow", "evaluate", "-o", str(tmp_path / "again"), "--from-results", str(paths[0]), "--no-plots", "-q"]
    )
    assert code == 0 and (tmp_path / "again" / "summary.md").read_text() == summary


@pytest.mark.data
def test_evaluate_cli_on_shared_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    from conftest import shared_data

    root = shared_data("cfpb").parent
    code, _, err = run_cli(
        [
            "bow",
            "evaluate",
            "-o",
            str(tmp_path),
            "--data-dir",
            str(root),
            "--docs",
            "120",
            "--epsilons",
            "3",
            "--precisions",
            "1",
            "--bins",
            "20",
            "--strategies",
            "frequency",
            "--lda-iter",
            "2",
            "--vocab-size",
            "3000",
            "-q",
        ],
        capsys,
    )
    assert code == 0, err
    assert (tmp_path / "results.md").is_file() and (tmp_path / "cfpb.png").is_file()
    assert "cfpb: LSA + random forest accuracy" in (tmp_path / "summary.md").read_text()


def test_run_evaluation_skips_too_dense_private_conditions() -> None:
    pytest.importorskip("sklearn")
    from conftest import TOPIC_WORDS, two_topic_corpus
    from deniable.bow import Vocabulary
    from deniable.experiments.topics import EvalConfig, markdown_table, run_evaluation

    texts, labels = two_topic_corpus()
    cfg = EvalConfig(
        n_docs=40, epsilons=(0.5, 50.0), precisions=(1.0,), strategies=("none",), lda_iter=2, max_nonzero=150
    )
    results = run_evaluation(cfg, texts=texts, labels=labels, vocabulary=Vocabulary(TOPIC_WORDS))
    rows = results.wide(extra=("note",))
    clean = next(r for r in rows if r["kind"] == "clean")
    assert clean["strategy"] == "none" and clean["jaccard"] == 1.0  # the reference fit, reused
    private = {r["epsilon"]: r for r in rows if r["kind"] == "private"}
    # eps/N = 0.5: ~120 counts + 38% of 240 entries > 150; eps/N = 50: the ~120 counts only
    assert private[0.5]["note"].startswith("skipped") and np.isnan(private[0.5]["accuracy"])
    assert private[50.0]["note"] == "" and private[50.0]["snr"] > 100
    assert "skipped" in markdown_table(results)


def test_evaluate_seeds_must_be_consecutive(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    code = run_app(["bow", "evaluate", "-o", str(tmp_path / "o"), "--data-dir", str(tmp_path), "--seeds", "0,5"])
    assert code != 0 and not (tmp_path / "o").exists()


# -- SynTF from `bow privatize` (issue 40: it was reachable only from `bow evaluate`) -----------------


@pytest.mark.parametrize("neighbours", [None, "2"])
def test_privatize_offers_syntf(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], neighbours: str | None
) -> None:
    extra = ["-e", "2", "--mechanism", "syntf", "--syntf-length", "7"]
    if neighbours is not None:
        extra += ["--syntf-neighbours", neighbours, "--embedding", str(files["emb"])]
    release, err = privatized(files, capsys, "txt", tmp_path / "syn", *extra)
    vocab = files["vocab"].read_text(encoding="utf-8").split()
    assert release.shape == (len(TEXTS), len(vocab))  # one row per record, one column per word (no bins)
    assert np.asarray(release.matrix.sum(axis=1)).ravel().tolist() == [7] * len(TEXTS)
    assert release.params["mechanism"] == "syntf" and release.params["length"] == 7
    assert release.params["similarity"] == (
        "identity" if neighbours is None else "public: 2 nearest embedding neighbours"
    )
    assert SECRET not in err and SECRET not in json.dumps(release.params)


def test_syntf_is_declared_with_the_option_type_of_every_mechanism() -> None:
    from deniable.bow.files import RELEASES
    from deniable.bow.syntf import SynTF
    from deniable.mechanisms import Option

    assert set(RELEASES) == {"lplp", "syntf"} and RELEASES["syntf"] is SynTF.options
    assert all(isinstance(o, Option) and o.high is not None for o in SynTF.options)
    with pytest.raises(InvalidParameterError, match="length"):
        SynTF(1.0, 100_001)  # the declared bound, in the constructor too


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--syntf-length", "5"], "--syntf-length"),  # a SynTF flag with LPLP: refused, not ignored
        (["-m", "syntf", "-N", "3"], "--precision"),  # an LPLP flag with SynTF
        (["-m", "syntf", "--group", "2"], "--group"),
        (["-m", "syntf", "--syntf-length", "0"], "--syntf-length"),
        (["-m", "syntf", "--syntf-neighbours", "5000"], "--syntf-neighbours"),
        (["-m", "nope"], "--mechanism"),
    ],
)
def test_privatize_refuses_the_other_release_s_flags(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    got, _, err = run_cli(privatize_args(files, "txt", tmp_path / "o", "-e", "1", "-q", *extra), capsys)
    assert got == 2 and needle in err and SECRET not in err
    assert not (tmp_path / "o").exists()
