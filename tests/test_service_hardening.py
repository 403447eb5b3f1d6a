"""The service in front of a hostile client: the findings of issue 15, one test each."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from deniable import InvalidParameterError  # noqa: E402
from deniable.service import create_app, load_config  # noqa: E402

OFFER = {
    "madlib": {"epsilons": [1, 10], "client": {"index": ["exact", "flat"]}},
    "tem": {"epsilons": [1, 10], "client": {"metric": ["euclidean"]}},
}
SECRET = "Secretword"


def make(environ: dict[str, str] | None = None, **config: Any) -> TestClient:
    from conftest import make_toy_embedding

    cfg = load_config(environ=environ or {}, mechanisms=config.pop("mechanisms", OFFER), **config)
    return TestClient(create_app(make_toy_embedding(), cfg))


@pytest.fixture(scope="module")
def client() -> TestClient:
    return make()


def post(client: TestClient, payload: dict[str, Any], path: str = "/v1/privatize") -> Any:
    return client.post(path, json=payload)


def test_v1_round_trip_states_the_guarantee(client: TestClient) -> None:
    r = post(client, {"texts": ["The hockey game"], "epsilon": 10, "mechanism": "tem"})
    assert r.status_code == 200, r.text
    body = r.json()
    g = body["guarantee"]
    assert g["mechanism"]["mechanism"] == "tem" and g["mechanism"]["epsilon"] == 10 and g["mechanism"]["metric"]
    assert "Pr[M(w)=y]" in g["statement"] and g["not_protected"] == body["policy"]["not_protected"]
    r = post(client, {"texts": ["The hockey game"], "epsilon": 1, "options": {"index": "flat"}})
    assert r.status_code == 200 and r.json()["guarantee"]["mechanism"]["index"] == "flat"
    offer = client.get("/v1/mechanisms").json()
    assert offer["mechanisms"]["madlib"]["epsilons"] == [1.0, 10.0]
    assert offer["mechanisms"]["madlib"]["options"] == {"index": ["exact", "flat"]}


@pytest.mark.parametrize(
    "payload",
    [
        {"mechanism": "tem", "options": {"gamma": 1e9}},  # client-settable in the registry, not offered
        {"mechanism": "tem", "options": {"table_max": 10**12}},
        {"mechanism": "tem", "options": {"disk_bytes": 10**15}},
        {"options": {"batch_size": 7}},
        {"options": {"index_options": {"vocab_block": 0}}},
        {"options": {"index_options": {"m": -1}}},
        {"options": {"index": "hnsw"}},  # declared, not offered here
        {"mechanism": "brr", "options": {"bits": 64, "seed": 3}},  # not offered at all
        {"epsilon": 2},  # not an offered epsilon
        {"epsilon": True},  # was taken as 1.0
        {"epsilon": "1"},
        {"unknown": 1},  # unknown top-level fields were ignored
    ],
)
def test_only_offered_values_reach_a_mechanism(client: TestClient, payload: dict[str, Any]) -> None:
    import deniable.mechanisms as mechanisms  # the service builds through it (at start-up only)

    built = []
    original = mechanisms.make_mechanism
    mechanisms.make_mechanism = lambda *a, **k: built.append(a) or original(*a, **k)  # type: ignore[assignment]
    try:
        r = post(client, {"texts": [SECRET], "epsilon": 1, **payload})
    finally:
        mechanisms.make_mechanism = original  # type: ignore[assignment]
    assert r.status_code == 422, r.text
    assert not built  # nothing is constructed per request
    assert SECRET not in r.text and "1000000000" not in r.text and "vocab_block" not in r.text


def test_no_mechanism_is_built_per_request(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    import deniable.mechanisms as mechanisms
    from deniable.mechanisms import registry

    def fail(*a: Any, **k: Any) -> None:
        raise AssertionError("built per request")

    monkeypatch.setattr(mechanisms, "make_mechanism", fail)
    monkeypatch.setattr(registry, "mechanism_class", fail)
    for eps in (1, 10):
        assert post(client, {"texts": ["hockey"], "epsilon": eps}).status_code == 200


def test_lone_surrogate_and_invalid_utf8_get_4xx(client: TestClient) -> None:
    headers = {"content-type": "application/json"}
    r = client.post("/v1/privatize", content=b'{"texts": ["\\ud800"], "epsilon": 10}', headers=headers)
    assert r.status_code == 422 and "texts" in r.text
    r = client.post("/v1/explain", content=b'{"word": "\\udfff", "epsilon": 10}', headers=headers)
    assert r.status_code == 422
    r = client.post("/v1/privatize", content=b'{"texts": ["\xff\xfe"], "epsilon": 10}', headers=headers)
    assert 400 <= r.status_code < 500
    r = client.post("/v1/privatize", content=b'{"texts": [', headers=headers)
    assert 400 <= r.status_code < 500


def test_token_limit(client: TestClient) -> None:
    c = make(max_tokens=5)
    r = post(c, {"texts": ["hockey " * 3, "game " * 3], "epsilon": 1})
    assert r.status_code == 413 and "5 word tokens" in r.text
    assert post(c, {"texts": ["hockey " * 5], "epsilon": 1}).status_code == 200


def test_body_limit_before_parsing() -> None:
    c = make(max_body_bytes=1000)
    r = post(c, {"texts": ["hockey " * 200], "epsilon": 1})
    assert r.status_code == 413
    sent = []

    def stream() -> Iterator[bytes]:  # chunked: no Content-Length
        for _ in range(1000):
            sent.append(1)
            yield b" " * 100

    r = c.post("/v1/privatize", content=stream(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    r = c.post("/v1/privatize", content=b"{}", headers={"content-type": "application/json", "content-length": "x"})
    assert 400 <= r.status_code < 500


def test_timeout_stops_the_work(slow_work: Callable[[float], list[int]]) -> None:
    c = make(timeout_s=0.2, chunk_tokens=1)
    calls = slow_work(0.15)
    r = post(c, {"texts": ["hockey"] * 50, "epsilon": 1})
    assert r.status_code == 503 and "Retry-After" in r.headers and "stopped" in r.text
    assert len(calls) <= 3  # stopped between chunks, not after all 50


def test_concurrency_limit_answers_503_with_retry_after() -> None:
    from conftest import guard_answers, work_guard

    guard = work_guard(max_body_bytes=100, max_concurrency=2, retry_after_s=3)
    guard.active = 2

    async def receive() -> dict[str, Any]:  # the body is read before a slot is looked for
        return {"type": "http.request", "body": b"{}", "more_body": False}

    sent = guard_answers(guard, receive)
    assert sent[0]["status"] == 503 and (b"retry-after", b"3") in sent[0]["headers"]
    assert guard.active == 2


def test_errors_do_not_echo_values_or_internals(client: TestClient) -> None:
    for payload in (
        {"texts": [SECRET], "epsilon": 1, "mechanism": SECRET},
        {"texts": [SECRET], "epsilon": 1, "options": {SECRET: 1}},
        {"texts": [SECRET], "epsilon": 1, SECRET: 1},
        {"texts": [SECRET], "epsilon": SECRET},
        {"texts": SECRET, "epsilon": 1},
    ):
        r = post(client, payload)
        assert r.status_code == 422
        assert SECRET not in r.text and "Traceback" not in r.text and "pydantic" not in r.text
    r = post(client, {"word": SECRET, "epsilon": 1}, "/v1/explain")
    assert r.status_code == 422 and SECRET not in r.text


def test_explain(client: TestClient) -> None:
    r = post(client, {"word": "hockey", "epsilon": 10, "mechanism": "tem", "against": ["puck"]}, "/v1/explain")
    assert r.status_code == 200, r.text
    ex = r.json()
    assert ex["exact"] and 0 < ex["n_w"] and ex["outputs"][0]["word"]
    assert ex["guarantees"][0]["other"] == "puck" and ex["guarantees"][0]["bound"] > 0
    r = post(client, {"word": "hockey", "epsilon": 1}, "/v1/explain")
    assert r.status_code == 200 and not r.json()["exact"]


def test_api_keys_and_nothing_secret_in_logs(caplog: pytest.LogCaptureFixture, tmp_path: Any) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# operators\nright-key-123\n")
    c = make({"DENIABLE_API_KEYS": "other-key"}, api_keys_file=str(keys))
    body = {"texts": [SECRET + " hockey"], "epsilon": 1}
    caplog.set_level(logging.DEBUG)
    assert c.post("/v1/privatize", json=body).status_code == 401
    assert c.post("/v1/privatize", json=body, headers={"Authorization": "Bearer wrong-key-987"}).status_code == 403
    assert (
        c.post("/v1/explain", json={"word": SECRET, "epsilon": 1}, headers={"X-API-Key": "wrong-key-987"}).status_code
        == 403
    )
    assert c.post("/v1/privatize", json=body, headers={"Authorization": "Bearer right-key-123"}).status_code == 200
    assert c.post("/v1/privatize", json=body, headers={"X-API-Key": "other-key"}).status_code == 200
    r = c.post("/v1/explain", json={"word": SECRET, "epsilon": 1}, headers={"X-API-Key": "other-key"})
    assert r.status_code == 422
    assert c.get("/livez").status_code == 200 and c.get("/v1/mechanisms").json()["api_key_required"]
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert SECRET not in logged and "wrong-key-987" not in logged and "right-key-123" not in logged


def test_config_is_checked_against_the_registry() -> None:
    with pytest.raises(InvalidParameterError, match="client"):
        load_config(environ={}, mechanisms={"madlib": {"client": {"batch_size": [1]}}})
    with pytest.raises(InvalidParameterError, match="index"):
        load_config(environ={}, mechanisms={"madlib": {"client": {"index": ["nope"]}}})
    with pytest.raises(InvalidParameterError, match="epsilons"):
        load_config(environ={}, mechanisms={"madlib": {"epsilons": [0]}})
    with pytest.raises(InvalidParameterError, match="config"):
        load_config(environ={}, max_tokenz=3)


def test_config_file_toml(tmp_path: Any) -> None:
    path = tmp_path / "service.toml"
    path.write_text(
        'max_tokens = 7\noov = ["random"]\n[mechanisms.tem]\nepsilons = [5]\nclient = { beta = [0.01, 0.001] }\n'
    )
    cfg = load_config(path, environ={})
    assert cfg.max_tokens == 7 and cfg.oov == ("random",) and cfg.offer("tem").client == {"beta": (0.01, 0.001)}
    assert cfg.default_mechanism == "tem"


def test_livez_at_once_readyz_after_preparation() -> None:
    import time

    from conftest import make_toy_embedding

    app = create_app(make_toy_embedding(), load_config(environ={}, mechanisms=OFFER), background=True)
    with TestClient(app) as c:
        assert c.get("/livez").status_code == 200
        for _ in range(200):
            if c.get("/readyz").status_code == 200:
                break
            time.sleep(0.05)
        assert c.get("/readyz").json()["status"] == "ready"
        assert post(c, {"texts": ["hockey"], "epsilon": 1}).status_code == 200


def test_openapi_has_versioned_paths_and_examples(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert {"/v1/privatize", "/v1/explain", "/v1/mechanisms", "/livez", "/readyz"} <= set(spec["paths"])
    assert "examples" in str(spec["paths"]["/v1/privatize"]["post"]["requestBody"])


def test_schemathesis_finds_no_server_error() -> None:
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings

    from conftest import make_toy_embedding

    app = create_app(make_toy_embedding(), load_config(environ={}, mechanisms=OFFER, max_tokens=200))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    failures: list[tuple[str, int]] = []

    def fuzz(operation: Any) -> None:
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            response = case.call()
            if response.status_code >= 500:
                failures.append((operation.label, response.status_code))

        check()

    operations = [op.ok() for op in schema.get_all_operations()]
    assert {"POST /v1/privatize", "POST /v1/explain"} <= {o.label for o in operations}
    for operation in operations:
        fuzz(operation)
    assert not failures


def test_tem_is_prepared_and_history_free_before_ready(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 13 item 2: the service's timing must not depend on what other clients sent.

    TEM is built history-free (no per-word state kept between calls) from prepared,
    input-independent tables, before /readyz; requests leave its state as it was.
    """
    from deniable.artefacts import list_artefacts

    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    client = make(mechanisms={"tem": {"epsilons": [10]}})
    assert client.get("/readyz").status_code == 200
    state = client.app.state.deniable  # type: ignore[attr-defined]
    ((mech, _),) = [v for v in state.mechanisms.values() if v[0].name == "tem"]
    assert mech.history_free
    # prepared before ready: the tables, the far bounds, the envelope totals at the offered epsilon,
    # and the strength estimate /v1/mechanisms states (a one-point calibration of public tokens)
    kinds = sorted(a.kind for a in list_artefacts(mech.embedding))
    assert kinds == ["calibration", "tem-far", "tem-knn", "tem-totals"]
    assert mech._prepared.totals is not None and mech._prepared.memo is None
    assert mech._prepared.far is not None and mech._prepared.far.prefaulted
    before = (mech.cache_info(), dict(mech._totals))
    for text in ("the hockey game", "nasa rocket launch", "the hockey game"):
        assert post(client, {"texts": [text], "epsilon": 10, "mechanism": "tem"}).status_code == 200
    assert (mech.cache_info(), dict(mech._totals)) == before  # no history kept
    assert mech._prepared.memo is None


def test_whole_vocabulary_mechanisms_are_served_history_free() -> None:
    """exponential, santext, santext_plus: their default draws once per distinct word of a call
    (its time counts distinct words); the service builds them history-free (one row per token)."""
    client = make(
        mechanisms={"exponential": {"epsilons": [5]}, "santext": {"epsilons": [5]}, "santext_plus": {"epsilons": [5]}},
        allow_non_metric=True,
    )
    assert client.get("/readyz").status_code == 200
    state = client.app.state.deniable  # type: ignore[attr-defined]
    served = {v[0].name: v[0] for v in state.mechanisms.values()}
    assert set(served) == {"exponential", "santext", "santext_plus"}
    assert all(m.history_free for m in served.values())
    r = post(client, {"texts": ["the hockey game the game"], "epsilon": 5, "mechanism": "exponential"})
    assert r.status_code == 200, r.text
