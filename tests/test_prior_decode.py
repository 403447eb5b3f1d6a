"""The ``prior`` option (issue 44): posterior-mode decode on madlib, mahalanobis, vickrey and brr.

- ``prior="uniform"`` (the default) is today's nearest-neighbour decode, byte for byte;
- a non-uniform prior decodes to the exact posterior mode of each noise law (brute force
  agrees; the wrong-law twin does not);
- the decoder reads only the noisy vectors / codes and public data;
- declared operator-only (the service answers a client's ``prior`` with a 422 naming it),
  recorded in the manifest (a counts file by name and sha256), split mode decodes with it.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deniable import Embedding, InvalidParameterError
from deniable.mechanisms import make_mechanism, options_of
from deniable.mechanisms._posterior import CodePosteriorDecoder, PosteriorDecoder
from deniable.metrics import hamming
from deniable.priors import make_prior

MECHANISMS = ("madlib", "mahalanobis", "vickrey", "brr")


def emb44(n: int = 300, dim: int = 8) -> Embedding:
    rng = np.random.default_rng(44)
    return Embedding([f"w{i}" for i in range(n)], rng.standard_normal((n, dim)).astype(np.float32))


def build(name: str, emb: Embedding, eps: Any = 3.0, **opts: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # brr: codes computed once; shared-code warnings
        return make_mechanism(name, emb, epsilon=eps, **opts)


#: sha256[:16] of the outputs at HEAD 1090598 (before the option existed), by /tmp/d_golden/golden.py:
#: privatize(ids, seed 7) then privatize_records(two records, seeds 8 and 9), epsilon 3.
GOLDEN = [
    ("madlib", {"index": "exact"}, "b9cb3c9129af69b6"),
    ("mahalanobis", {"index": "exact", "lam": 0.5}, "3c54d526b96b9aa7"),
    ("vickrey", {"index": "exact", "t": 0.4}, "e24c8f17bd9747cf"),
    ("vickrey", {"index": "exact", "lam": 0.3}, "6e6c28fe8e28a5b3"),
    ("brr", {"bits": 64, "binarizer": "simhash"}, "13fa383683d78954"),
]


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize(("name", "opts", "digest"), GOLDEN)
def test_uniform_prior_is_todays_decode_byte_for_byte(name: str, opts: dict, digest: str, explicit: bool) -> None:
    emb = emb44()
    mech = build(name, emb, **opts, **({"prior": "uniform"} if explicit else {}))
    ids = np.arange(300).repeat(4)
    out = mech.privatize(ids, rng=np.random.default_rng(7))
    recs = mech.privatize_records([ids[:500], ids[500:]], [np.random.default_rng(8), np.random.default_rng(9)])
    got = hashlib.sha256(
        np.asarray(out, np.int64).tobytes() + b"".join(np.asarray(r, np.int64).tobytes() for r in recs)
    )
    assert got.hexdigest()[:16] == digest
    assert "_posterior" not in mech.__dict__  # the nearest-neighbour path: no posterior decoder built


def brute(noisy: np.ndarray, vectors: np.ndarray, logp: np.ndarray, eps: float, w: np.ndarray | None = None) -> Any:
    """``log prior(y) - eps ||W (v - phi(y))||`` for every pair, float64."""
    diff = noisy[:, None, :].astype(np.float64) - vectors[None].astype(np.float64)
    if w is not None:
        diff = diff @ w.T
    return logp[None, :] - eps * np.linalg.norm(diff, axis=2)


@pytest.mark.parametrize("prior", ["zipf", "zipf:2"])
def test_madlib_and_mahalanobis_decode_the_exact_posterior_mode(prior: str) -> None:
    emb = emb44()
    logp = make_prior(prior, emb).log()
    ids = np.arange(300).repeat(2)
    for name, eps in (("madlib", 4.0), ("mahalanobis", 4.0), ("madlib", 0.5)):
        mech = build(name, emb, eps, prior=prior, **({"lam": 0.7} if name == "mahalanobis" else {}))
        noisy = mech.noisy_vectors(ids, np.random.default_rng(3)).astype(np.float64)
        w = mech.shape.inv_sqrt if name == "mahalanobis" else None
        score = brute(noisy, emb.vectors, logp, eps, w)
        got = mech.decode(noisy)
        assert np.array_equal(got, score.argmax(axis=1))
        # the wrong law's twin (squared distances, or the wrong norm) decodes differently
        dist = (logp[None, :] - score) / eps
        wrong = logp[None, :] - eps * dist**2
        assert not np.array_equal(got, wrong.argmax(axis=1))
        if name == "mahalanobis":
            assert not np.array_equal(got, brute(noisy, emb.vectors, logp, eps).argmax(axis=1))


@pytest.mark.parametrize("eps", [0.3, 3.0, 30.0])
@pytest.mark.parametrize("k", [1, 2])
def test_the_pruned_scan_is_exact_for_any_prior_and_blocking(eps: float, k: int) -> None:
    """Columns held in penalty order, the nearest pass, the bound, prefix groups, several
    vocabulary blocks: the best k are brute force's, for a prior in no particular order."""
    from deniable.priors import Prior

    emb = emb44(600, 6)
    rng = np.random.default_rng(k)
    prior = Prior("random", rng.pareto(1.0, 600) + 1e-3)
    post = PosteriorDecoder(emb.vectors, prior, eps, vocab_block=70, query_block=97)
    noisy = (emb.vectors[rng.integers(0, 600, 500)] + rng.standard_normal((500, 6)) * 3 / eps).astype(np.float32)
    score = brute(noisy, emb.vectors, prior.log(), eps)
    scores, ids = post.top(noisy, k)
    want = np.argsort(-score, axis=1, kind="stable")[:, :k]
    assert np.array_equal(ids, want)
    pen = (prior.log().max() - score) / eps
    np.testing.assert_allclose(scores, np.take_along_axis(pen, want, axis=1), rtol=1e-4, atol=1e-4)


def test_far_rows_decode_exactly_in_float64() -> None:
    """Tiny epsilon: noisy vectors far out are decoded by the float64 path, as brute force in float64."""
    emb = emb44()
    prior = make_prior("zipf:0.05", emb)  # a weak prior: the distances still matter at eps 1e-6
    eps = 1e-6
    post = PosteriorDecoder(emb.vectors, prior, eps)
    rng = np.random.default_rng(5)
    noisy = rng.standard_normal((200, 8)) * 1e5
    want = brute(noisy, emb.vectors, prior.log(), eps).argmax(axis=1)
    assert np.array_equal(post.decode_far(noisy), want)
    mech = build("madlib", emb, 1e-200, prior="zipf")
    assert mech.privatize(np.arange(20), rng=np.random.default_rng(0)).tolist() == [0] * 20  # the prior's mode


def test_vickrey_mixes_the_two_most_probable_words() -> None:
    emb = emb44()
    eps, t = 3.0, 0.4
    mech = build("vickrey", emb, eps, t=t, prior="zipf")
    logp = make_prior("zipf", emb).log()
    noisy = mech.noise_mechanism.noisy_vectors(np.arange(300), np.random.default_rng(2))
    s, ids = mech.noise_mechanism.posterior.top(noisy, 2)
    pen = brute(noisy, emb.vectors, logp, eps)
    pen = -(pen - logp.max()) / eps  # the prior-penalised distance
    order = np.argsort(pen, axis=1, kind="stable")[:, :2]
    assert np.array_equal(ids, order)
    np.testing.assert_allclose(s, np.take_along_axis(pen, order, axis=1), rtol=1e-4, atol=1e-4)
    # the choice: u < t s1 / (t s1 + (1 - t) s2)
    u = np.random.default_rng(9).random(300)
    p2 = t * s[:, 0] / (t * s[:, 0] + (1 - t) * s[:, 1])
    assert np.array_equal(mech.decode(noisy, u), np.where(u < p2, ids[:, 1], ids[:, 0]))


@pytest.mark.parametrize("eps", [0.8, 3.0])
@pytest.mark.parametrize("kind", ["zipf", "random"])
def test_brr_decodes_the_exact_posterior_mode_with_the_right_sign(kind: str, eps: float) -> None:
    from deniable.priors import Prior

    emb = emb44()
    prior = make_prior("zipf", emb) if kind == "zipf" else Prior("random", np.random.default_rng(3).pareto(1.0, 300))
    mech = build("brr", emb, eps, bits=64, binarizer="simhash", prior=prior)
    logp = prior.log()
    noisy = mech.noisy_codes(np.arange(300).repeat(2), np.random.default_rng(4))
    d = np.stack([hamming(noisy, np.broadcast_to(c, noisy.shape)) for c in mech.codes], axis=1).astype(float)
    p = mech.flip_probability
    score = logp[None, :] + d * np.log(p / (1 - p))
    got = mech.decode_codes(noisy, np.random.default_rng(0))
    assert np.array_equal(got, score.argmax(axis=1))
    twin = logp[None, :] - d * np.log(p / (1 - p))  # the sign flipped: more flips "more likely"
    assert np.mean(got == twin.argmax(axis=1)) < 0.5


def test_brr_words_sharing_a_code_decode_to_the_most_probable() -> None:
    codes = np.array([[1], [1], [2], [2], [2]], dtype=np.uint8)
    emb = Embedding([f"w{i}" for i in range(5)], np.eye(5, dtype=np.float32))
    prior = make_prior("zipf", emb)
    mech = build("brr", emb, 5.0, binarizer=codes, prior=prior)
    assert mech.decode_codes(codes, np.random.default_rng(0)).tolist() == [0, 0, 2, 2, 2]
    dec = CodePosteriorDecoder(
        mech.decoder.unique_codes, mech.decoder.members, mech.decoder.starts, mech.decoder.counts, prior, 5.0
    )
    assert dec.decode(codes[::-1]).tolist() == [2, 2, 2, 0, 0]


@pytest.mark.parametrize("name", MECHANISMS)
def test_the_decode_reads_only_the_noisy_rows(name: str) -> None:
    """The mechanism's output is the decode of the noisy vectors / codes drawn under the same seed:
    the decode step takes only them (and public data), never the input ids."""
    emb = emb44()
    mech = build(name, emb, 2.0, prior="zipf", **({"bits": 64, "binarizer": "simhash"} if name == "brr" else {}))
    ids = np.random.default_rng(1).integers(0, 300, 700)
    out = mech.privatize(ids, rng=np.random.default_rng(11))
    rng = np.random.default_rng(11)
    if name == "brr":
        again = mech.decode_codes(mech.noisy_codes(ids, rng), rng)
    elif name == "vickrey":
        noise = mech.noise_mechanism
        again = mech.decode(noise.noisy_vectors(ids, rng), rng)
    else:
        again = mech.decode(mech.noise(ids.size, rng) + emb.vectors[ids])
    assert np.array_equal(out, again)
    if name != "brr":  # the decoder holds public data only: the vectors (maybe whitened), the prior's penalty
        post = (mech.noise_mechanism if name == "vickrey" else mech).posterior
        public = {"transform", "d", "ntotal", "_aug", "penalty64", "_penalty", "_order", "_segments"}
        assert set(vars(post)) <= public | {"vocab_block", "query_block"}


@pytest.mark.parametrize("name", ["madlib", "mahalanobis"])
def test_the_contextual_decode_reads_only_the_noisy_rows(name: str, tmp_path: Path) -> None:
    """``prior="ngram:PATH"``: the output under a seed is the joint decode of the noisy rows drawn under that
    seed (each text on its own), and the decoder holds only public data: never the input ids."""
    from deniable.ngram import prepare_ngram

    emb = emb44()
    text = tmp_path / "public.txt"
    rng = np.random.default_rng(4)
    text.write_text("".join(" ".join(f"w{i}" for i in rng.zipf(1.5, 12) % 300) + "\n" for _ in range(200)))
    model = prepare_ngram(emb, text).path
    mech = build(name, emb, 2.0, prior=f"ngram:{model}")
    ids = np.random.default_rng(1).integers(0, 300, 300)
    off = np.array([0, 120, 120, 300])
    out = mech.privatize_texts(ids, off, np.random.default_rng(11))
    noisy = mech.noise(ids.size, np.random.default_rng(11)) + emb.vectors[ids]
    assert np.array_equal(out, np.concatenate([mech.decode(noisy[:120]), mech.decode(noisy[120:])]))
    assert set(vars(mech.contextual)) <= {
        "transform",
        "vectors",
        "ysq",
        "aug",
        "logp",
        "model",
        "epsilon",
        "k",
        "method",
    }
    assert "_posterior" not in mech.__dict__ and "_index" not in {k for k, v in mech.__dict__.items() if v}


@pytest.mark.parametrize("name", MECHANISMS)
def test_prior_is_declared_operator_only(name: str) -> None:
    opt = next(o for o in options_of(name) if o.name == "prior")
    assert opt.default == "uniform" and not opt.client and opt.cli_flag == "--decode-prior"


@pytest.mark.parametrize(
    "bad",
    ["zipf:x", "zipf:11", "nope", "counts:", "counts:/no/such/file.txt", "uniform:1", 3, "ngram:", "ngram:/no/such"],
)
def test_a_bad_prior_is_named(bad: Any) -> None:
    with pytest.raises(InvalidParameterError, match="prior"):
        build("madlib", emb44(), prior=bad)


def test_manifest_records_the_prior_and_a_counts_file_by_name_and_hash(tmp_path: Path) -> None:
    from deniable.api import release_fields
    from deniable.privatizer import Privatizer

    emb = emb44()
    text = tmp_path / "public.txt"
    text.write_text("w1 w2 w2 w3 w3 w3\n", encoding="utf-8")
    digest = hashlib.sha256(text.read_bytes()).hexdigest()
    for name in MECHANISMS:
        extra: dict[str, Any] = {"bits": 64, "binarizer": "simhash"} if name == "brr" else {}
        assert build(name, emb, **extra).describe()["prior"] == "uniform"
        assert build(name, emb, prior="zipf:1.5", **extra).describe()["prior"] == "zipf:1.5"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # weak at this epsilon: beside the point here
            described = release_fields(Privatizer(build(name, emb, prior=f"counts:{text}", **extra)), records=1)
        assert described["mechanism"]["prior"] == "counts:public.txt"
        assert described["mechanism"]["prior_sha256"] == digest
        assert str(tmp_path) not in str(described)


def test_counts_prior_changes_the_decode(tmp_path: Path) -> None:
    emb = emb44()
    text = tmp_path / "public.txt"
    text.write_text(("w7 " * 50 + "\n") * 20, encoding="utf-8")
    mech = build("madlib", emb, 0.3, prior=f"counts:{text}")
    out = mech.privatize(np.arange(300), rng=np.random.default_rng(0))
    assert np.mean(out == 7) > 0.5


def test_cli_flag_reaches_the_mechanism() -> None:
    from deniable.cli._common import MechanismFlags

    opts = MechanismFlags({"--decode-prior": "zipf"}).for_mechanism("madlib")
    assert opts["prior"] == "zipf"


# --- the service -----------------------------------------------------------------------------


def test_a_client_cannot_set_the_prior() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from conftest import make_toy_embedding
    from deniable.service import create_app, load_config

    offer = {"madlib": {"epsilons": [1], "options": {"index": "exact", "prior": "zipf"}}}
    with TestClient(create_app(make_toy_embedding(), load_config(environ={}, mechanisms=offer))) as c:
        ok = c.post("/privatize", json={"texts": ["hockey game"], "epsilon": 1})
        assert ok.status_code == 200, ok.text[:300]
        assert ok.json()["mechanism"]["prior"] == "zipf"
        r = c.post("/privatize", json={"texts": ["Secretword"], "epsilon": 1, "options": {"prior": "uniform"}})
        assert r.status_code == 422 and "prior" in r.text and "Secretword" not in r.text
    with pytest.raises(InvalidParameterError, match="prior"):
        load_config(environ={}, mechanisms={"madlib": {"epsilons": [1], "client": {"prior": ["zipf"]}}})


def test_split_mode_decodes_with_the_operators_prior() -> None:
    pytest.importorskip("fastapi")
    import base64

    from fastapi.testclient import TestClient

    from deniable.service import create_app, load_config

    emb = emb44()
    offer = {
        "madlib": {"epsilons": [2, 5], "options": {"index": "exact", "prior": "zipf"}},
        "brr": {"epsilons": [1], "options": {"bits": 64, "binarizer": "simhash", "prior": "zipf"}},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        app = create_app(emb, load_config(environ={}, mechanisms=offer))
    with TestClient(app) as c:
        arts = {a["mechanism"]: a["id"] for a in c.get("/v1/device").json()["artefacts"]}
        ids = np.arange(300)
        for eps in (2, 5):
            mech = build("madlib", emb, eps, index="exact", prior="zipf")
            noisy = mech.noisy_vectors(ids, np.random.default_rng(eps))
            body = {"artefact": arts["madlib"], "vectors": base64.b64encode(noisy.astype("<f4").tobytes()).decode()}
            r = c.post("/v1/decode", json={**body, "epsilon": eps})
            assert r.status_code == 200, r.text[:300]
            assert r.json()["ids"] == mech.decode(noisy).tolist()
        r = c.post("/v1/decode", json=body)
        assert r.status_code == 422 and "epsilon" in r.text
        r = c.post("/v1/decode", json={**body, "epsilon": 3})
        assert r.status_code == 422 and "epsilon" in r.text
        brr = build("brr", emb, 1.0, bits=64, binarizer="simhash", prior="zipf")
        codes = brr.noisy_codes(ids, np.random.default_rng(0))
        body = {"artefact": arts["brr"], "codes": base64.b64encode(codes.tobytes()).decode(), "epsilon": 1}
        r = c.post("/v1/decode", json=body)
        assert r.status_code == 200 and r.json()["ids"] == brr.decode_codes(codes, np.random.default_rng(0)).tolist()


@pytest.mark.parametrize(("vocab_block", "head"), [(64, 16), (256, 16), (1000, 64), (4096, 256)])
@pytest.mark.parametrize("eps", [0.7, 5.0])
def test_the_segmented_scan_matches_brute_force_for_every_layout(vocab_block: int, head: int, eps: float) -> None:
    """Segments of any layout (the head scored in pass 1, doubling widths, one per block, a short
    last block), duplicated vectors with equal penalties (a tie: the lowest id), k = 1 and 2."""
    from deniable.priors import Prior

    rng = np.random.default_rng(vocab_block + head)
    v = 2500
    vectors = rng.standard_normal((v, 5)).astype(np.float32)
    weights = rng.pareto(1.2, v) + 1e-3
    vectors[1800], weights[1800] = vectors[40], weights[40]  # same vector, same penalty
    prior = Prior("random", weights)
    post = PosteriorDecoder(vectors, prior, eps, vocab_block=vocab_block, query_block=61)
    post._HEAD = head  # type: ignore[misc]  # an instance's own head (the segments are built below)
    post.__init__(vectors, prior, eps, vocab_block=vocab_block, query_block=61)  # type: ignore[misc]
    noisy = vectors[rng.integers(0, v, 700)] + rng.standard_normal((700, 5)).astype(np.float32) * 2 / eps
    noisy[:3] = vectors[[40, 1800, 40]]
    score = brute(noisy, vectors, prior.log(), eps)
    for k in (1, 2):
        _, ids = post.top(noisy, k)
        want = np.argsort(-score, axis=1, kind="stable")[:, :k]
        assert np.array_equal(ids, want)
    assert 1800 not in post.top(noisy, 2)[1][:, 0]  # its twin, 40, has the lower id and the same score
