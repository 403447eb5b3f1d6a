from __future__ import annotations

from typing import Any

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
    # the defaults: sentence case, random replacement of out-of-vocabulary words, stated in the response
    r = client.post("/privatize", json={"texts": texts, "epsilon": 1e9})
    body = r.json()
    assert body["texts"] == ["The hockey game, was great!\r\n", ""]
    assert body["policy"]["case"] == "sentence" and body["policy"]["oov"] == "random"
    assert not any("keep" in item for item in body["policy"]["not_protected"])
    r = client.post("/privatize", json={"texts": ["hockey " * 50], "epsilon": 0.1, "options": {"index": "flat"}})
    assert r.status_code == 200 and r.json()["changed"] > 0


def test_a_client_cannot_switch_protection_off_by_default(client: TestClient) -> None:
    # issue 40: oov=keep and case=keep were offered by default (an unknown word came back verbatim)
    r = client.post("/v1/privatize", json={"texts": ["Zqxjvword hockey"], "epsilon": 1e9, "oov": "keep"})
    assert r.status_code == 422 and "oov" in r.text and "Zqxjvword" not in r.text
    r = client.post("/v1/privatize", json={"texts": ["Hockey"], "epsilon": 1e9, "case": "keep"})
    assert r.status_code == 422 and "case" in r.text
    offer = client.get("/v1/mechanisms").json()
    assert offer["oov"] == ["random", "drop"] and offer["case"] == ["sentence", "lower"]
    assert offer["unprotected"] == {}


def test_every_client_settable_value_of_the_default_offer_is_protected() -> None:
    from deniable.mechanisms import options_of
    from deniable.privatizer import POLICY_OPTIONS
    from deniable.service._models import request_models

    cfg = load_config(environ={})  # the default offer, as `deniable serve` with no config
    assert cfg.unprotected() == {} and not cfg.allow_unprotected
    for name, option in POLICY_OPTIONS.items():
        assert option.unprotected, name  # the registry says which policy values are not protected
        assert all(option.protected(v) for v in getattr(cfg, name)), name
    for offer in cfg.mechanisms:
        declared = {o.name: o for o in options_of(offer.name)}
        for key, values in offer.client.items():
            assert declared[key].client and all(declared[key].protected(v) for v in values), (offer.name, key)
    # and what a client can actually send: the request schema admits no unprotected value
    privatize, _ = request_models(cfg)
    schema = str(privatize.model_json_schema())
    assert "'random', 'drop'" in schema and "'keep'" not in schema


def test_an_unprotected_value_is_an_explicit_warned_and_stated_opt_in() -> None:
    from conftest import make_toy_embedding
    from deniable import InvalidParameterError, NotPrivateWarning
    from deniable.mechanisms import Option

    asked: dict[str, Any] = {"oov": ["random", "keep"], "case": ["lower", "keep"]}
    for field, values in asked.items():  # asked for without the opt-in: refused at start-up, naming the field
        with pytest.raises(InvalidParameterError, match=f"{field}.*allow_unprotected"):
            load_config(environ={}, mechanisms=OFFER, **{field: values})
    # the same rule for any registry option that declares unprotected values
    opt = Option("x", str, "a", choices=("a", "b"), client=True, unprotected=("b",))
    with pytest.raises(InvalidParameterError, match="x"):
        opt.offered_to_clients(["a", "b"], allow_unprotected=False)
    assert opt.offered_to_clients(["a", "b"], allow_unprotected=True) == ("a", "b")
    with pytest.raises(InvalidParameterError, match="client"):
        Option("y", int, 1).offered_to_clients([1], allow_unprotected=True)
    cfg = load_config(
        environ={}, mechanisms=OFFER, oov=["random", "keep"], case=["sentence", "keep"], allow_unprotected=True
    )
    with pytest.warns(NotPrivateWarning, match="allow_unprotected.*oov = keep.*case = keep"):
        c = TestClient(create_app(make_toy_embedding(), cfg))
    assert c.get("/v1/mechanisms").json()["unprotected"] == {"oov": ["keep"], "case": ["keep"]}
    texts = ["The Hockey game, was GREAT!\r\n", ""]
    r = c.post("/privatize", json={"texts": texts, "epsilon": 1e9, "case": "keep", "oov": "keep"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["texts"] == texts and body["tokens"] == 5 and body["mechanism"]["mechanism"] == "madlib"
    assert any("case=keep" in item for item in body["policy"]["not_protected"])
    assert any("oov=keep" in item for item in body["guarantee"]["not_protected"])
    r = c.post("/privatize", json={"texts": ["hockey"], "epsilon": 1e9})  # the defaults stay protected
    assert r.json()["policy"]["oov"] == "random" and not any("keep" in i for i in r.json()["policy"]["not_protected"])


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
