"""TEM's far bounds (kind ``tem-far``): proven per-cluster lower bounds that tighten the k-NN envelope.

Checked: every stored bound is at most the exact distance to every member of its cluster
(and within one quantization step of the cluster's exact minimum: the bounds are not just
valid but useful); the layout files agree with one another; draws through the clustered
envelope follow the exact distribution (G-test, false alarm 1e-6), also when the words of a
batch are split over many slices; and the same test rejects bounds that are too large (the
twin that must fail). The branch-free binary search behind every inverse-CDF draw is checked
against a plain count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable.artefacts import open_artefact
from deniable.mechanisms.tem import TruncatedExponential, _envelope, _sampler, _self_first, _totals
from deniable.mechanisms.tem import _far as far_module
from deniable.mechanisms.tem._far import FAR_KIND, PreparedFar, far_artefact_params
from deniable.mechanisms.tem._geometry import Geometry
from deniable.mechanisms.tem._sampler import count_at_most, segments
from deniable.preparation import prepare
from test_tem_support import ALPHA, force_path, g_test_pvalue

WORDS = (3, 40, 150)


def _far(emb: Any, metric: str) -> PreparedFar:
    info = open_artefact(emb, FAR_KIND, far_artefact_params(emb, metric))
    assert info is not None
    return PreparedFar(info.path)


@pytest.mark.parametrize("tile", [1024, 100])  # one tile, or many (the column reductions too)
@pytest.mark.parametrize("metric", ["euclidean", "angular"])
def test_far_bounds_are_proven_tight_and_consistent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, metric: str, tile: int
) -> None:
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path))  # built here, with this tile
    monkeypatch.setattr(far_module, "_TILE", tile)
    emb = make_tiny_embedding(900, 5, seed=71)
    prepare(emb, ["tem"], metric=metric, options={"epsilon": 3.0}, show_progress=False)
    far = _far(emb, metric)
    v = emb.size
    assert far.clusters == 14 and (far.counts > 0).all()  # 900 // 64 clusters, none empty
    assert np.array_equal(np.sort(far.order), np.arange(v))
    assert np.array_equal(far.rank[far.order], np.arange(v))
    assert far.starts[0] == 0 and far.starts[-1] == v
    geo = Geometry(emb, metric)
    label = np.repeat(np.arange(far.clusters), np.diff(far.starts))[far.rank]  # each word's cluster
    lb = far.lower(np.arange(v))
    worst_gap = 0.0
    for w in range(v):
        d = geo.exact(w, np.arange(v))
        exact_min = np.full(far.clusters, np.inf)
        np.minimum.at(exact_min, label, d)
        assert (lb[w] <= exact_min).all(), f"word {w}: a bound above the exact minimum"
        worst_gap = max(worst_gap, float((exact_min - lb[w]).max()))
    assert worst_gap <= far.step + 1e-3  # rounded down by at most one step (+ the float32 screen's slack)


@pytest.mark.parametrize("block_words", [None, 2])
def test_draws_through_the_far_envelope_are_exact(monkeypatch: pytest.MonkeyPatch, block_words: int | None) -> None:
    opts = force_path(monkeypatch, "knn")  # k = 8 of 400: most mass is outside E, in the clusters
    monkeypatch.setattr(_self_first, "_HEAVY_PROPOSALS", float("inf"))
    if block_words is not None:  # many blocks, a few words each, and small token slices
        monkeypatch.setattr(_sampler, "KNN_WORDS", block_words)
        monkeypatch.setattr(_sampler, "_KNN_TOKENS", 5000)
    emb = make_tiny_embedding(400, 3, seed=61)
    prepare(emb, ["tem"], options={"epsilon": 3.0}, show_progress=False)
    mech = TruncatedExponential(emb, 3.0, **opts)  # type: ignore[arg-type]
    batch = np.tile(np.array(WORDS), 30000)
    y = mech.privatize(batch, np.random.default_rng(11))
    assert mech._prepared.far is not None  # type: ignore[attr-defined]
    for w in WORDS:
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA


def test_words_with_and_without_far_bounds_in_one_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # the far bounds serve only words whose k-NN envelope puts enough mass outside E: with
    # the threshold between the words' shares, one batch mixes both kinds of proposal
    opts = force_path(monkeypatch, "knn")
    monkeypatch.setattr(_self_first, "_HEAVY_PROPOSALS", float("inf"))
    emb = make_tiny_embedding(400, 3, seed=61)
    prepare(emb, ["tem"], options={"epsilon": 3.0}, show_progress=False)
    probe = TruncatedExponential(emb, 3.0, **opts)  # type: ignore[arg-type]
    knn = probe._prepared_knn()  # type: ignore[attr-defined]
    assert knn is not None
    words = np.array(WORDS)
    _, _, m_e, _, log_env, _, _ = probe._env.arrays(knn.rows(words), words)  # type: ignore[attr-defined]
    outside = emb.size * np.exp(log_env)
    share = outside / (m_e + outside)
    assert share.min() < share.max()
    monkeypatch.setattr(_envelope, "FAR_MIN_SHARE", float(np.sort(share)[1]))  # the lowest word without
    mech = TruncatedExponential(emb, 3.0, **opts)  # type: ignore[arg-type]
    mech._prepared_knn()  # type: ignore[attr-defined]
    uses = mech._env.far_words(m_e, log_env)  # type: ignore[attr-defined]
    assert uses.any() and not uses.all()
    batch = np.tile(words, 30000)
    y = mech.privatize(batch, np.random.default_rng(14))
    for w in WORDS:
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA


def test_the_far_envelope_is_tighter_than_the_knn_bound_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    force_path(monkeypatch, "knn")
    emb = make_tiny_embedding(400, 3, seed=61)
    prepare(emb, ["tem"], options={"epsilon": 3.0}, show_progress=False)
    words = np.arange(emb.size)
    with_far = TruncatedExponential(emb, 3.0)
    knn = with_far._prepared_knn()  # type: ignore[attr-defined]
    assert knn is not None and with_far._prepared.far is not None  # type: ignore[attr-defined]
    total_far = with_far._env.arrays(knn.rows(words), words)[3]  # type: ignore[attr-defined]
    with_far._prepared.far = None  # type: ignore[attr-defined]
    total_knn = with_far._env.arrays(knn.rows(words), words)[3]  # type: ignore[attr-defined]
    z = np.array([with_far.compact_distribution(int(w)).total for w in words])
    assert (z <= total_far * (1 + 1e-12)).all() and (total_far <= total_knn * (1 + 1e-12)).all()
    assert np.median(total_knn / total_far) > 1.5  # fewer proposals per token


def test_far_layouts_a_few_rows_at_a_time_are_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    # the layouts are computed _LAYOUT_ROWS words at a time (cache); per row the same
    # arithmetic as all at once, so the prepared totals and the sampler agree bit for bit
    force_path(monkeypatch, "knn")
    emb = make_tiny_embedding(400, 3, seed=61)
    prepare(emb, ["tem"], options={"epsilon": 3.0}, show_progress=False)
    mech = TruncatedExponential(emb, 3.0)
    mech._prepared_knn()  # type: ignore[attr-defined]
    far = mech._prepared.far  # type: ignore[attr-defined]
    words = np.random.default_rng(3).permutation(emb.size)[:333]  # several chunks and a ragged one
    log_env = np.random.default_rng(4).uniform(-30.0, 0.0, words.size)
    cum, q = mech._env.far_layout(words, log_env)  # type: ignore[attr-defined]
    mass = mech._env.far_tables()[1][far.levels(words)]  # type: ignore[attr-defined]
    np.minimum(mass, np.exp(log_env)[:, None], out=mass)
    assert np.array_equal(q, far.levels(words)) and np.array_equal(cum, np.cumsum(mass * far.counts, axis=1))


def test_the_test_rejects_bounds_that_are_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = force_path(monkeypatch, "knn")
    monkeypatch.setattr(_self_first, "_HEAVY_PROPOSALS", float("inf"))
    emb = make_tiny_embedding(400, 3, seed=61)
    init = PreparedFar.__init__

    def lifted(self: PreparedFar, folder: Path, *, prefault: bool = False) -> None:  # about 1.0 higher: not bounds
        init(self, folder, prefault=prefault)
        self.bounds = np.minimum(self.bounds.astype(np.int64) + int(1.0 / self.step), 255).astype(np.uint8)

    # everything read through the lifted bounds: the prepared totals and layouts, and the draws
    monkeypatch.setattr(PreparedFar, "__init__", lifted)
    prepare(emb, ["tem"], options={"epsilon": 3.0}, show_progress=False)
    right = TruncatedExponential(emb, 3.0, cache=False)
    broken = TruncatedExponential(emb, 3.0, **opts)  # type: ignore[arg-type]
    batch = np.tile(np.array(WORDS), 30000)
    y = broken.privatize(batch, np.random.default_rng(12))
    assert broken._prepared.far is not None  # type: ignore[attr-defined]
    assert all(g_test_pvalue(y[batch == w], right.distribution(w)[1]) < ALPHA for w in WORDS)


def test_no_far_bounds_without_an_epsilon(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = force_path(monkeypatch, "knn")
    emb = make_tiny_embedding(300, 3, seed=72)
    infos = prepare(emb, ["tem"], show_progress=False)  # the k-NN tables only
    assert [i.kind for i in infos] == ["tem-knn"]
    mech = TruncatedExponential(emb, 3.0, **opts)  # type: ignore[arg-type]
    batch = np.tile(np.array([5, 6]), 20000)
    y = mech.privatize(batch, np.random.default_rng(13))
    assert mech._prepared.knn is not None and mech._prepared.far is None  # type: ignore[attr-defined]
    for w in (5, 6):
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA


@pytest.mark.parametrize("width", [1, 2, 7, 8, 9, 256, 1000, 1024])
def test_count_at_most_and_segments_are_the_plain_count(width: int) -> None:
    rng = np.random.default_rng(width)
    cum = np.cumsum(rng.integers(0, 3, size=(20, width)).astype(np.float64), axis=1)  # ties and flat runs
    rows = rng.integers(0, 20, size=5000)
    top = cum[:, -1].max() + 2
    u = np.concatenate([rng.uniform(-1, top, 4000), cum[rows[4000:], rng.integers(0, width, 1000)]])  # exact hits too
    expect = (cum[rows] <= u[:, None]).sum(axis=1)
    assert np.array_equal(count_at_most(cum, rows, u), expect)
    # the segment u falls in: its index (the last one past the row's end) and its ends
    c, lo, hi = segments(cum, rows, u)
    assert np.array_equal(c, np.minimum(expect, width - 1))
    assert np.array_equal(hi, cum[rows, c])
    assert np.array_equal(lo, np.where(c > 0, cum[rows, np.maximum(c - 1, 0)], 0.0))


@pytest.mark.parametrize("metric", ["euclidean", "angular", "manhattan"])
def test_chunked_exact_distances_are_the_same_bits(monkeypatch: pytest.MonkeyPatch, metric: str) -> None:
    # Geometry.exact (chunks of 8,192 rows) and exact_indexed (2,048 pairs) against one
    # pair at a time: chunking must not change a single bit
    from deniable.mechanisms.tem import _geometry as geometry_module

    monkeypatch.setattr(geometry_module, "_PAIRED_CHUNK", 7)
    emb = make_tiny_embedding(20000, 6, seed=73)
    geo = Geometry(emb, metric)
    rng = np.random.default_rng(15)
    ws, ys = rng.integers(0, emb.size, 100), rng.integers(0, emb.size, 100)
    ys[:5] = ws[:5]  # d(w, w) = 0 exactly
    one_by_one = np.array(
        [geo.exact_rows(geo.x[[w]], np.array([w]), np.array([y]))[0] for w, y in zip(ws, ys, strict=True)]
    )
    assert np.array_equal(geo.exact_paired(ws, ys), one_by_one) and (one_by_one[:5] == 0).all()
    table = np.asarray(geo.x[np.unique(ws)], dtype=np.float64)
    idx = np.searchsorted(np.unique(ws), ws)
    assert np.array_equal(geo.exact_indexed(table, idx, ws, ys), one_by_one)
    row = geo.exact(int(ws[0]), np.arange(emb.size))  # 3 chunks of 8,192
    assert np.array_equal(row[ys], geo.exact_rows(geo.x[[ws[0]]], ws[:1], ys))


def test_a_damaged_far_artefact_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deniable.artefacts import ArtefactError

    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path))
    emb = make_tiny_embedding(300, 3, seed=74)
    prepare(emb, ["tem"], options={"epsilon": 3.0}, show_progress=False)
    info = open_artefact(emb, FAR_KIND, far_artefact_params(emb, "euclidean"))
    assert info is not None
    good = info.file("bounds.npy").read_bytes()
    info.file("bounds.npy").write_bytes(good[:-1])  # truncated
    with pytest.raises(ArtefactError, match="deniable prepare"):
        TruncatedExponential(emb, 3.0).privatize(np.array([1, 2]), np.random.default_rng(0))
    prepare(emb, ["tem"], options={"epsilon": 3.0}, show_progress=False)  # rebuilt
    assert open_artefact(emb, FAR_KIND, far_artefact_params(emb, "euclidean")) is not None
    assert TruncatedExponential(emb, 3.0).privatize(np.array([1, 2]), np.random.default_rng(0)).shape == (2,)


@pytest.mark.parametrize("broken", [False, True])
def test_prepared_layouts_are_the_computed_ones_and_draw_exactly(monkeypatch: pytest.MonkeyPatch, broken: bool) -> None:
    # the totals at an epsilon also store the far layouts of the words below _LAYOUT_WORDS;
    # with 100 of 400 words stored, one batch draws 3 and 40 through prepared rows and 150
    # through computed ones. The twin moves each stored row's masses one cluster on (the
    # same total, other clusters): the draws must then fail the test
    opts = force_path(monkeypatch, "knn")
    monkeypatch.setattr(_self_first, "_HEAVY_PROPOSALS", float("inf"))
    monkeypatch.setattr(_totals, "_LAYOUT_WORDS", 100)
    emb = make_tiny_embedding(400, 3, seed=61)
    prepare(emb, ["tem"], options={"epsilon": 3.0}, show_progress=False)
    mech = TruncatedExponential(emb, 3.0, **opts)  # type: ignore[arg-type]
    knn = mech._prepared_knn()  # type: ignore[attr-defined]
    holder = mech._prepared  # type: ignore[attr-defined]
    assert knn is not None and holder.layouts is not None and holder.layout_rows is not None
    words = np.arange(100)
    _, _, m_e, _, log_env, _, _ = mech._env.arrays(knn.rows(words), words)  # type: ignore[attr-defined]
    uses = mech._env.far_words(m_e, log_env)  # type: ignore[attr-defined]
    rows = holder.layout_rows
    assert rows.size == 100 and np.array_equal(rows >= 0, uses) and uses[list(WORDS[:2])].all()
    computed = mech._env.far_layout(words[uses], log_env[uses])[0]  # type: ignore[attr-defined]
    assert np.array_equal(holder.layouts[rows[uses]], computed)  # the same bits
    last = np.array([WORDS[2]])
    _, _, m_e, _, log_env, _, _ = mech._env.arrays(knn.rows(last), last)  # type: ignore[attr-defined]
    assert mech._env.far_words(m_e, log_env).all()  # type: ignore[attr-defined]  # computed in the sampler
    if broken:
        mass = np.diff(np.asarray(holder.layouts), axis=1, prepend=0.0)
        holder.layouts = np.cumsum(np.roll(mass, 1, axis=1), axis=1)
    batch = np.tile(np.array(WORDS), 30000)
    y = mech.privatize(batch, np.random.default_rng(15))
    p = [g_test_pvalue(y[batch == w], mech.distribution(w)[1]) for w in WORDS]
    if broken:
        assert p[0] < ALPHA and p[1] < ALPHA and p[2] > ALPHA  # only the stored rows were read
    else:
        assert min(p) > ALPHA
