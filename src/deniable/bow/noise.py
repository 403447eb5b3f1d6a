"""Two-sided geometric noise and the ``(N, eps)``-LPLP guarantee (SPEC section 6, seed 002).

The two-sided geometric distribution with parameter ``alpha`` in (0, 1) is

    Pr[K = k] = (1 - alpha) / (1 + alpha) * alpha^|k|,   k in Z.

With ``alpha = exp(-eps / N)``, adding independent draws to every coordinate of a
count vector ``y`` gives ``(N, eps)``-limited-precision local privacy: for every
output ``z`` and ``y, y'`` with ``||y - y'||_1 <= N``,

    log Pr[z | y] - log Pr[z | y'] = (eps / N) * sum_i (|z_i - y'_i| - |z_i - y_i|)
                                   <= (eps / N) * ||y - y'||_1 <= eps

(triangle inequality per coordinate; equality when every ``z_i`` lies beyond both
``y_i`` and ``y'_i`` on the side of ``y_i``). Sets of outputs follow by summing.

Sampling is exact on the integers: ``K = G1 - G2`` with ``G1, G2`` independent
geometric variables with success probability ``1 - alpha`` (the difference of two
i.i.d. geometrics is two-sided geometric), drawn from the caller's generator — by
default the same ChaCha20 generator keyed from the OS as the word mechanisms. It is
not a rounded continuous Laplace (whose rounding would be a different, unanalysed
distribution). numpy draws a geometric from one double: by sequential search of
the cdf with a uniform ``U`` when ``p = 1 - alpha >= 1/3`` (``eps / N >= log 1.5``), else
by inversion of an exponential ``E`` (``ceil(E / -log(alpha))``), so each probability
is exact up to double rounding (~1e-16) — and the output is an integer, so no
low-order floating-point bits of the noise are ever released (the Mironov 2012 attack
on float Laplace does not apply).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._random import check_random_state
from .._validation import check_epsilon, check_positive

__all__ = [
    "MIN_RATE",
    "TwoSidedGeometric",
    "lplp_alpha",
    "lplp_max_log_ratio",
    "lplp_privacy_loss",
    "sample_two_sided_geometric",
    "two_sided_geometric_logpmf",
    "two_sided_geometric_pmf",
]

#: Smallest ``eps / N`` accepted: below it the noise (standard deviation ~ sqrt(2) * N / eps
#: > 1.4 million per coordinate) destroys every count and risks integer overflow.
MIN_RATE = 1e-6


def _check_alpha(alpha: float) -> float:
    a = float(alpha)
    if isinstance(alpha, bool) or not (0.0 < a < 1.0) or not math.isfinite(a):
        raise InvalidParameterError("alpha", alpha, "a number in (0, 1)")
    return a


def lplp_alpha(epsilon: float, precision: float) -> float:
    """``alpha = exp(-epsilon / precision)``: the noise parameter for ``(N, eps)``-LPLP."""
    eps = check_epsilon(epsilon)
    n = check_positive("precision", precision)
    return math.exp(-eps / n)


def two_sided_geometric_logpmf(k: npt.ArrayLike, alpha: float) -> npt.NDArray[np.float64]:
    """``log Pr[K = k]`` for integer ``k`` (computed in log space, stable for alpha near 0 or 1)."""
    a = _check_alpha(alpha)
    kk = np.abs(np.asarray(k, dtype=np.float64))
    return math.log1p(-a) - math.log1p(a) + kk * math.log(a)


def two_sided_geometric_pmf(k: npt.ArrayLike, alpha: float) -> npt.NDArray[np.float64]:
    """``Pr[K = k] = (1 - alpha) / (1 + alpha) * alpha^|k|``."""
    return np.exp(two_sided_geometric_logpmf(k, alpha))


def sample_two_sided_geometric(
    size: int | tuple[int, ...],
    rng: np.random.Generator,
    *,
    alpha: float | None = None,
    rate: float | None = None,
) -> npt.NDArray[np.int64]:
    """Draws of the two-sided geometric distribution, exactly on the integers.

    Give either ``alpha`` in (0, 1) or ``rate = -log(alpha) = eps / N`` (more precise
    when alpha is very close to 1). ``K = G1 - G2`` with ``G1, G2 ~ Geometric(1 - alpha)``.
    """
    if (alpha is None) == (rate is None):
        raise InvalidParameterError("alpha/rate", (alpha, rate), "exactly one of alpha and rate")
    if rate is None:
        a = _check_alpha(alpha)  # type: ignore[arg-type]
        p = 1.0 - a
    else:
        r = check_positive("rate", rate)
        p = -math.expm1(-r)  # 1 - exp(-r) without cancellation
    if p >= 1.0:  # alpha underflows to 0: the noise is exactly 0 in double precision
        return np.zeros(size, dtype=np.int64)
    g1 = rng.geometric(p, size=size)
    g2 = rng.geometric(p, size=size)
    return (g1 - g2).astype(np.int64, copy=False)


def lplp_privacy_loss(y: npt.ArrayLike, y2: npt.ArrayLike, epsilon: float, precision: float) -> float:
    """The exact worst-case privacy loss ``max_z log(Pr[z|y] / Pr[z|y2]) = eps/N * ||y - y2||_1``."""
    eps = check_epsilon(epsilon)
    n = check_positive("precision", precision)
    a = np.asarray(y, dtype=np.float64)
    b = np.asarray(y2, dtype=np.float64)
    if a.shape != b.shape:
        raise InvalidParameterError("y2", f"shape {b.shape}", f"the shape of y, {a.shape}")
    return float(eps / n * np.abs(a - b).sum())


def lplp_max_log_ratio(
    y: npt.ArrayLike,
    y2: npt.ArrayLike,
    epsilon: float,
    precision: float,
    *,
    margin: int = 3,
) -> float:
    """``max_z log Pr[z | y] - log Pr[z | y2]``, evaluated from the pmf by enumeration.

    The output density is a product over coordinates, so the log ratio is a sum of
    per-coordinate terms and its maximum over all ``z`` is the sum of the
    per-coordinate maxima. Each coordinate's term is piecewise linear in ``z_i`` and
    constant outside ``[min(y_i, y2_i), max(y_i, y2_i)]``, so enumerating
    ``z_i`` over that interval widened by ``margin`` finds the maximum exactly. Used by
    the tests to check the LPLP inequality from the pmf, independently of the closed
    form :func:`lplp_privacy_loss`.
    """
    alpha = lplp_alpha(epsilon, precision)
    a = np.asarray(y, dtype=np.int64).ravel()
    b = np.asarray(y2, dtype=np.int64).ravel()
    if a.shape != b.shape:
        raise InvalidParameterError("y2", f"shape {b.shape}", f"the shape of y, {a.shape}")
    total = 0.0
    for ai, bi in zip(a.tolist(), b.tolist(), strict=True):  # one small grid per coordinate
        z = np.arange(min(ai, bi) - margin, max(ai, bi) + margin + 1)
        ratio = two_sided_geometric_logpmf(z - ai, alpha) - two_sided_geometric_logpmf(z - bi, alpha)
        total += float(ratio.max())
    return total


@dataclass(frozen=True)
class TwoSidedGeometric:
    """The ``(N, eps)``-LPLP mechanism: two-sided geometric noise on every coordinate.

    Parameters
    ----------
    epsilon
        Privacy parameter (> 0).
    precision
        ``N`` (> 0): documents whose count vectors differ by at most ``N`` in l1
        distance (e.g. ``N`` word insertions/deletions, or ``N/2`` substitutions) are
        ``eps``-indistinguishable. Larger differences are protected with
        ``eps * ||y - y'||_1 / N``, i.e. less and less.
    clamp
        Replace negative noisy counts by 0 (post-processing: keeps the guarantee).
    """

    epsilon: float
    precision: float = 1.0
    clamp: bool = False

    def __post_init__(self) -> None:
        eps = check_epsilon(self.epsilon)
        n = check_positive("precision", self.precision)
        if eps / n < MIN_RATE:
            raise InvalidParameterError(
                "epsilon/precision",
                eps / n,
                f"at least {MIN_RATE:g} (smaller values give noise with standard deviation over a million per count)",
            )
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "precision", n)
        object.__setattr__(self, "clamp", bool(self.clamp))

    @property
    def rate(self) -> float:
        """``eps / N = -log(alpha)``."""
        return self.epsilon / self.precision

    @property
    def alpha(self) -> float:
        """``exp(-eps / N)``."""
        return math.exp(-self.rate)

    @property
    def noise_std(self) -> float:
        """Standard deviation of one coordinate's noise: ``sqrt(2 alpha) / (1 - alpha)``."""
        a = self.alpha
        return math.sqrt(2.0 * a) / -math.expm1(-self.rate) if a > 0 else 0.0

    @property
    def expected_abs_noise(self) -> float:
        """``E|K| = 2 alpha / (1 - alpha^2)`` per coordinate."""
        a = self.alpha
        return 2.0 * a / -math.expm1(-2.0 * self.rate) if a > 0 else 0.0

    def noise(self, shape: int | tuple[int, ...], rng: np.random.Generator | None = None) -> npt.NDArray[np.int64]:
        """Raw noise of the given shape (``rng=None``: a fresh secure generator)."""
        return sample_two_sided_geometric(shape, check_random_state(rng), rate=self.rate)

    def privatize(self, counts: npt.ArrayLike, rng: np.random.Generator | None = None) -> npt.NDArray[np.int64]:
        """Noisy counts: ``counts + K`` on every coordinate (a dense int64 array), clamped if asked.

        ``counts`` may be a dense array or a scipy sparse matrix; the result is always
        dense because every coordinate, zeros included, receives noise.
        """
        import scipy.sparse as sp

        dense = counts.toarray() if sp.issparse(counts) else np.asarray(counts)  # type: ignore[union-attr]
        if dense.dtype.kind not in "iu":
            raise InvalidParameterError("counts", f"dtype {dense.dtype}", "integer counts")
        out = dense.astype(np.int64) + self.noise(dense.shape, rng)
        if self.clamp:
            np.maximum(out, 0, out=out)
        return out

    def guarantee(self, y: npt.ArrayLike, y2: npt.ArrayLike) -> float:
        """The privacy loss bound between two count vectors: ``eps * ||y - y2||_1 / N``."""
        return lplp_privacy_loss(y, y2, self.epsilon, self.precision)

    def describe(self) -> str:
        """One line for logs and release metadata."""
        return (
            f"two-sided geometric noise, (N={self.precision:g}, eps={self.epsilon:g})-LPLP, "
            f"alpha=exp(-eps/N)={self.alpha:.6g}, noise std {self.noise_std:.3g} per coordinate"
            + (", clamped at 0" if self.clamp else "")
        )
