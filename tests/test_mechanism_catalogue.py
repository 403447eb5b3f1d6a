"""The catalogue: declared once in the registry, read by `deniable mechanisms`, `privatize --help`
and the service's /v1/mechanisms; the service refuses non-metric-DP offers unless allowed."""

from __future__ import annotations

import json

import pytest

from deniable import InvalidParameterError
from deniable.cli import run_app
from deniable.mechanisms import mechanism_names
from deniable.mechanisms.registry import MechanismInfo, catalogue, is_metric_dp, register, unregister

NOT_METRIC = {"custext", "custext_plus", "santext_plus", "truncated_gumbel"}


def test_every_builtin_has_a_catalogue_entry() -> None:
    rows = {r["name"]: r for r in catalogue()}
    assert set(rows) == set(mechanism_names())
    for name, r in rows.items():
        assert r["summary"] and r["paper"] and r["guarantee"] and r["speed"], name
        assert r["page"].startswith("docs/") and r["page"].endswith(".md"), name
        assert r["metric_dp"] == (name not in NOT_METRIC), name
        assert r["metric_dp"] == is_metric_dp(name)
    assert rows["diffractor"]["metric"] == "list_position" and rows["diffractor"]["exact"]
    assert rows["madlib"]["prepared"] and not rows["santext"]["prepared"]


def test_catalogue_pages_exist() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for r in catalogue():
        assert (root / r["page"]).is_file(), r["page"]


def test_a_plugin_without_info_gets_an_empty_entry() -> None:
    from deniable.mechanisms.exponential import ExponentialMechanism

    register("plugin_em", ExponentialMechanism, info=MechanismInfo(summary="mine"))
    try:
        row = next(r for r in catalogue() if r["name"] == "plugin_em")
        assert row["summary"] == "mine" and row["page"] == "" and row["metric_dp"]
    finally:
        unregister("plugin_em")


def test_mechanisms_command_lists_every_mechanism(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    assert run_app(["mechanisms", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == mechanism_names()
    assert run_app(["mechanisms"]) == 0
    out = capsys.readouterr().out
    assert "not metric DP" in out and "diffractor" in out


def test_privatize_help_names_every_registered_mechanism(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    assert run_app(["privatize", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for name in mechanism_names():
        assert name in out, name
    assert "deniable mechanisms" in out


def test_service_refuses_non_metric_offers_unless_allowed() -> None:
    pytest.importorskip("fastapi")
    from deniable.service import load_config

    for name in sorted(NOT_METRIC):
        with pytest.raises(InvalidParameterError, match="allow_non_metric"):
            load_config(environ={}, mechanisms={name: {"epsilons": [1]}})
        cfg = load_config(environ={}, mechanisms={name: {"epsilons": [1]}}, allow_non_metric=True)
        assert cfg.allow_non_metric and cfg.names == [name]
    load_config(environ={}, mechanisms={"diffractor": {"epsilons": [1]}})  # metric DP: offered
    with pytest.raises(InvalidParameterError, match="allow_non_metric"):
        load_config(environ={}, mechanisms={"custext": {"epsilons": [1]}}, allow_non_metric="yes")


def test_service_mechanisms_endpoint_states_the_guarantee_form() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from conftest import make_toy_embedding
    from deniable.service import create_app, load_config

    cfg = load_config(
        environ={},
        mechanisms={"madlib": {"epsilons": [1], "options": {"index": "exact"}}, "custext": {"epsilons": [1]}},
        allow_non_metric=True,
    )
    with TestClient(create_app(make_toy_embedding(), cfg)) as client:
        body = client.get("/v1/mechanisms").json()["mechanisms"]
    assert body["madlib"]["catalogue"]["metric_dp"] is True
    assert body["custext"]["catalogue"]["metric_dp"] is False
    assert "output set" in body["custext"]["catalogue"]["guarantee_form"]
