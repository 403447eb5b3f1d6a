"""The three binarizers: SimHash, ITQ and the near-lossless autoencoder (Tissier et al. 2019).

Every function takes a float matrix ``x`` (rows = words) and returns the codes as a
``(V, bits // 8)`` uint8 matrix of packed bits (``np.packbits`` order: the first bit is
the most significant bit of byte 0). All are deterministic given ``seed``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .._progress import progress

__all__ = ["autoencoder_codes", "centre", "itq_codes", "simhash_codes", "train_autoencoder"]

_ENCODE_BLOCK = 65536


def centre(x: npt.ArrayLike) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """``(x - mean, mean)`` in float32: every binarizer works on centred vectors (balanced bits)."""
    mat = np.asarray(x, dtype=np.float32)
    mean = mat.mean(axis=0, dtype=np.float64).astype(np.float32)
    return mat - mean, mean


def _pack_signs(x: npt.NDArray[np.float32], proj: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
    """``packbits(x @ proj > 0)`` in blocks of rows (bounded memory)."""
    out = np.empty((x.shape[0], proj.shape[1] // 8), dtype=np.uint8)
    for s in range(0, x.shape[0], _ENCODE_BLOCK):
        out[s : s + _ENCODE_BLOCK] = np.packbits(x[s : s + _ENCODE_BLOCK] @ proj > 0, axis=1)
    return out


def _sample_rows(n_rows: int, max_rows: int | None, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    if max_rows is None or n_rows <= max_rows:
        return np.arange(n_rows)
    return np.sort(rng.choice(n_rows, size=max_rows, replace=False))


def _random_orthonormal(rows: int, cols: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """A ``rows x cols`` matrix with orthonormal columns (rows >= cols) or rows (rows < cols)."""
    big, small = max(rows, cols), min(rows, cols)
    q, r = np.linalg.qr(rng.standard_normal((big, small)))
    q *= np.sign(np.diag(r))[None, :]  # Haar-distributed
    return q if rows >= cols else q.T


# -- SimHash ---------------------------------------------------------------------------------


def simhash_codes(x: npt.ArrayLike, bits: int, seed: int = 0) -> npt.NDArray[np.uint8]:
    """Sign of a Gaussian random projection of the centred vectors (Charikar's SimHash).

    ``Pr[bit differs] = angle(x, y) / pi`` for each bit, so the Hamming distance / bits
    estimates the angular distance of the centred vectors. Any ``bits`` works, also > dim.
    """
    xc, _ = centre(x)
    rng = np.random.default_rng([seed, 1])
    proj = rng.standard_normal((xc.shape[1], bits)).astype(np.float32)
    return _pack_signs(xc, proj)


# -- ITQ -------------------------------------------------------------------------------------


def itq_codes(
    x: npt.ArrayLike,
    bits: int,
    seed: int = 0,
    *,
    iterations: int = 50,
    max_train_rows: int | None = 10000,
    show_progress: bool | None = None,
) -> npt.NDArray[np.uint8]:
    """Iterative quantization (Gong & Lazebnik 2011): PCA, then a learned rotation.

    Minimises ``||B - V R||_F`` over codes ``B in {-1, 1}`` and an orthogonal ``R``
    (alternating: ``B = sign(V R)``; ``R`` from the orthogonal Procrustes problem, an
    SVD). ``V`` is the projection on the top ``bits`` principal components. When
    ``bits`` > dim there are only dim components: the dim principal coordinates are
    embedded in R^bits by a random isometry (a matrix with orthonormal rows) before the
    rotation is learned, so the codes carry at most dim dimensions of information.
    The rotation is fitted on ``max_train_rows`` random rows, then all rows are encoded.
    """
    xc, _ = centre(x)
    rng = np.random.default_rng([seed, 2])
    sample = xc[_sample_rows(xc.shape[0], max_train_rows, rng)].astype(np.float64)
    cov = sample.T @ sample / max(1, sample.shape[0] - 1)
    vals, vecs = np.linalg.eigh(cov)
    order = np.argsort(vals)[::-1]
    n = xc.shape[1]
    if bits <= n:
        pca = vecs[:, order[:bits]]
    else:
        pca = vecs[:, order] @ _random_orthonormal(n, bits, rng)  # (n, bits), orthonormal rows
    v = (sample @ pca).astype(np.float32)
    rot = _random_orthonormal(bits, bits, rng).astype(np.float32)
    with progress(iterations, f"ITQ rotation ({bits} bits)", enabled=show_progress) as advance:
        for _ in range(iterations):
            b = np.where(v @ rot > 0, np.float32(1.0), np.float32(-1.0))
            u, _s, wt = np.linalg.svd((v.T @ b).astype(np.float64))
            rot = (u @ wt).astype(np.float32)
            advance(1)
    return _pack_signs(xc, (pca @ rot).astype(np.float32))


# -- the autoencoder of Tissier, Gravier and Habrard (AAAI 2019) -------------------------------


def train_autoencoder(
    x: npt.ArrayLike,
    bits: int,
    seed: int = 0,
    *,
    epochs: int = 5,
    batch_size: int = 256,
    learning_rate: float = 1e-3,
    lam: float = 1.0,
    max_train_rows: int | None = 100000,
    show_progress: bool | None = None,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32], float]:
    """Train the binarizing autoencoder; return ``(W, s, mean, scale)``.

    Model (SPEC section 4): inputs are centred and scaled into [-1, 1] (one global
    scale, which keeps the geometry); code ``b = Heaviside(W x)`` (``W`` is ``bits x n``);
    reconstruction ``x_hat = tanh(W^T b + s)``. Loss per batch: mean over rows of
    ``||x_hat - x||^2`` plus ``lam / 2 * ||W^T W - I||_F^2``. The Heaviside has no
    gradient, but ``W`` is shared by encoder and decoder, so the gradient through the
    decoder moves the encoder's hyperplanes too; codes are recomputed every batch.
    Optimiser: Adam (beta1 0.9, beta2 0.999). ``W`` starts as a random matrix with
    orthonormal columns (rows if bits < n). Deterministic given ``seed``.
    """
    xc, mean = centre(x)
    scale = float(np.abs(xc).max()) or 1.0
    rng = np.random.default_rng([seed, 3])
    train = xc[_sample_rows(xc.shape[0], max_train_rows, rng)] / np.float32(scale)
    n = train.shape[1]
    w = _random_orthonormal(bits, n, rng).astype(np.float32)
    s = np.zeros(n, dtype=np.float32)
    eye = np.eye(n, dtype=np.float32)
    mw, vw = np.zeros_like(w), np.zeros_like(w)
    ms, vs = np.zeros_like(s), np.zeros_like(s)
    b1, b2, tiny = 0.9, 0.999, 1e-8
    steps_per_epoch = -(-train.shape[0] // batch_size)
    t = 0
    with progress(epochs * steps_per_epoch, f"training binary autoencoder ({bits} bits)", enabled=show_progress) as adv:
        for _ in range(epochs):
            perm = rng.permutation(train.shape[0])
            for start in range(0, train.shape[0], batch_size):
                xb = train[perm[start : start + batch_size]]
                code = (xb @ w.T > 0).astype(np.float32)  # (B, bits)
                xh = np.tanh(code @ w + s)
                delta = (2.0 / xb.shape[0]) * (xh - xb) * (1.0 - xh * xh)  # dL/dz, (B, n)
                gw = code.T @ delta + (2.0 * lam) * (w @ (w.T @ w - eye))
                gs = delta.sum(axis=0)
                t += 1
                for p, g, m1, m2 in ((w, gw, mw, vw), (s, gs, ms, vs)):
                    m1 *= b1
                    m1 += (1 - b1) * g
                    m2 *= b2
                    m2 += (1 - b2) * g * g
                    p -= learning_rate * (m1 / (1 - b1**t)) / (np.sqrt(m2 / (1 - b2**t)) + tiny)
                adv(1)
    return w, s, mean, scale


def autoencoder_codes(
    x: npt.ArrayLike,
    bits: int,
    seed: int = 0,
    *,
    show_progress: bool | None = None,
    **options: float | int | None,
) -> npt.NDArray[np.uint8]:
    """Codes of every row from :func:`train_autoencoder` (``options`` are its keywords)."""
    w, _s, mean, _scale = train_autoencoder(x, bits, seed, show_progress=show_progress, **options)  # type: ignore[arg-type]
    xc = np.asarray(x, dtype=np.float32) - mean
    return _pack_signs(xc, np.ascontiguousarray(w.T))
