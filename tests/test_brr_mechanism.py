"""BRR: the bit channel (exact), the sampler, the decode, the mechanism's API and validation."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from _brr_helpers import bound_violations, code_embedding, mixed_vocabulary, nibble_vocabulary
from deniable import BinaryRandomizedResponse, InvalidParameterError, Privatizer
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.brr import (
    HammingDecoder,
    SharedCodesWarning,
    channel_log_prob,
    flip_probability,
    randomized_response,
    sample_flip_masks,
)
from deniable.metrics import hamming

# mixed_vocabulary() shares a code on purpose; the warning itself is tested below (pytest.warns).
pytestmark = pytest.mark.filterwarnings("ignore::deniable.mechanisms.brr.SharedCodesWarning")


def all_codes(m: int) -> np.ndarray:
    """Every m-bit code (m <= 8) packed in one byte (leading bits), shape (2^m, 1)."""
    return (np.arange(2**m, dtype=np.uint8) << (8 - m)).reshape(-1, 1)


@pytest.mark.parametrize("m", [4, 5, 6, 7, 8])
@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_bit_channel_is_eps_hamming_private_exactly(m: int, eps: float) -> None:
    """log P(b_hat|b) - log P(b_hat|b') <= eps * hamming(b, b') for all b, b', b_hat (m-bit)."""
    c = all_codes(m)
    # log P(b_hat | b) for every (b_hat, b): (2^m, 2^m)
    logp = channel_log_prob(c[:, None, :], c[None, :, :], eps, m)
    assert np.allclose(np.exp(logp).sum(axis=0), 1.0)  # a distribution over b_hat for each b
    d = hamming(c[:, None, :], c[None, :, :]).astype(float)  # (b, b')
    ratio = logp[:, :, None] - logp[:, None, :]  # [b_hat, b, b']
    assert np.all(ratio <= eps * d[None, :, :] + 1e-9)
    # tight: equality at b_hat = b
    diag = ratio[np.arange(2**m), np.arange(2**m), :]
    assert np.allclose(diag, eps * d)


@pytest.mark.parametrize("m", [4, 8])
def test_bit_channel_with_wrong_flip_probability_violates(m: int) -> None:
    c = all_codes(m)
    eps, wrong = 1.0, 1.5  # flip probability computed from the wrong epsilon
    logp = channel_log_prob(c[:, None, :], c[None, :, :], wrong, m)
    d = hamming(c[:, None, :], c[None, :, :]).astype(float)
    ratio = logp[:, :, None] - logp[:, None, :]
    assert np.any(ratio > eps * d[None, :, :] + 1e-9)


def test_flip_probability() -> None:
    assert flip_probability(0.0001) == pytest.approx(0.5, abs=1e-4)
    assert flip_probability(2.0) == pytest.approx(1 / (1 + math.e**2))
    assert flip_probability(1000.0) == 0.0 or flip_probability(1000.0) < 1e-300
    with pytest.raises(InvalidParameterError, match="epsilon"):
        flip_probability(0)


def test_flip_masks_are_iid_bernoulli_per_bit() -> None:
    """Each of the m bits (packbits order) flips with probability p, independently of the others."""
    rng = np.random.default_rng(1)
    p, n, m = 0.2, 40000, 24
    masks = sample_flip_masks(n, m, p, rng)
    assert masks.shape == (n, 3) and masks.dtype == np.uint8
    bits = np.unpackbits(masks, axis=1)
    rate = bits.mean(axis=0)
    z = (rate - p) / math.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(z) < 5.5)
    # pairwise independence of neighbouring bits
    both = (bits[:, :-1] & bits[:, 1:]).mean(axis=0)
    z2 = (both - p * p) / math.sqrt(p * p * (1 - p * p) / n)
    assert np.all(np.abs(z2) < 5.5)
    # number of flips per code ~ Binomial(m, p)
    flips = bits.sum(axis=1, dtype=np.int64)  # numpy 2.0's bincount refuses uint64
    observed = np.bincount(flips, minlength=m + 1)
    expected = stats.binom.pmf(np.arange(m + 1), m, p) * n
    keep = expected > 5
    chi2 = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    assert stats.chi2.sf(chi2, keep.sum() - 1) > 1e-6


def test_randomized_response_only_touches_the_code_bits() -> None:
    rng = np.random.default_rng(0)
    codes = np.zeros((1000, 8), dtype=np.uint8)
    noisy = randomized_response(codes, 0.5, rng)
    assert noisy.shape == codes.shape and noisy.any()


def test_word_level_bound_holds_and_wrong_epsilon_fails_fast() -> None:
    codes = nibble_vocabulary()
    assert bound_violations(codes, claimed_eps=1.0, true_eps=1.0, n=20000, seed=3) == 0
    assert bound_violations(codes, claimed_eps=1.0, true_eps=1.6, n=20000, seed=3) > 0


def test_exact_word_distribution_respects_the_bound() -> None:
    """Enumerate every noisy 8-bit code: the decode's exact word distribution is eps*d_H private."""
    codes = mixed_vocabulary()
    eps, m = 0.8, 8
    qs = all_codes(8)
    dec = HammingDecoder(codes)
    # exact decode distribution of each b_hat over words (uniform ties, then uniform sharers)
    dist = hamming(qs[:, None, :], dec.unique_codes[None, :, :])  # (256, U)
    tie = dist == dist.min(axis=1, keepdims=True)
    p_code = tie / tie.sum(axis=1, keepdims=True)
    p_word = p_code[:, dec.code_of_word] / dec.counts[dec.code_of_word][None, :]  # (256, V)
    assert np.allclose(p_word.sum(axis=1), 1.0)
    chan = np.exp(channel_log_prob(qs[:, None, :], codes[None, :, :], eps, m))  # (256 b_hat, V w)
    out = chan.T @ p_word  # (V w, V y)
    d = hamming(codes[:, None, :], codes[None, :, :]).astype(float)
    lr = np.log(out)[:, None, :] - np.log(out)[None, :, :]
    assert np.all(lr <= eps * d[:, :, None] + 1e-9)
    # and the sampler matches this exact distribution
    mech = BinaryRandomizedResponse(code_embedding(codes), eps, binarizer=codes)
    rng = np.random.default_rng(5)
    n = 20000
    for w in (0, 3, 6):
        got = np.bincount(mech.privatize(np.full(n, w), rng), minlength=len(codes))
        chi2 = ((got - n * out[w]) ** 2 / (n * out[w])).sum()
        assert stats.chi2.sf(chi2, len(codes) - 1) > 1e-6


def test_privatize_shape_dtype_and_identity_at_huge_epsilon(rng: np.random.Generator) -> None:
    codes = mixed_vocabulary()
    mech = BinaryRandomizedResponse(code_embedding(codes), 1e6, binarizer=codes)
    ids = np.array([[0, 1, 2], [5, 6, 7]])
    out = mech.privatize(ids, rng)
    assert out.shape == ids.shape and out.dtype == np.int64
    assert np.array_equal(out, ids)
    shared = mech.privatize(np.full(2000, 3), rng)
    assert set(shared.tolist()) == {3, 4}  # words 3 and 4 share a code
    assert mech.privatize(np.array([], dtype=np.int64), rng).shape == (0,)


def test_distance_guarantee_describe() -> None:
    codes = mixed_vocabulary()
    mech = BinaryRandomizedResponse(code_embedding(codes), 2.0, binarizer=codes)
    assert mech.distance(0, 5) == 8.0 and mech.distance(3, 4) == 0.0 and mech.distance(0, 1) == 2.0
    assert mech.guarantee("w0", "w2") == pytest.approx(8.0)
    assert np.array_equal(mech.pair_distances([0, 0], [5, 1]), [8.0, 2.0])
    d = mech.describe()
    assert d["mechanism"] == "brr" and d["metric"] == "hamming" and d["bits"] == 8
    assert d["shared_codes"] == 1 and d["words_sharing_a_code"] == 2 and d["distinct_codes"] == 7
    assert mech.flip_probability == pytest.approx(1 / (1 + math.exp(2)))


def test_trained_codes_and_registry(tiny_embedding) -> None:  # type: ignore[no-untyped-def]
    mech = make_mechanism("brr", tiny_embedding, 1.0, bits=64, binarizer="simhash")
    assert isinstance(mech, BinaryRandomizedResponse)
    assert mech.codes.shape == (8, 8) and mech.bits == 64 and mech.binarizer == "simhash"
    out = mech.privatize(np.arange(8), np.random.default_rng(0))
    assert out.min() >= 0 and out.max() < 8


def test_privatizer_with_brr(toy_embedding) -> None:  # type: ignore[no-untyped-def]
    mech = BinaryRandomizedResponse(toy_embedding, 1e4, bits=128, binarizer="simhash")
    text = "The hockey game was great!"
    assert Privatizer(mech).privatize(text, np.random.default_rng(0)) == text
    mech_low = BinaryRandomizedResponse(toy_embedding, 0.05, bits=128, binarizer="simhash")
    noisy = Privatizer(mech_low).privatize_batch([text] * 50, np.random.default_rng(0))
    assert any(t != text for t in noisy) and all(t.endswith("!") for t in noisy)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"epsilon": 0}, "epsilon"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"bits": 100}, "bits"),
        ({"bits": True}, "bits"),
        ({"binarizer": "pca"}, "binarizer"),
        ({"index": "ivf"}, "index"),
        ({"batch_size": 0}, "batch_size"),
        ({"seed": -1}, "seed"),
        ({"binarizer": np.zeros((3, 8), dtype=np.uint8)}, "binarizer"),
        ({"binarizer": np.zeros((8, 8), dtype=np.int64)}, "binarizer"),
        ({"binarizer": np.zeros((8, 8), dtype=np.uint8), "bits": 128}, "bits"),
        ({"binarizer_options": {"epochs": 0}}, "epochs"),
        ({"binarizer_options": {"nope": 1}}, "nope"),
    ],
)
def test_bad_parameters_name_the_parameter(tiny_embedding, kwargs: dict, name: str) -> None:  # type: ignore[no-untyped-def]
    args = {"epsilon": 1.0, "bits": 64, "binarizer": "simhash", **kwargs}
    with pytest.raises(InvalidParameterError, match=name):
        BinaryRandomizedResponse(tiny_embedding, **args)


def test_bad_ids_and_embedding(tiny_embedding, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    mech = BinaryRandomizedResponse(tiny_embedding, 1.0, bits=64, binarizer="simhash")
    with pytest.raises(InvalidParameterError, match="ids"):
        mech.privatize([0, 8], rng)
    with pytest.raises(InvalidParameterError, match="ids"):
        mech.privatize([0.5], rng)
    with pytest.raises(InvalidParameterError, match="embedding"):
        BinaryRandomizedResponse("glove", 1.0)  # type: ignore[arg-type]


def test_hamming_helper_matches_metrics_module() -> None:
    from deniable.metrics import paired_distances

    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (50, 32), dtype=np.uint8)
    b = rng.integers(0, 256, (50, 32), dtype=np.uint8)
    assert np.array_equal(hamming(a, b), paired_distances(a, b, "hamming"))
    for x, y in itertools.islice(zip(a, b, strict=True), 3):
        assert hamming(x, y) == np.unpackbits(x ^ y).sum()


def test_shared_codes_warn_with_counts_and_a_few_groups() -> None:
    with pytest.warns(SharedCodesWarning, match=r"1 binary code\(s\) are shared by 2 of the 8 vocabulary words") as rec:
        mech = BinaryRandomizedResponse(code_embedding(mixed_vocabulary()), 1.0, binarizer=mixed_vocabulary())
    assert "{w3, w4}" in str(rec[0].message) and issubclass(SharedCodesWarning, UserWarning)
    assert mech.describe()["shared_codes"] == 1 and mech.describe()["words_sharing_a_code"] == 2  # unchanged
    # five groups (sizes 7, 2, 2, 3, 2) + 3 unique codes: the 3 largest are listed, at most 5 words each
    sizes = [7, 2, 2, 3, 2, 1, 1, 1]
    codes = np.repeat(np.arange(len(sizes), dtype=np.uint8) * 16, sizes).reshape(-1, 1)
    with pytest.warns(SharedCodesWarning) as rec:
        BinaryRandomizedResponse(code_embedding(codes), 1.0, binarizer=codes)
    msg = str(rec[0].message)
    assert "5 binary code(s) are shared by 16 of the 19 vocabulary words (8-bit codes)" in msg
    assert "{w0, w1, w2, w3, w4 and 2 more}; {w11, w12, w13}; {w7, w8}." in msg and "w9" not in msg
    # no shared code: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", SharedCodesWarning)
        BinaryRandomizedResponse(code_embedding(nibble_vocabulary()), 1.0, binarizer=nibble_vocabulary())


def test_cli_privatize_shows_the_shared_codes_warning(tmp_path: Path) -> None:
    """The notice must reach stderr of the real command (Python's default warning display)."""
    from deniable.binarize.device import save_device_artefact

    codes = np.zeros((4, 4), dtype=np.uint8)
    codes[:, 0] = [0, 0, 255, 15]  # "hockey" and "puck" share a code
    save_device_artefact(tmp_path / "dev", ["hockey", "puck", "nasa", "the"], codes, {"binarizer": "precomputed"})
    (tmp_path / "in.txt").write_text("the hockey\n", encoding="utf-8")
    args = ["privatize", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"), "-m", "brr", "-e", "2"]
    args += ["--embedding", str(tmp_path / "dev"), "-q"]
    code = "import sys; from deniable.cli import main; main(sys.argv[1:])"
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("warning: brr:") and "shared by 2 of the 4 vocabulary words" in proc.stderr
    assert "{hockey, puck}" in proc.stderr


@pytest.mark.parametrize("index", ["flat", "hnsw"])
def test_cli_privatize_brr_takes_the_index_option(tmp_path: Path, index: str) -> None:
    from deniable.binarize.device import save_device_artefact
    from deniable.cli import run_app

    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, size=(64, 8), dtype=np.uint8)
    words = [f"w{i}" for i in range(64)]
    save_device_artefact(tmp_path / "dev", words, codes, {"binarizer": "precomputed"})
    (tmp_path / "in.txt").write_text("w1 w2 w3\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    args = [
        "privatize",
        str(tmp_path / "in.txt"),
        "-o",
        str(out),
        "-m",
        "brr",
        "-e",
        "50",
        "--index",
        index,
        "--case",
        "keep",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = run_app([*args, "--embedding", str(tmp_path / "dev"), "-q"])
    assert rc == 0
    assert out.read_text(encoding="utf-8") == "w1 w2 w3\n"  # eps = 50 per bit: no bit flips


def test_construction_is_cheap_codes_come_from_prepare(
    tiny_embedding, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    """Constructing only validates; the first privatize trains once (notice on stderr), even from threads."""
    import threading

    import deniable.mechanisms.brr as brr_module

    calls: list[int] = []
    real = brr_module.binarize

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(brr_module, "binarize", counting)
    mech = BinaryRandomizedResponse(tiny_embedding, 1.0, bits=64, binarizer="itq", seed=12345, show_progress=False)
    assert calls == [] and not mech.prepared and mech.bits == 64 and mech.binarizer == "itq"
    with pytest.raises(InvalidParameterError, match="iterations"):  # options are still checked at once
        BinaryRandomizedResponse(tiny_embedding, 1.0, binarizer="itq", binarizer_options={"iterations": 0})
    assert calls == []
    loud = BinaryRandomizedResponse(tiny_embedding, 1.0, bits=128, binarizer="itq", seed=12346)
    loud.privatize([0, 1], np.random.default_rng(0))
    assert "brr needs 128-bit itq codes of 8 words" in capsys.readouterr().err and calls == [1]
    outs: list[np.ndarray] = []
    threads = [
        threading.Thread(target=lambda: outs.append(mech.privatize(np.arange(8), np.random.default_rng(0))))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1, 1] and len(outs) == 4 and mech.prepared
    assert all(np.array_equal(o, outs[0]) for o in outs)
    assert mech.prepare() is mech and calls == [1, 1]
