"""The contextual reconstruction attacker (issue 41): its candidates agree with the unigram attacker's guess
tables, it beats or ties the unigram attacker on text drawn from its own bigram model, it refuses a model
fitted on the attacked text, and ``deniable evaluate --attack reconstruction --context ngram:PATH``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import make_toy_embedding
from deniable._errors import InvalidParameterError
from deniable.experiments import make_prior, mechanism_factories
from deniable.experiments.contextual import (
    TextTokens,
    contextual_attack,
    contextual_evaluation,
    emission_candidates,
    write_contextual_results,
)
from deniable.experiments.reconstruction import exact_guess_table, sampled_guess_table
from deniable.mechanisms import make_mechanism
from deniable.ngram import NgramModel, train_ngram
from fake_mechanisms import run_cli

#: A strongly structured chain over the toy words: each word has one likely successor
CHAIN = ["the", "puck", "was", "great", "goal", "it", "is", "a", "good", "game", "nasa", "rocket", "orbit"]


def _chain_corpus(n_lines: int, seed: int) -> list[str]:
    r = np.random.default_rng(seed)
    lines = []
    for _ in range(n_lines):
        i = int(r.integers(len(CHAIN)))
        words = []
        for _ in range(12):
            words.append(CHAIN[i])
            i = (i + 1) % len(CHAIN) if r.random() < 0.85 else int(r.integers(len(CHAIN)))
        lines.append(" ".join(words))
    return lines


def _other_texts(n: int, seed: int) -> list[str]:
    """Texts of the chain's words that are no line of the training corpus (reversed chains)."""
    return [" ".join(reversed(t.split())) for t in _chain_corpus(n, seed)]


def _sample_texts(model: NgramModel, words: list[str], n: int, length: int, seed: int) -> list[str]:
    """Texts drawn from the bigram model itself (``<unk>`` written as a word outside the vocabulary)."""
    r = np.random.default_rng(seed)
    out_words = np.arange(model.unk + 1)
    texts = []
    for _ in range(n):
        prev, toks = model.bos, []
        for _ in range(length):
            p = np.exp(model.log_prob(prev, out_words))
            w = int(r.choice(out_words, p=p / p.sum()))
            toks.append("zzzunseen" if w == model.unk else words[w])
            prev = w
        texts.append(" ".join(toks))
    return texts


@pytest.fixture
def public(tmp_path: Path) -> Path:
    path = tmp_path / "public.txt"
    path.write_text("\n".join(_chain_corpus(300, seed=1)) + "\n", encoding="utf-8")
    return path


def test_exact_candidates_are_the_unigram_posterior_ranking() -> None:
    emb = make_toy_embedding()
    mech = make_mechanism("tem", emb, 1.0)
    prior = make_prior("zipf", emb)
    outputs = np.arange(emb.size)
    cand, emis = emission_candidates(mech, prior, outputs, k=emb.size)
    assert np.array_equal(cand[:, 0], exact_guess_table(mech, prior))
    rows = np.array(
        [
            np.bincount(mech.distribution(w)[0], weights=mech.distribution(w)[1], minlength=emb.size)
            for w in range(emb.size)
        ]
    )
    for y in outputs:
        assert np.allclose(np.exp(emis[y]), rows[cand[y], y])
        score = emis[y] + prior.log()[cand[y]]
        assert np.all(np.diff(score) <= 1e-12)  # best first
    short, _ = emission_candidates(mech, prior, outputs[[2, 5]], k=3)
    assert np.array_equal(short, cand[[2, 5], :3])


def test_sampled_candidates_agree_with_the_sampled_guess_table() -> None:
    emb = make_toy_embedding()
    mech = make_mechanism("madlib", emb, 4.0)
    prior = make_prior("zipf", emb)
    table = sampled_guess_table(mech, prior, draws=300, smoothing=1.0, rng=np.random.default_rng(5))
    outputs = np.arange(emb.size)
    cand, emis = emission_candidates(
        mech, prior, outputs, k=4, exact=False, draws=300, smoothing=1.0, rng=np.random.default_rng(5)
    )
    assert np.array_equal(cand[:, 0], table.guess)
    assert emis.shape == (emb.size, 4) and np.all(emis <= 0)


@pytest.mark.parametrize("decoder", ["marginal", "viterbi"])
@pytest.mark.parametrize("mechanism", ["tem", "madlib"])
def test_contextual_beats_or_ties_unigram_on_text_from_its_own_bigram(
    public: Path, decoder: str, mechanism: str
) -> None:
    emb = make_toy_embedding()
    model = train_ngram(emb, public)
    tokens = TextTokens.from_texts(_sample_texts(model, list(emb.vocabulary), 60, 25, seed=2), emb)
    prior = make_prior(f"counts:{public}", emb)
    res = contextual_attack(
        make_mechanism(mechanism, emb, 2.0), tokens, model, prior, k=6, decoder=decoder, draws=300, random_state=3
    )
    uni, ctx = res.groups["unigram"]["all"], res.groups["contextual"]["all"]
    assert uni.n == ctx.n == int(tokens.known.sum()) > 1000
    assert uni.unchanged == ctx.unchanged
    gain, half = res.gain["all"]
    assert gain == pytest.approx(ctx.recovered[0] - uni.recovered[0])
    assert gain - half > 0  # the context pays on text the model describes, beyond the noise of one draw
    assert ctx.recovered[0] > uni.recovered[0] + 0.05


def test_refuses_a_model_fitted_on_the_attacked_text(public: Path, tmp_path: Path) -> None:
    emb = make_toy_embedding()
    model = train_ngram(emb, public)
    lines = public.read_text(encoding="utf-8").splitlines()
    mech = make_mechanism("tem", emb, 2.0)
    with pytest.raises(InvalidParameterError, match="context"):
        contextual_attack(mech, TextTokens.from_texts(lines[:50], emb), model, random_state=0)
    # the check sees through a cut (max_words): the full texts are compared
    factories = mechanism_factories(["tem"], {})
    with pytest.raises(InvalidParameterError, match="context"):
        contextual_evaluation([t[:20] for t in lines[:50]], emb, factories, [2.0], model, full_texts=lines[:50])
    # a single shared line among many others is tolerated (duplicates happen between public corpora)
    others = _other_texts(200, seed=9)
    res = contextual_attack(mech, TextTokens.from_texts([lines[0], *others], emb), model, random_state=0)
    assert res.groups["contextual"]["all"].n > 0
    # a model over another vocabulary is refused
    with pytest.raises(InvalidParameterError, match="ngram"):
        contextual_attack(
            make_mechanism("tem", emb.subset(10), 2.0), TextTokens.from_texts(others, emb.subset(10)), model
        )


def test_evaluation_rows_and_files(public: Path, tmp_path: Path) -> None:
    emb = make_toy_embedding()
    model = train_ngram(emb, public)
    texts = _other_texts(30, seed=4)
    res = contextual_evaluation(
        texts, emb, mechanism_factories(["tem", "madlib"], {}), [1.0, 4.0], model, draws=50, random_state=0
    )
    keys = {(r["mechanism"], r["epsilon"], r["group"], r["attacker"], r["metric"]) for r in res.rows}
    assert ("tem", 1.0, "all", "unigram", "recovered") in keys and ("madlib", 4.0, "name", "contextual", "gain") in keys
    assert ("tem", 1.0, "all", "unigram", "gain") not in keys
    assert res.settings["context"] == "ngram:public.txt" and res.settings["decoder"] == "marginal"
    again = contextual_evaluation(
        texts, emb, mechanism_factories(["tem", "madlib"], {}), [1.0, 4.0], model, draws=50, random_state=0
    )
    assert [r["value"] for r in again.rows] == [r["value"] for r in res.rows]  # seeded: reproducible
    paths = write_contextual_results(res, tmp_path / "out", command="deniable evaluate ...")
    md = paths["results.md"].read_text(encoding="utf-8")
    assert "| recovered, unigram | recovered, contextual | gain |" in md and "| madlib | 4 | sampled | all |" in md
    assert json.loads(paths["settings.json"].read_text())["command"] == "deniable evaluate ..."


def test_cli_context(public: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import write_labelled_csvs

    def row(i: int, rng: np.random.Generator) -> list[str]:
        return [" ".join(rng.choice(CHAIN, 8)), "a" if i % 2 else "b"]

    files = write_labelled_csvs(tmp_path, row, n=20)
    model_path = train_ngram(make_toy_embedding(), public).save(tmp_path / "public.npz")
    out = tmp_path / "res"
    base = ["evaluate", "--task", "file", "--data", str(files["train"]), "--test", str(files["test"]),
            "--embedding", str(files["emb"]), "--attack", "reconstruction", "--mechanism", "tem,madlib",
            "--epsilon", "2", "--draws", "30", "--prior", f"counts:{public}", "--out", str(out),
            "--seed", "0", "-q"]  # fmt: skip
    for spec in (f"ngram:{public}", f"ngram:{model_path}"):
        code, stdout, stderr = run_cli([*base, "--context", spec, "--context-k", "5"], capsys)
        assert code == 0, stderr
        assert "| tem | 2 | exact | all | 160 |" in stdout and "recovered, contextual" in stdout
    settings = json.loads((out / "settings.json").read_text())
    assert settings["k"] == 5 and settings["context"] == "ngram:public.txt"  # the text the saved model was trained on
    bad = [
        (["--context", f"ngram:{files['train']}"], "--context"),  # the attacked file itself
        (["--context", "bigram:x"], "--context"),
        (["--context", f"ngram:{tmp_path / 'missing.txt'}"], "--context"),
        (["--context", f"ngram:{public}", "--context-decoder", "beam"], "--context-decoder"),
        (["--context", f"ngram:{public}", "--context-k", "0"], "--context-k"),
    ]
    seen = tmp_path / "seen.txt"  # another file holding the attacked texts: refused by content
    with open(files["train"], encoding="utf-8") as fh:
        seen.write_text("\n".join(r["text"] for r in csv.DictReader(fh)) + "\n", encoding="utf-8")
    bad.append((["--context", f"ngram:{seen}"], "--context"))
    for extra, flag in bad:
        code, _, stderr = run_cli([*base, *extra], capsys)
        assert code == 2 and flag in stderr, (extra, stderr)
    code, _, stderr = run_cli(
        ["evaluate", "--task", "file", "--data", str(files["train"]), "--test", str(files["test"]), "--embedding",
         str(files["emb"]), "--out", str(out), "--context", f"ngram:{public}", "-q"], capsys
    )  # fmt: skip
    assert code == 2 and "--context" in stderr


def test_decoding_in_chunks_of_texts_changes_nothing(public: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import deniable.experiments.contextual as ctx

    emb = make_toy_embedding()
    model = train_ngram(emb, public)
    tokens = TextTokens.from_texts(_other_texts(40, seed=6), emb)
    mech = make_mechanism("tem", emb, 2.0)
    whole = contextual_attack(mech, tokens, model, k=4, random_state=1)
    monkeypatch.setattr(ctx, "_POSITIONS_PER_DECODE", 30)  # texts of 12 tokens: chunks of 2 texts
    assert ctx._text_chunks(tokens.offsets, 30)[:2] == [(0, 2), (2, 4)]
    assert ctx._text_chunks(tokens.offsets, 5)[:2] == [(0, 1), (1, 2)]  # a longer text alone
    chunked = contextual_attack(mech, tokens, model, k=4, random_state=1)
    assert chunked.groups["contextual"]["all"] == whole.groups["contextual"]["all"]
    assert chunked.gain["all"] == whole.gain["all"]
