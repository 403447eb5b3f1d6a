from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from deniable.service import create_app, load_config  # noqa: E402

#: The operator's offer these tests run against (the service no longer takes any epsilon or option).
OFFER = {"madlib": {"epsilons": [0.1, 1, 1e9], "client": {"index": ["exact", "flat"]}}}


@pytest.fixture(scope="module")
def client() -> TestClient:
    from conftest import make_toy_embedding

    return TestClient(create_app(make_toy_embedding(), load_config(environ={}, mechanisms=OFFER)))


def test_health_and_mechanisms(client: TestClient) -> None:
    assert client.get("/health").json()["vocabulary"] == 18
    assert "madlib" in client.get("/mechanisms").json()["mechanisms"]


def test_privatize_round_trip(client: TestClient) -> None:
    texts = ["The Hockey game, was GREAT!\r\n", ""]
    r = client.post("/privatize", json={"texts": texts, "epsilon": 1e9, "case": "keep", "oov": "keep"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["texts"] == texts and body["tokens"] == 5 and body["mechanism"]["mechanism"] == "madlib"
    assert any("case=keep" in item for item in body["policy"]["not_protected"])
    # the defaults: sentence case, random replacement of out-of-vocabulary words, stated in the response
    r = client.post("/privatize", json={"texts": texts, "epsilon": 1e9})
    body = r.json()
    assert body["texts"] == ["The hockey game, was great!\r\n", ""]
    assert body["policy"]["case"] == "sentence" and body["policy"]["oov"] == "random"
    assert not any("keep" in item for item in body["policy"]["not_protected"])
    r = client.post("/privatize", json={"texts": ["hockey " * 50], "epsilon": 0.1, "options": {"index": "flat"}})
    assert r.status_code == 200 and r.json()["changed"] > 0


@pytest.mark.parametrize(
    ("payload", "code", "needle"),
    [
        ({"texts": ["Secretword"], "epsilon": 0}, 422, "epsilon"),
        ({"texts": ["Secretword"], "epsilon": -1}, 422, "epsilon"),
        ({"texts": ["Secretword"], "epsilon": 1, "mechanism": "nope"}, 422, "mechanism"),
        ({"texts": ["Secretword"], "epsilon": 1, "oov": "skip"}, 422, "oov"),
        ({"texts": ["Secretword"], "epsilon": 1, "options": {"bogus": 1}}, 422, "options"),
        ({"texts": "Secretword", "epsilon": 1}, 422, "texts"),
        ({"epsilon": 1}, 422, "texts"),
    ],
)
def test_bad_requests_get_4xx_without_echoing_text(client: TestClient, payload: dict, code: int, needle: str) -> None:
    r = client.post("/privatize", json=payload)
    assert r.status_code == code
    assert needle in r.text
    assert "Secretword" not in r.text
