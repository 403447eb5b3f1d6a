"""Run keys supplied by a user: weak keys and key files others can read are refused (never echoed),
and manifests state where the key came from (os / file / given / seed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deniable import InvalidParameterError
from deniable._random import MIN_DISTINCT_BYTES, RunKey, check_key_strength
from deniable.api import read_manifest
from deniable.cli import run_app

WEAK = {
    "all zero": "00" * 32,
    "one byte repeated": "ff" * 32,
    "short pattern": "deadbeef" * 8,
    "15-byte pattern": (bytes(range(1, 16)) * 3)[:32].hex(),
    "counting": bytes(range(32)).hex(),
    "counting by 7": bytes((7 * i) & 0xFF for i in range(32)).hex(),
    "a word as hex": (b"password" * 4).hex(),
}
GOOD = "3f9c1d0a7be24c58e61f09a3d7b4c2e85a0f1b6c9d2e7a4b8c3f5e1d0a9b7c6e"


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = run_app(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def _keyfile(tmp_path: Path, text: str, mode: int = 0o600, name: str = "run.key") -> Path:
    path = tmp_path / name
    path.write_text(text + "\n", encoding="ascii")
    os.chmod(path, mode)
    return path


def _run(tmp_path: Path, emb_dir: Path, key: Path, capsys: pytest.CaptureFixture[str], out: str = "out.txt"):
    src = tmp_path / "in.txt"
    src.write_text("my diagnosis is leukemia\n", encoding="utf-8")
    args = ["privatize", str(src), "-o", str(tmp_path / out), "--epsilon", "8", "--embedding", str(emb_dir), "-q"]
    return cli([*args, "--run-key-file", str(key)], capsys)


@pytest.mark.parametrize("kind", sorted(WEAK))
def test_weak_keys_are_refused_by_the_cli_without_echoing_them(tmp_path, emb_dir, capsys, kind):
    key = _keyfile(tmp_path, WEAK[kind])
    code, out, err = _run(tmp_path, emb_dir, key, capsys)
    assert code == 2 and "--run-key-file" in err and "random key" in err
    assert WEAK[kind] not in out + err and not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("kind", sorted(WEAK))
def test_weak_keys_are_refused_by_the_python_api(emb_dir, kind):
    import deniable

    with pytest.raises(InvalidParameterError, match="random key") as exc:
        RunKey.from_hex(WEAK[kind])
    assert WEAK[kind] not in str(exc.value)
    with pytest.raises(InvalidParameterError, match="run_key"):
        deniable.privatize("the game", 8.0, embedding=str(emb_dir), run_key=WEAK[kind])


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606])
def test_key_files_others_can_read_or_write_are_refused(tmp_path, emb_dir, capsys, mode):
    if os.name == "nt":  # pragma: no cover
        pytest.skip("no POSIX mode bits")
    key = _keyfile(tmp_path, GOOD, mode)
    code, out, err = _run(tmp_path, emb_dir, key, capsys)
    assert code == 2 and "--run-key-file" in err and "chmod 600" in err and GOOD not in out + err
    with pytest.raises(InvalidParameterError, match="chmod 600"):
        RunKey.from_file(key)
    os.chmod(key, 0o600)  # the fix the message gives
    code, _, err = _run(tmp_path, emb_dir, key, capsys)
    assert code == 0, err


def test_random_keys_are_never_refused():
    for _ in range(3000):
        check_key_strength(os.urandom(32))
    check_key_strength(bytes.fromhex(GOOD))
    assert MIN_DISTINCT_BYTES == 16


def test_manifests_state_the_keys_origin(tmp_path, emb_dir, capsys):
    code, _, err = _run(tmp_path, emb_dir, _keyfile(tmp_path, GOOD), capsys, "file.txt")
    assert code == 0, err
    m = read_manifest(tmp_path / "file.txt")
    assert m["run_key_origin"] == m["release"]["run_key_origin"] == "file" and m["seeded"] is False
    new = tmp_path / "new.key"  # no such file: a fresh key from the OS, written there
    code, _, err = _run(tmp_path, emb_dir, new, capsys, "new.txt")
    assert code == 0, err
    assert read_manifest(tmp_path / "new.txt")["release"]["run_key_origin"] == "os"
    src = tmp_path / "in.txt"
    args = ["privatize", str(src), "--epsilon", "8", "--embedding", str(emb_dir), "-q"]
    assert cli([*args, "-o", str(tmp_path / "os.txt")], capsys)[0] == 0
    assert cli([*args, "-o", str(tmp_path / "seed.txt"), "--seed", "4"], capsys)[0] == 0
    assert read_manifest(tmp_path / "os.txt")["release"]["run_key_origin"] == "os"
    seeded = read_manifest(tmp_path / "seed.txt")
    assert seeded["seeded"] is True and seeded["release"]["run_key_origin"] == "seed"


def test_python_keys_carry_their_origin_across_pickling():
    import pickle

    assert RunKey.new().origin == "os" and RunKey.from_seed(3).origin == "seed"
    given = RunKey.from_hex(GOOD)
    assert given.origin == "given" and pickle.loads(pickle.dumps(given)).origin == "given"
    with pytest.raises(InvalidParameterError, match="64 hex"):
        RunKey.from_hex("abcd")
