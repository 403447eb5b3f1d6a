"""Keyed determinism: the same run key and record give the same output whatever the batch size,
the grouping of records, ``num_proc``, the partitioning, the engine or the process's history.

Each test compares two computations with the SAME key that differ only in how the records are
cut into batches or processes: under keying per batch (the old design) they released fresh noise
for the same records (a second release the ledger did not count).
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_records_use_their_own_streams, make_toy_embedding
from deniable._random import RunKey
from deniable.api import privatize_file
from deniable.embedding import load_embedding
from deniable.mechanisms import make_mechanism, mechanism_names
from deniable.privatizer import Privatizer

WORDS = "the hockey game was great nasa launched a rocket puck goal space orbit".split()
# TEM's draws depend on its warm caches until it is prepared (issue 40 item 3, tests/test_tem_keyed.py)
MECHANISMS = [m for m in mechanism_names() if m != "tem"]


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 12)))) for _ in range(n)]


def _priv(emb_dir: Path, mechanism: str = "madlib", epsilon: float = 2.0) -> Privatizer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Privatizer(make_mechanism(mechanism, load_embedding(str(emb_dir)), epsilon))


@pytest.mark.parametrize("name", MECHANISMS)
def test_each_record_depends_on_its_own_stream_only(name):
    """privatize_records: one record's output is the same alone, in a group, or in another order."""
    emb = make_toy_embedding()
    opts = {"k": 5} if name.startswith("custext") else {}  # k at most the toy vocabulary
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mech = make_mechanism(name, emb, 2.0, **opts)
        fields = getattr(mech, "__dataclass_fields__", {})
        small = make_mechanism(name, emb, 2.0, batch_size=7, **opts) if "batch_size" in fields else mech
    assert_records_use_their_own_streams(mech, small, emb.size)


@pytest.mark.parametrize("fmt", ["txt", "csv", "jsonl", "parquet"])
def test_privatize_file_same_key_same_output_whatever_the_batch_size(tmp_path, emb_dir, fmt):
    texts = _texts(40)
    src = tmp_path / f"in.{fmt}"
    columns = None if fmt == "txt" else ["a", "b"]
    if fmt == "txt":
        src.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    elif fmt == "csv":
        src.write_text("a,b\n" + "".join(f"{t},{t[::-1]}\n" for t in texts), encoding="utf-8")
    elif fmt == "jsonl":
        src.write_text("".join(json.dumps({"a": t, "b": t.upper()}) + "\n" for t in texts), encoding="utf-8")
    else:
        pd = pytest.importorskip("pandas")
        pytest.importorskip("pyarrow")
        pd.DataFrame({"a": texts, "b": [t.upper() for t in texts]}).to_parquet(src)
    key, priv = RunKey.new(), _priv(emb_dir)

    def content(path: Path) -> object:  # Parquet: the rows (its row groups follow the batch size)
        if fmt == "parquet":
            import pandas as pd

            return pd.read_parquet(path).to_dict("list")
        return path.read_bytes()

    outs = []
    for i, size in enumerate((1, 7, 1000)):
        dst = tmp_path / f"out{i}.{fmt}"
        privatize_file(src, dst, priv, columns=columns, run_key=key, batch_size=size)
        outs.append(content(dst))
    assert outs[0] == outs[1] == outs[2]
    fresh = tmp_path / f"fresh.{fmt}"
    privatize_file(src, fresh, priv, columns=columns, batch_size=7)
    assert content(fresh) != outs[0]  # another key: another release


def test_api_privatize_same_key_same_text_whatever_the_other_texts(emb_dir):
    import deniable

    key = RunKey.new()
    texts = _texts(30, seed=3)
    whole = deniable.privatize(texts, 2.0, embedding=str(emb_dir), run_key=key)
    first = deniable.privatize(texts[:10], 2.0, embedding=str(emb_dir), run_key=key)
    assert whole[:10] == first  # a record's output does not depend on the records after it


def test_hf_num_proc_and_batch_size_do_not_change_the_release(emb_dir):
    pytest.importorskip("datasets", reason="needs deniable[hf]")
    from datasets import Dataset

    from deniable.integrations import hf

    texts = _texts(30, seed=4)
    ds = Dataset.from_dict({"review": texts, "n": list(range(30))})
    key = RunKey.new()
    common = dict(embedding=str(emb_dir), run_key=key.hex())
    one = hf.privatize(ds, "review", "madlib", 2.0, batch_size=8, **common)["review"]
    two = hf.privatize(ds, "review", "madlib", 2.0, batch_size=8, num_proc=2, **common)["review"]
    other = hf.privatize(ds, "review", "madlib", 2.0, batch_size=5, **common)["review"]
    assert one == two == other
    # the same through datasets' own API (Dataset.map with the batch function)
    from deniable.integrations import BatchPrivatizer

    batch = BatchPrivatizer.for_columns("review", "madlib", 2.0, **common)
    mapped = ds.map(batch, batched=True, with_indices=True, batch_size=3, num_proc=2)["review"]
    assert mapped == one


def test_dask_partitioning_does_not_change_the_release(emb_dir):
    pytest.importorskip("dask.dataframe", reason="needs deniable[dask]")
    import dask
    import dask.dataframe as dd
    import pandas as pd

    from deniable.integrations import dask as ddask

    df = pd.DataFrame({"review": _texts(30, seed=5), "n": range(30)})
    key = RunKey.new().hex()
    with dask.config.set(scheduler="sync"):
        outs = [
            ddask.privatize(
                dd.from_pandas(df, npartitions=k), "review", "madlib", 2.0, embedding=str(emb_dir), run_key=key
            )
            .compute()["review"]
            .tolist()
            for k in (1, 3, 7)
        ]
    assert outs[0] == outs[1] == outs[2]


def test_cold_process_and_warm_process_give_the_same_release(tmp_path, emb_dir):
    """A fresh interpreter (cold caches, batch size 1) and this warm one (other inputs privatized first)."""
    texts = _texts(25, seed=6)
    src = tmp_path / "in.txt"
    src.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    key = RunKey.new()
    for name in ("madlib", "vickrey", "truncated_gumbel"):
        priv = _priv(emb_dir, name)
        priv.privatize_batch(_texts(50, seed=9))  # warm this process on other input
        privatize_file(src, tmp_path / f"warm-{name}.txt", priv, run_key=key)
        code = (
            "import sys, warnings; warnings.simplefilter('ignore')\n"
            "from deniable import Privatizer\nfrom deniable.api import privatize_file\n"
            "from deniable.embedding import load_embedding\nfrom deniable.mechanisms import make_mechanism\n"
            "priv = Privatizer(make_mechanism(sys.argv[4], load_embedding(sys.argv[1]), 2.0))\n"
            "privatize_file(sys.argv[2], sys.argv[3], priv, run_key=sys.stdin.read().strip(), batch_size=1)\n"
        )
        cold = tmp_path / f"cold-{name}.txt"
        subprocess.run(
            [sys.executable, "-c", code, str(emb_dir), str(src), str(cold), name],
            input=key.hex(),
            text=True,
            check=True,
            timeout=300,
        )
        assert cold.read_text(encoding="utf-8") == (tmp_path / f"warm-{name}.txt").read_text(encoding="utf-8"), name


@pytest.mark.parametrize("name", ["madlib", "mahalanobis", "vickrey", "brr", "truncated_gumbel"])
def test_the_split_noise_and_decode_keeps_the_output_law(name):
    """Per-record draws + one batched decode sample the same law as the batched path (two-sample
    chi-square on the outputs of one word); the twin (the batched law of another word) must be told apart."""
    from scipy.stats import chi2_contingency

    emb = make_toy_embedding()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mech = make_mechanism(name, emb, 1.5)
    key = RunKey.new()
    n, size, w = 6000, 6, 3
    records = [np.full(size, w, dtype=np.int64) for _ in range(n // size)]
    keyed = np.concatenate(
        mech.privatize_records(records, [key.record_generator(i, "t", "") for i in range(len(records))])
    )
    rng = np.random.default_rng(RunKey.new().generator(0).integers(2**63))
    batched, twin = mech.privatize(np.full(n, w), rng), mech.privatize(np.full(n, 0), rng)

    def p_value(a: np.ndarray, b: np.ndarray) -> float:
        table = np.stack([np.bincount(a, minlength=emb.size), np.bincount(b, minlength=emb.size)])
        table = table[:, table.sum(axis=0) > 0]
        return 1.0 if table.shape[1] < 2 else float(chi2_contingency(table)[1])

    assert p_value(keyed, batched) > 1e-4  # the same law (fails with probability 1e-4)
    assert p_value(keyed, twin) < 1e-6  # a wrong law is detected


def test_a_repeated_json_key_draws_fresh_noise_for_each_value(tmp_path, emb_dir):
    """The same text twice under a repeated key in one record: two streams, not one output copied."""
    text = " ".join(["hockey"] * 40)
    src = tmp_path / "in.jsonl"
    src.write_text(f'{{"t": "{text}", "t": "{text}"}}\n', encoding="utf-8")
    privatize_file(src, tmp_path / "out.jsonl", _priv(emb_dir, epsilon=0.5), columns=["t"], run_key=RunKey.new())
    import re

    values = re.findall(r'"t": "([^"]*)"', (tmp_path / "out.jsonl").read_text(encoding="utf-8"))
    assert len(values) == 2 and values[0] != values[1]
