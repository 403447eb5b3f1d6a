"""The privacy ledger never undercounts: two manifests are one release only when they provably
produced the same output (same run key, same mechanism and parameters, same keyed input digest).

Issue 40 item 4: with the same key, ``--batch-size 7`` or one line inserted at the top of the
same file gave fresh noise, yet ``inspect-manifest`` counted one release at epsilon 8.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from deniable._random import RunKey
from deniable.api import privacy_ledger, read_manifest
from deniable.cli import run_app

LINES = ["my diagnosis is leukemia", "the hockey game was great", "nasa launched a rocket", "a puck and a goal"] * 5


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = run_app(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def _privatize(
    capsys: pytest.CaptureFixture[str], emb_dir: Path, src: Path, dst: Path, key: Path | None, *extra: str
) -> Path:
    args = ["privatize", str(src), "-o", str(dst), "--epsilon", "8", "--embedding", str(emb_dir), "-q", *extra]
    if key is not None:
        args += ["--run-key-file", str(key)]
    code, _, err = cli(args, capsys)
    assert code == 0, err
    return dst


def _ledger(capsys: pytest.CaptureFixture[str], *outs: Path) -> list[dict]:
    code, out, err = cli(["inspect-manifest", *map(str, outs), "--json"], capsys)
    assert code == 0, err
    return json.loads(out)["ledger"]


def test_batch_size_is_the_same_release_and_counted_once(tmp_path, emb_dir, keyfile, capsys):
    src = tmp_path / "notes.txt"
    src.write_text("".join(t + "\n" for t in LINES), encoding="utf-8")
    a = _privatize(capsys, emb_dir, src, tmp_path / "a.txt", keyfile)
    b = _privatize(capsys, emb_dir, src, tmp_path / "b.txt", keyfile, "--batch-size", "7")
    assert a.read_text(encoding="utf-8") == b.read_text(encoding="utf-8")  # the same output: one release
    (entry,) = _ledger(capsys, a, b)
    assert entry["releases"] == 1 and entry["epsilon_per_word"] == 8.0


def test_a_line_inserted_at_the_top_is_a_second_release(tmp_path, emb_dir, keyfile, capsys):
    src = tmp_path / "notes.txt"
    src.write_text("".join(t + "\n" for t in LINES), encoding="utf-8")
    a = _privatize(capsys, emb_dir, src, tmp_path / "a.txt", keyfile)
    src.write_text("inserted line\n" + "".join(t + "\n" for t in LINES), encoding="utf-8")  # the same path
    b = _privatize(capsys, emb_dir, src, tmp_path / "b.txt", keyfile)
    (entry,) = _ledger(capsys, a, b)
    assert entry["releases"] == 2 and entry["epsilon_per_word"] == 16.0
    # and the shifted records were not released with the streams other texts had
    assert a.read_text(encoding="utf-8").splitlines()[1:] != b.read_text(encoding="utf-8").splitlines()[2:]


def test_one_word_changed_in_the_middle_is_a_second_release(tmp_path, emb_dir, keyfile, capsys):
    src = tmp_path / "notes.csv"
    rows = [f"{i},{t}" for i, t in enumerate(LINES)]
    src.write_text("id,text\n" + "\n".join(rows) + "\n", encoding="utf-8")
    a = _privatize(capsys, emb_dir, src, tmp_path / "a.csv", keyfile, "-c", "text")
    rows[7] = "7,the rocket game was great"
    src.write_text("id,text\n" + "\n".join(rows) + "\n", encoding="utf-8")
    b = _privatize(capsys, emb_dir, src, tmp_path / "b.csv", keyfile, "-c", "text")
    (entry,) = _ledger(capsys, a, b)
    assert entry["releases"] == 2 and entry["epsilon_per_word"] == 16.0


def test_another_epsilon_mechanism_or_policy_with_the_same_key_is_another_release(tmp_path, emb_dir, keyfile, capsys):
    src = tmp_path / "notes.txt"
    src.write_text("".join(t + "\n" for t in LINES), encoding="utf-8")
    outs = [
        _privatize(capsys, emb_dir, src, tmp_path / "a.txt", keyfile),
        _privatize(capsys, emb_dir, src, tmp_path / "b.txt", keyfile, "--mechanism", "vickrey"),
        _privatize(capsys, emb_dir, src, tmp_path / "c.txt", keyfile, "--case", "lower"),
        _privatize(capsys, emb_dir, src, tmp_path / "d.txt", keyfile),  # a recomputation of a
    ]
    (entry,) = _ledger(capsys, *outs)
    assert entry["releases"] == 3 and entry["epsilon_per_word"] == 24.0
    args = ["privatize", str(src), "-o", str(tmp_path / "e.txt"), "--epsilon", "4", "--embedding", str(emb_dir)]
    code, _, err = cli([*args, "-q", "--run-key-file", str(keyfile)], capsys)
    assert code == 0, err
    (entry,) = _ledger(capsys, *outs, tmp_path / "e.txt")
    assert entry["releases"] == 4 and entry["epsilon_per_word"] == 28.0


def test_fresh_keys_and_seeds_are_each_a_release(tmp_path, emb_dir, capsys):
    src = tmp_path / "notes.txt"
    src.write_text("".join(t + "\n" for t in LINES), encoding="utf-8")
    a = _privatize(capsys, emb_dir, src, tmp_path / "a.txt", None)
    b = _privatize(capsys, emb_dir, src, tmp_path / "b.txt", None)
    c = _privatize(capsys, emb_dir, src, tmp_path / "c.txt", None, "--seed", "3")
    d = _privatize(capsys, emb_dir, src, tmp_path / "d.txt", None, "--seed", "3")  # the same output as c...
    (entry,) = _ledger(capsys, a, b, c, d)
    assert entry["releases"] == 4 and entry["epsilon_per_word"] == 32.0  # ...but a seed proves nothing: counted


def _manifest(eps: float = 8.0, key: str | None = "k1", digest: str | None = "d1", mech: str = "madlib") -> dict:
    release = {
        "input": "dataset:x",
        "columns": ["text"],
        "records": 10,
        "epsilon_per_word": eps,
        "mechanism": mech,
        "metric": "euclidean",
        "run_key_id": key,
        "input_digest": None if digest is None else {"text": digest},
    }
    return {"manifest_version": 1, "mechanism": {"mechanism": mech, "epsilon": eps}, "release": release}


def test_only_key_parameters_and_digest_together_merge_manifests():
    def total(*ms: dict) -> tuple[int, float]:
        (entry,), _ = privacy_ledger(list(ms))
        return entry.releases, entry.epsilon

    assert total(_manifest(), _manifest()) == (1, 8.0)  # a recomputation
    assert total(_manifest(), _manifest(digest="d2")) == (2, 16.0)  # another input under the same key
    assert total(_manifest(), _manifest(key="k2")) == (2, 16.0)  # another key
    assert total(_manifest(), _manifest(eps=4.0)) == (2, 12.0)  # another epsilon
    assert total(_manifest(), _manifest(mech="vickrey")) == (2, 16.0)  # another mechanism
    assert total(_manifest(digest=None), _manifest(digest=None)) == (2, 16.0)  # no digest (old, Spark): unproven
    assert total(_manifest(key=None), _manifest(key=None)) == (2, 16.0)  # no key (seeded)
    _, warns = privacy_ledger([_manifest(), _manifest(digest="d2")])
    assert any("run key k1" in w and "one input" in w for w in warns)


def test_the_digest_is_keyed_and_reveals_nothing_without_the_key(tmp_path, emb_dir, keyfile, capsys):
    src = tmp_path / "notes.txt"
    src.write_text("".join(t + "\n" for t in LINES), encoding="utf-8")
    a = _privatize(capsys, emb_dir, src, tmp_path / "a.txt", keyfile)
    other = tmp_path / "other.key"
    other.write_text(RunKey.new().hex(), encoding="ascii")
    os.chmod(other, 0o600)
    b = _privatize(capsys, emb_dir, src, tmp_path / "b.txt", other)
    da = read_manifest(a)["release"]["input_digest"]["(text)"]
    db = read_manifest(b)["release"]["input_digest"]["(text)"]
    assert len(da) == 64 and da != db  # the same input under two keys: unrelated digests
    text = (tmp_path / "a.txt.manifest.json").read_text(encoding="utf-8")
    assert "leukemia" not in text and keyfile.read_text().strip() not in text
