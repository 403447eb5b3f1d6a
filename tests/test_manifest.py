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


# ----------------------------------------------------------------------- keyed runs and the ledger
def _two_lines(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("".join(f"the hockey game number {i} was great\n" for i in range(50)))
    return src


def test_privatize_file_run_key_reproduces_and_stays_secret(tmp_path, emb_dir):
    from deniable._random import RunKey

    src, key = _two_lines(tmp_path), RunKey.new()
    priv = _priv(emb_dir)
    privatize_file(src, tmp_path / "a.txt", priv, run_key=key, batch_size=7)
    privatize_file(src, tmp_path / "b.txt", priv, run_key=key.hex(), batch_size=7)
    privatize_file(src, tmp_path / "c.txt", priv, batch_size=7)
    a, b, c = ((tmp_path / f"{n}.txt").read_text().splitlines() for n in "abc")
    assert a == b and sum(x != y for x, y in zip(a, c, strict=True)) > 25
    ma, mc = read_manifest(tmp_path / "a.txt"), read_manifest(tmp_path / "c.txt")
    assert ma["release"]["run_key_id"] == key.id != mc["release"]["run_key_id"]
    assert ma["release"]["input"] == mc["release"]["input"] and ma["release"]["input"].startswith("path:")
    assert ma["release"]["epsilon_per_word"] == 5.0 and ma["release"]["records"] == 50
    assert key.hex() not in (tmp_path / "a.txt.manifest.json").read_text()
    assert str(tmp_path) not in (tmp_path / "a.txt.manifest.json").read_text()


def test_ledger_sums_releases_of_one_input(tmp_path, emb_dir, capsys):
    from deniable._random import RunKey
    from deniable.api import privacy_ledger

    src, key = _two_lines(tmp_path), RunKey.new()
    priv = _priv(emb_dir)
    for name, k in [("a", key), ("b", key), ("c", None), ("d", None)]:
        privatize_file(src, tmp_path / f"{name}.txt", priv, run_key=k)
    other = tmp_path / "other.txt"
    other.write_text("nasa rocket\n")
    privatize_file(other, tmp_path / "e.txt", priv)
    outs = [str(tmp_path / f"{n}.txt") for n in "abcde"]
    entries, warns = privacy_ledger(outs)
    by_input = {e.input: e for e in entries}
    same = by_input[read_manifest(outs[0])["release"]["input"]]
    assert same.releases == 3 and same.epsilon == 15.0  # a and b are one release (one run key)
    assert by_input[read_manifest(outs[4])["release"]["input"]].releases == 1
    assert any("released 3 times" in w and "15" in w for w in warns)
    assert not privacy_ledger(outs[:2])[1]  # one run, recomputed: nothing to warn about
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["inspect-manifest", *outs, "--budget", "12"])
    assert exc.value.code == 1
    captured = capsys.readouterr()
    assert "privacy ledger" in captured.out and "over the budget of 12" in captured.err
    with pytest.raises(SystemExit) as exc:
        main(["inspect-manifest", *outs[:2], "--budget", "12", "--json"])
    assert exc.value.code == 0
    assert json.loads(capsys.readouterr().out)["ledger"][0]["epsilon_per_word"] == 5.0


def test_ledger_reads_manifests_without_a_release_entry(tmp_path):
    from deniable.api import privacy_ledger

    old = {"manifest_version": 1, "mechanism": {"mechanism": "tem", "epsilon": 3.0}, "columns": ["t"]}
    entries, warns = privacy_ledger([old, old])
    assert [e.releases for e in entries] == [1, 1] and any("no input id" in w for w in warns)
