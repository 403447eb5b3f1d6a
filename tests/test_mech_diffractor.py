"""1-Diffractor: the list walk, the prepared list artefact, the exact distribution against the
mDP inequality (with a wrong-epsilon twin that must fail), and the sampler against it."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from deniable import Embedding, InvalidParameterError
from deniable.artefacts import list_artefacts
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.diffractor import LIST_KIND, Diffractor, greedy_walk
from deniable.preparation import planned_artefacts, prepare


def line_embedding(n: int = 12, seed: int = 0, dim: int = 3) -> Embedding:
    r = np.random.default_rng(seed)
    return Embedding([f"w{i}" for i in range(n)], r.normal(size=(n, dim)).astype(np.float32), name="line")


def full(mech: Diffractor, w: int) -> np.ndarray:
    ids, probs = mech.distribution(w)
    out = np.zeros(mech.embedding.size)
    np.add.at(out, ids, probs)
    return out


def worst_excess(mech: Diffractor, epsilon_claimed: float) -> float:
    """max over w, w', y of log p(y|w) - log p(y|w') - epsilon_claimed * d(w, w')."""
    v = mech.embedding.size
    dists = [full(mech, w) for w in range(v)]
    assert all(np.all(p > 0) for p in dists)  # full support: every ratio finite
    worst = -math.inf
    for w, w2 in itertools.permutations(range(v), 2):
        ratio = float(np.max(np.log(dists[w]) - np.log(dists[w2])))
        worst = max(worst, ratio - epsilon_claimed * mech.distance(w, w2))
    return worst


def test_greedy_walk_follows_nearest_unvisited_then_smallest_id() -> None:
    # 0 -> 2 (1 is its nearest but row order says 2 first), 2 -> 1, 1 has only visited ones -> smallest free id 3
    knn = np.array([[0, 2, 1], [1, 0, 2], [2, 1, 0], [3, 4, -1], [4, 3, -1]])
    np.testing.assert_array_equal(greedy_walk(knn, 0), [0, 2, 1, 3, 4])
    np.testing.assert_array_equal(greedy_walk(knn, 4), [4, 3, 0, 2, 1])


def test_the_walk_on_a_line_recovers_the_line() -> None:
    x = np.linspace(0, 1, 30)[:, None] * np.ones((1, 2))
    perm = np.random.default_rng(1).permutation(30)
    emb = Embedding([f"w{i}" for i in range(30)], x[perm].astype(np.float32), name="line")
    mech = Diffractor(emb, 1.0, index="exact", neighbours=3)
    start = int(np.flatnonzero(perm == 0)[0])
    order = greedy_walk(np.argsort(np.abs(x[perm, 0][:, None] - x[perm, 0][None, :]), axis=1)[:, :4], start)
    assert sorted(order.tolist()) == list(range(30))
    # from the list's first word (id 0), positions are monotone along the line
    walk = perm[mech.tables.order[0]]
    assert np.all(np.abs(np.diff(walk)) == 1) or sorted(walk.tolist()) == list(range(30))


@pytest.mark.parametrize("noise", ["geometric", "tem"])
@pytest.mark.parametrize("lists", [1, 3])
@pytest.mark.parametrize("eps", [0.3, 2.0])
@pytest.mark.parametrize("gamma", [2, 2.5])
def test_exact_distribution_respects_the_bound(noise: str, lists: int, eps: float, gamma: float) -> None:
    mech = Diffractor(line_embedding(), eps, noise=noise, gamma=gamma, lists=lists, index="exact", neighbours=4)
    for w in range(mech.embedding.size):
        assert full(mech, w).sum() == pytest.approx(1.0, abs=1e-12)
    assert worst_excess(mech, eps) <= 1e-9


@pytest.mark.parametrize("noise", ["geometric", "tem"])
def test_a_wrong_epsilon_twin_fails(noise: str) -> None:
    """The check can fail: a twin claiming a smaller epsilon is caught (geometric: the clipped ends
    make eps * d tight; TEM: the exponential mechanism's bound is loose by up to a factor 2)."""
    mech = Diffractor(line_embedding(), 1.5, noise=noise, gamma=3, index="exact", neighbours=4)
    assert worst_excess(mech, (0.7 if noise == "geometric" else 0.5) * 1.5) > 1e-3


def test_geometric_clipping_is_tight_at_the_ends() -> None:
    """Clipping moves the tails onto the ends; the ratio at an end is exactly exp(eps |x - x'|)."""
    mech = Diffractor(line_embedding(), 1.0, index="exact", neighbours=4)
    order = mech.tables.order[0]
    a, b = int(order[2]), int(order[5])
    p, q = full(mech, a), full(mech, b)
    end = int(order[0])
    assert math.log(p[end] / q[end]) == pytest.approx(1.0 * mech.distance(a, b), rel=1e-12)


@pytest.mark.parametrize(("noise", "lists"), [("geometric", 1), ("tem", 1), ("geometric", 2), ("tem", 3)])
def test_sampler_draws_from_the_exact_distribution(noise: str, lists: int) -> None:
    mech = Diffractor(line_embedding(20, 2), 0.8, noise=noise, gamma=3.5, lists=lists, index="exact", neighbours=5)
    gen = np.random.default_rng(7)
    n = 60_000
    for w in (0, 7, 19):
        expected = full(mech, w) * n
        counts = np.bincount(mech.privatize(np.full(n, w), gen), minlength=mech.embedding.size)
        keep = expected > 5
        chi = float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))
        assert stats.chi2.sf(chi, keep.sum() - 1) > 1e-6, (noise, lists, w)


def test_sampler_wrong_law_is_detected() -> None:
    """Twin of the chi-square check: draws at eps 0.8 do not fit the law at eps 1.6."""
    mech = Diffractor(line_embedding(20, 2), 0.8, index="exact", neighbours=5)
    twin = Diffractor(line_embedding(20, 2), 1.6, index="exact", neighbours=5)
    n = 60_000
    expected = full(twin, 7) * n
    counts = np.bincount(mech.privatize(np.full(n, 7), np.random.default_rng(3)), minlength=20)
    keep = expected > 5
    chi = float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))
    assert stats.chi2.sf(chi, keep.sum() - 1) < 1e-6


def test_huge_and_tiny_epsilon_stay_finite() -> None:
    emb = line_embedding()
    for eps in (1e-6, 500.0):
        for noise in ("geometric", "tem"):
            m = Diffractor(emb, eps, noise=noise, index="exact", neighbours=4)
            out = m.privatize(np.arange(12).repeat(50), np.random.default_rng(0))
            assert out.min() >= 0 and out.max() < 12
    m = Diffractor(emb, 500.0, index="exact", neighbours=4)
    assert np.array_equal(m.privatize(np.arange(12), np.random.default_rng(0)), np.arange(12))


def test_list_is_a_prepared_artefact_built_once() -> None:
    emb = line_embedding(15, 4)
    planned = planned_artefacts(emb, ["diffractor"], metric="list_position", options={"lists": 2})
    assert [k for k, _ in planned] == [LIST_KIND, LIST_KIND]
    infos = prepare(emb, ["diffractor"], options={"lists": 2})
    assert {i.kind for i in infos} == {LIST_KIND} and len(infos) == 2
    before = {i.path: i.created for i in list_artefacts(emb)}
    mech = make_mechanism("diffractor", emb, 1.0, lists=2)
    mech.privatize(np.arange(15), np.random.default_rng(0))
    assert {i.path: i.created for i in list_artefacts(emb)} == before  # read, not rebuilt
    for l_ in range(2):
        assert sorted(mech.tables.order[l_].tolist()) == list(range(15))
        np.testing.assert_array_equal(mech.tables.position[l_][mech.tables.order[l_]], np.arange(15))


def test_options_are_declared_and_validated() -> None:
    emb = line_embedding()
    with pytest.raises(InvalidParameterError, match="noise"):
        make_mechanism("diffractor", emb, 1.0, noise="laplace")
    with pytest.raises(InvalidParameterError, match="gamma"):
        make_mechanism("diffractor", emb, 1.0, gamma=-1)
    with pytest.raises(InvalidParameterError, match="lists"):
        make_mechanism("diffractor", emb, 1.0, lists=0)
    m = make_mechanism("diffractor", emb, 1.0, noise="tem", gamma=2)
    assert m.describe()["metric"] == "list_position" and m.describe()["gamma"] == 2
    assert type(m).guarantee_form == "metric"


def test_pair_distances_match_distance() -> None:
    m = Diffractor(line_embedding(), 1.0, lists=3, index="exact", neighbours=4)
    a, b = np.arange(12), np.arange(12)[::-1]
    expected = [m.distance(int(x), int(y)) for x, y in zip(a, b, strict=True)]
    np.testing.assert_array_equal(m.pair_distances(a, b), expected)


def test_log_distribution_keeps_far_outputs_finite_and_the_audit_passes() -> None:
    """On 3,000 words exp(-eps |j - x|) underflows float64; the log-space law does not, and the
    exact audit (which reads it) passes at the true epsilon and fails a twin claiming less."""
    from deniable.experiments.audit import audit_mechanism

    emb = line_embedding(3000, 5, dim=4)
    for noise in ("geometric", "tem"):
        mech = Diffractor(emb, 1.0, noise=noise, gamma=4, lists=2, index="exact", neighbours=8)
        _, logp = mech.log_distribution(0)
        assert np.all(np.isfinite(logp)) and np.logaddexp.reduce(logp) == pytest.approx(0.0, abs=1e-9)
        ok = audit_mechanism(mech, pairs=6, random_state=0)
        assert ok.method == "exact" and not ok.violations
        twin = audit_mechanism(mech, pairs=6, claimed_epsilon=0.4, random_state=0)
        assert twin.violations


@pytest.mark.parametrize(("eps", "cap"), [(1e-3, 6), (0.3, 8), (1.0, 50), (5.0, 3), (40.0, 10)])
def test_two_sided_geometric_is_the_discrete_laplace_law_capped(eps: float, cap: int) -> None:
    """Issue 40: ``D`` follows ``(1-a)/(1+a) a^|d|`` with the tails beyond ``cap`` on ``+-cap``
    (exact after clipping); the law of the pre-issue-40 draw (each geometric capped first) does not
    fit it where ``eps * cap`` is small."""
    from deniable._random import seeded_generator
    from deniable.mechanisms.diffractor import two_sided_geometric
    from test_sampler_law import law_pvalue

    a = math.exp(-eps)
    d = np.arange(-cap, cap + 1)
    law = (1 - a) / (1 + a) * np.exp(-eps * np.abs(d))
    law[0] = law[-1] = a**cap / (1 + a)  # Pr[D <= -cap] = Pr[D >= cap]
    n = 200_000
    got = two_sided_geometric(eps, cap, n, seeded_generator(int(eps * 1000) + cap, warn=False))
    assert got.dtype == np.int64 and got.shape == (n,)
    counts = np.bincount(got + cap, minlength=d.size)[None, :]
    assert law_pvalue(counts, law[None, :] / law.sum()) > 1e-6
    if eps * cap < 1:
        e = seeded_generator(1, warn=False).standard_exponential((2, n))
        geo = np.floor(np.minimum(e / eps, float(cap)))
        old = np.bincount((geo[0] - geo[1]).astype(np.int64) + cap, minlength=d.size)[None, :]
        assert law_pvalue(old, law[None, :] / law.sum()) < 1e-6


def test_zero_threshold_is_tanh_at_both_ends() -> None:
    from deniable.mechanisms.diffractor import geometric_zero_threshold

    for eps in (1e-12, 1e-6, 0.3, 0.999, 1.0, 3.0, 30.0, 700.0):
        t = geometric_zero_threshold(eps)
        assert -math.expm1(-t) == pytest.approx(math.tanh(eps / 2), rel=1e-12)
        assert math.isfinite(t) and t > 0


def test_tem_window_is_capped_at_the_list_and_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    """gamma beyond the list spans at most 2n - 1 positions, and tokens go through it in blocks
    (memory bounded whatever gamma a client sets); neither changes the law."""
    import deniable.mechanisms.diffractor as diffractor
    from test_sampler_law import law_pvalue

    seen: list[tuple[int, int]] = []
    original = Diffractor._sample_window

    def spy(self: Diffractor, x: np.ndarray, g: int, rng: np.random.Generator) -> np.ndarray:
        seen.append((x.size, g))
        return original(self, x, g, rng)

    monkeypatch.setattr(Diffractor, "_sample_window", spy)
    monkeypatch.setattr(diffractor, "_WINDOW_BLOCK", 2000)
    emb = line_embedding(20, 2)
    mech = Diffractor(emb, 0.3, noise="tem", gamma=100_000, index="exact", neighbours=5)
    n = 20_000
    counts = np.stack(
        [np.bincount(mech.privatize(np.full(n, w), np.random.default_rng(w)), minlength=20) for w in (0, 9)]
    )
    assert {g for _, g in seen} == {19} and max(m for m, _ in seen) == 2000 // 39
    law = np.stack([full(mech, w) for w in (0, 9)])
    assert law_pvalue(counts, law) > 1e-6
