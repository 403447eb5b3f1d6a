"""The word reconstruction attacker (issue 41): priors, the exact Bayes attacker against brute force, the
sampled estimator against the exact value, and ``deniable evaluate --attack reconstruction``."""

from __future__ import annotations

import gzip
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import make_tiny_embedding, make_toy_embedding
from deniable import Embedding, NotPrivateWarning
from deniable._errors import DataError, InvalidParameterError
from deniable.experiments import (
    Prior,
    TokenSample,
    make_prior,
    mechanism_factories,
    reconstruction_attack,
    reconstruction_evaluation,
)
from deniable.experiments.reconstruction import GroupScore, exact_guess_table, sampled_guess_table
from deniable.mechanisms import make_mechanism, mechanism_names
from fake_mechanisms import run_cli


# ----------------------------------------------------------------------------- priors
def test_zipf_prior_follows_row_order() -> None:
    emb = make_tiny_embedding(8)
    p = make_prior("zipf", emb).probs
    assert p.sum() == pytest.approx(1.0) and np.all(np.diff(p) < 0)
    assert p[0] / p[3] == pytest.approx(4.0)  # 1 / rank
    q = make_prior("zipf:2", emb).probs
    assert q[0] / q[1] == pytest.approx(4.0)
    assert np.allclose(make_prior("uniform", emb).probs, 1 / 8)
    assert np.allclose(make_prior("zipf:0", emb).probs, 1 / 8)


def test_counts_prior_reads_a_public_file_with_the_one_tokenizer(tmp_path: Path) -> None:
    emb = make_toy_embedding()
    path = tmp_path / "public.txt"
    path.write_text("The puck, the GOAL!\nnasa nasa nasa unknownword\n", encoding="utf-8")
    prior = make_prior(f"counts:{path}", emb)
    counts = np.full(emb.size, 0.5)
    for w, c in (("the", 2), ("puck", 1), ("goal", 1), ("nasa", 3)):
        counts[emb.index_of[w]] += c
    assert np.allclose(prior.probs, counts / counts.sum())
    gz = tmp_path / "public.txt.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert np.allclose(make_prior(f"counts:{gz}", emb).probs, prior.probs)


@pytest.mark.parametrize("spec", ["zipf:x", "zipf:-1", "counts:", "counts:/no/such/file", "bayes", "uniform:2"])
def test_bad_prior_names_the_parameter(spec: str) -> None:
    with pytest.raises(InvalidParameterError, match="prior"):
        make_prior(spec, make_tiny_embedding())


def test_counts_prior_refuses_files_without_vocabulary_words(tmp_path: Path) -> None:
    path = tmp_path / "none.txt"
    path.write_text("zzz qqq\n", encoding="utf-8")
    with pytest.raises(DataError, match="no word"):
        make_prior(f"counts:{path}", make_toy_embedding())
    path.write_bytes(b"\xff\xfe\xfa")
    with pytest.raises(DataError, match="UTF-8"):
        make_prior(f"counts:{path}", make_toy_embedding())
    with pytest.raises(InvalidParameterError, match="prior"):
        make_prior(Prior("x", np.ones(3)), make_toy_embedding())  # the wrong size


# ----------------------------------------------------------------------------- tokens
def test_name_like_tokens_are_capitalized_where_no_sentence_starts() -> None:
    emb = make_toy_embedding()
    tokens = TokenSample.from_texts(["Hockey is the game. The puck and Nasa, zzz Esa!", "Goal"], emb)
    words = emb.words(tokens.ids)
    assert words == ["hockey", "is", "the", "game", "the", "puck", "nasa", "esa", "goal"]
    assert [w for w, n in zip(words, tokens.name, strict=True) if n] == ["nasa", "esa"]
    assert tokens.oov == 2  # "and", "zzz"


# ----------------------------------------------------------------------------- exact attacker
def _brute_force(mech: object, prior: np.ndarray, v: int) -> tuple[np.ndarray, np.ndarray]:
    """Per output, the guess maximizing prior(w) P(y|w) by enumeration; per word, P(guess(M(x)) = x)."""
    p = np.zeros((v, v))
    for w in range(v):
        ids, probs = mech.distribution(w)  # type: ignore[attr-defined]
        for i, q in zip(ids.tolist(), probs.tolist(), strict=True):
            p[w, i] += q
    guess = []
    for y in range(v):
        best, arg = -1.0, -1
        for w in sorted(range(v), key=lambda u: (-prior[u], u)):  # ties: the more probable word
            if prior[w] * p[w, y] > best:
                best, arg = prior[w] * p[w, y], w
        guess.append(arg)
    g = np.array(guess)
    return g, np.array([sum(p[x, y] for y in range(v) if g[y] == x) for x in range(v)])


@pytest.mark.parametrize(
    ("name", "eps", "options"),
    [("tem", 3.0, {}), ("exponential", 2.0, {}), ("santext", 4.0, {}), ("custext", 1.0, {"k": 4})],
)
@pytest.mark.parametrize("prior_spec", ["zipf", "uniform"])
def test_exact_attacker_matches_brute_force(name: str, eps: float, options: dict, prior_spec: str) -> None:
    emb = make_toy_embedding()
    mech = make_mechanism(name, emb, eps, **options)
    prior = make_prior(prior_spec, emb)
    want_guess, want_rate = _brute_force(mech, prior.probs, emb.size)
    assert np.array_equal(exact_guess_table(mech, prior), want_guess)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, emb.size, 400)
    res = reconstruction_attack(mech, TokenSample.from_ids(ids, emb), prior)
    assert res.method == "exact"
    want = float(np.mean(want_rate[ids]))
    assert res.groups["all"].recovered[0] == pytest.approx(want, abs=1e-12)
    unchanged = np.mean([mech.distribution(int(x))[1][int(x)] for x in ids]) if name == "tem" else None
    if unchanged is not None:
        assert res.groups["all"].unchanged[0] == pytest.approx(unchanged, abs=1e-12)


def test_the_bayes_guess_beats_every_other_table_on_prior_weighted_success() -> None:
    """Enumerating every guess table on a 4-word vocabulary: none recovers more prior-weighted words."""
    emb = make_tiny_embedding(4, seed=2)
    mech = make_mechanism("exponential", emb, 1.5)
    prior = make_prior("zipf", emb)
    p = np.array([mech.distribution(w)[1] for w in range(4)])

    def success(g: np.ndarray) -> float:
        return float(sum(prior.probs[x] * p[x, g == x].sum() for x in range(4)))

    best = max(success(np.array(g)) for g in itertools.product(range(4), repeat=4))
    assert success(exact_guess_table(mech, prior)) == pytest.approx(best, abs=1e-12)


def test_candidates_restrict_the_guesses_to_the_most_probable_words() -> None:
    emb = make_toy_embedding()
    mech = make_mechanism("tem", emb, 3.0)
    guess = exact_guess_table(mech, make_prior("zipf", emb), candidates=5)
    assert set(guess.tolist()) <= set(range(5))


def test_exact_needs_a_distribution() -> None:
    emb = make_toy_embedding()
    with pytest.raises(InvalidParameterError, match="exact output distribution"):
        reconstruction_attack(make_mechanism("madlib", emb, 3.0), TokenSample.from_ids([0, 1], emb), method="exact")


# ----------------------------------------------------------------------------- sampled estimator
def _toy_tokens(emb: Embedding) -> TokenSample:
    rng = np.random.default_rng(11)
    return TokenSample.from_ids(rng.integers(0, emb.size, 3000), emb)


def test_sampled_estimator_agrees_with_tem_exact() -> None:
    """Held-out recovery, estimated by sampling, within its noise interval of TEM's exact value; the exact value
    lies in the bracket [held-out, in-sample]."""
    emb = make_toy_embedding()
    tokens = _toy_tokens(emb)
    mech = make_mechanism("tem", emb, 2.0)
    exact = reconstruction_attack(mech, tokens, "zipf", content_rank=9).groups
    est = reconstruction_attack(
        mech, tokens, "zipf", method="sampled", draws=20_000, content_rank=9, random_state=5
    ).groups
    for g in ("all", "content"):
        truth = exact[g].recovered[0]
        value, se = est[g].recovered
        assert abs(value - truth) <= 1.96 * se + 2e-3, (g, value, truth, se)  # 2e-3: the fitted table's bias
        insample = est[g].recovered_insample
        assert insample is not None
        lo, hi = value - 1.96 * se, insample[0] + 1.96 * insample[1]
        assert lo <= truth <= hi
        u, use = est[g].unchanged
        assert abs(u - exact[g].unchanged[0]) <= 3 * use


@pytest.mark.parametrize("wrong", ["epsilon", "insample"])
def test_sampled_estimator_twin_must_fail(wrong: str) -> None:
    """Wrong twins: the estimate for another epsilon, and the in-sample score of a table fitted on few draws, are
    outside the noise interval of TEM's exact value."""
    emb = make_toy_embedding()
    tokens = _toy_tokens(emb)
    truth = reconstruction_attack(make_mechanism("tem", emb, 2.0), tokens, "zipf").groups["all"].recovered[0]
    if wrong == "epsilon":
        est = reconstruction_attack(
            make_mechanism("tem", emb, 3.0), tokens, "zipf", method="sampled", draws=20_000, random_state=5
        )
        value, se = est.groups["all"].recovered
    else:
        est = reconstruction_attack(
            make_mechanism("tem", emb, 2.0), tokens, "zipf", method="sampled", draws=20, random_state=5
        )
        insample = est.groups["all"].recovered_insample
        assert insample is not None
        value, se = insample
    assert abs(value - truth) > 1.96 * se + 2e-3, (value, truth, se)


def test_sampled_table_is_fitted_only_on_its_draws() -> None:
    """The guess table depends on the prior, the mechanism and the draws, never on the text under attack."""
    emb = make_toy_embedding()
    mech = make_mechanism("madlib", emb, 4.0)
    a = sampled_guess_table(mech, make_prior("zipf", emb), draws=200, rng=np.random.default_rng(1))
    b = sampled_guess_table(mech, make_prior("zipf", emb), draws=200, rng=np.random.default_rng(1))
    assert np.array_equal(a.guess, b.guess) and a.insample.shape == (emb.size,)
    res = reconstruction_attack(mech, _toy_tokens(emb), "zipf", draws=300, random_state=2)
    assert res.method == "sampled" and res.draws == 300
    g = res.groups["all"]
    assert 0 <= g.recovered[0] <= 1 and g.recovered_insample is not None and g.recovered[1] > 0


@pytest.mark.filterwarnings("ignore::deniable.NotPrivateWarning")
@pytest.mark.parametrize("name", mechanism_names())
def test_every_registered_mechanism_is_attacked(name: str) -> None:
    emb = make_toy_embedding()
    mech = make_mechanism(name, emb, 3.0)
    res = reconstruction_attack(mech, TokenSample.from_ids(range(18), emb), draws=30, random_state=0)
    g = res.groups["all"]
    assert g.n == 18 and 0 <= g.recovered[0] <= 1 and 0 <= g.unchanged[0] <= 1
    assert res.method == ("exact" if mech.has_distribution and name != "truncated_gumbel" else "sampled")


def test_truncated_gumbel_is_sampled_by_default() -> None:
    """Its distribution() is exact but integrates numerically (slow): auto samples it, exact stays available."""
    emb = make_toy_embedding()
    with pytest.warns(NotPrivateWarning):
        mech = make_mechanism("truncated_gumbel", emb, 2.0)
    tokens = TokenSample.from_ids([0, 3, 5], emb)
    assert reconstruction_attack(mech, tokens, draws=20, random_state=0).method == "sampled"
    assert reconstruction_attack(mech, tokens, method="exact").method == "exact"


def test_interval_is_wilson_widened_by_the_noise() -> None:
    lo, hi = GroupScore.interval(0.5, 0.0, 100)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
    lo2, hi2 = GroupScore.interval(0.5, 0.01, 100)
    assert lo2 == pytest.approx(lo - 0.0196, abs=1e-6) and hi2 == pytest.approx(hi + 0.0196, abs=1e-6)
    assert all(math.isnan(x) for x in GroupScore.interval(0.5, 0.0, 0))


def test_evaluation_rows_per_mechanism_epsilon_and_group() -> None:
    emb = make_toy_embedding()
    texts = ["Hockey and the puck went in the goal.", "nasa launch the rocket into orbit, said Esa"]
    res = reconstruction_evaluation(
        texts,
        emb,
        mechanism_factories(["tem", "madlib"]),
        [1.0, 8.0],
        draws=50,
        random_state=0,
    )
    keys = {(r["mechanism"], r["epsilon"], r["group"], r["metric"]) for r in res.rows}
    assert ("tem", 8.0, "name", "recovered") in keys and ("madlib", 1.0, "rare", "recovered_insample") in keys
    assert ("tem", 1.0, "all", "recovered_insample") not in keys
    assert res.settings["prior"] == "zipf:1" and res.settings["tokens"] == 11


# ----------------------------------------------------------------------------- CLI
def test_cli_attack_reconstruction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import write_labelled_csvs

    def row(i: int, rng: np.random.Generator) -> list[str]:
        return [" ".join(rng.choice(["hockey", "puck", "nasa", "the", "orbit"], 6)), "a" if i % 2 else "b"]

    files = write_labelled_csvs(tmp_path, row, n=20)
    public = tmp_path / "public.txt"
    public.write_text("the the the hockey nasa\n", encoding="utf-8")
    out = tmp_path / "res"
    args = ["evaluate", "--task", "file", "--data", str(files["train"]), "--test", str(files["test"]),
            "--embedding", str(files["emb"]), "--attack", "reconstruction", "--mechanism", "tem,madlib",
            "--epsilon", "2,6", "--draws", "50", "--prior", f"counts:{public}", "--out", str(out),
            "--seed", "0", "-q"]  # fmt: skip
    code, stdout, stderr = run_cli(args, capsys)
    assert code == 0, stderr
    assert "| tem | 2 | exact | all | 120 |" in stdout and "| madlib | 6 | sampled | content |" in stdout
    settings = json.loads((out / "settings.json").read_text())
    assert settings["prior"] == "counts:public.txt" and settings["draws"] == 50
    assert (out / "results.csv").is_file()
    code, _, stderr = run_cli([*args[:-5], "--prior", "counts:/no/such", "--out", str(out), "-q"], capsys)
    assert code == 2 and "--prior" in stderr
