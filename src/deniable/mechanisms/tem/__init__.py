"""The Truncated Exponential Mechanism (TEM, SPEC section 3; seed 004), exact and fast.

For an input word ``w`` with ``a = epsilon / 2``::

    Pr[M(w) = y]  ∝  exp(-a * min(d(w, y), gamma))

i.e. ``exp(-a d)`` inside the ball ``L_w = {y : d(w, y) <= gamma}`` and the constant
``exp(-a gamma)`` outside it (the bottom element of the paper, whose probability is
shared uniformly by the words outside). This is ``epsilon * d``-private for any metric
``d`` and any ``gamma``.

Sampling is exact in every regime (see docs/tem.md for the proofs); for each distinct
word of a batch one of three exact samplers is used:

1. **table** (Appendix B): ``L_w`` with exact distances is kept (in-memory LRU of this
   process only: nothing derived from the input is written to disk); a token costs one
   inverse-CDF lookup (``searchsorted`` on the cumulative weights) and, for the bottom
   element, a uniform word outside ``L_w`` drawn by rejection from the vocabulary.
2. **uniform rejection**: propose ``y`` uniformly from the vocabulary, accept with
   probability ``exp(-a min(d, gamma))`` (the envelope is the maximum weight 1). Used
   when the acceptance rate measured on the batch is high (small epsilon), it needs no
   pre-computation at all; tokens not accepted within a bounded number of rounds fall
   through to 3 or 1.
3. **shells**: one float32 pass over the vocabulary gives proven lower bounds
   ``lb(y) <= d(w, y)``; words are grouped into shells ``k = floor(a min(lb, gamma) / h)``
   with envelope weight ``exp(-h k) >= exp(-a min(d, gamma))``; a token picks a shell by
   its envelope mass, a uniform member, and is accepted with probability
   ``exp(-a min(d, gamma) + h k) >= exp(-h - slack)``. Used when ``L_w`` is too large
   to store (small epsilon or large gamma): no exponential over the whole vocabulary.

The k-NN envelope tables of the whole vocabulary can be prepared once
(:func:`deniable.prepare`, ``deniable prepare --mechanism tem``): they depend on
the embedding and the metric only, are memory-mapped, and are used automatically
(the k-NN envelope sampler). With them, every token first tries "self first": its word's
weight in the envelope is exactly 1, so ``u ~ U[0, total)`` below 1 returns the word from
the envelope total alone (prepared per epsilon with ``deniable prepare -m tem -e EPS``,
else memoized per process); the other tokens continue that same attempt.
``history_free=True`` (for long-lived services) keeps no per-word state between calls
and samples data-obliviously (:mod:`._oblivious`: the same work for every token, so
the time of a call depends on its token count and the configuration only).

Every probability is computed from :meth:`._geometry.Geometry.exact` (float64 distances by
differences), the same function :meth:`TruncatedExponential.compact_distribution`
uses, so the sampled distribution is the stated one (up to float64 rounding).

The modules, each importing only those above it in this list:

- :mod:`._shared`: the table type and small helpers of the builds (no other TEM module);
- :mod:`._geometry`: distances (exact and screened) and THE arithmetic of the distribution;
- :mod:`._tables`: the in-memory LRU of tables and the prepared k-NN tables (kind ``tem-knn``);
- :mod:`._far`: the prepared far bounds of every word to every cluster (kind ``tem-far``);
- :mod:`._envelope`: the k-NN envelope at one epsilon (its masses, costs and far layouts);
- :mod:`._totals`: every word's envelope total, prepared (kind ``tem-totals``) or memoized;
- :mod:`._sampler`: the batched k-NN envelope sampler;
- :mod:`._lazy`: the lazy per-word path (ball tables, uniform rejection, shells);
- :mod:`._self_first`: the fastest sampler (self test first), not history-free;
- :mod:`._oblivious`: the history-free, data-oblivious sampler;
- :mod:`._mechanism`: :class:`TruncatedExponential`, which reads the others (importing it
  registers the three artefact kinds with the store).

Only the names below are public.
"""

from __future__ import annotations

from ._mechanism import CompactDistribution, TruncatedExponential, theorem3_gamma

__all__ = ["CompactDistribution", "TruncatedExponential", "theorem3_gamma"]
