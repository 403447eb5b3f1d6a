"""End-to-end tests of ``deniable privatize`` on every file format, and its errors."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deniable import Embedding
from deniable.cli import run_app

SECRET = "Hockey"  # must never appear in an error message


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = run_app(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def base(emb_dir: Path, eps: str = "1e9") -> list[str]:
    """Identity-style runs: case and out-of-vocabulary tokens kept (explicit opt-ins, not the defaults)."""
    return ["--epsilon", eps, "--embedding", str(emb_dir), "--seed", "1", "-q", "--case", "keep", "--oov", "keep"]


def test_txt_identity_at_huge_epsilon(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.txt"
    data = "The Hockey game was great!\r\n\n\nNASA launched a rocket é 😀\nno newline at end"
    src.write_bytes(data.encode())
    code, _, _ = run(["privatize", str(src), "-o", str(tmp_path / "out.txt"), *base(emb_dir)], capsys)
    assert code == 0
    assert (tmp_path / "out.txt").read_bytes() == data.encode()


def test_txt_small_epsilon_changes_words_keeps_lines(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.txt"
    src.write_text("hockey game\n\nnasa rocket\n" * 50, encoding="utf-8")
    code, _, _ = run(["privatize", str(src), "-o", str(tmp_path / "o.txt"), *base(emb_dir, "0.5")], capsys)
    assert code == 0
    out = (tmp_path / "o.txt").read_text(encoding="utf-8")
    assert out.count("\n") == 150 and out != src.read_text(encoding="utf-8")


def write_csv(path: Path, rows: list[list[str]], terminator: str = "\r\n") -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator=terminator).writerows(rows)


@pytest.mark.parametrize("terminator", ["\r\n", "\n"])
def test_csv_keeps_other_columns_rows_and_quoting(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], terminator: str
) -> None:
    rows = [
        ["id", "text", "note", "title"],
        ["007", "the hockey game,\nwas great", 'says "hi", ok', "Nasa"],
        ["2", "", "ünïcödé, 😀", "rocket launch"],
        ["3", "it is", "", "x"],
    ]
    src, dst = tmp_path / "in.csv", tmp_path / "out.csv"
    write_csv(src, rows, terminator)
    args = ["privatize", str(src), "-o", str(dst), "--column", "text", "--column", "title"]
    code, _, _ = run([*args, *base(emb_dir)], capsys)
    assert code == 0
    assert dst.read_bytes() == src.read_bytes()
    code, _, _ = run([*args, *base(emb_dir, "0.1")], capsys)
    with open(dst, newline="", encoding="utf-8") as fh:
        back = list(csv.reader(fh))
    assert len(back) == len(rows)
    assert [r[0] for r in back] == [r[0] for r in rows]
    assert [r[2] for r in back] == [r[2] for r in rows]
    assert back[1][1].count("\n") == 1 and back[1][1].count(",") == 1


def test_jsonl_keeps_other_keys(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = [
        {"id": 1, "text": "the hockey game", "meta": {"a": [1, 2]}},
        {"id": 2, "text": None},
        {"text": "nasa é", "z": 1.5},
    ]
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    code, _, _ = run(["privatize", str(src), "-o", str(dst), "-c", "text", *base(emb_dir, "0.1")], capsys)
    assert code == 0
    back = [json.loads(line) for line in dst.read_text(encoding="utf-8").splitlines()]
    assert [list(r) for r in back] == [list(r) for r in recs]
    assert back[1]["text"] is None and back[0]["meta"] == {"a": [1, 2]} and back[2]["z"] == 1.5


def test_parquet_keeps_schema_and_nulls(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = pa.table(
        {"id": pa.array([3, 1, 2], pa.int64()), "text": ["the hockey game", None, "nasa"], "score": [0.5, 1.5, None]}
    )
    src, dst = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(table, src)
    code, _, _ = run(["privatize", str(src), "-o", str(dst), "-c", "text", "--batch-size", "2", *base(emb_dir)], capsys)
    assert code == 0
    back = pq.read_table(dst)
    assert back.schema == table.schema
    assert back.equals(table)


def test_stdin_to_stdout(
    emb_dir: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    data = b"the Hockey game\r\nnasa!\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code = run_app(["privatize", "-", "-o", "-", *base(emb_dir)])
    assert code == 0
    assert capsysbinary.readouterr().out == data


@pytest.mark.parametrize(
    ("setup", "extra", "code", "message"),
    [
        ("txt", ["--epsilon", "0"], 2, "--epsilon=0.0 is not valid"),
        ("txt", ["--epsilon", "nan"], 2, "finite"),
        ("txt", ["--epsilon", "1", "--mechanism", "nope"], 2, "--mechanism='nope'"),
        ("csv", ["--epsilon", "1", "--column", "missing"], 2, "--column='missing'"),
        ("csv", ["--epsilon", "1"], 2, "at least one text column"),
        ("badutf8", ["--epsilon", "1"], 3, "line 2 is not valid UTF-8"),
        ("badutf8csv", ["--epsilon", "1", "-c", "text"], 3, "not valid UTF-8"),
        ("empty", ["--epsilon", "1"], 3, "empty"),
        ("headeronly", ["--epsilon", "1", "-c", "text"], 3, "no records"),
        ("badjson", ["--epsilon", "1", "-c", "text"], 3, "line 2: not valid JSON"),
        ("txt", ["--epsilon", "1", "--metric", "angular"], 2, "not an option of --mechanism madlib"),
        ("txt", ["--epsilon", "1", "--oov", "skip"], 2, "--oov"),
        ("missing", ["--epsilon", "1"], 3, "does not exist"),
    ],
)
def test_bad_inputs_exit_nonzero_with_no_output(
    emb_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    setup: str,
    extra: list[str],
    code: int,
    message: str,
) -> None:
    suffix = {"csv": ".csv", "badutf8csv": ".csv", "headeronly": ".csv", "badjson": ".jsonl"}.get(setup, ".txt")
    src = tmp_path / f"in{suffix}"
    if setup == "txt":
        src.write_text(f"{SECRET} game\n", encoding="utf-8")
    elif setup == "csv":
        write_csv(src, [["text"], [SECRET]])
    elif setup == "badutf8":
        src.write_bytes(f"{SECRET} ok\n".encode() + b"caf\xe9\n")
    elif setup == "badutf8csv":
        src.write_bytes(b"text\n" + SECRET.encode() + b"\ncaf\xe9\n")
    elif setup == "empty":
        src.write_bytes(b"")
    elif setup == "headeronly":
        src.write_text("text\n", encoding="utf-8")
    elif setup == "badjson":
        src.write_text(json.dumps({"text": SECRET}) + '\n{"text": \n', encoding="utf-8")
    dst = tmp_path / f"out{suffix}"
    rc, out, err = run(["privatize", str(src), "-o", str(dst), "--embedding", str(emb_dir), *extra], capsys)
    assert rc == code, err
    assert message in " ".join(err.split())
    assert SECRET not in err and SECRET not in out
    assert not dst.exists()
    assert list(tmp_path.glob("*.partial")) == [] and list(tmp_path.glob(".*partial")) == []


def test_seed_warns_not_private(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.txt"
    src.write_text("hockey\n", encoding="utf-8")
    rc, _, err = run(
        ["privatize", str(src), "-o", str(tmp_path / "o.txt"), "-e", "1", "--embedding", str(emb_dir), "--seed", "3"],
        capsys,
    )
    assert rc == 0 and "NOT private" in err


def test_oov_count_is_reported(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.txt"
    src.write_text("hockey zzzz qqqq\n", encoding="utf-8")
    rc, _, err = run(
        ["privatize", str(src), "-o", str(tmp_path / "o.txt"), "-e", "1", "--embedding", str(emb_dir)], capsys
    )
    assert rc == 0  # the default replaces them with random words, and says so
    assert "2 out-of-vocabulary tokens" in err and "replaced by random words" in err and "NOT protected" not in err
    rc, _, err = run(
        ["privatize", str(src), "-o", str(tmp_path / "o.txt"), "-e", "1", "--embedding", str(emb_dir), "--oov", "keep"],
        capsys,
    )
    assert rc == 0
    assert "2 out-of-vocabulary tokens" in err and "NOT protected" in err
    assert "not protected: out-of-vocabulary tokens" in err


def test_vocab_size_and_index_options(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.txt"
    src.write_text("hockey soccer the\n", encoding="utf-8")
    rc, _, err = run(
        [
            "privatize",
            str(src),
            "-o",
            str(tmp_path / "o.txt"),
            "-e",
            "0.01",
            "--embedding",
            str(emb_dir),
            "--vocab-size",
            "2",
            "--index",
            "flat",
            "--oov",
            "keep",
            "--case",
            "lower",
        ],
        capsys,
    )
    assert rc == 0, err
    out = (tmp_path / "o.txt").read_text(encoding="utf-8").split()
    assert set(out[:2]) <= {"hockey", "soccer"} and out[2] == "the"  # 'the' is now out of vocabulary


def test_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["--help"], capsys)
    assert rc == 0 and "privatize" in out
    rc, out, _ = run(["privatize", "--help"], capsys)
    assert rc == 0 and "--epsilon" in out


def test_embedding_mismatch_is_reported(tmp_path: Path) -> None:
    from deniable import EmbeddingError, MultivariateLaplace
    from deniable.index import FlatIndex

    emb = Embedding(["a", "b"], np.eye(2, dtype=np.float32))
    with pytest.raises(EmbeddingError, match="do not match"):
        MultivariateLaplace(emb, epsilon=1.0, index=FlatIndex(np.zeros((3, 2), np.float32)))


def test_summary_reports_the_mechanism_parameters(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TEM's gamma (and where it came from) is reported, as the issue asks; never any text."""
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "in.txt"
    src.write_text("hockey soccer the\n", encoding="utf-8")
    base = ["privatize", str(src), "-o", str(tmp_path / "o.txt"), "--embedding", str(emb_dir), "-e", "2"]
    rc, _, err = run([*base, "-m", "tem", "--beta", "0.01"], capsys)
    assert rc == 0, err
    assert "gamma=" in err and "gamma_from=beta" in err and "beta=0.01" in err
    rc, _, err = run([*base, "-m", "tem", "--gamma", "0.5"], capsys)
    assert rc == 0, err
    assert "gamma=0.5" in err and "gamma_from=given" in err
    assert "hockey" not in err and "soccer" not in err


def test_tem_suggests_prepare_until_prepared(
    emb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "in.txt"
    src.write_text("the hockey game\n", encoding="utf-8")
    args = ["privatize", str(src), "-o", str(tmp_path / "out.txt"), "-m", "tem", "--epsilon", "10"]
    args += ["--embedding", str(emb_dir)]
    code, _, err = run(args, capsys)
    assert code == 0 and "deniable prepare -m tem" in err
    assert run(["prepare", "-m", "tem", "--embedding", str(emb_dir), "-q"], capsys)[0] == 0
    code, _, err = run(args, capsys)
    assert code == 0 and "deniable prepare -m tem" not in err  # (the strength line may suggest --calibration)
    code, _, err = run([*args, "-q"], capsys)  # quiet: no summary, no tip
    assert code == 0 and err == ""


def test_run_key_file_reproduces_a_run_and_input_label_names_it(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os
    import stat

    from deniable.api import manifest_path, read_manifest

    src = tmp_path / "in.txt"
    src.write_text("the hockey game was great\nnasa launched a rocket\n" * 20, encoding="utf-8")
    key = tmp_path / "run.key"
    args = ["--epsilon", "2", "--embedding", str(emb_dir), "-q", "--run-key-file", str(key)]
    outs = []
    for j in range(2):
        dst = tmp_path / f"out{j}.txt"
        code, _, err = run(["privatize", str(src), "-o", str(dst), *args, "--input-label", "tickets-2026"], capsys)
        assert code == 0, err
        outs.append(dst.read_text(encoding="utf-8"))
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600  # written by the first run, readable by its owner only
    assert not list(tmp_path.glob(".run.key.*"))  # written through a temporary, which is gone
    assert outs[0] == outs[1] and outs[0] != src.read_text(encoding="utf-8")  # the same release, recomputed
    code, _, _ = run(["privatize", str(src), "-o", str(tmp_path / "fresh.txt"), *args[:4], "-q"], capsys)
    assert code == 0 and (tmp_path / "fresh.txt").read_text(encoding="utf-8") != outs[0]  # no key: a new run
    releases = [read_manifest(manifest_path(tmp_path / f"out{j}.txt"))["release"] for j in range(2)]
    assert releases[0]["run_key_id"] == releases[1]["run_key_id"] and releases[0]["input"] == "dataset:tickets-2026"
    assert key.read_text().strip() not in manifest_path(tmp_path / "out0.txt").read_text()  # the secret never written
    # a damaged key file and a seed with a key are errors naming the flag
    key.write_text("not a key\n")
    code, _, err = run(["privatize", str(src), "-o", str(tmp_path / "x.txt"), *args], capsys)
    assert code == 2 and "--run-key-file" in err
    code, _, err = run(["privatize", str(src), "-o", str(tmp_path / "x.txt"), *args, "--seed", "1"], capsys)
    assert code == 2 and "--run-key-file" in err
