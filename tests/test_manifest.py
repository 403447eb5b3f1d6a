"""The run manifest: written beside outputs, never any text, printed by inspect-manifest."""

from __future__ import annotations

import json
import warnings

import pytest

from deniable import DataError, Privatizer
from deniable.api import manifest_path, privatize_file, read_manifest
from deniable.cli import main
from deniable.embedding import load_embedding
from deniable.mechanisms import make_mechanism

SECRET = "nasa launched the rocket secretword"


def _priv(emb_dir):
    return Privatizer(make_mechanism("madlib", load_embedding(str(emb_dir)), 5.0))


def test_privatize_file_writes_manifest_without_text(tmp_path, emb_dir):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": 1, "text": SECRET}) + "\n" + json.dumps({"id": 2, "text": "the game"}) + "\n")
    dst = tmp_path / "out.jsonl"
    stats = privatize_file(src, dst, _priv(emb_dir), columns=["text"], embedding=str(emb_dir), vocabulary="words")
    path = manifest_path(dst)
    assert path == tmp_path / "out.jsonl.manifest.json"
    raw = path.read_text()
    for word in ("secretword", "launched", "rocket", "nasa", "game"):
        assert word not in raw.lower()
    m = read_manifest(dst)
    # only counts the output reveals: changed / out-of-vocabulary counts depend on the input
    assert m["counts"] == {"texts": 2, "tokens": 7} and stats.oov == 2
    assert m["mechanism"]["mechanism"] == "madlib" and m["mechanism"]["epsilon"] == 5.0
    assert m["embedding"]["fingerprint"] == load_embedding(str(emb_dir)).fingerprint
    assert m["oov"] == "random" and m["case"] == "sentence" and m["vocabulary"] == "words"
    assert m["started"] <= m["finished"] and m["version"]


def test_no_manifest_on_failure_or_stdout(tmp_path, emb_dir):
    src = tmp_path / "in.csv"
    src.write_text("id,text\n")  # no records
    with pytest.raises(DataError):
        privatize_file(src, tmp_path / "out.csv", _priv(emb_dir), columns=["text"])
    assert list(tmp_path.iterdir()) == [src]


def test_cli_writes_and_inspects_manifest(tmp_path, emb_dir, capsys):
    src = tmp_path / "in.txt"
    src.write_text("the hockey game\nnasa rocket\n")
    out = tmp_path / "out.txt"
    with pytest.raises(SystemExit) as exc:
        main(["privatize", str(src), "-o", str(out), "-e", "5", "--embedding", str(emb_dir), "-q"])
    assert exc.value.code == 0
    assert (tmp_path / "out.txt.manifest.json").is_file()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["inspect-manifest", str(out)])
    assert exc.value.code == 0
    shown = capsys.readouterr().out
    assert "counts.tokens" in shown and "madlib" in shown and "hockey" not in shown
    with pytest.raises(SystemExit) as exc:
        main(["inspect-manifest", str(src)])
    assert exc.value.code == 3


def test_seeded_run_is_marked(tmp_path, emb_dir):
    src = tmp_path / "in.txt"
    src.write_text("the game\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        privatize_file(src, tmp_path / "o.txt", _priv(emb_dir), random_state=3)
    assert read_manifest(tmp_path / "o.txt")["seeded"] is True
