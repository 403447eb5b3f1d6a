"""The service's per-API-key budget (issue 42): releases of a key compose, and a release over it is refused first."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from deniable import InvalidParameterError  # noqa: E402
from deniable.service import create_app, load_config  # noqa: E402

OFFER = {"madlib": {"epsilons": [1, 4], "client": {"index": ["exact"]}}}
KEYS = ["key-alice-0123456789", "key-bob-9876543210"]


def make(**config: Any) -> TestClient:
    from conftest import make_toy_embedding

    cfg = load_config(environ={"DENIABLE_API_KEYS": ",".join(KEYS)}, mechanisms=OFFER, **config)
    return TestClient(create_app(make_toy_embedding(), cfg))


def post(c: TestClient, key: str, eps: float, text: str = "the hockey game was great") -> Any:
    return c.post("/v1/privatize", json={"texts": [text], "epsilon": eps}, headers={"X-API-Key": key})


def spy(c: TestClient) -> list[int]:
    """Count the calls of every privatizer's work (the mechanism): wrapped in place."""
    calls: list[int] = []
    for priv in c.app.state.deniable.privatizers.values():  # type: ignore[attr-defined]
        inner = priv.privatize_batch_with_stats

        def wrapped(*a: Any, _inner: Any = inner, **k: Any) -> Any:
            calls.append(1)
            return _inner(*a, **k)

        object.__setattr__(priv, "privatize_batch_with_stats", wrapped)  # a frozen dataclass
    return calls


def test_releases_of_a_key_compose_and_the_one_over_is_refused_before_the_mechanism() -> None:
    c = make(budget_per_key=9)
    calls = spy(c)
    for _ in range(2):
        assert post(c, KEYS[0], 4).status_code == 200  # 4 + 4 = 8 <= 9
    assert len(calls) == 2
    r = post(c, KEYS[0], 4, "a secret sentence nobody should see")  # 12 > 9
    assert r.status_code == 403 and len(calls) == 2  # refused before the mechanism was called
    (detail,) = r.json()["detail"]
    assert detail["type"] == "budget_exhausted" and detail["loc"] == ["body", "epsilon"]
    assert "budget_per_key 9" in detail["msg"] and "spent epsilon 8" in detail["msg"]
    assert "secret" not in r.text and KEYS[0] not in r.text  # never echoes text or key
    assert post(c, KEYS[0], 1).status_code == 200  # 9: what is left may still be spent
    assert post(c, KEYS[0], 1).status_code == 403
    assert post(c, KEYS[1], 4).status_code == 200  # another key: its own budget
    assert len(calls) == 4


def test_the_ledger_file_holds_digests_and_epsilons_only_and_survives_a_restart(tmp_path: Path) -> None:
    ledger = tmp_path / "budget.json"
    c = make(budget_per_key=5, budget_ledger=str(ledger))
    assert post(c, KEYS[0], 4, "my private words").status_code == 200
    text = ledger.read_text()
    digest = hashlib.sha256(KEYS[0].encode()).hexdigest()[:16]
    assert f"api-key:{digest}" in text and KEYS[0] not in text and "private" not in text
    assert json.loads(text)  # a budget file (JSON)
    again = make(budget_per_key=5, budget_ledger=str(ledger))  # a restart (or another worker): same ledger
    calls = spy(again)
    assert post(again, KEYS[0], 4).status_code == 403 and not calls
    assert post(again, KEYS[0], 1).status_code == 200


def test_no_budget_by_default_and_the_config_is_checked() -> None:
    c = make()
    assert c.app.state.deniable.budget is None  # type: ignore[attr-defined]
    for _ in range(5):
        assert post(c, KEYS[0], 4).status_code == 200
    for bad in (0, -1, float("inf"), True, "ten"):
        with pytest.raises(InvalidParameterError, match="budget_per_key"):
            load_config(environ={}, mechanisms=OFFER, budget_per_key=bad)
    with pytest.raises(InvalidParameterError, match="budget_ledger"):
        load_config(environ={}, mechanisms=OFFER, budget_ledger="/tmp/x.json")  # without a budget
    from conftest import make_toy_embedding

    with pytest.raises(InvalidParameterError, match="budget_per_key"):  # a budget per key needs keys
        create_app(make_toy_embedding(), load_config(environ={}, mechanisms=OFFER, budget_per_key=5))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    budget=st.sampled_from([1.0, 2.5, 5.0, 8.0]),
    asks=st.lists(st.tuples(st.sampled_from([0, 1]), st.sampled_from([1.0, 4.0])), max_size=8),
)
def test_property_a_key_never_spends_more_than_its_budget(budget: float, asks: list[tuple[int, float]]) -> None:
    c = make(budget_per_key=budget)
    calls = spy(c)
    spent = [0.0, 0.0]
    for who, eps in asks:
        r = post(c, KEYS[who], eps)
        fits = spent[who] + eps <= budget + 1e-9
        assert r.status_code == (200 if fits else 403)
        if fits:
            spent[who] += eps
    assert len(calls) == len(asks) - _refused(asks, budget)  # every refusal came before the mechanism


def _refused(asks: list[tuple[int, float]], budget: float) -> int:
    spent, refused = [0.0, 0.0], 0
    for who, eps in asks:
        if spent[who] + eps <= budget + 1e-9:
            spent[who] += eps
        else:
            refused += 1
    return refused
