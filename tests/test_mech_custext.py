"""CusText: the customized mapping takes the MOST similar words; sets partition the vocabulary (issue 17)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deniable import Embedding
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.custext import customized_mapping


def random_embedding(n: int = 60, dim: int = 5, seed: int = 0) -> Embedding:
    r = np.random.default_rng(seed)
    return Embedding([f"w{i}" for i in range(n)], r.normal(size=(n, dim)).astype(np.float32))


def sequential_greedy(vectors: np.ndarray, k: int) -> list[list[int]]:
    """The paper's mapping, one word at a time (reference)."""
    u = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    mapped = np.zeros(len(u), dtype=bool)
    groups = []
    for w in range(len(u)):
        if mapped[w]:
            continue
        free = np.flatnonzero(~mapped)
        sims = u[free] @ u[w]
        sims[free == w] = np.inf
        g = free[np.argsort(-sims, kind="stable")][:k]
        mapped[g] = True
        groups.append(g.tolist())
    return groups


@pytest.mark.parametrize("block", [1, 3, 64])
def test_mapping_is_the_sequential_greedy(block: int) -> None:
    emb = random_embedding()
    got = customized_mapping(emb.vectors, 7, leaders_per_block=block)
    want = sequential_greedy(emb.vectors.astype(np.float64), 7)
    assert [row[row >= 0].tolist() for row in got] == want
    flat = got[got >= 0]
    assert sorted(flat.tolist()) == list(range(emb.size))  # a partition


def test_output_set_holds_the_most_similar_words_not_the_least() -> None:
    """Regression: a peer sorts cosine similarity ascending and keeps the K LEAST similar words."""
    emb = random_embedding(40, 4, seed=3)
    mech = make_mechanism("custext", emb, 2.0, k=5)
    u = emb.vectors / np.linalg.norm(emb.vectors, axis=1, keepdims=True)
    cos = u @ u[0]
    out = mech.output_set(0)  # word 0 leads the first set: all words were free
    assert out[0] == 0
    assert sorted(out.tolist()) == sorted(np.argsort(-cos)[:5].tolist())
    assert not set(out.tolist()) & set(np.argsort(cos)[:5].tolist())


def test_probabilities_grow_with_similarity_and_the_bound_is_within_the_set() -> None:
    emb = random_embedding(30, 4, seed=4)
    mech = make_mechanism("custext", emb, 3.0, k=6)
    ids, probs = mech.distribution(7)
    u = emb.vectors / np.linalg.norm(emb.vectors, axis=1, keepdims=True)
    cos = u[ids] @ u[7]
    order = np.argsort(cos)
    assert np.all(np.diff(probs[order]) >= -1e-12)
    assert probs.max() / probs.min() == pytest.approx(np.exp(3.0 / 2))  # normalised score spans [0, 1]
    others = [w for w in range(30) if w not in set(ids.tolist())]
    assert mech.guarantee(7, ids[1]) == pytest.approx(3.0)
    assert mech.guarantee(7, others[0]) == np.inf


def test_custext_plus_keeps_stopwords_only() -> None:
    words = ["the", "and", "hockey", "puck", "rocket", "orbit", "nasa", "goal"]
    r = np.random.default_rng(1)
    emb = Embedding(words, r.normal(size=(8, 3)).astype(np.float32))
    plus = make_mechanism("custext_plus", emb, 0.1, k=4)
    plain = make_mechanism("custext", emb, 0.1, k=4)
    ids = np.repeat(np.arange(8), 400)
    out = plus.privatize(ids, np.random.default_rng(0))
    assert np.all(out[ids <= 1] == ids[ids <= 1])
    assert np.any(out[ids >= 2] != ids[ids >= 2])
    assert np.any(plain.privatize(ids, np.random.default_rng(0))[ids <= 1] != ids[ids <= 1])
    assert "stopwords" in plus.describe()["not_protected"]


def test_mapping_is_cached_on_disk_and_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    import deniable.mechanisms.custext as mod

    emb = random_embedding(50, 4, seed=9)
    first = make_mechanism("custext", emb, 1.0, k=5)
    want = first.output_set(3)
    assert emb.cache_path("custext", "mapping-k5-v1.npy").is_file()

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("recomputed")

    monkeypatch.setattr(mod, "customized_mapping", boom)
    again = make_mechanism("custext_plus", emb, 2.0, k=5)  # same public mapping, other epsilon
    np.testing.assert_array_equal(again.output_set(3), want)
    with pytest.raises(AssertionError, match="recomputed"):
        make_mechanism("custext", emb, 1.0, k=5, cache=False).output_set(3)


# -- bounds of k, and no cache folder left by a refused or failed build (issue 40) ----------------


def _cache_files() -> list[str]:
    from deniable._cache import cache_dir

    return sorted(str(p.relative_to(cache_dir())) for p in cache_dir().rglob("*"))


@pytest.mark.parametrize("k", [99_999_999_999, 257])
def test_k_beyond_the_declared_bound_is_refused_before_any_work(k: int) -> None:
    from deniable import InvalidParameterError
    from deniable.mechanisms import validate_options
    from deniable.mechanisms.custext import K_MAX, CusText

    emb = random_embedding(400, seed=9)
    before = _cache_files()
    with pytest.raises(InvalidParameterError, match=rf"^k={k} is not valid: an integer >= 1 and <= {K_MAX}"):
        validate_options("custext", {"k": k})
    with pytest.raises(InvalidParameterError, match=f"k={k}"):
        CusText(emb, 1.0, k=k)  # the constructor checks the same declaration
    assert _cache_files() == before


def test_k_beyond_the_vocabulary_is_refused_where_the_embedding_is_known() -> None:
    from deniable import InvalidParameterError

    emb = random_embedding(60, seed=12)
    before = _cache_files()
    with pytest.raises(
        InvalidParameterError, match=r"^k=61 is not valid: .*at most the vocabulary size \(60 words here\)"
    ):
        make_mechanism("custext_plus", emb, 1.0, k=61)
    assert _cache_files() == before
    assert make_mechanism("custext", emb, 1.0, k=60).output_set(0).size == 60  # the whole vocabulary: allowed


def test_the_cli_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fake_mechanisms import run_cli

    emb = random_embedding(50)
    emb.save(tmp_path / "emb")
    (tmp_path / "in.txt").write_text("w1 w2\n", encoding="utf-8")
    args = ["privatize", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"), "-e", "1", "-m", "custext"]
    args += ["--embedding", str(tmp_path / "emb"), "--vocabulary", "all"]
    for k, needle in (("99999999999", "<= 256"), ("51", "vocabulary size (50 words here)")):
        before = _cache_files()
        code, _, err = run_cli([*args, "--custext-k", k], capsys)
        assert code == 2 and f"--custext-k={k} is not valid" in err and needle in err, err
        assert not (tmp_path / "out.txt").exists()
        assert not any("custext" in f for f in _cache_files() if f not in before)


def test_a_failed_mapping_build_leaves_no_cache_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    from deniable.mechanisms import custext

    emb = random_embedding(70, seed=4)
    folder = emb.cache_path("custext")
    mech = make_mechanism("custext", emb, 1.0, k=5)

    def fail(*args: object, **kwargs: object) -> None:
        raise MemoryError("simulated")

    monkeypatch.setattr(custext, "customized_mapping", fail)
    with pytest.raises(MemoryError):
        mech.output_set(0)
    assert not folder.exists()  # before: cache_path created it on the lookup, and it stayed, empty


def test_a_failed_atomic_write_removes_the_folders_it_made(tmp_path: Path) -> None:
    from deniable._cache import atomic_path

    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "other").write_text("x")

    def fail(tmp: Path) -> None:
        tmp.write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_path(tmp_path / "a" / "b" / "artefact.npy", fail)
    assert not (tmp_path / "a").exists()
    with pytest.raises(OSError, match="disk full"):
        atomic_path(tmp_path / "kept" / "artefact.npy", fail)
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["other"]  # a folder it did not make stays
    atomic_path(tmp_path / "c" / "ok.bin", lambda p: p.write_bytes(b"1"))
    assert (tmp_path / "c" / "ok.bin").read_bytes() == b"1"


def test_every_integer_option_of_every_mechanism_has_an_upper_bound() -> None:
    from deniable.mechanisms import mechanism_names, options_of

    unbounded = [
        f"{name}.{o.name}"
        for name in mechanism_names()
        for o in options_of(name)
        if o.type is int and o.choices is None and o.high is None
    ]
    assert not unbounded, f"integer options without an upper bound: {unbounded}"


def test_a_huge_binarizer_seed_is_refused_not_a_crash() -> None:
    from deniable import InvalidParameterError
    from deniable.mechanisms import validate_options

    # before: accepted, then "OSError: File name too long" from the codes' cache file name
    with pytest.raises(InvalidParameterError, match="seed"):
        validate_options("brr", {"seed": 10**300})
