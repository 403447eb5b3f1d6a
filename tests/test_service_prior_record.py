"""The service never echoes an operator's prior file path (responses and ``/v1/mechanisms``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import make_toy_embedding


def test_a_counts_prior_is_named_by_its_file_not_its_path(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from deniable.service import create_app, load_config

    emb = make_toy_embedding()
    folder = tmp_path / "operator-secret-folder"
    folder.mkdir()
    counts = folder / "counts.tsv"
    counts.write_text("".join(f"{w}\t{i + 1}\n" for i, w in enumerate(["the", "game", "hockey", "nasa"])))
    offer = {"madlib": {"epsilons": [1], "options": {"index": "exact", "prior": f"counts:{counts}"}}}
    with TestClient(create_app(emb, load_config(environ={}, mechanisms=offer))) as c:
        r = c.post("/privatize", json={"texts": ["hockey game"], "epsilon": 1})
        assert r.status_code == 200, r.text[:300]
        record = r.json()["mechanism"]
        assert record["prior"] == "counts:counts.tsv" and len(record["prior_sha256"]) == 64
        listing = c.get("/v1/mechanisms")
        assert listing.status_code == 200
        for body in (r.text, listing.text, json.dumps(listing.json())):
            assert "operator-secret-folder" not in body and str(tmp_path) not in body
