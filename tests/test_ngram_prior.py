"""The contextual decode prior (issue 44, ``prior="ngram:PATH"``): madlib and Mahalanobis decode each text's
noisy vectors jointly under a public bigram model prepared by ``deniable prepare --ngram FILE``.

- the prepared model: a memory-mapped folder in the artefact store, keyed by the text's sha256, verified;
- the option: PATH must be a prepared model (a text file is refused with the command to run), vickrey and brr
  refuse ``ngram:`` naming ``prior``, the manifest records the model's sha256 (never a path);
- the decode: the joint Viterbi decode of the noisy rows (brute force agrees), per text, never across
  records, whatever the batching (keyed runs: the same output for every batch size);
- the command line and the service (operator-only).
"""

from __future__ import annotations

import itertools
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import assert_records_use_their_own_streams, make_toy_embedding
from deniable import Embedding, InvalidParameterError
from deniable._random import RunKey
from deniable.mechanisms import make_mechanism
from deniable.mechanisms._contextual import ContextualDecoder, contextual_decode
from deniable.ngram import load_ngram, prepare_ngram, train_ngram, viterbi
from deniable.privatizer import Privatizer

CORPUS = (
    "the hockey game was great\n"
    "the puck was a great goal\n"
    "nasa launched a rocket into orbit\n"
    "the rocket was a good launch, nasa is great\n"
    "the game is good. the match was great\n"
    "esa and nasa launch a rocket\n"
) * 5
TEXTS = ["the hockey game was great", "nasa launched a rocket", "a", "the puck was a goal and the match was good"]


def build(name: str, emb: Any, eps: float = 2.0, **opts: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_mechanism(name, emb, epsilon=eps, **opts)


@pytest.fixture
def public(tmp_path: Path) -> Path:
    path = tmp_path / "public.txt"
    path.write_text(CORPUS, encoding="utf-8")
    return path


@pytest.fixture
def model_dir(public: Path) -> Path:
    return prepare_ngram(make_toy_embedding(), public).path


# --- the prepared model ------------------------------------------------------------------------


def test_prepared_model_is_memory_mapped_verified_and_trained_once(public: Path, tmp_path: Path) -> None:
    emb = make_toy_embedding()
    info = prepare_ngram(emb, public)
    again = prepare_ngram(emb, public)
    assert again.path == info.path and again.created == info.created  # keyed by the text's sha256: once
    model = load_ngram(info.path, emb)
    assert isinstance(model.keys.base, np.memmap) or isinstance(model.keys, np.memmap)
    trained = train_ngram(emb, public)
    h, w = np.arange(trained.bos + 1)[:, None], np.arange(trained.unk + 1)[None, :]
    assert np.array_equal(model.log_prob(h, w), trained.log_prob(h, w))
    assert model.digest() == trained.digest() == json.loads((info.path / "model.json").read_text())["sha256"]
    # a copy outside the store is hashed whole: an altered copy is refused
    copy = tmp_path / "copy"
    shutil.copytree(info.path, copy)
    assert load_ngram(copy, emb).digest() == model.digest()
    counts = np.load(copy / "counts.npy")
    counts[0] += 1
    np.save(copy / "counts.npy", counts)
    with pytest.raises(InvalidParameterError, match="prior"):
        build("madlib", emb, prior=f"ngram:{copy}").prepare()
    # another vocabulary: refused, naming the option
    with pytest.raises(InvalidParameterError, match="prior"):
        build("madlib", emb.subset(12), prior=f"ngram:{info.path}").prepare()


@pytest.mark.parametrize("name", ["madlib", "mahalanobis"])
def test_text_file_and_missing_path_are_refused_naming_prior(name: str, public: Path, tmp_path: Path) -> None:
    emb = make_toy_embedding()
    with pytest.raises(InvalidParameterError, match=r"prior.*deniable prepare --ngram"):
        build(name, emb, prior=f"ngram:{public}")
    with pytest.raises(InvalidParameterError, match="prior"):
        build(name, emb, prior=f"ngram:{tmp_path / 'nothing'}")
    with pytest.raises(InvalidParameterError, match="prior"):
        build(name, emb, prior="ngram:")


@pytest.mark.parametrize("name", ["vickrey", "brr"])
def test_vickrey_and_brr_refuse_a_contextual_prior(name: str, model_dir: Path) -> None:
    extra = {"bits": 64, "binarizer": "simhash"} if name == "brr" else {}
    with pytest.raises(InvalidParameterError, match=r"prior.*madlib and mahalanobis only"):
        build(name, make_toy_embedding(), prior=f"ngram:{model_dir}", **extra)


def test_a_per_word_prior_is_refused_for_ngram(model_dir: Path) -> None:
    from deniable.priors import make_prior

    with pytest.raises(InvalidParameterError, match="prior"):
        make_prior(f"ngram:{model_dir}", make_toy_embedding())


def test_manifest_records_the_models_sha256_never_a_path(model_dir: Path, tmp_path: Path) -> None:
    from deniable.api import release_fields

    emb = make_toy_embedding()
    digest = load_ngram(model_dir).digest()
    for name in ("madlib", "mahalanobis"):
        mech = build(name, emb, prior=f"ngram:{model_dir}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            described = release_fields(Privatizer(mech), records=1)
        assert described["mechanism"]["prior"] == "ngram:public.txt"
        assert described["mechanism"]["prior_sha256"] == digest
        assert str(tmp_path) not in json.dumps(described) and str(model_dir) not in json.dumps(described)
        assert "joint decode" in mech.decode_description


# --- the decode ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["madlib", "mahalanobis"])
def test_the_decode_is_the_joint_viterbi_mode_of_the_noisy_rows(name: str, model_dir: Path) -> None:
    """k = V: the decode is the exact joint posterior mode under the bigram (brute force over all paths)."""
    emb = make_toy_embedding()
    mech = build(name, emb, 3.0, prior=f"ngram:{model_dir}")
    object.__setattr__(mech, "_contextual", None)  # rebuilt below with every word a candidate
    model = load_ngram(model_dir, emb)
    w = mech.shape.inv_sqrt if name == "mahalanobis" else None
    object.__setattr__(mech, "_contextual", ContextualDecoder(emb.vectors, model, 3.0, k=emb.size, transform=w))
    ids = np.array([0, 6, 7, 12, 9])
    noisy = mech.noisy_vectors(ids, np.random.default_rng(5)).astype(np.float64)
    got = mech.decode_texts(noisy, [0, 2, 5])
    x = noisy if w is None else noisy @ w.T
    y = emb.vectors.astype(np.float64) if w is None else emb.vectors.astype(np.float64) @ w.T
    dist = np.linalg.norm(x[:, None, :] - y[None], axis=2)
    want = []
    for a, b in ((0, 2), (2, 5)):
        best, arg = -np.inf, None
        for seq in itertools.product(range(emb.size), repeat=b - a):
            s = float(model.log_prob(np.array([model.bos, *seq[:-1]]), np.array(seq)).sum())
            s -= 3.0 * float(dist[np.arange(a, b), seq].sum())
            if s > best:
                best, arg = s, list(seq)
        want += arg or []
    assert got.tolist() == want


@pytest.mark.parametrize("name", ["madlib", "mahalanobis"])
def test_the_contextual_decode_reads_only_the_noisy_rows(name: str, model_dir: Path) -> None:
    """The output under a seed is the joint decode of the noisy rows drawn under that seed, and the decoder
    holds public data only (vectors, the public model, epsilon, k): it never sees the input ids."""
    emb = make_toy_embedding()
    mech = build(name, emb, 2.0, prior=f"ngram:{model_dir}")
    ids = np.random.default_rng(1).integers(0, emb.size, 60)
    out = mech.privatize(ids, rng=np.random.default_rng(11))
    again = mech.decode(mech.noise(ids.size, np.random.default_rng(11)) + emb.vectors[ids])
    assert np.array_equal(out, again)
    public = {"transform", "vectors", "ysq", "aug", "logp", "model", "epsilon", "k", "method"}
    assert set(vars(mech.contextual)) <= public


def test_texts_are_decoded_on_their_own_never_across_records(model_dir: Path) -> None:
    emb = make_toy_embedding()
    mech = build("madlib", emb, 2.0, prior=f"ngram:{model_dir}")
    rng = np.random.default_rng(2)
    sizes = [5, 0, 3, 9, 1]
    ids = rng.integers(0, emb.size, sum(sizes))
    off = np.r_[0, np.cumsum(sizes)]
    out = mech.privatize_texts(ids, off, np.random.default_rng(3))
    noisy = mech.noise(ids.size, np.random.default_rng(3)) + emb.vectors[ids]
    alone = [mech.decode(noisy[a:b]) for a, b in itertools.pairwise(off) if b > a]
    assert np.array_equal(out, np.concatenate(alone))
    # the Privatizer passes each text's boundaries (out-of-vocabulary tokens left out of the context)
    priv = Privatizer(mech, check_strength=False)
    texts = ["the hockey zzzz game", "nasa rocket", "the puck"]
    batch = priv.privatize_batch(texts, np.random.default_rng(4))
    known = [emb.tokenizer.tokenize([t]).ids for t in texts]
    known = [k[k >= 0] for k in known]
    allk = np.concatenate(known)
    noisy = mech.noise(allk.size, np.random.default_rng(4)) + emb.vectors[allk]  # the draws, in text order
    bounds = np.r_[0, np.cumsum([k.size for k in known])]
    one_by_one = [mech.decode(noisy[a:b]).tolist() for a, b in itertools.pairwise(bounds)]
    got = [emb.tokenizer.tokenize([b]).ids for b in batch]
    # the first text's out-of-vocabulary word became a random word: compare its known positions
    assert [got[0][[0, 1, 3]].tolist(), *[g.tolist() for g in got[1:]]] == one_by_one


def test_each_record_depends_on_its_own_stream_only(model_dir: Path) -> None:
    emb = make_toy_embedding()
    mech = build("madlib", emb, 2.0, prior=f"ngram:{model_dir}")
    small = build("madlib", emb, 2.0, prior=f"ngram:{model_dir}", batch_size=7)
    assert_records_use_their_own_streams(mech, small, emb.size)


def test_keyed_file_release_does_not_depend_on_the_batch_size(model_dir: Path, tmp_path: Path) -> None:
    from deniable.api import privatize_file

    emb = make_toy_embedding()
    rng = np.random.default_rng(0)
    words = "the hockey game was great nasa launched a rocket puck goal space orbit".split()
    src = tmp_path / "in.txt"
    src.write_text("".join(" ".join(rng.choice(words, int(rng.integers(1, 12)))) + "\n" for _ in range(40)))
    priv = Privatizer(build("madlib", emb, 2.0, prior=f"ngram:{model_dir}"), check_strength=False)
    key = RunKey.new()
    outs = []
    for i, size in enumerate((1, 7, 1000)):
        dst = tmp_path / f"out{i}.txt"
        privatize_file(src, dst, priv, run_key=key, batch_size=size)
        outs.append(dst.read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_grouped_viterbi_equals_one_text_at_a_time(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Texts decoded side by side (short ones grouped, long ones alone) give each text's own decode."""
    import deniable.ngram as ng

    model = load_ngram(model_dir)
    r = np.random.default_rng(8)
    lengths = r.integers(0, 30, 60)
    lengths[5] = 200  # a long text: decoded alone
    t = int(lengths.sum())
    cand = r.integers(0, model.unk + 1, size=(t, 4))
    emis = r.normal(scale=2.0, size=(t, 4))
    off = np.r_[0, np.cumsum(lengths)]
    together = viterbi(model, cand, emis, off)
    alone = [viterbi(model, cand[a:b], emis[a:b]) for a, b in itertools.pairwise(off)]
    assert np.array_equal(together, np.concatenate(alone))
    monkeypatch.setattr(ng, "_POSITIONS_PER_BLOCK", 16)  # other groups, more texts alone
    assert np.array_equal(viterbi(model, cand, emis, off), together)


def test_tiny_epsilon_far_rows_decode_without_overflow(model_dir: Path) -> None:
    emb = make_toy_embedding()
    mech = build("madlib", emb, 1e-200, prior=f"ngram:{model_dir}")
    out = mech.privatize(np.arange(10), rng=np.random.default_rng(0))
    assert out.shape == (10,) and out.min() >= 0 and out.max() < emb.size
    model = load_ngram(model_dir, emb)
    big = np.random.default_rng(1).standard_normal((6, emb.dim)) * 1e250
    cand, emis = ContextualDecoder(emb.vectors, model, 1e-250).candidates(big)
    assert np.all(np.isfinite(emis)) and cand.shape == (6, min(16, emb.size))


def test_blocked_candidate_scan_equals_one_block(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import deniable.mechanisms._contextual as cx

    emb = make_toy_embedding()
    model = load_ngram(model_dir, emb)
    noisy = emb.vectors[np.arange(18).repeat(3)] + np.random.default_rng(3).normal(size=(54, emb.dim))
    whole = contextual_decode(noisy, [0, 20, 54], model, emb, 1.5, k=5)
    cw, ew = ContextualDecoder(emb.vectors, model, 1.5, k=5).candidates(noisy)
    monkeypatch.setattr(cx, "_BLOCK_CELLS", 7)  # one row x 7 words at a time: three vocabulary blocks
    cb, eb = ContextualDecoder(emb.vectors, model, 1.5, k=5).candidates(noisy)
    assert np.array_equal(cw, cb) and np.allclose(ew, eb, atol=1e-12)
    assert np.array_equal(contextual_decode(noisy, [0, 20, 54], model, emb, 1.5, k=5), whole)


def test_top_k_keeps_the_lower_ids_on_ties() -> None:
    from deniable.mechanisms._contextual import _merge, _top_k

    r = np.random.default_rng(0)
    sc = r.integers(0, 4, size=(50, 30)).astype(np.float64)  # many ties
    for k in (1, 3, 7):
        _, i = _top_k(sc, k)
        want = np.lexsort((np.broadcast_to(np.arange(30), sc.shape), -sc), axis=1)[:, :k]
        assert np.array_equal(np.sort(i, axis=1), np.sort(want, axis=1))
        s1, i1 = _top_k(sc[:, :13], k)
        s2, i2 = _top_k(sc[:, 13:], k)
        ms, mi = _merge(s1, i1, s2, i2 + 13, k)
        assert np.array_equal(mi, want) and np.array_equal(ms, np.take_along_axis(sc, want, axis=1))


# --- command line and service --------------------------------------------------------------------


def test_cli_prepare_prints_the_model_and_privatize_uses_it(
    emb_dir: Path, public: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deniable.cli import run_app

    code = run_app(["prepare", "--ngram", str(public), "--embedding", str(emb_dir), "-q"])
    out = capsys.readouterr()
    assert code == 0
    path = Path(out.out.strip())
    assert (path / "model.json").is_file() and (path / "keys.npy").is_file()
    src = tmp_path / "in.txt"
    src.write_text("the hockey game was great\nnasa launched a rocket\n", encoding="utf-8")
    dst = tmp_path / "out.txt"
    args = ["privatize", str(src), "-o", str(dst), "-e", "3", "--embedding", str(emb_dir), "-q"]
    assert run_app([*args, "--decode-prior", f"ngram:{path}"]) == 0
    assert len(dst.read_text(encoding="utf-8").splitlines()) == 2
    manifest = json.dumps(json.loads(Path(str(dst) + ".manifest.json").read_text()))
    assert "ngram:public.txt" in manifest and str(path) not in manifest
    capsys.readouterr()
    assert run_app([*args, "--decode-prior", f"ngram:{public}"]) == 2  # the text itself: refused
    err = capsys.readouterr().err
    assert "decode-prior" in err and "deniable prepare --ngram" in err
    assert run_app([*args, "-m", "vickrey", "--decode-prior", f"ngram:{path}"]) == 2


def test_a_client_cannot_set_an_ngram_prior_and_the_operators_is_used(model_dir: Path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from deniable.service import create_app, load_config

    offer = {"madlib": {"epsilons": [2], "options": {"index": "exact", "prior": f"ngram:{model_dir}"}}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        app = create_app(make_toy_embedding(), load_config(environ={}, mechanisms=offer))
    with TestClient(app) as c:
        ok = c.post("/privatize", json={"texts": ["the hockey game", "nasa rocket"], "epsilon": 2})
        assert ok.status_code == 200, ok.text[:300]
        described = ok.json()["mechanism"]
        assert described["prior"].startswith("ngram:")  # the offered option as the operator wrote it
        assert described["prior_sha256"] == load_ngram(model_dir).digest()
        device = c.get("/v1/device")  # no device artefact: the on-device decode is word by word
        assert device.status_code == 200 and device.json()["artefacts"] == []
        r = c.post(
            "/privatize",
            json={"texts": ["Secretword"], "epsilon": 2, "options": {"prior": f"ngram:{model_dir}"}},
        )
        assert r.status_code == 422 and "prior" in r.text and "Secretword" not in r.text
    with pytest.raises(InvalidParameterError, match="prior"):
        load_config(environ={}, mechanisms={"madlib": {"epsilons": [1], "client": {"prior": [f"ngram:{model_dir}"]}}})


def test_the_embedding_vectors_are_what_the_decoder_scans() -> None:
    """A decoder over another vector set (same words) is refused by shape, not silently used."""
    emb = Embedding([f"w{i}" for i in range(5)], np.eye(5, dtype=np.float32))
    with pytest.raises(InvalidParameterError, match="embedding"):
        from deniable.ngram import NgramModel

        model = NgramModel(4, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), "x")
        ContextualDecoder(emb.vectors, model, 1.0)


def test_the_strength_sentence_of_a_contextual_decode_says_it_was_measured_on_independent_words(
    model_dir: Path,
) -> None:
    from deniable.calibrate.table import strength

    emb = make_toy_embedding()
    ctx = strength(build("madlib", emb, 5.0, prior=f"ngram:{model_dir}"))
    plain = strength(build("madlib", emb, 5.0, prior="zipf"))
    assert "measured on independent words" in ctx.source and "contextual decode keeps more" in ctx.sentence()
    assert "independent words" not in plain.source  # twin: a word-by-word decode needs no such caveat
