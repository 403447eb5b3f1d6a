"""Edges of the one-call Python API that the command line already handled (issue 40).

- ``target=`` without ``epsilon="auto"`` is refused, as ``--target`` without ``--epsilon auto`` is;
- a text longer than the declared per-record limit (the CLI's ``max_record_chars``) is refused
  before any work, with an error naming the parameter and the item; the limit can be raised;
- where the command line says ``WEAK``, ``deniable.privatize`` and ``Privatizer`` warn
  :class:`~deniable.WeakPrivacyWarning`, from the same rule (one function).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import deniable
from deniable import DataError, InvalidParameterError, Privatizer, WeakPrivacyWarning
from deniable.io import MAX_RECORD_CHARS
from deniable.mechanisms import make_mechanism
from fake_mechanisms import run_cli

SECRET = "Puckish"


@pytest.fixture(scope="module")
def toy_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    from conftest import make_toy_embedding

    folder = tmp_path_factory.mktemp("api_edges") / "emb"
    make_toy_embedding().save(folder)
    return str(folder)


# -- target without epsilon="auto" ----------------------------------------------------------------


def test_target_without_auto_is_refused_like_the_cli(
    toy_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # before: the Python API privatized at epsilon 8 and silently ignored the target
    with pytest.raises(InvalidParameterError, match=r"^target='unchanged<=0.5' is not valid: given only with"):
        deniable.privatize(["the game"], epsilon=8, target="unchanged<=0.5", embedding=toy_path)
    (tmp_path / "in.txt").write_text("the game\n", encoding="utf-8")
    args = ["privatize", str(tmp_path / "in.txt"), "-o", str(tmp_path / "o.txt"), "-e", "8"]
    code, _, err = run_cli([*args, "--target", "unchanged<=0.5", "--embedding", toy_path], capsys)
    assert code == 2 and "--target='unchanged<=0.5' is not valid: given only with --epsilon auto" in err


# -- the per-text size limit ----------------------------------------------------------------------


def test_the_default_limit_is_the_cli_s_one_number() -> None:
    import inspect

    assert inspect.signature(deniable.privatize).parameters["max_record_chars"].default is MAX_RECORD_CHARS


@pytest.mark.parametrize(
    ("texts", "kwargs", "where"),
    [
        (["short", "x" * (MAX_RECORD_CHARS + 1)], {}, "texts: item 1"),
        ("x" * (MAX_RECORD_CHARS + 1), {}, "texts: item 0"),
        (["ok", None, SECRET * 3], {"max_record_chars": 20}, "texts: item 2"),
    ],
)
def test_a_too_long_text_is_refused_before_any_work(
    texts: object, kwargs: dict[str, int], where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deniable import api

    def no_load(*args: object, **kw: object) -> None:
        raise AssertionError("loaded an embedding for a request that must be refused")

    monkeypatch.setattr(api, "cached_privatizer", no_load)
    with pytest.raises(DataError, match=r"longer than max_record_chars=") as info:
        deniable.privatize(texts, epsilon=1, **kwargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(where) and SECRET not in str(info.value)


def test_a_dataframe_cell_is_named_by_its_column_and_row(monkeypatch: pytest.MonkeyPatch) -> None:
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"a": ["x", "y"], "b": ["z", "w" * 50]})
    with pytest.raises(DataError, match=r"^column 'b': item 1 is longer than max_record_chars=10"):
        deniable.privatize(df, epsilon=1, column=["a", "b"], max_record_chars=10)


def test_the_limit_can_be_raised_or_lifted(toy_path: str) -> None:
    text = "the game " * 10
    for limit in (len(text), None):
        out = deniable.privatize([text], epsilon=0.5, embedding=toy_path, max_record_chars=limit)
        assert len(out[0].split()) == 20
    for bad in (0, -1, 2.5, True, "big"):
        with pytest.raises(InvalidParameterError, match="max_record_chars"):
            deniable.privatize([text], epsilon=0.5, embedding=toy_path, max_record_chars=bad)  # type: ignore[arg-type]


# -- WEAK -----------------------------------------------------------------------------------------


def test_privatize_warns_where_the_cli_says_weak(
    toy_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # before: BRR at eps 2 changed no word and the Python API said nothing (the CLI printed WEAK)
    with pytest.warns(WeakPrivacyWarning, match=r"^WEAK: most words of a typical text") as record:
        deniable.privatize(["the hockey game"], epsilon=500, embedding=toy_path)
    (weak,) = [w for w in record if w.category is WeakPrivacyWarning]
    assert Path(weak.filename).name == "test_api_edges.py"  # the caller's line
    (tmp_path / "in.txt").write_text("the hockey game\n", encoding="utf-8")
    args = ["privatize", str(tmp_path / "in.txt"), "-o", str(tmp_path / "o.txt"), "-e", "500"]
    code, _, err = run_cli([*args, "--embedding", toy_path], capsys)
    assert code == 0 and err.count("WEAK") == 1  # the summary's line, not a second one from the warning
    assert str(weak.message).split(" (")[0] in err.replace("\n", " ")  # the same sentence


def test_privatizer_warns_from_the_same_rule(toy_path: str) -> None:
    from conftest import make_toy_embedding
    from deniable.calibrate.table import strength

    emb = make_toy_embedding()
    weak = make_mechanism("madlib", emb, 500.0)
    with pytest.warns(WeakPrivacyWarning) as record:
        Privatizer(weak)
    assert str(record[0].message) == strength(weak).warning()
    assert Path(record[0].filename).name == "test_api_edges.py"
    strong = make_mechanism("madlib", emb, 0.01)
    assert strength(strong).warning() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", WeakPrivacyWarning)
        Privatizer(strong)
        assert len(deniable.privatize(["the game"], epsilon=0.01, embedding=toy_path)) == 1


def test_the_warning_is_public() -> None:
    assert "WeakPrivacyWarning" in deniable.__all__ and issubclass(WeakPrivacyWarning, UserWarning)
    assert not issubclass(WeakPrivacyWarning, deniable.NotPrivateWarning)  # weak, not unprotected
