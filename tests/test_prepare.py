"""deniable.artefacts (deniable.prepare): TEM's prepared k-NN tables, the manifest and its checks, the lock, the CLI."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import make_tiny_embedding, make_toy_embedding
from deniable import Embedding, InvalidParameterError
from deniable.artefacts import (
    ArtefactError,
    build_artefact,
    list_artefacts,
    open_artefact,
    register_kind,
    remove_artefacts,
)
from deniable.embedding import Embedding as _Embedding
from deniable.mechanisms.tem import TruncatedExponential, _self_first
from deniable.mechanisms.tem import _tables as tables_module
from deniable.mechanisms.tem._geometry import Geometry
from deniable.mechanisms.tem._tables import knn_entry
from deniable.preparation import planned_artefacts, prepare
from test_tem_support import ALPHA, force_path, g_test_pvalue

METRICS = ["euclidean", "manhattan", "chebyshev", "angular"]


@pytest.fixture(autouse=True)
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Every test here starts from an empty artefact store of its own (``DENIABLE_CACHE``)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("DENIABLE_CACHE", str(folder))
    return folder


def _tables(emb: Embedding, metric: str) -> tuple[np.ndarray, np.ndarray]:
    (info,) = prepare(emb, ["tem"], metric=metric, show_progress=False)
    return np.load(info.file("ids.npy"), mmap_mode="r"), np.load(info.file("dist.npy"), mmap_mode="r")


@pytest.mark.parametrize("tile", [None, 64])  # one tile, or several with a ragged last one
@pytest.mark.parametrize("metric", METRICS)
def test_prepared_tables_are_the_lazy_tables(monkeypatch: pytest.MonkeyPatch, metric: str, tile: int | None) -> None:
    # the prepared build (symmetric tiled search for euclidean / angular) = the row-by-row
    # k-NN table of every word
    k = 8
    monkeypatch.setattr(tables_module, "_KNN_K", k)
    if tile is not None:
        monkeypatch.setattr(tables_module, "_TILE", tile)
    v = 400
    emb = make_tiny_embedding(v, 4, seed=50)
    ids, dist = _tables(emb, metric)
    assert ids.shape == dist.shape == (v, k + 1 + 32)
    geo = Geometry(emb, metric)
    row = np.empty((1, v), dtype=np.float32)
    for w in range(v):
        geo.screen(np.array([w]), row)
        lazy_ids, lazy_dist = knn_entry(geo, w, row[0], k, 32)
        assert np.array_equal(ids[w], lazy_ids)
        assert np.array_equal(dist[w, :k], lazy_dist[:k])  # exact distances, same arithmetic
        d_all = geo.exact(w, np.arange(v))
        outside = np.setdiff1d(np.arange(v), ids[w, :k])
        assert dist[w, k] <= d_all[outside].min()  # d_env: a proven lower bound
        assert np.isclose(dist[w, k], lazy_dist[k], rtol=1e-5, atol=1e-6)
        # the sketch (an estimate only): lower bounds of sampled far distances, in order
        sketch = dist[w, k + 1 :]
        assert np.all(sketch >= dist[w, k] - 1e-9) and np.all(sketch <= d_all.max() + 1e-9)
        assert np.all(np.diff(sketch) >= 0)


@pytest.mark.parametrize("metric", ["euclidean", "angular", "manhattan"])
def test_prepared_tables_sample_exactly_without_scanning(monkeypatch: pytest.MonkeyPatch, metric: str) -> None:
    opts = force_path(monkeypatch, "knn")
    emb = make_tiny_embedding(200, 3, seed=51)
    prepare(emb, ["tem"], metric=metric, show_progress=False)

    def no_scan(*args: Any) -> None:
        raise AssertionError("scanned the vocabulary although the tables are prepared")

    monkeypatch.setattr(Geometry, "screen", no_scan)
    monkeypatch.setattr(_self_first, "_HEAVY_PROPOSALS", float("inf"))  # no ball tables for frequent words
    mech = TruncatedExponential(emb, 3.0, metric=metric, **opts)  # type: ignore[arg-type]
    rng = np.random.default_rng(9)
    batch = np.tile(np.array([3, 40, 150]), 20000)
    y = mech.privatize(batch, rng)
    for w in (3, 40, 150):
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA
    assert len(mech._knn) == 0  # type: ignore[attr-defined]


def test_a_truncated_or_altered_artefact_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    import deniable.artefacts as prep

    emb = make_tiny_embedding(120, 3, seed=52)
    (info,) = prepare(emb, show_progress=False)
    params = info.params
    assert open_artefact(emb, "tem-knn", params) is not None
    good = info.file("dist.npy").read_bytes()
    # truncated
    info.file("dist.npy").write_bytes(good[:-8])
    with pytest.raises(ArtefactError, match="truncated"):
        open_artefact(emb, "tem-knn", params)
    with pytest.raises(ArtefactError, match="deniable prepare"):
        TruncatedExponential(emb, 4.0).privatize(np.array([1, 2]), np.random.default_rng(0))
    # one byte flipped (same size); a new process checks the file again
    bad = bytearray(good)
    bad[-3] ^= 0x01
    info.file("dist.npy").write_bytes(bytes(bad))
    prep._verified.clear()
    with pytest.raises(ArtefactError, match="checksum"):
        open_artefact(emb, "tem-knn", params)
    # prepare() rebuilds it
    (again,) = prepare(emb, show_progress=False)
    assert again.file("dist.npy").read_bytes() == good
    assert open_artefact(emb, "tem-knn", params) is not None
    # a damaged manifest
    for text in ("{", '{"format": 1, "kind": "tem-knn"}'):
        (info.path / "manifest.json").write_text(text, encoding="utf-8")
        with pytest.raises(ArtefactError, match="manifest"):
            open_artefact(emb, "tem-knn", params)
    assert list_artefacts(emb) == []
    remove_artefacts(emb)  # also deletes a folder whose manifest cannot be read
    assert not info.path.exists()


def _slow_builder(embedding: _Embedding, params: dict[str, Any], folder: Path, show: bool | None) -> None:
    with open(params["log"], "a", encoding="utf-8") as fh:
        fh.write("built\n")
    time.sleep(0.5)
    (folder / "data.bin").write_bytes(b"x" * 1000)


def _build_in_child(log: str, cache: str) -> None:
    import os

    os.environ["DENIABLE_CACHE"] = cache
    register_kind("test-slow", _slow_builder)  # type: ignore[arg-type]
    build_artefact(make_tiny_embedding(10, 2), "test-slow", {"log": log})


def test_two_processes_build_once(cache: Path, tmp_path: Path) -> None:
    log = str(tmp_path / "log.txt")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_build_in_child, args=(log, str(cache))) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert Path(log).read_text(encoding="utf-8") == "built\n"
    register_kind("test-slow", _slow_builder)  # type: ignore[arg-type]
    info = open_artefact(make_tiny_embedding(10, 2), "test-slow", {"log": log})
    assert info is not None and info.files == {"data.bin": 1000}
    assert not list(info.path.parent.glob(".tmp-*"))  # no half-built folder left behind


def test_list_remove_and_errors() -> None:
    emb = make_tiny_embedding(60, 3, seed=53)
    prepare(emb, ["tem", "madlib"], metric="angular", show_progress=False)  # madlib: its HNSW index
    prepare(emb, show_progress=False)
    infos = list_artefacts(emb)
    assert sorted(i.kind for i in infos) == ["hnsw", "tem-knn", "tem-knn"]
    assert sorted(i.params["metric"] for i in infos if i.kind == "tem-knn") == ["angular", "euclidean"]
    assert all(i.disk_bytes > 0 for i in infos)
    assert len(remove_artefacts(emb)) == 3 and list_artefacts(emb) == []
    with pytest.raises(InvalidParameterError, match="mechanism"):
        prepare(emb, ["nope"])
    with pytest.raises(InvalidParameterError, match="metric"):
        prepare(emb, metric="cosine")


def test_cli_prepare(cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from deniable.cli import run_app

    emb_dir = tmp_path / "toy"
    make_toy_embedding().save(emb_dir)
    assert run_app(["prepare", "--mechanism", "tem", "--embedding", str(emb_dir)]) == 0
    assert "tem-knn" in capsys.readouterr().err
    assert run_app(["prepare", "--embedding", str(emb_dir), "--metric", "angular", "--vocab-size", "10", "-q"]) == 0
    assert run_app(["prepare", "--list"]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert len(lines) == 2 and all(line.startswith("tem-knn\t") for line in lines)
    assert "KiB" in out.out and "2 prepared" in out.err
    # the old TEM disk cache recorded privatized words: --list warns, --remove deletes it
    legacy = cache / "artefacts" / make_toy_embedding().fingerprint[:20] / "tem" / "euclidean-0x1p+0"
    legacy.mkdir(parents=True)
    (legacy / "shard-0.words.npy").write_bytes(b"x")
    assert run_app(["prepare", "--list", "-q"]) == 0
    assert "older version" in capsys.readouterr().err
    assert run_app(["prepare", "--remove", "--embedding", str(emb_dir), "-q"]) == 0
    assert not legacy.parent.exists()
    assert run_app(["prepare", "--list", "-q"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1  # the 10-word subset is another embedding
    assert run_app(["prepare", "--mechanism", "nope", "--embedding", str(emb_dir)]) == 2
    assert run_app(["prepare", "--embedding", str(emb_dir), "--metric", "cosine"]) == 2
    # a damaged artefact: privatize exits 3 with a clear message, prepare repairs it
    assert run_app(["prepare", "--embedding", str(emb_dir), "-q"]) == 0
    (dist,) = [p for p in cache.rglob("dist.npy") if "euclidean" in (p.parent / "manifest.json").read_text()]
    dist.write_bytes(dist.read_bytes()[:-1])
    src = tmp_path / "in.txt"
    src.write_text("the hockey game\n", encoding="utf-8")
    args = ["privatize", str(src), "-o", str(tmp_path / "o.txt"), "-m", "tem", "-e", "5", "--embedding", str(emb_dir)]
    capsys.readouterr()
    assert run_app([*args, "-q"]) == 3
    assert "deniable prepare" in capsys.readouterr().err
    assert run_app(["prepare", "--embedding", str(emb_dir), "-q"]) == 0
    assert run_app([*args, "-q"]) == 0


def test_madlib_hnsw_prepared_loaded_and_repaired(monkeypatch: pytest.MonkeyPatch) -> None:
    from deniable.index import faiss_index
    from deniable.index.faiss_index import HNSW_KIND, HNSWIndex, hnsw_artefact_params
    from deniable.mechanisms.laplace import MultivariateLaplace

    emb = make_tiny_embedding(300, 4, seed=54)
    (info,) = prepare(emb, ["madlib"], show_progress=False)
    assert info.kind == HNSW_KIND and info.params == hnsw_artefact_params() and info.files["index.faiss"] > 0
    built = HNSWIndex.build

    def no_build(*args: Any, **kwargs: Any) -> HNSWIndex:
        raise AssertionError("built the HNSW index although it is prepared")

    monkeypatch.setattr(HNSWIndex, "build", no_build)
    mech = MultivariateLaplace(emb, 50.0, index="hnsw")
    q = emb.vectors[:20].astype(np.float32)
    assert np.array_equal(mech.decode(q), np.arange(20))  # loaded from the store
    # a damaged file is rejected (never read) and rebuilt, by prepare and by the mechanism
    f = info.file("index.faiss")
    f.write_bytes(f.read_bytes()[:-1])
    with pytest.raises(ArtefactError, match="truncated"):
        open_artefact(emb, HNSW_KIND, hnsw_artefact_params())
    monkeypatch.setattr(HNSWIndex, "build", built)
    (again,) = prepare(emb, ["madlib"], show_progress=False)
    assert open_artefact(emb, HNSW_KIND, hnsw_artefact_params()) == again
    data = again.file("index.faiss").read_bytes()
    again.file("index.faiss").write_bytes(data[:-8] + bytes(8))  # same size, altered
    idx = faiss_index.HNSWIndex.cached(emb, notice=False)
    assert idx.ntotal == 300 and open_artefact(emb, HNSW_KIND, hnsw_artefact_params()) is not None


def test_madlib_hnsw_takes_over_the_old_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    import faiss

    from deniable.index.faiss_index import HNSWIndex

    emb = make_tiny_embedding(200, 3, seed=55)
    old = HNSWIndex.build(emb.vectors)
    legacy = emb.cache_path("hnsw-m32-efc100.faiss")
    legacy.parent.mkdir(parents=True, exist_ok=True)  # cache_path is a lookup: it creates nothing
    faiss.write_index(old.faiss_index, str(legacy))

    def no_build(*args: Any, **kwargs: Any) -> HNSWIndex:
        raise AssertionError("rebuilt although the old cache holds the index")

    monkeypatch.setattr(HNSWIndex, "build", no_build)
    (info,) = prepare(emb, ["madlib"], show_progress=False)
    assert info.file("index.faiss").read_bytes() == legacy.read_bytes()


def test_cli_prepare_madlib(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from deniable.cli import run_app

    emb_dir = tmp_path / "toy"
    make_toy_embedding().save(emb_dir)
    assert run_app(["prepare", "-m", "madlib", "--embedding", str(emb_dir)]) == 0
    assert "hnsw:" in capsys.readouterr().err
    assert run_app(["prepare", "--list"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("hnsw\t") and "ef_construction=100, m=32" in line
    assert run_app(["prepare", "--remove", "-m", "madlib", "--embedding", str(emb_dir), "-q"]) == 0
    assert run_app(["prepare", "--list", "-q"]) == 0
    assert capsys.readouterr().out == ""


def test_brr_codes_prepared_loaded_and_repaired(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deniable import binarize as binarize_module
    from deniable.binarize import CODES_KIND, codes_artefact_params
    from deniable.mechanisms.brr import BinaryRandomizedResponse

    emb = make_tiny_embedding(120, 6, seed=56)
    (info,) = prepare(emb, ["brr"], options={"bits": 64, "binarizer": "random"}, show_progress=False)
    params = codes_artefact_params("simhash", 64, 0, {})
    assert (info.kind, info.params) == (CODES_KIND, params)
    codes = np.load(info.file("codes.npy"))
    assert codes.shape == (120, 8) and codes.dtype == np.uint8

    def no_training(*args: Any, **kwargs: Any) -> np.ndarray:
        raise AssertionError("computed the codes although they are prepared")

    monkeypatch.setattr(binarize_module, "simhash_codes", no_training)
    mech = BinaryRandomizedResponse(emb, 5.0, bits=64, binarizer="simhash").prepare(show_progress=False)
    assert np.array_equal(mech.codes, codes)
    # damaged: rejected when opened, rebuilt by prepare (the same codes: a function of public data)
    f = info.file("codes.npy")
    f.write_bytes(f.read_bytes()[:-1] + b"\xff")
    with pytest.raises(ArtefactError, match="checksum"):
        open_artefact(emb, CODES_KIND, params)
    monkeypatch.undo()
    monkeypatch.setenv("DENIABLE_CACHE", str(cache))  # undo() unset it too
    (again,) = prepare(emb, ["brr"], options={"bits": 64, "binarizer": "simhash"}, show_progress=False)
    assert np.array_equal(np.load(again.file("codes.npy")), codes)
    with pytest.raises(InvalidParameterError, match="bits"):
        prepare(emb, ["brr"], options={"bits": 100})


def test_cli_prepare_brr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from deniable.cli import run_app

    emb_dir = tmp_path / "toy"
    make_toy_embedding().save(emb_dir)
    args = ["prepare", "-m", "brr", "--bits", "128", "--binarizer", "simhash", "--embedding", str(emb_dir)]
    assert run_app(args) == 0
    assert "binary-codes:" in capsys.readouterr().err
    assert run_app(["prepare", "--list"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("binary-codes\t") and "bits=128" in line and "method=simhash" in line
    assert run_app([*args[:-2], "--bits", "100", "--embedding", str(emb_dir)]) == 2


# -- BRR's binary HNSW index and madlib's auto decode choice: prepared artefacts too -----------

BRR_HNSW = {"bits": 64, "binarizer": "simhash", "index": "hnsw"}


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-1] if how == "truncate" else data[:-1] + bytes([data[-1] ^ 0x01]))


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Replace ``module.name`` by a wrapper that counts its calls."""
    calls: list[int] = []
    original = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def test_brr_hnsw_prepared_listed_verified_and_used(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import deniable.artefacts as prep
    from deniable.binarize import CODES_KIND, codes_artefact_params
    from deniable.index import binary
    from deniable.index.binary import BINARY_HNSW_KIND, binary_hnsw_params
    from deniable.mechanisms.brr import BinaryRandomizedResponse

    emb = make_tiny_embedding(300, 8, seed=60)
    codes, hnsw = prepare(emb, ["brr"], options=BRR_HNSW, show_progress=False)
    params = binary_hnsw_params({"kind": CODES_KIND, "params": codes_artefact_params("simhash", 64, 0, {})})
    assert (codes.kind, hnsw.kind, hnsw.params) == (CODES_KIND, BINARY_HNSW_KIND, params)
    assert sorted(i.kind for i in list_artefacts(emb)) == [CODES_KIND, BINARY_HNSW_KIND]
    assert hnsw.files["index.faissbin"] > 0 and open_artefact(emb, BINARY_HNSW_KIND, params) == hnsw
    assert prepare(emb, ["brr"], options={"bits": 64, "binarizer": "simhash"}, show_progress=False) == [codes]

    # the mechanism reads the prepared index: nothing built, nothing said
    builds = _counting(monkeypatch, binary, "_write_binary_hnsw")
    capsys.readouterr()
    mech = BinaryRandomizedResponse(emb, 8.0, bits=64, binarizer="simhash", index="hnsw")
    out = mech.privatize(np.arange(300), np.random.default_rng(0))
    assert builds == [] and capsys.readouterr().err == ""
    assert isinstance(mech.decoder._index, binary.BinaryHNSWIndex) and out.shape == (300,)

    # damaged (truncated, then one bit flipped): never read; prepare and the mechanism rebuild it
    for how in ("truncate", "flip"):
        _damage(hnsw.file("index.faissbin"), how)
        prep._verified.clear()
        with pytest.raises(ArtefactError, match="truncated" if how == "truncate" else "checksum"):
            open_artefact(emb, BINARY_HNSW_KIND, params)
        if how == "truncate":
            prepare(emb, ["brr"], options=BRR_HNSW, show_progress=False)
        else:
            BinaryRandomizedResponse(emb, 8.0, bits=64, binarizer="simhash", index="hnsw").prepare(show_progress=False)
        assert open_artefact(emb, BINARY_HNSW_KIND, params) is not None
    assert len(builds) == 2

    # --remove of brr --index hnsw deletes both; flat brr only the codes
    assert len(remove_artefacts(emb, planned_artefacts(emb, ["brr"], options=BRR_HNSW))) == 2
    assert list_artefacts(emb) == []
    with pytest.raises(InvalidParameterError, match="index"):
        planned_artefacts(emb, ["brr"], options={"index": "auto"})


def test_brr_hnsw_built_lazily_says_so_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    from deniable.binarize.device import CodeVocabulary
    from deniable.index import binary
    from deniable.mechanisms.brr import BinaryRandomizedResponse

    emb = make_tiny_embedding(200, 8, seed=61)
    builds = _counting(monkeypatch, binary, "_write_binary_hnsw")
    ids = np.arange(200)
    capsys.readouterr()
    BinaryRandomizedResponse(emb, 8.0, bits=64, binarizer="simhash", index="hnsw").privatize(ids)
    err = capsys.readouterr().err
    assert err.count("deniable:") == 1 and "binary HNSW" in err and builds == [1]  # codes and index: one notice
    BinaryRandomizedResponse(emb, 8.0, bits=64, binarizer="simhash", index="hnsw").privatize(ids)
    assert capsys.readouterr().err == "" and builds == [1]
    # codes prepared, index not: the index's own notice (logged: the CLI shows it after a second), once
    BinaryRandomizedResponse(emb, 8.0, bits=128, binarizer="simhash").prepare(show_progress=False)
    capsys.readouterr()
    caplog.set_level("INFO", logger="deniable")
    caplog.clear()
    BinaryRandomizedResponse(emb, 8.0, bits=128, binarizer="simhash", index="hnsw").privatize(ids)
    (start,) = [r.getMessage() for r in caplog.records if getattr(r, "deniable_build", None) == "start"]
    assert "binary HNSW index" in start and capsys.readouterr().err == "" and len(builds) == 2
    # given codes (a device artefact): kept in the store of that vocabulary, keyed by the codes
    caplog.clear()
    dev = CodeVocabulary(emb.vocabulary, np.random.default_rng(1).integers(0, 256, (200, 8), dtype=np.uint8))
    for _ in range(2):
        BinaryRandomizedResponse(dev, 8.0, index="hnsw").privatize(ids)
    (info,) = list_artefacts(dev)
    assert info.kind == "binary-hnsw" and set(info.params["codes"]) == {"sha256"} and len(builds) == 3
    starts = _build_starts(caplog)
    assert len(starts) == 1 and "binary HNSW index" in starts[0]


def _build_starts(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The builds the library logged (what the CLI shows when one takes over a second)."""
    return [r.getMessage() for r in caplog.records if getattr(r, "deniable_build", None) == "start"]


def _prepare_in_child(what: str, cache: str, log: str) -> None:
    """Prepare ``what`` in a fresh (spawned) process, logging each build of it."""
    import os

    from deniable.index import binary, tuned

    os.environ["DENIABLE_CACHE"] = cache
    tuned.MIN_SIZE = 0
    module, name = (binary, "_write_binary_hnsw") if what == "binary-hnsw" else (tuned, "write_choice")
    original = getattr(module, name)

    def logged(*args: Any, **kwargs: Any) -> Any:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write("built\n")
        time.sleep(0.3)
        return original(*args, **kwargs)

    setattr(module, name, logged)
    if what == "binary-hnsw":
        prepare(make_tiny_embedding(300, 8, seed=62), ["brr"], options=BRR_HNSW, show_progress=False)
    else:
        prepare(make_tiny_embedding(300, 4, seed=63), ["madlib"], options={"epsilon": 20.0}, show_progress=False)


@pytest.mark.parametrize("what", ["binary-hnsw", "decode-choice"])
def test_two_processes_prepare_the_new_kinds_once(cache: Path, tmp_path: Path, what: str) -> None:
    log = tmp_path / "log.txt"
    ctx = multiprocessing.get_context("spawn")  # faiss's OpenMP threads do not survive a fork
    procs = [ctx.Process(target=_prepare_in_child, args=(what, str(cache), str(log))) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert log.read_text(encoding="utf-8") == "built\n"
    (info,) = [i for i in list_artefacts() if i.kind == what]
    assert not list(info.path.parent.glob(".tmp-*"))


def test_madlib_decode_choice_prepared_listed_verified_and_used(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    import deniable.artefacts as prep
    from deniable.index import tuned
    from deniable.index.faiss_index import HNSWIndex
    from deniable.index.tuned import DECODE_CHOICE_KIND
    from deniable.mechanisms.laplace import MultivariateLaplace

    emb = make_tiny_embedding(400, 4, seed=64)
    # decoded exactly by default below MIN_SIZE: only the HNSW index is prepared
    assert [i.kind for i in prepare(emb, ["madlib"], options={"epsilon": 5.0}, show_progress=False)] == ["hnsw"]
    monkeypatch.setattr(tuned, "MIN_SIZE", 0)
    infos = prepare(emb, ["madlib"], options={"epsilon": [5.0, 50.0]}, show_progress=False)
    assert [i.kind for i in infos] == ["hnsw", DECODE_CHOICE_KIND, DECODE_CHOICE_KIND]
    choice = infos[2]
    assert choice.params["key"] == "madlib epsilon=50.0" and choice.params["mechanism"] == {
        "name": "madlib",
        "options": {"epsilon": 50.0},
    }
    assert choice.params["ladder"] == list(tuned.DEFAULT_LADDER) and choice.files["choice.json"] > 0
    assert open_artefact(emb, DECODE_CHOICE_KIND, choice.params) == choice

    # the mechanism reads the prepared choice: nothing measured, nothing said
    measured = _counting(monkeypatch, tuned, "write_choice")
    capsys.readouterr()
    mech = MultivariateLaplace(emb, 50.0)
    mech.privatize(np.arange(50), np.random.default_rng(0))
    assert measured == [] and capsys.readouterr().err == ""
    assert isinstance(mech.search_index, HNSWIndex) and mech.decode_description.startswith("hnsw efSearch=")

    # damaged: never read; the mechanism (then prepare) makes it again
    for how in ("truncate", "flip"):
        _damage(choice.file("choice.json"), how)
        prep._verified.clear()
        with pytest.raises(ArtefactError, match="truncated" if how == "truncate" else "checksum"):
            open_artefact(emb, DECODE_CHOICE_KIND, choice.params)
        if how == "truncate":
            MultivariateLaplace(emb, 50.0, index_options={"notice": False}).prepare()
        else:
            prepare(emb, ["madlib"], options={"epsilon": 50.0}, show_progress=False)
        assert open_artefact(emb, DECODE_CHOICE_KIND, choice.params) is not None
    assert len(measured) == 2

    # a lazy choice says so once (the HNSW index it needs is built with it, silently)
    remove_artefacts(emb)
    capsys.readouterr()
    caplog.set_level("INFO", logger="deniable")
    caplog.clear()
    MultivariateLaplace(emb, 7.0).privatize(np.arange(20))
    starts = _build_starts(caplog)  # the choice, then (inside it) the HNSW index: the CLI shows the first
    assert "madlib epsilon=7.0" in starts[0] and sum("madlib epsilon" in m for m in starts) == 1
    assert len(measured) == 3 and capsys.readouterr().err == ""
    caplog.clear()
    MultivariateLaplace(emb, 7.0).privatize(np.arange(20))
    assert _build_starts(caplog) == [] and len(measured) == 3
    # removing one epsilon's choice (and the HNSW index it reads) leaves the others
    plan = planned_artefacts(emb, ["madlib"], options={"epsilon": 7.0})
    assert [i.kind for i in remove_artefacts(emb, plan)] == ["decode-choice", "hnsw"]
    assert list_artefacts(emb) == []


def test_madlib_decode_choice_takes_over_the_old_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from deniable.index import tuned
    from deniable.mechanisms.laplace import MultivariateLaplace

    monkeypatch.setattr(tuned, "MIN_SIZE", 0)
    emb = make_tiny_embedding(300, 4, seed=65)
    # (the old file's key names the ladder: a choice made over another ladder is not taken over)
    key = "madlib epsilon=3.0; target=0.99; samples=2000; ladder=[64]; hnsw m=32 efc=100"
    emb.cache_path("decode-choices.json").parent.mkdir(parents=True, exist_ok=True)
    emb.cache_path("decode-choices.json").write_text(json.dumps({key: [64, 0.995]}))
    monkeypatch.setattr(tuned, "ExactIndex", None)  # a measurement would fail
    (_, info) = prepare(emb, ["madlib"], options={"epsilon": 3.0}, show_progress=False)
    assert json.loads(info.file("choice.json").read_text()) == {"ef_search": 64, "agreement": 0.995}
    assert MultivariateLaplace(emb, 3.0).search_index.ef_search == 64  # type: ignore[attr-defined]


def test_cli_prepare_brr_hnsw_and_madlib_epsilons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from deniable.cli import run_app
    from deniable.index import tuned

    monkeypatch.setattr(tuned, "MIN_SIZE", 0)
    emb_dir = tmp_path / "toy"
    make_toy_embedding().save(emb_dir)
    brr = ["prepare", "-m", "brr", "--bits", "64", "--binarizer", "simhash", "--index", "hnsw"]
    assert run_app([*brr, "--embedding", str(emb_dir)]) == 0
    assert "binary-hnsw:" in capsys.readouterr().err
    assert run_app(["prepare", "-m", "madlib", "-e", "2,8", "--epsilon", "30", "--embedding", str(emb_dir)]) == 0
    assert capsys.readouterr().err.count("decode-choice:") == 3
    assert run_app(["prepare", "--list"]) == 0
    kinds = sorted(line.split("\t")[0] for line in capsys.readouterr().out.splitlines())
    assert kinds == ["binary-codes", "binary-hnsw", *["decode-choice"] * 3, "hnsw"]
    assert run_app(["prepare", "--remove", "-m", "madlib", "-e", "8", "--embedding", str(emb_dir), "-q"]) == 0
    assert run_app(["prepare", "--list", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.count("decode-choice\t") == 2 and "epsilon=8.0" not in out and "\nhnsw\t" not in "\n" + out
    assert run_app(["prepare", "-m", "madlib", "-e", "x", "--embedding", str(emb_dir)]) == 2
    assert run_app(["prepare", "-m", "brr", "--index", "auto", "--embedding", str(emb_dir)]) == 2
