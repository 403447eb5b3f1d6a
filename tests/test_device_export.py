"""`deniable export-device --format web`: the JavaScript client's files, verified by their manifest,
loaded by the client in Node; the default --format npy is unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from _device_helpers import Harness, b64
from conftest import make_toy_embedding
from deniable import EmbeddingError
from deniable.binarize.device import WEB_FORMAT, web_artefact, web_artefact_id
from deniable.cli import run_app


@pytest.mark.parametrize("mechanism", ["brr", "madlib"])
def test_export_web(tmp_path: Path, capsys: pytest.CaptureFixture[str], mechanism: str) -> None:
    src = tmp_path / "toy"
    make_toy_embedding().save(src)
    out = tmp_path / "web"
    args = ["export-device", "--format", "web", "-m", mechanism, "--embedding", str(src), "-o", str(out)]
    assert run_app([*args, "--bits", "64", "--binarizer", "simhash"] if mechanism == "brr" else args) == 0
    assert "web artefact" in capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == WEB_FORMAT and manifest["version"] == 1 and manifest["mechanism"] == mechanism
    assert manifest["vocab_size"] == 18 and manifest["lowercase"] is True
    assert manifest["fingerprint"] == make_toy_embedding().fingerprint
    for name, spec in manifest["files"].items():
        data = (out / name).read_bytes()
        assert len(data) == spec["bytes"] and hashlib.sha256(data).hexdigest() == spec["sha256"]
    payload = (out / ("codes.bin" if mechanism == "brr" else "vectors.bin")).read_bytes()
    if mechanism == "madlib":  # float32 little-endian, row-major
        vec = np.frombuffer(payload, dtype="<f4").reshape(18, 4)
        np.testing.assert_array_equal(vec, make_toy_embedding().vectors)
    else:
        assert len(payload) == 18 * 8 and manifest["bits"] == 64
    js = Harness()  # the client loads the folder, verifies it and decodes word 3's own payload to word 3
    try:
        if mechanism == "brr":
            assert js("brr_decode", artefact=str(out), codes=b64(np.frombuffer(payload[24:32], np.uint8)))["ids"] == [3]
        else:
            assert js("madlib_decode", artefact=str(out), vectors=b64(vec[3:4]))["ids"] == [3]
    finally:
        js.close()


def test_export_web_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_app(["export-device", "--format", "zip", "-o", str(tmp_path / "x")]) == 2
    assert "--format" in capsys.readouterr().err
    assert run_app(["export-device", "-m", "madlib", "-o", str(tmp_path / "x")]) == 2
    assert "--mechanism" in capsys.readouterr().err


def test_web_artefact_is_deterministic_and_checked() -> None:
    words = ["a", "b"]
    codes = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.uint8)
    one = web_artefact("brr", words, codes, lowercase=True, fingerprint="f")
    assert one == web_artefact("brr", words, codes, lowercase=True, fingerprint="f")
    assert web_artefact_id(one) == hashlib.sha256(one["manifest.json"]).hexdigest()[:16]
    with pytest.raises(EmbeddingError):
        web_artefact("tem", words, codes, lowercase=True, fingerprint="f")
    with pytest.raises(EmbeddingError):
        web_artefact("brr", ["a\nb", "c"], codes, lowercase=True, fingerprint="f")
    with pytest.raises(EmbeddingError):
        web_artefact("brr", words, codes[:, :3], lowercase=True, fingerprint="f")


def test_export_web_uint8_is_the_services_8bit_artefact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--vectors uint8` writes madlib over the 8-bit embedding: the bytes the service offers beside float32."""
    from deniable.binarize.device import WEB_VERSION_QUANTIZED, web_artefact_of
    from deniable.mechanisms import make_mechanism
    from deniable.mechanisms.laplace import quantized_madlib

    src = tmp_path / "toy"
    make_toy_embedding().save(src)
    out = tmp_path / "web"
    args = ["export-device", "--format", "web", "-m", "madlib", "--vectors", "uint8", "--embedding", str(src)]
    assert run_app([*args, "-o", str(out)]) == 0
    assert "web artefact" in capsys.readouterr().err
    files = web_artefact_of(quantized_madlib(make_mechanism("madlib", make_toy_embedding(), 1.0, index="exact")))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files
    assert json.loads(files["manifest.json"])["version"] == WEB_VERSION_QUANTIZED
    assert run_app([*args[:4], "brr", "--vectors", "uint8", "-o", str(tmp_path / "x")]) == 2
    assert "--vectors" in capsys.readouterr().err
