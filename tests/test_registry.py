"""The mechanism registry: declared options, validation, and the proof that one registration
reaches the CLI, the service and the evaluation harness with no other edit."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from deniable import Embedding
from deniable._errors import InvalidParameterError, NotPrivateWarning
from deniable.mechanisms import (
    Option,
    check_epsilon_option,
    make_mechanism,
    mechanism_class,
    mechanism_names,
    options_of,
    register,
    unregister,
    validate_options,
)
from fake_mechanisms import Shift, run_cli

SECRET = "Secretword"


@dataclass(frozen=True, eq=False)
class ShiftMechanism(Shift):
    """A toy (NOT private) mechanism: word id -> id + shift (mod V). Only here to test the registry."""

    name: ClassVar[str] = "toyshift"
    metric: ClassVar[str] = "index"  # type: ignore[misc]
    shift: int = 0

    options: ClassVar[tuple[Option, ...]] = (
        Option("shift", int, 0, low=0, high=3, client=True, help="how far ids move (toyshift help)"),
    )

    def distance(self, w: int, w2: int) -> float:
        return float(abs(w - w2))


@pytest.fixture
def toy_registered() -> Iterator[str]:
    register("toyshift", ShiftMechanism)
    try:
        yield "toyshift"
    finally:
        unregister("toyshift")


# -- the proof: one registration, seen everywhere ----------------------------------------------
def test_registered_mechanism_reaches_the_cli(
    toy_registered: str,
    emb_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = run_cli(["privatize", "--help"], capsys)
    assert code == 0 and "--shift" in out and "toyshift help" in out
    src = tmp_path / "in.txt"
    src.write_text("hockey soccer\n", encoding="utf-8")
    dst = tmp_path / "out.txt"
    base = ["privatize", str(src), "-o", str(dst), "-e", "1", "--embedding", str(emb_dir), "-q"]
    code, _, _ = run_cli([*base, "--mechanism", "toyshift", "--shift", "1"], capsys)
    assert code == 0
    assert (
        dst.read_text(encoding="utf-8") == "Soccer puck\n"
    )  # sentence case; toy vocabulary: hockey, soccer, puck, ...
    code, _, err = run_cli([*base, "--mechanism", "toyshift", "--shift", "7"], capsys)
    assert code == 2 and "--shift" in err
    code, _, err = run_cli([*base, "--mechanism", "madlib", "--shift", "1"], capsys)
    assert code == 2 and "--shift" in err and "madlib" in err
    code, _, err = run_cli([*base, "--mechanism", "toyshift", "--gamma", "1"], capsys)
    assert code == 2 and "--gamma" in err


def test_registered_mechanism_reaches_the_service(toy_registered: str) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from conftest import make_toy_embedding
    from deniable.service import create_app, load_config

    # the operator offers the registered mechanism; its declared client option becomes offered values
    offer = {"toyshift": {"epsilons": [1], "client": {"shift": [0, 1, 2, 3]}}}
    client = TestClient(create_app(make_toy_embedding(), load_config(environ={}, mechanisms=offer)))
    listed = client.get("/mechanisms").json()["mechanisms"]
    assert listed["toyshift"]["options"] == {"shift": [0, 1, 2, 3]}
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert schema["ToyshiftOptions"]["properties"]["shift"]["enum"] == [0, 1, 2, 3]
    r = client.post(
        "/privatize", json={"texts": ["hockey"], "epsilon": 1, "mechanism": "toyshift", "options": {"shift": 1}}
    )
    assert r.status_code == 200 and r.json()["texts"] == ["Soccer"]
    for bad in (9, True, "1", 1.5):
        r = client.post(
            "/privatize", json={"texts": [SECRET], "epsilon": 1, "mechanism": "toyshift", "options": {"shift": bad}}
        )
        assert r.status_code == 422 and "shift" in r.text and SECRET not in r.text


def test_registered_mechanism_reaches_the_harness(toy_registered: str, tiny_embedding: Embedding) -> None:
    from deniable.experiments.harness import mechanism_factories

    factory = mechanism_factories(["toyshift"], {"toyshift": {"shift": 2}})["toyshift"]
    mech = factory(tiny_embedding, 1.0)
    assert isinstance(mech, ShiftMechanism) and mech.shift == 2
    with pytest.raises(InvalidParameterError, match="shift"):
        mechanism_factories(["toyshift"], {"toyshift": {"shift": -1}})


def test_register_by_import_path_is_lazy_and_unregister_removes() -> None:
    register("toypath", f"{__name__}:ShiftMechanism")
    try:
        assert "toypath" in mechanism_names()
        assert mechanism_class("toypath") is ShiftMechanism
        assert [o.name for o in options_of("toypath")] == ["shift"]
        with pytest.raises(InvalidParameterError, match="registered"):
            register("toypath", ShiftMechanism)
    finally:
        unregister("toypath")
    assert "toypath" not in mechanism_names()
    with pytest.raises(InvalidParameterError, match="mechanism"):
        mechanism_class("toypath")


# -- validation --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "options", "bad"),
    [
        ("tem", {"gamma": -1.0}, "gamma"),
        ("tem", {"gamma": float("inf")}, "gamma"),
        ("tem", {"beta": 1.0}, "beta"),
        ("tem", {"beta": True}, "beta"),  # a bool is not a number
        ("tem", {"table_max": True}, "table_max"),
        ("tem", {"table_max": 2.0}, "table_max"),
        ("tem", {"metric": "cosine"}, "metric"),
        ("tem", {"metric": 3}, "metric"),
        ("madlib", {"index": "annoy"}, "index"),
        ("madlib", {"batch_size": 0}, "batch_size"),
        ("madlib", {"index_options": [1]}, "index_options"),
        ("brr", {"bits": 100}, "bits"),
        ("brr", {"bits": 64.0}, "bits"),
        ("brr", {"index": "exact"}, "index"),
        ("brr", {"binarizer": "pca"}, "binarizer"),
        ("tem", {"bogus": 1}, "bogus"),
        ("madlib", {"metric": "angular"}, "metric"),  # an option of another mechanism
    ],
)
def test_bad_options_are_rejected_naming_the_option(name: str, options: dict[str, object], bad: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        validate_options(name, options)
    assert info.value.name == bad


def test_good_options_pass_and_none_means_unset() -> None:
    assert validate_options("tem", {"metric": "angular", "gamma": 2, "beta": 0.1, "disk_bytes": np.int64(5)}) == {
        "metric": "angular",
        "gamma": 2.0,
        "beta": 0.1,
        "disk_bytes": 5,
    }
    assert validate_options("brr", {"bits": None, "binarizer": "random", "index": "hnsw"}) == {
        "binarizer": "random",
        "index": "hnsw",
    }


@pytest.mark.parametrize(
    ("name", "options"), [("brr", {"bits": 64}), ("tem", {"disk_bytes": 1}), ("madlib", {"batch_size": 8})]
)
def test_client_may_not_set_server_options(name: str, options: dict[str, object]) -> None:
    validate_options(name, options)  # fine for the library and the CLI
    with pytest.raises(InvalidParameterError, match="clients may not set"):
        validate_options(name, options, client=True)


@pytest.mark.parametrize(
    ("name", "options"),
    [("tem", {"metric": SECRET}), ("tem", {SECRET: 1}), ("madlib", {"index": SECRET}), ("tem", {"gamma": SECRET})],
)
def test_client_errors_never_echo_values(name: str, options: dict[str, object]) -> None:
    with pytest.raises(InvalidParameterError) as info:
        validate_options(name, options, client=True)
    assert SECRET not in str(info.value)


def test_unknown_mechanism_not_echoed_for_clients() -> None:
    with pytest.raises(InvalidParameterError) as info:
        validate_options(SECRET, {}, client=True)
    assert SECRET not in str(info.value) and "madlib" in str(info.value)


def test_epsilon_is_declared_and_huge_values_warn(tiny_embedding: Embedding) -> None:
    for bad in (0, -1.0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(InvalidParameterError, match="epsilon"):
            check_epsilon_option(bad)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        make_mechanism("madlib", tiny_embedding, True)  # type: ignore[arg-type]
    with pytest.warns(NotPrivateWarning, match="unchanged"):
        make_mechanism("madlib", tiny_embedding, 1e308)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_mechanism("madlib", tiny_embedding, 1e9)


def test_every_builtin_declares_its_constructor_options() -> None:
    """Every registered mechanism declares each constructor keyword once, with the constructor's own default."""
    import dataclasses

    # SanText fixes the metric its parent class takes (it checks and refuses any other): no option
    fixed = {("santext", "metric"), ("santext_plus", "metric")}
    for name in mechanism_names():
        cls = mechanism_class(name)
        if not cls.__module__.startswith("deniable."):
            continue  # a test's own mechanism, registered for the time of that test
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        keywords = {n for n in fields if (name, n) not in fixed} - {"embedding", "epsilon"}
        assert {o.name for o in options_of(name)} == keywords, name
        for opt in options_of(name):
            f = fields[opt.name]
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
            # a dict option's "unset" (None) is the constructor's empty mapping
            unset_dict = opt.type is dict and opt.default is None and default == {}
            assert default == opt.default or unset_dict, (name, opt.name)


def test_help_lists_every_registered_option(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    import typer.rich_utils

    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 250)  # whatever width an earlier test left
    for command in ("privatize", "explain", "calibrate", "evaluate", "compare"):
        code, out, _ = run_cli([command, "--help"], capsys)
        assert code == 0
        for name in mechanism_names():
            for opt in options_of(name):
                if opt.cli and opt.type is not dict:
                    assert opt.cli_flag in out, (command, opt.cli_flag)


def test_library_names_become_flags_in_cli_errors(
    emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import deniable.io

    def fail(*args: object, **kwargs: object) -> None:
        raise InvalidParameterError("column", "body", "a column of the file")

    monkeypatch.setattr(deniable.io, "transform_file", fail)
    src = tmp_path / "in.csv"
    src.write_text("a\nb\n", encoding="utf-8")
    code, _, err = run_cli(
        ["privatize", str(src), "-o", str(tmp_path / "o.csv"), "-e", "1", "--embedding", str(emb_dir)], capsys
    )
    assert code == 2 and "--column='body'" in err


def test_madlib_constructor_is_cheap_and_builds_its_index_once(
    tiny_embedding: Embedding, monkeypatch: pytest.MonkeyPatch
) -> None:
    import deniable.mechanisms.laplace as laplace

    calls = []
    real = laplace.make_index

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(laplace, "make_index", counting)
    mech = laplace.MultivariateLaplace(tiny_embedding, 1.0, index="flat")
    assert calls == []
    found: list[object] = []
    threads = [threading.Thread(target=lambda: found.append(mech.search_index)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and all(f is found[0] for f in found)
    assert mech.privatize([0, 1], np.random.default_rng(0)).shape == (2,)
