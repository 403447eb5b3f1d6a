"""The calibration's shortcut for noise-then-nearest-word mechanisms (madlib): decode only what can change.

A calibration point privatizes the same reference tokens with the same random stream at every
epsilon (:mod:`deniable.calibrate.table`). For the multivariate Laplace mechanism that stream is a
direction ``u`` and a radius ``R`` per token, the noise at epsilon being ``u * R / epsilon``: token
``t``'s noisy vector ``v_t + (R_t / epsilon) u_t`` moves along one ray as epsilon changes. With an
exact nearest-word decode every word's cell (the points nearer to it than to any other word) is
convex, so:

- **bracketed**: if the token decodes to the same word ``w`` at two evaluated epsilons ``a < b``,
  both noisy vectors lie in ``w``'s cell, hence so does every point of the segment between them:
  the token decodes to ``w`` at every epsilon in between. Only the tokens whose decodes at the
  nearest evaluated epsilons on either side differ are decoded again.
- **self**: the segment from ``v_t`` (epsilon = infinity) to the noisy vector at an evaluated
  ``a``: a token released unchanged at ``a`` is released unchanged at every larger epsilon, where
  ``v_t`` decodes to ``t`` (checked once per distinct word; a duplicated vector may decode to
  another id).

Each is a proof in exact arithmetic. In floats, a token the shortcut settles has each cell
boundary at least as far from its noisy vector as from one of the two bracketing ones (the
distance to a hyperplane is linear along the segment), so it can differ from a direct decode
only where that bracketing decode was itself a tie within float rounding. Measured: the same
tables as decoding every token (``tests/test_calibrate_table.py``; GloVe's 5,000, 50,000 and
336,158 words, docs/calibration.md). The rows a pass of the grid leaves to decode are decoded in
one batch (:func:`evaluate_group`), so the decode's worker threads share them.

It applies, per point, only where all of this is checked: a uniform prior (the nearest-word
decode), an exact index (``ExactIndex`` or faiss ``IndexFlatL2``; an HNSW decode is not a
Voronoi partition and is decoded in full), and noise that is one fixed draw divided by epsilon
(compared with the first point's draws, relative 1e-9). Anything else privatizes in full.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ..mechanisms.base import Mechanism
    from .table import CalibrationPoint

__all__ = ["RayDecodes", "evaluate_group"]

#: Relative agreement required of ``noise(epsilon) * epsilon`` with the first point's (float64 rounding)
_RAY_RTOL = 1e-9


def _exact_decode(mech: Mechanism) -> bool:
    """Whether ``mech`` releases the exact nearest word of a noisy vector (prepares its decode)."""
    from ..index.exact import ExactIndex
    from ..index.faiss_index import FlatIndex

    if not (
        getattr(mech, "uniform_prior", False)
        and not getattr(mech, "joint_decode", True)
        and callable(getattr(mech, "batch_noisy", None))
        and callable(getattr(mech, "decode_texts", None))
    ):
        return False
    try:
        index = mech.search_index  # type: ignore[attr-defined]
    except AttributeError:
        return False
    return isinstance(index, ExactIndex | FlatIndex)


def _same_rows(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> bool:
    """Whether every row of ``a`` equals ``b``'s up to :data:`_RAY_RTOL` of its norm."""
    gap = np.linalg.norm(a - b, axis=1)
    return bool(np.all(gap <= _RAY_RTOL * np.linalg.norm(b, axis=1)))


@dataclass(frozen=True)
class _Pending:
    """A planned point: its epsilon, its outputs so far (-1: to decode), which tokens and their noisy rows."""

    epsilon: float
    out: npt.NDArray[np.int64]
    todo: npt.NDArray[np.intp]
    rows: npt.NDArray[np.float64]


@dataclass
class RayDecodes:
    """The outputs of the exact-decoded points so far, and how they bracket the next one."""

    ids: npt.NDArray[np.int64]
    ray: npt.NDArray[np.float64] | None = None  # noise * epsilon of the first point (one fixed draw)
    self_ok: npt.NDArray[np.bool_] | None = None  # per token: its own vector decodes to itself
    done: dict[float, npt.NDArray[np.int64]] = field(default_factory=dict)
    decoded: int = 0  # tokens decoded (statistics of the shortcut, for the log and the tests)
    settled: int = 0  # tokens settled by the shortcut

    def privatize(self, mech: Mechanism, generator: np.random.Generator) -> npt.NDArray[np.int64] | None:
        """``mech.privatize(self.ids, generator)``, decoding only the tokens the shortcut does not settle;
        None where the shortcut does not apply (the caller privatizes in full)."""
        pending = self.plan(mech, generator)
        return None if pending is None else self.finish([pending], mech)[0]

    def plan(self, mech: Mechanism, generator: np.random.Generator) -> _Pending | None:
        """What :meth:`privatize` would decode for ``mech`` (bracketed by the points already finished),
        holding only the rows to decode, not ``mech``; None where the shortcut does not apply."""
        if not _exact_decode(mech):
            return None
        m: Any = mech
        noisy = m.batch_noisy(self.ids, generator)  # what privatize decodes, all at once
        eps = float(mech.epsilon)
        scaled = (noisy - np.asarray(m.embedding.vectors[self.ids], dtype=np.float64)) * eps
        if self.ray is None:
            self.ray = scaled
        elif not _same_rows(scaled, self.ray):
            return None  # not one draw scaled by 1/epsilon: no ray to follow
        if self.self_ok is None:
            self.self_ok = self._self_decodes(mech)
        out = np.full(self.ids.size, -1, dtype=np.int64)
        known = sorted(self.done)
        at = bisect.bisect_left(known, eps)
        if at < len(known) and known[at] == eps:
            out[:] = self.done[eps]
        elif at > 0:  # the nearest finished smaller epsilon (more noise)
            lower = self.done[known[at - 1]]
            stays = self.self_ok & (lower == self.ids)
            out[stays] = self.ids[stays]
            if at < len(known):
                upper = self.done[known[at]]
                same = lower == upper
                out[same] = lower[same]
        todo = np.flatnonzero(out < 0)
        return _Pending(eps, out, todo, noisy[todo])

    def finish(self, pending: list[_Pending], decoder: Mechanism) -> list[npt.NDArray[np.int64]]:
        """The outputs of planned points, their rows decoded together by ``decoder`` (any of the planned
        mechanisms: the exact nearest-word decode of a row does not depend on epsilon): one decode of
        many rows keeps the decode's worker threads busy where each point has few."""
        m: Any = decoder
        rows = [p.rows for p in pending if p.todo.size]
        if rows:
            found = np.asarray(m.decode_texts(np.concatenate(rows), [0, sum(r.shape[0] for r in rows)]), np.int64)
            at = 0
            for p in pending:
                p.out[p.todo] = found[at : at + p.todo.size]
                at += p.todo.size
        for p in pending:
            self.decoded += int(p.todo.size)
            self.settled += int(self.ids.size - p.todo.size)
            self.done[p.epsilon] = p.out
        return [p.out.copy() for p in pending]

    def _self_decodes(self, mech: Mechanism) -> npt.NDArray[np.bool_]:
        m: Any = mech
        words, inverse = np.unique(self.ids, return_inverse=True)
        own = np.asarray(m.embedding.vectors[words], dtype=np.float64)
        found = np.asarray(m.decode_texts(own, [0, words.size]), dtype=np.int64)
        return np.asarray((found == words)[inverse.ravel()], dtype=bool)


def evaluate_group(
    group: Sequence[float],
    make: Callable[[float], Mechanism],
    evaluate: Callable[[Mechanism, npt.NDArray[np.int64] | None], CalibrationPoint],
    rays: RayDecodes | None,
    seed: int,
) -> list[CalibrationPoint]:
    """The calibration points of ``group`` (a pass of the grid): ``make(epsilon)`` builds each mechanism,
    ``evaluate(mech, outputs)`` measures it (``outputs`` None: it privatizes with the stream of ``seed``).
    Those ``rays`` applies to are bracketed by the points finished before and decoded together."""
    from ._common import statistics_generator

    out: list[CalibrationPoint] = []
    planned: list[_Pending] = []
    decoder = None
    for eps in group:
        mech = make(eps)
        pending = None if rays is None else rays.plan(mech, statistics_generator(seed))
        if pending is None:
            out.append(evaluate(mech, None))
        else:
            planned.append(pending)
            decoder = mech  # one exact decode for the batch (the others are dropped, their indexes too)
    if rays is not None and decoder is not None:
        for pending, found in zip(planned, rays.finish(planned, decoder), strict=True):
            out.append(evaluate(make(pending.epsilon), found))
    return out
