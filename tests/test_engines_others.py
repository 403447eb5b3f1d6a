"""Ray Data, Dask and Hugging Face datasets: thin layers over the same batch function."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from _engine_helpers import imdb_like, same_share, single_process_changed
from deniable import NotPrivateWarning

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")
N = 2000


@pytest.fixture(scope="module")
def rows():
    return imdb_like(N, seed=1)


def _check(rows, got, emb_dir, exact=False):
    assert len(got) == len(rows)
    got = sorted(got, key=lambda r: r["id"])
    assert [(r["id"], r["label"], r["score"]) for r in got] == [(r["id"], r["label"], r["score"]) for r in rows]
    if exact:
        assert [r["review"] for r in got] == [r["review"] for r in rows]


def _changed(rows, got):
    """Tokens whose word differs (the toy texts have one word per space-separated token)."""
    by_id = {r["id"]: r["review"] for r in got}
    changed = tokens = 0
    for r in rows:
        a = r["review"].lower().rstrip(".!?").split()
        b = by_id[r["id"]].lower().rstrip(".!?").split()
        changed += sum(x != y for x, y in zip(a, b, strict=True))
        tokens += len(a)
    return changed, tokens


def test_dask(rows, emb_dir):
    pytest.importorskip("dask.dataframe", reason="needs deniable[dask]")
    import dask
    import dask.dataframe as dd
    import pandas as pd

    import deniable.integrations.dask as dz

    ddf = dd.from_pandas(pd.DataFrame(rows), npartitions=4)
    with dask.config.set(scheduler="processes", num_workers=2):
        same = dz.privatize(ddf, ["review"], "madlib", 1e9, embedding=str(emb_dir), case="keep", oov="keep").compute()
        _check(rows, same.to_dict("records"), emb_dir, exact=True)
        out = dz.privatize(ddf, "review", "madlib", 3.0, embedding=str(emb_dir)).compute()
    got = out.to_dict("records")
    _check(rows, got, emb_dir)
    a, n = _changed(rows, got)
    b, m = single_process_changed(emb_dir, [r["review"] for r in rows], 3.0)
    assert same_share(a, n, b, m)


def test_hf_datasets_num_proc_2(rows, emb_dir, tmp_path, monkeypatch):
    pytest.importorskip("datasets", reason="needs deniable[hf]")
    import datasets

    import deniable.integrations.hf as hf

    monkeypatch.setenv("DENIABLE_LOAD_LOG", str(tmp_path))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    ds = datasets.Dataset.from_list(rows)
    same = hf.privatize(ds, ["review"], "madlib", 1e9, embedding=str(emb_dir), case="keep", oov="keep", num_proc=2)
    assert same.column_names == ds.column_names and same.to_list() == rows
    before = set(os.listdir(tmp_path))
    # an epsilon no other test used: forked workers would inherit a key this process loaded already
    out = hf.privatize(ds, "review", "madlib", 2.999, embedding=str(emb_dir), num_proc=2, batch_size=100)
    assert out.column_names == ds.column_names
    got = out.to_list()
    _check(rows, got, emb_dir)
    per_pid = Counter(n.split("-")[0] for n in set(os.listdir(tmp_path)) - before if n != "hf")
    assert per_pid and all(v == 1 for v in per_pid.values())  # 10 batches per process, one load each
    a, n = _changed(rows, got)
    b, m = single_process_changed(emb_dir, [r["review"] for r in rows], 2.999)
    assert same_share(a, n, b, m)


def test_ray(rows, emb_dir):
    pytest.importorskip("ray.data", reason="needs deniable[ray]")
    import ray

    import deniable.integrations.ray as rz

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    try:
        ds = ray.data.from_items(rows)
        same = rz.privatize(ds, ["review"], "madlib", 1e9, embedding=str(emb_dir), case="keep", oov="keep")
        _check(rows, same.take_all(), emb_dir, exact=True)
        got = rz.privatize(ds, "review", "madlib", 3.0, embedding=str(emb_dir), batch_size=250).take_all()
        _check(rows, got, emb_dir)
        a, n = _changed(rows, got)
        b, m = single_process_changed(emb_dir, [r["review"] for r in rows], 3.0)
        assert same_share(a, n, b, m)
    finally:
        ray.shutdown()


# ------------------------------------------------------------------ releases that do not multiply
def _by_id(records):
    return {r["id"]: r["review"] for r in records}


def _differ(a, b):
    return sum(a[i] != b[i] for i in a)


def test_dask_recomputation_releases_the_same_text(rows, emb_dir):
    pytest.importorskip("dask.dataframe", reason="needs deniable[dask]")
    import dask.dataframe as dd
    import pandas as pd

    import deniable.integrations.dask as dz

    ddf = dd.from_pandas(pd.DataFrame(rows[:600]), npartitions=3)
    out = dz.privatize(ddf, "review", "madlib", 3.0, embedding=str(emb_dir))
    first = _by_id(out.compute().to_dict("records"))
    assert first == _by_id(out.compute(scheduler="sync").to_dict("records"))  # computed again: the same
    other = _by_id(dz.privatize(ddf, "review", "madlib", 3.0, embedding=str(emb_dir)).compute().to_dict("records"))
    assert _differ(first, other) > 300  # a new run is independent


def test_hf_run_key_fingerprint_and_cache(rows, emb_dir, tmp_path, monkeypatch):
    pytest.importorskip("datasets", reason="needs deniable[hf]")
    import datasets

    import deniable.integrations.hf as hf
    from deniable._random import RunKey
    from deniable.integrations import BatchPrivatizer

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    ds = datasets.Dataset.from_list(rows[:600])
    key = RunKey.new()
    a = hf.privatize(ds, "review", "madlib", 3.0, embedding=str(emb_dir), run_key=key, batch_size=100)
    b = hf.privatize(ds, "review", "madlib", 3.0, embedding=str(emb_dir), run_key=key.hex(), batch_size=100, num_proc=2)
    assert a.to_list() == b.to_list()  # the same run: the same release, whatever num_proc
    c = hf.privatize(ds, "review", "madlib", 3.0, embedding=str(emb_dir), batch_size=100)
    assert c._fingerprint != a._fingerprint and _differ(_by_id(a.to_list()), _by_id(c.to_list())) > 300
    # by hand: the same BatchPrivatizer is the same run (cached or recomputed: equal), a new one is new
    batch = BatchPrivatizer(mechanism="madlib", epsilon=3.0, embedding=str(emb_dir), columns=("review",))
    x = ds.map(batch, batched=True, with_indices=True)
    y = ds.map(batch, batched=True, with_indices=True)
    z = ds.map(
        BatchPrivatizer(mechanism="madlib", epsilon=3.0, embedding=str(emb_dir), columns=("review",)),
        batched=True,
        with_indices=True,
    )
    assert x.to_list() == y.to_list() and _differ(_by_id(x.to_list()), _by_id(z.to_list())) > 300


def test_ray_id_column_reproduces(rows, emb_dir):
    pytest.importorskip("ray.data", reason="needs deniable[ray]")
    import ray

    import deniable.integrations.ray as rz

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    try:
        ds = ray.data.from_items(rows[:400])
        keyed = rz.privatize(ds, "review", "madlib", 3.0, embedding=str(emb_dir), id_column="id", batch_size=64)
        first = _by_id(keyed.take_all())
        assert first == _by_id(keyed.take_all())  # executed again: the same release
        with pytest.warns(NotPrivateWarning, match="id_column"):
            fresh = rz.privatize(ds, "review", "madlib", 3.0, embedding=str(emb_dir), batch_size=64)
        assert _differ(_by_id(fresh.take_all()), _by_id(fresh.take_all())) > 200  # no identity: new noise
    finally:
        ray.shutdown()


def test_hf_dataset_dict_and_streaming_under_one_key(rows, emb_dir, tmp_path, monkeypatch):
    """``DatasetDict`` (each split its own namespace) and ``IterableDataset`` (a running index, no
    num_proc): under one key the text does not depend on num_proc, batch size or streaming."""
    pytest.importorskip("datasets", reason="needs deniable[hf]")
    import datasets

    import deniable.integrations.hf as hf
    from deniable import InvalidParameterError
    from deniable._random import RunKey

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    part = rows[:300]
    ds = datasets.Dataset.from_dict({k: [r[k] for r in part] for k in part[0]})
    key = RunKey.new().hex()
    kw = {"embedding": str(emb_dir), "run_key": key}
    base = hf.privatize(ds, "review", "madlib", 3.0, batch_size=7, **kw)["review"]
    assert base == hf.privatize(ds, "review", "madlib", 3.0, batch_size=100, num_proc=2, **kw)["review"]
    stream = hf.privatize(ds.to_iterable_dataset(num_shards=3), "review", "madlib", 3.0, batch_size=13, **kw)
    assert isinstance(stream, datasets.IterableDataset)
    assert [r["review"] for r in stream] == base  # the running index is the row index
    assert [r["id"] for r in stream] == [r["id"] for r in part]
    with pytest.raises(InvalidParameterError, match="num_proc"):
        hf.privatize(ds.to_iterable_dataset(), "review", "madlib", 3.0, num_proc=2, **kw)

    dd = datasets.DatasetDict({"train": ds, "test": ds})
    out = hf.privatize(dd, "review", "madlib", 3.0, **kw)
    assert isinstance(out, datasets.DatasetDict) and list(out) == ["train", "test"]
    assert out["train"].column_names == ds.column_names and out["train"]["id"] == ds["id"]
    train, test = out["train"]["review"], out["test"]["review"]
    assert sum(a == b for a, b in zip(train, test, strict=True)) < 60  # the same rows, separate streams
    assert sum(a == b for a, b in zip(train, base, strict=True)) < 60  # a split is not the bare dataset
    again = hf.privatize(dd, "review", "madlib", 3.0, batch_size=11, num_proc=2, **kw)
    assert again["train"]["review"] == train and again["test"]["review"] == test
    streaming = datasets.IterableDatasetDict({k: v.to_iterable_dataset() for k, v in dd.items()})
    streamed = hf.privatize(streaming, "review", "madlib", 3.0, batch_size=17, **kw)
    assert isinstance(streamed, datasets.IterableDatasetDict)
    assert [r["review"] for r in streamed["test"]] == test
