"""Word reconstruction: what share of the words an attacker who knows the mechanism recovers.

Attacker model (docs/attacker.md). It knows the mechanism and its parameters, the embedding and
a public prior over input words (:mod:`deniable.priors`); it reads one privatized
token ``y`` at a time and guesses the Bayes-optimal unigram answer

    guess(y) = argmax_{w in C} prior(w) * P(M(w) = y)

over a candidate vocabulary ``C`` (the ``candidates`` most probable words under the prior, by
default the whole vocabulary). The guess table depends on the mechanism, the prior and ``C``
only, never on the text under attack; the text is used only to score it.

Two ways to get ``P(M(w) = y)``:

- **exact** (mechanisms with ``has_distribution``: TEM, exponential, SanText(+), CusText(+),
  1-Diffractor; truncated Gumbel on request, its rows are slow): the rows of
  :meth:`Mechanism.distribution`, streamed in blocks. The share recovered is then an exact expectation over the noise:
  ``sum_t P(guess(M(x_t)) = x_t) / N`` over the text's tokens ``x_t``.
- **sampled** (madlib, Mahalanobis, Vickrey, BRR, truncated Gumbel by default): ``draws`` outputs per candidate word fit
  a table of counts; the guess table takes the argmax of ``prior(w) * (count(w, y) + s m(y))``
  (``s = smoothing`` pseudo-draws spread as the pooled output frequency ``m``). It is scored
  on ``draws`` *independent* outputs per word of the text (``recovered``, the held-out
  score: the success of an attacker that exists, so a valid lower bound on what the best one
  achieves) and on its own fitting draws (``recovered_insample``: optimistic, the table was
  chosen to fit those draws). The truth lies between; more fitting draws narrow the bracket.

Reported per group of tokens (:data:`GROUPS`): ``all`` in-vocabulary tokens; ``content``:
outside the ``content_rank`` most frequent words (embedding row order: GloVe is frequency
ordered); ``rare``: outside the ``rare_rank`` most frequent; ``name``: written with a capital
letter where no sentence starts (the first word of a text or after ``.``, ``!``, ``?``: the
tokenizer's :data:`~deniable.text.SENTENCE_END`), i.e. name-like. Beside each, ``unchanged``:
the share released as itself. Out-of-vocabulary tokens are left out (counted in the settings).

Intervals (95%): the Wilson interval over the group's ``N`` tokens (what a text like this one
would see: token sampling and one noise draw per token), widened on either side by 1.96 times
the estimator's own noise standard error (sampled only, ``noise_se``: finite draws, given the
text).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._validation import check_choice, check_int
from ..calibrate.recovery import (  # the exact attacker, shared with the calibration (moved there)
    CONTENT_RANK,
    SAMPLED_BY_DEFAULT,
    _block,  # noqa: F401 (re-exported: experiments.contextual imports it from here)
    _candidates,
    _dense_rows,  # noqa: F401 (re-exported, likewise)
    exact_guess_table,
    exact_rates,
)
from ..embedding import Embedding, Vocabulary
from ..mechanisms.base import Mechanism
from ..priors import Prior, make_prior
from ..text import SENTENCE_END
from .data import TaskData
from .harness import EvaluationConfig, truncate_words
from .results import ExperimentRandomness, Results, format_interval, write_files

__all__ = [
    "GROUPS",
    "METHODS",
    "GroupScore",
    "ReconstructionResult",
    "TokenSample",
    "attack_texts",
    "exact_guess_table",
    "reconstruction_attack",
    "reconstruction_evaluation",
    "run_reconstruction",
    "sampled_guess_table",
    "write_reconstruction_results",
]

#: Token groups reported: all, content words, rare words, name-like tokens
GROUPS = ("all", "content", "rare", "name")
#: ``method``: auto (exact where the mechanism has ``distribution()``), exact, sampled
METHODS = ("auto", "exact", "sampled")
#: Defaults: content words lie outside the 200 most frequent words (CONTENT_RANK, with SAMPLED_BY_DEFAULT
#: from deniable.calibrate.recovery), rare ones outside 20,000
RARE_RANK = 20_000
#: Draws per privatize call (memory of the sampled estimator)
_CHUNK_DRAWS = 1 << 21
_Z = 1.959963984540054


# ----------------------------------------------------------------------------- tokens
@dataclass(frozen=True, eq=False)
class TokenSample:
    """The in-vocabulary tokens of a text collection: ``ids`` and which are name-like (``name``)."""

    ids: npt.NDArray[np.int64]
    name: npt.NDArray[np.bool_]
    oov: int = 0

    @classmethod
    def from_texts(cls, texts: Sequence[str], vocab: Vocabulary) -> TokenSample:
        """Tokenize ``texts`` with the embedding's tokenizer; keep the tokens of the vocabulary."""
        doc = vocab.tokenizer.tokenize(texts)
        before = [sep for p in doc.parts for sep in p[0:-1:2]]  # the separator before each word
        ends = {s: SENTENCE_END.search(s) is not None for s in set(before)}
        start = np.fromiter(map(ends.__getitem__, before), dtype=bool, count=len(before))
        firsts = doc.offsets[:-1][doc.offsets[1:] > doc.offsets[:-1]]
        start[firsts] = True
        capital = np.fromiter((t[:1].isupper() for t in doc.tokens), dtype=bool, count=len(doc.tokens))
        known = doc.known
        return cls(doc.ids[known], (capital & ~start)[known], int((~known).sum()))

    @classmethod
    def from_ids(cls, ids: npt.ArrayLike, vocab: Vocabulary) -> TokenSample:
        """Tokens given as vocabulary ids (none name-like)."""
        arr = vocab.check_ids(ids).ravel()
        return cls(arr, np.zeros(arr.size, dtype=bool))

    def __len__(self) -> int:
        return int(self.ids.size)

    def groups(self, content_rank: int = CONTENT_RANK, rare_rank: int = RARE_RANK) -> dict[str, npt.NDArray[np.bool_]]:
        """A token mask per group of :data:`GROUPS`."""
        return {
            "all": np.ones(self.ids.size, dtype=bool),
            "content": self.ids >= content_rank,
            "rare": self.ids >= rare_rank,
            "name": self.name,
        }


# ----------------------------------------------------------------------------- guess tables
def _draw(
    mech: Mechanism, words: npt.NDArray[np.int64], draws: int, rng: np.random.Generator
) -> Iterator[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
    """``(row index into words, output)`` for ``draws`` outputs of each word, in chunks."""
    per = max(1, _CHUNK_DRAWS // draws)
    for a in range(0, len(words), per):
        block = words[a : a + per]
        rows = np.repeat(np.arange(a, a + len(block), dtype=np.int64), draws)
        yield rows, mech.privatize(np.repeat(block, draws), rng)


@dataclass(frozen=True, eq=False)
class SampledTable:
    """A guess table fitted on ``draws`` outputs per candidate, and its in-sample recovery per candidate."""

    guess: npt.NDArray[np.int64]
    candidates: npt.NDArray[np.int64]
    insample: npt.NDArray[np.float64]
    draws: int


def sampled_guess_table(
    mech: Mechanism,
    prior: Prior,
    *,
    draws: int = 1000,
    candidates: int | None = None,
    smoothing: float = 0.0,
    rng: np.random.Generator,
) -> SampledTable:
    """The guess table fitted on ``draws`` privatized outputs of each candidate word (module docstring).

    ``guess[y] = argmax_w prior(w) (count(w, y) + smoothing * m(y))`` with ``m`` the pooled output
    frequency of all fitting draws; an output never drawn gets the most probable candidate.
    """
    draws = check_int("draws", draws, minimum=1)
    if not (isinstance(smoothing, int | float) and math.isfinite(smoothing) and smoothing >= 0):
        raise InvalidParameterError("smoothing", smoothing, "a number >= 0")
    v = mech.embedding.size
    cand = _candidates(prior, candidates)
    keys, counts = _fit_counts(mech, cand, draws, rng)
    row, y = keys // v, keys % v
    pooled = np.bincount(y, weights=counts, minlength=v) / (len(cand) * draws)
    log_prior = prior.log()[cand]
    with np.errstate(divide="ignore"):
        score = log_prior[row] + np.log(counts + smoothing * pooled[y])
        fallback = log_prior[0] + np.log(smoothing * pooled)  # the top candidate where it has no count
    order = np.lexsort((row, -score, y))  # per output: best score first, ties to the more probable word
    y_sorted = y[order]
    first = order[np.r_[True, y_sorted[1:] != y_sorted[:-1]]]
    guess = np.full(v, cand[0], dtype=np.int64)
    best = np.full(v, -np.inf)
    best[y[first]] = score[first]
    guess[y[first]] = cand[row[first]]
    top_wins = fallback > best
    guess[top_wins] = cand[0]
    hit = guess[y] == cand[row]
    insample = np.bincount(row[hit], weights=counts[hit], minlength=len(cand)) / draws
    return SampledTable(guess, cand, insample, draws)


def _fit_counts(
    mech: Mechanism, cand: npt.NDArray[np.int64], draws: int, rng: np.random.Generator
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The fitting draws as sparse counts: keys ``row * V + y`` and how often each occurred."""
    v = mech.embedding.size
    keys, counts = [], []
    for rows, out in _draw(mech, cand, draws, rng):
        k, c = np.unique(rows * v + out, return_counts=True)  # distinct chunks never share a key
        keys.append(k)
        counts.append(c)
    return np.concatenate(keys), np.concatenate(counts).astype(np.float64)


def _sampled_rates(
    mech: Mechanism, guess: npt.NDArray[np.int64], types: npt.NDArray[np.int64], draws: int, rng: np.random.Generator
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per word of ``types``, from ``draws`` fresh outputs each: the share guessed right and the share unchanged."""
    rec = np.zeros(len(types))
    unch = np.zeros(len(types))
    for rows, out in _draw(mech, types, draws, rng):
        truth = types[rows]
        rec += np.bincount(rows, weights=guess[out] == truth, minlength=len(types))
        unch += np.bincount(rows, weights=out == truth, minlength=len(types))
    return rec / draws, unch / draws


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class GroupScore:
    """One group's shares: ``n`` tokens; each share as ``(value, noise_se)``."""

    n: int
    unchanged: tuple[float, float]
    recovered: tuple[float, float]
    recovered_insample: tuple[float, float] | None = None

    @staticmethod
    def interval(value: float, noise_se: float, n: int) -> tuple[float, float]:
        """Wilson 95% over ``n`` tokens, widened by ``1.96 * noise_se`` on either side, clipped to [0, 1]."""
        if n == 0 or math.isnan(value):
            return math.nan, math.nan
        z2 = _Z * _Z
        centre = (value + z2 / (2 * n)) / (1 + z2 / n)
        half = _Z * math.sqrt(value * (1 - value) / n + z2 / (4 * n * n)) / (1 + z2 / n)
        return max(0.0, centre - half - _Z * noise_se), min(1.0, centre + half + _Z * noise_se)


@dataclass(frozen=True)
class ReconstructionResult:
    """What :func:`reconstruction_attack` measured: ``method`` ("exact" / "sampled"), a :class:`GroupScore` per
    group, and the per-word rates behind them (``types``: the distinct words of the text, ``counts``)."""

    mechanism: str
    epsilon: float
    method: str
    prior: str
    draws: int | None
    groups: dict[str, GroupScore]
    types: npt.NDArray[np.int64] = field(repr=False)
    recovered_by_type: npt.NDArray[np.float64] = field(repr=False)
    unchanged_by_type: npt.NDArray[np.float64] = field(repr=False)


def _score(
    tokens: TokenSample,
    types: npt.NDArray[np.int64],
    inverse: npt.NDArray[np.int64],
    rates: Mapping[str, tuple[npt.NDArray[np.float64], int | None]],
    masks: Mapping[str, npt.NDArray[np.bool_]],
) -> dict[str, GroupScore]:
    out = {}
    for g, mask in masks.items():
        n = int(mask.sum())
        counts = np.bincount(inverse[mask], minlength=len(types)).astype(np.float64)
        vals: dict[str, tuple[float, float]] = {}
        for metric, (rate, draws) in rates.items():
            if n == 0:
                vals[metric] = (math.nan, math.nan)
                continue
            value = float(counts @ rate / n)
            se = 0.0 if draws is None else math.sqrt(float((counts**2) @ (rate * (1 - rate))) / draws) / n
            vals[metric] = (value, se)
        out[g] = GroupScore(n, vals["unchanged"], vals["recovered"], vals.get("recovered_insample"))
    return out


def reconstruction_attack(
    mechanism: Mechanism,
    tokens: TokenSample,
    prior: str | Prior = "zipf",
    *,
    method: str = "auto",
    draws: int = 1000,
    score_draws: int | None = None,
    candidates: int | None = None,
    smoothing: float = 0.0,
    content_rank: int = CONTENT_RANK,
    rare_rank: int = RARE_RANK,
    random_state: int | np.random.Generator | None = None,
) -> ReconstructionResult:
    """The unigram Bayes attacker on ``tokens`` (module docstring): shares recovered and unchanged per group.

    ``method="auto"`` is exact where ``mechanism.has_distribution`` (but for :data:`SAMPLED_BY_DEFAULT`),
    sampled otherwise; ``draws``
    (sampled) outputs per candidate word fit the guess table and ``score_draws`` (default: as many) per
    word of the text score it; ``random_state`` seeds the draws (an evaluation: nothing is released).
    """
    check_choice("method", method, METHODS)
    vocab = mechanism.embedding
    pri = make_prior(prior, vocab)
    if len(tokens) == 0:
        raise InvalidParameterError("tokens", 0, "at least one token of the embedding's vocabulary")
    check_int("content_rank", content_rank, minimum=0)
    check_int("rare_rank", rare_rank, minimum=0)
    exact = method == "exact" or (
        method == "auto" and mechanism.has_distribution and mechanism.name not in SAMPLED_BY_DEFAULT
    )
    types, inverse = np.unique(tokens.ids, return_inverse=True)
    rates: dict[str, tuple[npt.NDArray[np.float64], int | None]]
    if exact:
        guess = exact_guess_table(mechanism, pri, candidates)
        rec, unch = exact_rates(mechanism, guess, types)
        rates = {"unchanged": (unch, None), "recovered": (rec, None)}
    else:
        rng = (
            random_state
            if isinstance(random_state, np.random.Generator)
            else ExperimentRandomness.from_random_state(random_state).generator(0)
        )
        table = sampled_guess_table(mechanism, pri, draws=draws, candidates=candidates, smoothing=smoothing, rng=rng)
        scoring = draws if score_draws is None else check_int("score_draws", score_draws, minimum=1)
        rec, unch = _sampled_rates(mechanism, table.guess, types, scoring, rng)
        insample = np.zeros(vocab.size)
        insample[table.candidates] = table.insample
        rates = {
            "unchanged": (unch, scoring),
            "recovered": (rec, scoring),
            "recovered_insample": (insample[types], draws),
        }
    groups = _score(tokens, types, inverse, rates, tokens.groups(content_rank, rare_rank))
    return ReconstructionResult(
        mechanism.name,
        float(mechanism.epsilon),
        "exact" if exact else "sampled",
        pri.source,
        None if exact else draws,
        groups,
        types,
        rec,
        unch,
    )


def reconstruction_evaluation(
    texts: Sequence[str],
    embedding: Vocabulary,
    mechanisms: Mapping[str, Callable[[Embedding, float], Mechanism]],
    epsilons: Sequence[float],
    *,
    prior: str | Prior = "zipf",
    method: str = "auto",
    draws: int = 1000,
    candidates: int | None = None,
    smoothing: float = 0.0,
    corpus: str = "texts",
    random_state: int | np.random.Generator | None = None,
    log: Callable[[str], None] | None = None,
) -> Results:
    """:func:`reconstruction_attack` for every mechanism and epsilon on the tokens of ``texts``.

    Returns :class:`~deniable.experiments.results.Results` with the setting columns ``mechanism``,
    ``epsilon``, ``group`` and the metrics ``unchanged``, ``recovered`` and (sampled)
    ``recovered_insample``, each with its interval, ``n_tokens``, ``method`` and ``noise_se``.
    """
    pri = make_prior(prior, embedding)  # once: a counts file is read once
    tokens = TokenSample.from_texts(texts, embedding)
    randomness = ExperimentRandomness.from_random_state(random_state)
    rows: list[dict[str, Any]] = []
    for i, (name, factory) in enumerate(mechanisms.items()):
        for j, eps in enumerate(epsilons):
            mech = factory(Embedding.check(embedding), eps)
            res = reconstruction_attack(
                mech,
                tokens,
                pri,
                method=method,
                draws=draws,
                candidates=candidates,
                smoothing=smoothing,
                random_state=randomness.generator(i, j),
            )
            if log is not None:
                log(f"{name} eps={eps:g}: {res.method}, recovered {res.groups['all'].recovered[0]:.3f}")
            for g, score in res.groups.items():
                metrics = {"unchanged": score.unchanged, "recovered": score.recovered}
                if score.recovered_insample is not None:
                    metrics["recovered_insample"] = score.recovered_insample
                for metric, (value, se) in metrics.items():
                    lo, hi = GroupScore.interval(value, se, score.n)
                    rows.append(
                        {
                            "mechanism": name,
                            "epsilon": float(eps),
                            "group": g,
                            "repeat": 0,
                            "metric": metric,
                            "value": value,
                            "ci_low": lo,
                            "ci_high": hi,
                            "n_tokens": score.n,
                            "method": res.method,
                            "noise_se": se,
                        }
                    )
    settings = {
        "attack": "reconstruction",
        "corpus": corpus,
        "tokens": len(tokens),
        "oov_tokens_left_out": tokens.oov,
        "embedding": embedding.name,
        "vocabulary": embedding.size,
        "prior": pri.source,
        "method": method,
        "draws": draws,
        "candidates": candidates if candidates is not None else embedding.size,
        "smoothing": smoothing,
        "content_rank": CONTENT_RANK,
        "rare_rank": RARE_RANK,
        "random_state": randomness.entropy,
    }
    return Results(
        f"{corpus} word reconstruction",
        ("mechanism", "epsilon", "group"),
        rows,
        settings=settings,
        notes=[
            "recovered: share of tokens a unigram Bayes attacker (knows the mechanism, the embedding and a "
            f"public prior, {pri.source}) guesses right; exact from distribution(), or (sampled) a guess table "
            "fitted on independent draws (held-out: a lower bound); recovered_insample: scored on its own "
            "fitting draws (optimistic); unchanged: released as itself",
            f"groups: all in-vocabulary tokens; content: outside the {CONTENT_RANK} most frequent words; rare: "
            f"outside the {RARE_RANK:,} most frequent; name: capitalized where no sentence starts",
        ],
        own_interval="Wilson over tokens (+ the estimator's noise)",
    )


def write_reconstruction_results(result: Results, folder: str | Path, *, command: str = "") -> dict[str, Path]:
    """results.csv (one row per setting and metric), results.md and settings.json."""
    table: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in result.rows:
        key = (r["mechanism"], r["epsilon"], r["group"])
        row = table.setdefault(key, {"method": r["method"], "n": r["n_tokens"]})
        row[r["metric"]] = format_interval(r["value"], r["ci_low"], r["ci_high"])
    md = [f"# {result.name}", ""]
    md += [f"- {n}" for n in result.notes]
    md += [
        "",
        "| mechanism | epsilon | method | group | N | unchanged | recovered | recovered in-sample |",
        "|---|---:|---|---|---:|---|---|---|",
    ]
    for (mech, eps, group), vals in table.items():
        md.append(
            f"| {mech} | {eps:g} | {vals['method']} | {group} | {vals['n']:,} | {vals.get('unchanged', '')} | "
            f"{vals.get('recovered', '')} | {vals.get('recovered_insample', '')} |"
        )
    settings = dict(result.settings)
    if command:
        settings["command"] = command
    cols = [
        "mechanism",
        "epsilon",
        "group",
        "metric",
        "value",
        "ci_low",
        "ci_high",
        "n_tokens",
        "method",
        "noise_se",
    ]
    return write_files(
        folder,
        tables={"results.csv": (result.rows, cols)},
        texts={"results.md": "\n".join(md)},
        json_files={"settings.json": settings},
    )


def attack_texts(task: TaskData, *, size: int | None = None, max_words: int | None = None, seed: int = 0) -> list[str]:
    """The texts a reconstruction attack is scored on: the task's training side (a ranking task: its
    questions and answers), ``size`` of them drawn at random (``seed``: a data split), each cut after
    ``max_words`` words."""
    side = task.train
    texts = list(side.texts) if task.kind == "classification" else [*side.questions, *side.answers]
    if size is not None and size < len(texts):
        keep = np.sort(np.random.default_rng(seed).permutation(len(texts))[: check_int("train_size", size)])
        texts = [texts[i] for i in keep.tolist()]
    return truncate_words(texts, max_words) if max_words is not None else texts


def run_reconstruction(
    task: TaskData,
    embedding: Vocabulary,
    cfg: EvaluationConfig,
    *,
    prior: str | Prior = "zipf",
    draws: int = 1000,
    candidates: int | None = None,
    log: Callable[[str], None] | None = None,
) -> Results:
    """``deniable evaluate --attack reconstruction``: :func:`reconstruction_evaluation` on ``task``'s training
    texts (``cfg.train_size`` of them, cut at ``cfg.max_words``) for ``cfg``'s mechanisms and epsilons."""
    texts = attack_texts(task, size=cfg.train_size, max_words=cfg.max_words)
    return reconstruction_evaluation(
        texts,
        embedding,
        cfg.mechanisms,
        cfg.epsilons,
        prior=prior,
        draws=draws,
        candidates=candidates,
        corpus=task.name,
        random_state=cfg.random_state,
        log=log,
    )
