"""madlib on the device with 8-bit vectors (issue 43, docs/device.md "8-bit vectors").

The small artefact is not an approximation of float32 madlib: it is madlib over a quantized
(public) embedding, ``deniable.embedding.quantize``, and every decoder -- the JavaScript client,
the service's POST /v1/decode and the Python library -- uses the very same float32 vectors
(levels[k, codes[v, k]]), so they agree word for word. The twin: decoding the same noisy vectors
with the float32 vectors gives other words on some rows (parity cannot come from ignoring the
quantization).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from _device_helpers import Harness, b64, mechanisms, small_embedding, unb64
from deniable import EmbeddingError
from deniable.binarize.device import (
    WEB_LEVELS,
    WEB_PRIOR_FILE,
    WEB_QVECTORS,
    WEB_VERSION_QUANTIZED,
    save_web_artefact,
    web_artefact_of,
)
from deniable.embedding import Embedding, QuantizedEmbedding, quantize
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.laplace import quantized_madlib


@pytest.fixture(scope="module")
def quantized() -> QuantizedEmbedding:
    return quantize(small_embedding())


@pytest.fixture(scope="module")
def artefact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("q8") / "madlib-uint8"
    save_web_artefact(folder, web_artefact_of(quantized_madlib(mechanisms()["madlib"])))
    return folder


def test_quantize_is_a_public_embedding_on_a_grid(quantized: QuantizedEmbedding) -> None:
    emb = small_embedding()
    src = np.asarray(emb.vectors, dtype=np.float64)
    q = np.asarray(quantized.vectors)
    assert isinstance(quantized, Embedding) and quantized.vocabulary == emb.vocabulary
    assert quantized.levels.shape == (emb.dim, 256) and quantized.levels.dtype == np.float32
    assert np.all(np.diff(quantized.levels.astype(np.float64), axis=1) > 0)
    codes = quantized.codes
    assert codes.dtype == np.uint8 and codes.shape == (emb.size, emb.dim)
    np.testing.assert_array_equal(quantized.levels[np.arange(emb.dim), codes], q)  # bit for bit
    # each coordinate on its nearest level (within half a step), each column's extremes exact
    step = (src.max(axis=0) - src.min(axis=0)) / 255
    assert np.all(np.abs(q - src) <= step / 2 * (1 + 1e-5) + 1e-7)
    np.testing.assert_array_equal(q.min(axis=0), emb.vectors.min(axis=0))
    moved = np.linalg.norm(q - src, axis=1).max()
    assert moved <= quantized.max_error <= moved * 1.001
    # a function of the public embedding only: the same bytes again; its own fingerprint
    again = quantize(small_embedding())
    assert again.fingerprint == quantized.fingerprint != emb.fingerprint
    assert quantized.source_fingerprint == emb.fingerprint
    # a subset keeps the grid (and stays quantized); saved and loaded, the same fingerprint
    sub = quantized.subset(100)
    assert isinstance(sub, QuantizedEmbedding) and sub.levels is quantized.levels
    np.testing.assert_array_equal(sub.codes, codes[:100])


def test_quantize_edge_cases(tmp_path: Path) -> None:
    emb = Embedding(["a", "b", "c"], np.array([[1.0, 0.5], [1.0, -0.25], [1.0, 2.0]], dtype=np.float32))
    q = quantize(emb)  # a constant column: every code 0
    np.testing.assert_array_equal(q.codes[:, 0], [0, 0, 0])
    np.testing.assert_array_equal(q.vectors, emb.vectors)  # three values per column: all on the grid
    q.save(tmp_path / "q")
    assert Embedding.load(tmp_path / "q").fingerprint == q.fingerprint
    with pytest.raises(EmbeddingError, match="bits"):
        quantize(emb, bits=6)


def test_the_artefact_is_version_3_and_names_its_source(artefact: Path, quantized: QuantizedEmbedding) -> None:
    manifest = json.loads((artefact / "manifest.json").read_text())
    assert manifest["version"] == WEB_VERSION_QUANTIZED and manifest["mechanism"] == "madlib"
    assert manifest["dtype"] == "uint8" and manifest["dim"] == 50
    assert manifest["quantization"] == "uniform-8bit-per-dimension"
    assert manifest["fingerprint"] == quantized.fingerprint
    assert manifest["quantized_from"] == small_embedding().fingerprint
    assert manifest["max_error"] == quantized.max_error
    assert set(manifest["files"]) == {"words.txt", WEB_QVECTORS, WEB_LEVELS}
    for name, spec in manifest["files"].items():
        data = (artefact / name).read_bytes()
        assert len(data) == spec["bytes"] and hashlib.sha256(data).hexdigest() == spec["sha256"]
    codes = np.frombuffer((artefact / WEB_QVECTORS).read_bytes(), np.uint8).reshape(-1, 50)
    levels = np.frombuffer((artefact / WEB_LEVELS).read_bytes(), "<f4").reshape(50, 256)
    np.testing.assert_array_equal(levels[np.arange(50), codes], quantized.vectors)
    # a quarter of the float32 payload
    assert len(codes.tobytes()) * 4 == small_embedding().size * 50 * 4


def test_a_prior_rides_along(quantized: QuantizedEmbedding) -> None:
    mech = make_mechanism("madlib", small_embedding(), 5.0, index="exact", prior="zipf")
    files = web_artefact_of(quantized_madlib(mech))
    manifest = json.loads(files["manifest.json"])
    assert manifest["version"] == WEB_VERSION_QUANTIZED and manifest["prior"] == "zipf"
    assert WEB_PRIOR_FILE in files and manifest["dtype"] == "uint8"
    # not for a contextual prior, a non-madlib mechanism or an already quantized embedding
    assert quantized_madlib(mechanisms()["brr"]) is None
    assert quantized_madlib(make_mechanism("madlib", quantized, 5.0, index="exact")) is None


@pytest.fixture(scope="module")
def js() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.close()


@pytest.fixture(scope="module")
def service() -> Iterator[object]:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from _device_helpers import service_app

    with TestClient(service_app()) as c:
        yield c


def test_the_client_rebuilds_the_same_vectors(js: Harness, artefact: Path, quantized: QuantizedEmbedding) -> None:
    got = js("madlib_vectors", artefact=str(artefact))
    assert got["quantized"] is True and got["version"] == WEB_VERSION_QUANTIZED
    np.testing.assert_array_equal(unb64(got["vectors"], "<f4").reshape(-1, 50), quantized.vectors)


def test_decode_parity_and_the_float32_twin(
    js: Harness, artefact: Path, service: object, quantized: QuantizedEmbedding
) -> None:
    small = quantized_madlib(mechanisms()["madlib"])
    index = service.get("/v1/device").json()["artefacts"]  # type: ignore[attr-defined]
    aid = next(a["id"] for a in index if a.get("vectors") == "uint8")
    n = 1500
    ids = np.random.default_rng(3).integers(0, quantized.size, n)
    noise = unb64(js("laplace", count=n, dim=50, epsilon=5.0)["noise"], "<f8").reshape(n, -1)
    noisy = (noise + quantized.vectors[ids]).astype("<f4")  # the device's perturbation: its own vectors
    local = js("madlib_decode", artefact=str(artefact), vectors=b64(noisy))["ids"]
    r = service.post("/v1/decode", json={"artefact": aid, "vectors": b64(noisy), "epsilon": 5.0})  # type: ignore[attr-defined]
    assert r.status_code == 200, r.text[:300]
    remote = r.json()["ids"]
    python = small.decode(noisy).tolist()
    vec = np.asarray(quantized.vectors, dtype=np.float64)
    q64 = noisy.astype(np.float64)
    d = (q64**2).sum(axis=1)[:, None] + (vec**2).sum(axis=1)[None, :] - 2 * q64 @ vec.T  # float64
    two = np.sort(d, axis=1)[:, :2]
    close = (two[:, 1] - two[:, 0]) <= 1e-5 * two[:, 0]
    assert close.sum() <= 10
    exact = np.argmin(d, axis=1)
    for i in np.flatnonzero(~close).tolist():
        assert local[i] == remote[i] == python[i] == exact[i]
    # the twin: the float32 vectors decode the same noisy rows to other words on some rows (about 1.7%
    # at epsilon 5 on this vocabulary: 26 expected in 1,500)
    twin = mechanisms()["madlib"].decode(noisy)
    assert int(np.sum(twin != np.asarray(python))) >= 5


def test_the_service_offers_both_and_a_default(service: object, monkeypatch: pytest.MonkeyPatch) -> None:
    arts = [a for a in service.get("/v1/device").json()["artefacts"] if a["mechanism"] == "madlib"]  # type: ignore[attr-defined]
    assert sorted(a["vectors"] for a in arts) == ["float32", "uint8"]
    by = {a["vectors"]: a for a in arts}
    assert by["uint8"]["vocab_size"] == by["float32"]["vocab_size"] == small_embedding().size  # < 250,000 words
    assert by["uint8"]["bytes"] < by["float32"]["bytes"] / 2
    # the test vocabulary's float32 artefact fits 16 MB: it is the default (the exact mechanism)
    assert by["float32"]["default"] is True and by["uint8"]["default"] is False
    assert by["uint8"]["max_error"] > 0 and "max_error" not in by["float32"]
    # the served bytes are the export's
    files = web_artefact_of(quantized_madlib(mechanisms()["madlib"]))
    for name, data in files.items():
        assert service.get(by["uint8"]["url"] + name).content == data  # type: ignore[attr-defined]
    # above the budget the 8-bit one is the default
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    import deniable.binarize.device as device
    from _device_helpers import OFFER
    from deniable.service import create_app, load_config

    monkeypatch.setattr(device, "DEVICE_BUDGET_BYTES", 100_000)
    with TestClient(create_app(small_embedding(), load_config(environ={}, mechanisms=OFFER))) as c:
        got = {
            a["vectors"]: a["default"] for a in c.get("/v1/device").json()["artefacts"] if a["mechanism"] == "madlib"
        }
    assert got == {"uint8": True, "float32": False}


def test_local_privatization_end_to_end(js: Harness, artefact: Path) -> None:
    texts = ["The hockey game was great, and the police said it."]
    assert all(w.lower() in small_embedding().index_of for w in texts[0].replace(",", "").rstrip(".").split())
    assert js("privatize", artefact=str(artefact), texts=texts, epsilon=1e6)["texts"] == texts
