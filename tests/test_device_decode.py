"""Decode parity: the same noisy codes / vectors decoded by the JavaScript local decoder, by
POST /v1/decode and by the Python decoder give the same words (docs/device.md, "Tie rules").

BRR: Hamming distances are integers, so the tie set (every word whose code is at the
minimum distance) is exact and must be identical; each decoder then draws uniformly among
the tied codes and a word of the code, so each decoded word must lie in that set, and
where it has one element all three words are equal.
madlib: nearest vector in Euclidean distance, ties to the lowest id. JavaScript sums
(q - y)^2 in float64; the Python exact index uses float32 matrix products: the two agree
wherever the two best squared distances differ by more than float32 rounding (1e-5
relative here); closer pairs are counted and must be rare.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from _device_helpers import Harness, b64, mechanisms, service_app, unb64
from deniable.metrics import hamming


@pytest.fixture(scope="module")
def service() -> Iterator[object]:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    with TestClient(service_app()) as c:
        yield c


def decode_remote(service: object, mechanism: str, field: str, payload: np.ndarray) -> list[int]:
    ids = {a["mechanism"]: a["id"] for a in service.get("/v1/device").json()["artefacts"]}  # type: ignore[attr-defined]
    r = service.post("/v1/decode", json={"artefact": ids[mechanism], field: b64(payload)})  # type: ignore[attr-defined]
    assert r.status_code == 200, r.text[:300]
    return list(r.json()["ids"])


def test_brr_decode_parity(js: Harness, artefacts: dict[str, Path], service: object) -> None:
    brr = mechanisms()["brr"]
    rng = np.random.default_rng(5)
    ids = rng.integers(0, brr.embedding.size, 400)
    words = [int(i) for i in ids]
    noisy = np.concatenate(
        [
            unb64(
                js("brr_noisy", artefact=str(artefacts["brr"]), ids=words[:200], draws=1, epsilon=2.0)["codes"],
                np.uint8,
            ),
            brr.noisy_codes(ids[200:], rng).ravel(),
        ]
    ).reshape(400, -1)
    # the exact tie sets, by brute force over every word's code
    dist = hamming(noisy[:, None, :], brr.codes[None, :, :])
    d0 = dist.min(axis=1)
    tie_sets = [set(np.flatnonzero(dist[i] == d0[i]).tolist()) for i in range(len(noisy))]
    got = js("brr_ties", artefact=str(artefacts["brr"]), codes=b64(noisy))
    assert got["distances"] == d0.tolist()
    assert [set(t) for t in got["ties"]] == tie_sets
    local = js("brr_decode", artefact=str(artefacts["brr"]), codes=b64(noisy))["ids"]
    remote = decode_remote(service, "brr", "codes", noisy)
    python = brr.decoder.decode(noisy, rng).tolist()
    for i, ties in enumerate(tie_sets):
        assert local[i] in ties and remote[i] in ties and python[i] in ties
        if len(ties) == 1:
            assert local[i] == remote[i] == python[i]
    assert sum(len(t) == 1 for t in tie_sets) > 300  # most rows have one nearest word


def test_brr_ties_are_uniform_in_javascript(js: Harness, artefacts: dict[str, Path]) -> None:
    """A query halfway between two codes (a tie by construction) is decoded uniformly over the tie set."""
    brr = mechanisms()["brr"]
    a = 10
    b = next(j for j in range(11, 100) if int(hamming(brr.codes[a], brr.codes[j])) % 2 == 0)
    ca, cb = np.unpackbits(brr.codes[a]), np.unpackbits(brr.codes[b])
    q = ca.copy()
    diff = np.flatnonzero(ca != cb)
    q[diff[: len(diff) // 2]] = cb[diff[: len(diff) // 2]]
    query = np.packbits(q)
    ties = js("brr_ties", artefact=str(artefacts["brr"]), codes=b64(query[None, :]))["ties"][0]
    assert {a, b} <= set(ties)
    n = 2000
    out = js("brr_decode", artefact=str(artefacts["brr"]), codes=b64(np.tile(query, (n, 1))))["ids"]
    counts = np.array([out.count(t) for t in ties])
    assert counts.sum() == n
    from scipy.stats import chisquare

    assert chisquare(counts).pvalue > 1e-4


def test_madlib_decode_parity(js: Harness, artefacts: dict[str, Path], service: object) -> None:
    mad = mechanisms()["madlib"]
    rng = np.random.default_rng(9)
    ids = rng.integers(0, mad.embedding.size, 300)
    noise = unb64(js("laplace", count=300, dim=mad.embedding.dim, epsilon=5.0)["noise"], "<f8").reshape(300, -1)
    noisy = (noise + mad.embedding.vectors[ids]).astype("<f4")
    local = js("madlib_decode", artefact=str(artefacts["madlib"]), vectors=b64(noisy))["ids"]
    remote = decode_remote(service, "madlib", "vectors", noisy)
    python = mad.decode(noisy).tolist()
    vec = np.asarray(mad.embedding.vectors, dtype=np.float64)
    d = ((noisy.astype(np.float64)[:, None, :] - vec[None, :, :]) ** 2).sum(axis=2)
    two = np.sort(d, axis=1)[:, :2]
    close = (two[:, 1] - two[:, 0]) <= 1e-5 * two[:, 0]
    exact = np.argmin(d, axis=1)
    assert close.sum() <= 3
    for i in np.flatnonzero(~close).tolist():
        assert local[i] == remote[i] == python[i] == exact[i]
    assert sum(local[i] != ids[i] for i in range(300)) > 0  # the noise does change words at epsilon 5
