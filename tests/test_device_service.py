"""The service's device routes: the artefact files (the bytes of `export-device --format web`),
the client's files, and split mode's POST /v1/decode (never a word in, validation by field)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from _device_helpers import OFFER, VOCAB, b64, export, mechanisms, service_app, small_embedding  # noqa: E402
from deniable.service import create_app, load_config  # noqa: E402


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(service_app()) as c:
        yield c


@pytest.fixture(scope="module")
def index(client: TestClient) -> dict[str, dict]:
    r = client.get("/v1/device")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-cache"
    body = r.json()
    assert body["client"] == "/v1/device/client/deniable.js" and body["decode"] == "/v1/decode"
    return {a["mechanism"]: a for a in body["artefacts"]}


def test_one_artefact_per_code_book(index: dict[str, dict]) -> None:
    assert set(index) == {"brr", "madlib"}  # two epsilons each, one artefact each
    assert index["brr"]["vocab_size"] == VOCAB


def test_served_bytes_are_the_exported_bytes(client: TestClient, index: dict[str, dict], tmp_path: Path) -> None:
    folders = export(tmp_path)
    for name, art in index.items():
        manifest = client.get(art["url"] + "manifest.json")
        assert manifest.status_code == 200
        assert (
            "immutable" in manifest.headers["cache-control"] and "max-age=31536000" in manifest.headers["cache-control"]
        )
        assert manifest.content == (folders[name] / "manifest.json").read_bytes()
        assert hashlib.sha256(manifest.content).hexdigest()[:16] == art["id"]
        for file, spec in json.loads(manifest.content)["files"].items():
            got = client.get(art["url"] + file)
            assert got.content == (folders[name] / file).read_bytes()
            assert hashlib.sha256(got.content).hexdigest() == spec["sha256"]
        assert client.get(art["url"] + "nothing.bin").status_code == 404
    assert client.get("/v1/device/0123456789abcdef/manifest.json").status_code == 404


def test_the_client_is_served(client: TestClient) -> None:
    root = Path(__file__).resolve().parents[1] / "clients" / "js" / "src"
    for name in ("deniable.js", "unicode.js"):
        r = client.get(f"/v1/device/client/{name}")
        assert r.status_code == 200 and r.content == (root / name).read_bytes()
        assert r.headers["content-type"].startswith("text/javascript")
    assert client.get("/v1/device/client/../../__init__.py").status_code == 404
    assert client.get("/v1/device/client/other.js").status_code == 404


def test_decode_brr_and_madlib(client: TestClient, index: dict[str, dict]) -> None:
    mechs = mechanisms()
    emb = small_embedding()
    ids = np.array([emb.index_of[w] for w in ("hockey", "game", "great", "the")])
    codes = mechs["brr"].codes[ids]
    r = client.post("/v1/decode", json={"artefact": index["brr"]["id"], "codes": b64(codes)})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["ids"] == ids.tolist() and r.json()["words"] == ["hockey", "game", "great", "the"]
    vec = np.asarray(emb.vectors[ids], dtype="<f4")
    r = client.post("/v1/decode", json={"artefact": index["madlib"]["id"], "vectors": b64(vec)})
    assert r.status_code == 200 and r.json()["ids"] == ids.tolist()


@pytest.mark.parametrize(
    ("body", "loc", "status"),
    [
        ({"artefact": "nope", "codes": ""}, "artefact", 422),
        ({"artefact": "BRR", "codes": "%%%"}, "codes", 422),
        ({"artefact": "BRR", "codes": base64.b64encode(b"abc").decode()}, "codes", 422),
        ({"artefact": "BRR", "vectors": "AAAA"}, "codes", 422),
        ({"artefact": "BRR", "codes": "", "texts": ["hockey"]}, "body", 422),
        ({"artefact": "MADLIB", "vectors": b64(np.full((1, 50), np.nan, dtype="<f4"))}, "vectors", 422),
        ([1, 2], "body", 422),
    ],
)
def test_decode_refuses_bad_input_by_field(
    client: TestClient, index: dict[str, dict], body: object, loc: str, status: int
) -> None:
    if isinstance(body, dict) and body.get("artefact") in ("BRR", "MADLIB"):
        body = {**body, "artefact": index[str(body["artefact"]).lower()]["id"]}
    r = client.post("/v1/decode", json=body)
    assert r.status_code == status, r.text[:300]
    assert r.json()["detail"][0]["loc"][-1] == loc
    assert "hockey" not in r.text


def test_decode_refuses_more_rows_than_max_tokens(client: TestClient, index: dict[str, dict]) -> None:
    n = client.app.state.deniable.config.max_tokens + 1  # type: ignore[attr-defined]
    r = client.post("/v1/decode", json={"artefact": index["brr"]["id"], "codes": b64(np.zeros((n, 32), np.uint8))})
    assert r.status_code == 413, r.text[:300]


def test_decode_is_not_json(client: TestClient) -> None:
    r = client.post("/v1/decode", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_not_ready_is_503() -> None:
    app = create_app(small_embedding(), load_config(environ={}, mechanisms=OFFER), background=True)
    app.state.deniable.ready.clear()
    with TestClient(app) as c:
        app.state.deniable.ready.clear()
        assert c.get("/v1/device").status_code == 503
        assert c.post("/v1/decode", json={"artefact": "x", "codes": ""}).status_code == 503


def test_decode_takes_a_concurrency_slot(client: TestClient) -> None:
    from deniable.service._guard import Guard

    guard = [m for m in client.app.user_middleware if m.cls is Guard]  # type: ignore[attr-defined]
    assert guard and "/v1/decode" in guard[0].kwargs["work_paths"]


SPLIT_CLIENT = """
import { readFile } from "node:fs/promises";
import path from "node:path";
const [, , client, dir] = process.argv;
const { loadArtefact, Privatizer } = await import(client);
const a = await loadArtefact((name) => readFile(path.join(dir, name)));
let sent = null;
const fetch = async (url, init) => {  // hands the body back to the test, which posts it to the service
  sent = JSON.parse(init.body);
  const row = a.mechanism === "brr" ? a.bits / 8 : a.dim * 4;
  const rows = Buffer.from(sent.codes ?? sent.vectors, "base64").length / row;
  return { ok: true, json: async () => ({ ids: new Array(rows).fill(0) }) };
};
await new Privatizer(a, { epsilon: 1e6, mode: "split", fetch }).privatize("The hockey game was great");
let refused = "";
try {
  const words = new TextEncoder().encode(a.words.join("\\n"));
  const vectors = new Uint8Array(a.size * (a.dim ?? 0) * 4);
  const files = { "words.txt": words, "codes.bin": a.codeBytes, "vectors.bin": vectors };
  const anonymous = new a.constructor(a.manifest, files);
  new Privatizer(anonymous, { epsilon: 1, mode: "split" });  // built without loadArtefact: no id
} catch (e) {
  refused = String(e.message);
}
console.log(JSON.stringify({ id: a.id, sent, refused }));
"""


def test_js_split_mode_names_the_served_artefact_without_an_explicit_id(
    client: TestClient, index: dict[str, dict], tmp_path: Path
) -> None:
    # issue 40: split mode read manifest.id, which the manifest lacks: its decode got a 422 unless
    # the caller passed artefactId. The client now names the artefact by its content address.
    import subprocess

    from _device_helpers import ROOT, node_path

    script = tmp_path / "split.mjs"
    script.write_text(SPLIT_CLIENT)
    module = (ROOT / "clients" / "js" / "src" / "deniable.js").as_uri()
    for name, art in index.items():
        folder = tmp_path / name
        folder.mkdir()
        manifest = client.get(art["url"] + "manifest.json").content
        for file in ["manifest.json", *json.loads(manifest)["files"]]:
            (folder / file).write_bytes(client.get(art["url"] + file).content)  # the served bytes
        run = subprocess.run(
            [node_path(), str(script), module, str(folder)], capture_output=True, text=True, timeout=120, check=False
        )
        assert run.returncode == 0, run.stderr[-2000:]
        out = json.loads(run.stdout)
        assert out["id"] == art["id"] and out["sent"]["artefact"] == art["id"]
        r = client.post("/v1/decode", json=out["sent"])  # the body the client sent, as the service gets it
        assert r.status_code == 200, r.text[:300]
        assert len(r.json()["ids"]) == 16  # 5 tokens padded to padTo
        assert "artefactId" in out["refused"]  # an artefact without an id: a clear error, not a 422 later
