"""Prepared artefacts are hashed whole once, then trusted by their stamp while unchanged (issue 27):
a damaged file is still refused, and ``deniable prepare --verify`` hashes everything on demand."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

import deniable.artefacts as prep
from conftest import make_tiny_embedding, make_toy_embedding
from deniable.artefacts import STAMP, ArtefactError, ArtefactInfo, open_artefact, verify_artefacts
from deniable.preparation import prepare


@pytest.fixture
def tables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[object, ArtefactInfo]:
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(prep, "_SAMPLE_BYTES", 64)  # small blocks: most of a small file is not sampled
    emb = make_tiny_embedding(3000, 3, seed=70)
    (info,) = prepare(emb, show_progress=False)
    assert info.file("dist.npy").stat().st_size > 64 * 16 * 4
    return emb, info


def _hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the whole-file hashes (a fresh process: the in-memory record of checked files is empty)."""
    prep._verified.clear()
    seen: list[str] = []
    original = prep.file_sha256

    def counting(path: Path) -> str:
        seen.append(path.name)
        return original(path)

    monkeypatch.setattr(prep, "file_sha256", counting)
    return seen


def _rewrite(f: Path, offset: int, keep_mtime: bool = True) -> None:
    """Flip one byte at ``offset`` (same size), restoring the mtime if asked (bit rot, or a careful hand)."""
    st = f.stat()
    data = bytearray(f.read_bytes())
    data[offset] ^= 0x01
    f.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_stamped_file_is_not_hashed_again(
    tables: tuple[object, ArtefactInfo], monkeypatch: pytest.MonkeyPatch
) -> None:
    emb, info = tables
    stamp = json.loads(info.file(STAMP).read_text(encoding="utf-8"))
    assert set(stamp) == set(info.files)  # written at build: nothing is hashed again at the first open
    seen = _hashes(monkeypatch)
    assert open_artefact(emb, "tem-knn", info.params) is not None  # type: ignore[arg-type]
    assert seen == []


def test_the_build_hashes_its_files_at_once_and_records_each_files_own_sha256(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the files of one build are hashed side by side (one per core), each recorded under its own name
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(prep, "usable_cores", lambda: 2)
    threads: dict[str, int] = {}
    original = prep.file_sha256

    def recording(path: Path) -> str:
        threads[Path(path).name] = threading.get_ident()
        return original(path)

    monkeypatch.setattr(prep, "file_sha256", recording)
    (info,) = prepare(make_tiny_embedding(700, 3, seed=71), show_progress=False)
    manifest = json.loads(info.file(prep.MANIFEST).read_text(encoding="utf-8"))
    assert set(threads) == set(manifest["files"]) == {"ids.npy", "dist.npy"}
    assert threading.get_ident() not in threads.values()  # on the pool's threads
    for name, meta in manifest["files"].items():
        data = info.file(name).read_bytes()
        assert meta["bytes"] == len(data) and meta["sha256"] == hashlib.sha256(data).hexdigest()


def test_a_changed_size_is_refused(tables: tuple[object, ArtefactInfo], monkeypatch: pytest.MonkeyPatch) -> None:
    emb, info = tables
    f = info.file("dist.npy")
    f.write_bytes(f.read_bytes() + b"\0")
    _hashes(monkeypatch)
    with pytest.raises(ArtefactError, match="bytes"):
        open_artefact(emb, "tem-knn", info.params)  # type: ignore[arg-type]


def test_a_changed_sampled_block_is_refused_even_with_its_mtime_kept(
    tables: tuple[object, ArtefactInfo], monkeypatch: pytest.MonkeyPatch
) -> None:
    emb, info = tables
    f = info.file("dist.npy")
    _rewrite(f, f.stat().st_size - 3)  # the last block is always sampled
    seen = _hashes(monkeypatch)
    with pytest.raises(ArtefactError, match="checksum"):
        open_artefact(emb, "tem-knn", info.params)  # type: ignore[arg-type]
    assert seen == ["dist.npy"]  # the stamp did not match: hashed whole, refused


def test_a_changed_mtime_means_a_full_check_then_a_new_stamp(
    tables: tuple[object, ArtefactInfo], monkeypatch: pytest.MonkeyPatch
) -> None:
    emb, info = tables
    f = info.file("ids.npy")
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))  # touched, same content
    seen = _hashes(monkeypatch)
    assert open_artefact(emb, "tem-knn", info.params) is not None  # type: ignore[arg-type]
    assert seen == ["ids.npy"]
    seen = _hashes(monkeypatch)  # the next process: stamped again, nothing hashed
    assert open_artefact(emb, "tem-knn", info.params) is not None  # type: ignore[arg-type]
    assert seen == []
    _rewrite(f, 200, keep_mtime=False)  # altered the usual way: the mtime moves
    _hashes(monkeypatch)
    with pytest.raises(ArtefactError, match="checksum"):
        open_artefact(emb, "tem-knn", info.params)  # type: ignore[arg-type]


def test_verify_catches_a_flipped_byte_anywhere(
    tables: tuple[object, ArtefactInfo],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from deniable.cli import run_app

    emb, info = tables
    assert [p for _, p in verify_artefacts()] == [None]
    f = info.file("dist.npy")
    size = f.stat().st_size
    sampled = {(size - 64) * k // 15 + j for k in range(16) for j in range(64)}
    offset = next(o for o in range(size // 3, size) if o not in sampled)
    _rewrite(f, offset)  # between sampled blocks, mtime kept: the stamp cannot see it
    _hashes(monkeypatch)
    assert open_artefact(emb, "tem-knn", info.params) is not None  # type: ignore[arg-type]  # documented limit
    ((_, problem),) = verify_artefacts()
    assert problem is not None and "checksum" in problem
    emb_dir = tmp_path / "toy"
    make_toy_embedding().save(emb_dir)
    capsys.readouterr()
    assert run_app(["prepare", "--verify"]) == 3
    out = capsys.readouterr()
    assert out.out.startswith("DAMAGED\ttem-knn\t") and "checksum" in out.err and "rebuilds it" in out.err
    assert run_app(["prepare", "--embedding", str(emb_dir), "-q"]) == 0  # another artefact, intact
    prepare(emb, show_progress=False, rebuild=True)  # type: ignore[arg-type]
    assert run_app(["prepare", "--verify", "-q"]) == 0
    assert capsys.readouterr().out.count("ok\t") == 2
    assert run_app(["prepare", "--verify", "--list"]) == 2


def test_kinds_register_where_defined_and_deniable_imports_none() -> None:
    import json
    import subprocess
    import sys

    # the store knows no kind; importing a mechanism registers the kinds it prepares (its
    # ``prepared_artefacts``), each in the module that defines the builder
    code = (
        "import deniable.artefacts as a, deniable.mechanisms as m; before = set(a._KINDS); "
        "[m.mechanism_class(n) for n in m.mechanism_names()]; "
        "import deniable.calibrate.table, json; "
        "print(json.dumps([sorted(before), sorted(a._KINDS), sorted(a._STALE)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, after, stale = json.loads(out)
    assert before == []
    assert set(after) == {"tem-knn", "tem-totals", "tem-far", "hnsw", "binary-codes", "binary-hnsw"} | {
        "decode-choice",
        "diffractor-list",
        "calibration",
        "ngram",  # madlib's contextual decode prior (issue 44): prepared by `deniable prepare --ngram`
    }
    assert stale == ["tem-totals"]
    # `import deniable` imports no mechanism module (nor scipy.special) until an artefact is needed
    code = "import sys, deniable; print(sorted(m for m in sys.modules if m.startswith(('deniable.mech', 'scipy.sp'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "diffractor" not in out and "scipy.special" not in out and "mechanisms.tem" not in out
