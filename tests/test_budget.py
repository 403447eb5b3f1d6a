"""The budget that refuses a release before it is made (deniable.budget.BudgetAccountant).

Issue 42: the ledger added manifests up after the fact, only for file outputs; diffprivlib's
BudgetAccountant refuses a release *before* spending. Here: composition adds up per data set
and column, a reproduced release (same key, parameters, keyed input digest) costs nothing, an
inserted line or another batch size is counted as the ledger counts it, and a refused release
draws no noise and writes nothing (CLI exit 2, Python BudgetError).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import deniable
from deniable._random import RunKey
from deniable.budget import BUDGET_FILE_NAME, BudgetAccountant, BudgetError, read_budget_file
from deniable.cli import run_app
from deniable.privatizer import Privatizer

pytestmark = pytest.mark.filterwarnings("ignore::deniable.WeakPrivacyWarning")

LINES = ["my diagnosis is leukemia", "the hockey game was great", "nasa launched a rocket", "a puck and a goal"] * 3


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A mechanism spy: how many batches reached the privatizer (every draw goes through ``_run``)."""
    calls: list[int] = []
    real = Privatizer._run

    def spy(self, texts, *args, **kwargs):
        calls.append(len(texts))
        return real(self, texts, *args, **kwargs)

    monkeypatch.setattr(Privatizer, "_run", spy)
    return calls


@pytest.fixture(autouse=True)
def _fresh_default():
    old = BudgetAccountant.pop_default()
    yield
    BudgetAccountant.pop_default()
    if old is not None:
        old.set_default()


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = run_app(list(args))
    return code, capsys.readouterr().err


def _src(tmp_path: Path, lines: list[str] = LINES, name: str = "notes.txt") -> Path:
    src = tmp_path / name
    src.write_text("".join(t + "\n" for t in lines), encoding="utf-8")
    return src


def _run(capsys, emb_dir, src, dst, budget, *extra):
    args = ["privatize", str(src), "-o", str(dst), "--epsilon", "4", "--embedding", str(emb_dir), "-q"]
    return cli(capsys, *args, "--budget", str(budget), *extra)


# ----------------------------------------------------------------------------- the accountant
def test_composition_adds_up_per_data_set_and_column():
    acc = BudgetAccountant(10)
    acc.spend(3, dataset="a")
    acc.spend(3, dataset="a")
    acc.spend(9, dataset="b")  # another data set has its own budget
    acc.spend(2.5, dataset="a", columns=["other"])
    assert acc.total("a") == 6 and acc.remaining("a") == 4 and acc.total("a", "other") == 2.5
    assert acc.total("b") == 9 and acc.total() == 0
    assert acc.check(4, dataset="a") == 4  # exactly the budget is allowed
    with pytest.raises(BudgetError) as info:
        acc.check(4.5, dataset="a")
    e = info.value
    assert (e.spent, e.asked, e.remaining, e.budget) == (6, 4.5, 4, 10)
    assert "spent epsilon 6" in str(e) and "asks 4.5" in str(e) and "4 remains" in str(e)
    assert len(acc) == 4  # a refusal spends nothing
    acc.spend(0.1, dataset="c")
    acc.spend(0.2, dataset="c")
    assert BudgetAccountant(0.3, spent_budget=acc.spent_budget).check(1e-12, dataset="x") > 0  # float sums


def test_wrong_twin_no_composition_would_let_the_release_through():
    """The twin: counting only the largest release (no composition) passes what the budget refuses."""
    acc = BudgetAccountant(10, spent_budget=[])
    for _ in range(3):
        acc.spend(3, dataset="a")
    largest = max((r["release"]["epsilon_per_word"] for r in acc.spent_budget), default=0.0)
    assert largest + 3 <= 10  # the wrong rule would allow a 4th release at 3...
    with pytest.raises(BudgetError):  # ...composition does not: 9 + 3 > 10
        acc.check(3, dataset="a")


def test_default_accountant_and_context():
    default = BudgetAccountant.load_default()
    assert default is BudgetAccountant.load_default() and math.isinf(default.epsilon)
    with BudgetAccountant(1) as acc:
        assert BudgetAccountant.load_default() is acc
    assert BudgetAccountant.load_default() is default
    with pytest.raises(deniable.InvalidParameterError, match="epsilon"):
        BudgetAccountant(0)
    with pytest.raises(deniable.InvalidParameterError, match="accountant"):
        BudgetAccountant.load_default("nope")  # type: ignore[arg-type]


def test_persistence_round_trip_is_atomic_and_holds_no_text(tmp_path):
    path = tmp_path / BUDGET_FILE_NAME
    acc = BudgetAccountant(10, path=path)
    acc.spend(4, dataset="patients")
    res = acc.reserve(3, dataset="patients")
    assert BudgetAccountant(10, path=path).total("patients") == 7  # a reservation counts for other processes
    res.cancel()
    again = BudgetAccountant.load(path)
    assert again.epsilon == 10 and again.total("patients") == 4 and len(again) == 1
    eps, releases = read_budget_file(path)
    assert eps == 10 and releases == again.spent_budget
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    text = path.read_text(encoding="utf-8")
    assert "patients" in text  # the label the user gave, nothing else of the data


# ------------------------------------------------------------------------------ deniable.privatize
def test_privatize_refuses_before_drawing(emb_dir, draws):
    acc = BudgetAccountant(10)
    deniable.privatize(LINES, epsilon=6, embedding=str(emb_dir), accountant=acc, dataset="notes")
    assert len(draws) == 1
    with pytest.raises(BudgetError, match=r"accountant 10: .*spent epsilon 6 per word, this release asks 6"):
        deniable.privatize(LINES, epsilon=6, embedding=str(emb_dir), accountant=acc, dataset="notes")
    assert len(draws) == 1  # no noise drawn
    assert acc.total("notes") == 6
    deniable.privatize(LINES, epsilon=4, embedding=str(emb_dir), accountant=acc, dataset="notes")
    assert acc.remaining("notes") == 0


def test_privatize_reproduction_costs_nothing_a_changed_input_does(emb_dir):
    acc = BudgetAccountant(8)
    key = RunKey.new()
    first = deniable.privatize(LINES, epsilon=8, embedding=str(emb_dir), run_key=key, accountant=acc, dataset="n")
    again = deniable.privatize(LINES, epsilon=8, embedding=str(emb_dir), run_key=key, accountant=acc, dataset="n")
    assert again == first and acc.total("n") == 8  # the same output: no new release
    with pytest.raises(BudgetError):  # one line inserted: fresh noise for the shifted lines, a new release
        deniable.privatize(
            ["inserted", *LINES], epsilon=8, embedding=str(emb_dir), run_key=key, accountant=acc, dataset="n"
        )
    with pytest.raises(BudgetError):  # the same texts under a fresh key: a new release
        deniable.privatize(LINES, epsilon=8, embedding=str(emb_dir), accountant=acc, dataset="n")


def test_the_default_accountant_records_every_call(emb_dir):
    deniable.privatize(LINES[:2], epsilon=5, embedding=str(emb_dir))
    deniable.privatize(LINES[:2], epsilon=5, embedding=str(emb_dir))
    assert BudgetAccountant.load_default().total() == 10  # unlabelled releases are counted together
    with BudgetAccountant(9):
        with pytest.raises(BudgetError):
            deniable.privatize(LINES[:2], epsilon=5, embedding=str(emb_dir), dataset="x")
            deniable.privatize(LINES[:2], epsilon=5, embedding=str(emb_dir), dataset="x")


# ---------------------------------------------------------------------------- BatchPrivatizer
def test_batch_privatizer_charges_once_on_the_driver_before_any_job(emb_dir, draws):
    from deniable.integrations import BatchPrivatizer

    acc = BudgetAccountant(10)
    batch = BatchPrivatizer.for_columns(["text"], "madlib", 6.0, embedding=str(emb_dir), accountant=acc, dataset="d")
    assert acc.total("d") == 6 and draws == []
    batch.privatize_columns({"text": LINES}, positions=list(range(len(LINES))))
    batch.privatize_columns({"text": LINES}, positions=list(range(len(LINES))))  # the same run: no new charge
    assert acc.total("d") == 6
    import pickle

    assert "accountant" not in pickle.dumps(batch).decode("latin-1")  # nothing of it travels to workers
    n = len(draws)
    with pytest.raises(BudgetError):
        BatchPrivatizer.for_columns(["text"], "madlib", 6.0, embedding=str(emb_dir), accountant=acc, dataset="d")
    assert len(draws) == n
    BatchPrivatizer(mechanism="madlib", epsilon=6.0, embedding=str(emb_dir), accountant=False)  # a check only
    assert acc.total("d") == 6


# ---------------------------------------------------------------------------------------- CLI
def test_cli_refuses_with_exit_2_before_loading_and_writes_nothing(tmp_path, emb_dir, capsys, monkeypatch, draws):
    src = _src(tmp_path)
    code, err = _run(capsys, emb_dir, src, tmp_path / "a.txt", 6)
    assert code == 0, err
    budget_file = tmp_path / BUDGET_FILE_NAME
    assert budget_file.is_file() and BudgetAccountant.load(budget_file).total(src) == 4

    import deniable.cli.privatize as cmd

    def no_load(*a, **k):
        raise AssertionError("the embedding was loaded")

    monkeypatch.setattr(cmd, "load_embedding_option", no_load)
    n = len(draws)
    code, err = _run(capsys, emb_dir, src, tmp_path / "b.txt", 6)
    assert code == 2
    msg = " ".join(err.split())
    assert "--budget 6" in msg and "spent epsilon 4" in msg and "asks 4" in msg and "2 remains" in msg
    assert "nothing written" in msg and "leukemia" not in msg
    assert not (tmp_path / "b.txt").exists() and not (tmp_path / "b.txt.manifest.json").exists()
    assert len(draws) == n and BudgetAccountant.load(budget_file).total(src) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["notes.txt", "a.txt", "a.txt.manifest.json", BUDGET_FILE_NAME, BUDGET_FILE_NAME + ".lock"]
    )


def test_cli_reproduction_is_free_batch_size_too_an_inserted_line_is_not(tmp_path, emb_dir, keyfile, capsys, draws):
    src = _src(tmp_path)
    key = ("--run-key-file", str(keyfile))
    assert _run(capsys, emb_dir, src, tmp_path / "a.txt", 4, *key)[0] == 0
    code, err = _run(capsys, emb_dir, src, tmp_path / "b.txt", 4, *key, "--batch-size", "5")
    assert code == 0, err  # the same release (the ledger's rule): free, although the budget is spent
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == (tmp_path / "b.txt").read_text(encoding="utf-8")
    n = len(draws)
    _src(tmp_path, ["inserted line", *LINES])  # the same path, one line inserted at the top
    code, err = _run(capsys, emb_dir, src, tmp_path / "c.txt", 4, *key)
    assert code == 2 and "--budget 4" in err and not (tmp_path / "c.txt").exists()
    assert len(draws) == n  # refused after the keyed digest pass, before any noise
    # the budget agrees with the ledger over the manifests
    code = run_app(["inspect-manifest", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--json"])
    ledger = json.loads(capsys.readouterr().out)["ledger"]
    assert code == 0 and ledger[0]["epsilon_per_word"] == BudgetAccountant.load(tmp_path / BUDGET_FILE_NAME).total(src)


def test_cli_label_and_budget_file_and_inspect(tmp_path, emb_dir, capsys):
    a, b = _src(tmp_path, name="a.txt"), _src(tmp_path, name="b.txt")
    book = tmp_path / "book.json"
    (tmp_path / "out").mkdir()
    extra = ("--input-label", "notes", "--budget-file", str(book))
    assert _run(capsys, emb_dir, a, tmp_path / "out" / "a.txt", 7, *extra)[0] == 0
    code, err = _run(capsys, emb_dir, b, tmp_path / "out" / "b.txt", 7, *extra)  # another path, the same data set
    assert code == 2 and "dataset:notes" in err
    assert _run(capsys, emb_dir, b, tmp_path / "out" / "b.txt", 7, "--budget-file", str(book))[0] == 0
    code = run_app(["inspect-manifest", str(book), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["budget"] == 7 and sorted(e["epsilon_per_word"] for e in data["ledger"]) == [4, 4]
    code, err = cli(capsys, "privatize", str(a), "-o", "-", "--epsilon", "4", "--budget", "9")
    assert code == 2 and "--budget-file" in err
    code, err = cli(capsys, "privatize", str(a), "-o", str(tmp_path / "x.txt"), "--epsilon", "4", "--budget", "-1")
    assert code == 2 and "--budget" in err


@pytest.mark.parametrize("name", ["a.csv", "a.parquet", "a.jsonl", "a.txt.gz"])
def test_the_digest_pass_before_drawing_matches_the_manifests(tmp_path, toy_embedding, name):
    """The pass that tells a reproduction before any noise is drawn digests what privatize_file records."""
    pd = pytest.importorskip("pandas")
    from deniable import make_mechanism
    from deniable.api import _input_digest, privatize_file, read_manifest

    df = pd.DataFrame({"id": [1, 2, 3], "text": ["the game", None, "nasa rocket"], "b": ["x y", "the", "a"]})
    src = tmp_path / name
    cols: list[str] | None = ["text", "b"]
    if name.endswith(".csv"):
        df.to_csv(src, index=False)
    elif name.endswith(".parquet"):
        df.to_parquet(src)
    elif name.endswith(".jsonl"):
        df.to_json(src, orient="records", lines=True)
    else:
        import gzip

        src.write_bytes(gzip.compress(b"the game\n\nnasa rocket\n"))
        cols = None
    key = RunKey.new()
    priv = Privatizer(make_mechanism("madlib", toy_embedding, 5.0), check_strength=False)
    out = tmp_path / ("out-" + name)
    privatize_file(src, out, priv, columns=cols, run_key=key, batch_size=2)
    recorded = read_manifest(out)["release"]["input_digest"]
    assert _input_digest(src, key, columns=cols, format=None, batch_size=1) == recorded
    assert _input_digest(src, RunKey.new(), columns=cols, format=None, batch_size=1) != recorded  # keyed


def test_many_releases_are_summed_not_forgotten(monkeypatch):
    import deniable.budget as budget

    monkeypatch.setattr(budget, "MAX_RECORDS", 20)
    monkeypatch.setattr(budget, "_KEEP_RECENT", 5)
    acc = BudgetAccountant()
    for i in range(50):
        acc.spend(0.5, dataset="a" if i % 2 else "b", columns=["text", "title"])
    assert len(acc) <= 20 + 4
    assert acc.total("a") == 12.5 and acc.total("b", "title") == 12.5  # no release lost
    capped = BudgetAccountant(12.75, spent_budget=acc.spent_budget)
    with pytest.raises(BudgetError):
        capped.check(0.5, dataset="a", columns=["title"])
    capped.check(0.25, dataset="a", columns=["title"])  # exactly the budget: allowed
