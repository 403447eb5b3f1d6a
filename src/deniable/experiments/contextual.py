"""The contextual reconstruction attacker: the unigram attacker's candidates, decoded jointly with a public n-gram.

Attacker model (docs/attacker.md): as the unigram attacker (:mod:`.reconstruction`) it knows the
mechanism, its parameters, the embedding and a public prior; it also holds a word bigram model
(:mod:`deniable.ngram`) trained on a public text that is **not** the attacked text. It reads a whole
privatized text ``y_1..y_n`` and

1. keeps, per token, the ``k`` words with the highest unigram posterior ``prior(w) P(y_t | w)``
   (exact rows of ``distribution()`` where the mechanism has them; for a sampled mechanism the
   count table fitted on draws independent of the attacked outputs, smoothed by ``smoothing``
   pseudo-draws spread as the pooled output frequency), plus ``<unk>`` (a word outside the
   vocabulary, released as a uniformly random word: ``P(y | <unk>) = 1 / V``, ``--oov random``);
2. decodes the text as a hidden Markov model (states: the candidates; transitions: the bigram;
   emissions: ``P(y_t | w)``): ``marginal`` (default: each token's most probable *word* given the
   whole text, forward-backward; the Bayes rule for the share of vocabulary tokens recovered, the
   score) or ``viterbi`` (the jointly most probable text; where it passes through ``<unk>``, the
   unigram guess). ``<unk>`` is never guessed: only vocabulary tokens are scored, and on IMDb with
   2,000 words (26% of the tokens outside) it would otherwise win most positions at small epsilon.

Both attackers are scored on the **same** single privatization of each token (one noise draw, as a
release would see): the unigram guess is the first candidate. The shares per group (all / content /
rare / name, as :mod:`.reconstruction`) get Wilson intervals over the group's tokens, and the gain
(contextual minus unigram) a paired normal interval over tokens.

The n-gram model must not have seen the attacked texts: :func:`contextual_attack` refuses when more
than :data:`MAX_OVERLAP` of them are lines of the model's training file (hashes stored in the model).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._validation import check_choice, check_int
from ..embedding import Embedding, Vocabulary
from ..mechanisms.base import Mechanism
from ..ngram import DECODERS, NgramModel, decode, line_hash
from ..priors import Prior, make_prior
from .data import TaskData
from .harness import EvaluationConfig, truncate_words
from .reconstruction import (
    CONTENT_RANK,
    METHODS,
    RARE_RANK,
    SAMPLED_BY_DEFAULT,
    GroupScore,
    TokenSample,
    _block,
    _candidates,
    _dense_rows,
    _fit_counts,
    attack_texts,
)
from .results import ExperimentRandomness, Results, format_interval, write_files

__all__ = [
    "ATTACKERS",
    "ContextualResult",
    "contextual_attack",
    "contextual_evaluation",
    "emission_candidates",
    "run_contextual",
    "write_contextual_results",
]

#: The attackers compared (the ``attacker`` column)
ATTACKERS = ("unigram", "contextual")
#: Candidates per token kept for the joint decode
DEFAULT_K = 20
#: Largest share of attacked texts that may be lines of the n-gram's training file
MAX_OVERLAP = 0.01
#: Tokens decoded at once (memory: a few hundred bytes per token and candidate)
_POSITIONS_PER_DECODE = 1 << 18
_Z = 1.959963984540054


@dataclass(frozen=True)
class TextTokens:
    """Every word token of a batch of texts, in order: ``ids`` (-1 outside the vocabulary), text ``offsets``,
    ``name`` (name-like, as :class:`~.reconstruction.TokenSample`) and each text's :func:`~deniable.ngram.line_hash`."""

    ids: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    name: npt.NDArray[np.bool_]
    hashes: npt.NDArray[np.int64]

    @classmethod
    def from_texts(cls, texts: Sequence[str], vocab: Vocabulary) -> TextTokens:
        doc = vocab.tokenizer.tokenize(texts)
        name = np.zeros(doc.ids.size, dtype=bool)
        name[doc.known] = TokenSample.from_texts(texts, vocab).name
        hashes = np.array([line_hash(t) for t in texts], dtype=np.int64)
        return cls(doc.ids, doc.offsets, name, hashes)

    @property
    def known(self) -> npt.NDArray[np.bool_]:
        return self.ids >= 0


def emission_candidates(
    mech: Mechanism,
    prior: Prior,
    outputs: npt.NDArray[np.int64],
    *,
    k: int = DEFAULT_K,
    exact: bool = True,
    draws: int = 1000,
    smoothing: float = 1.0,
    candidates: int | None = None,
    rng: np.random.Generator | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Per distinct output of ``outputs`` (sorted, distinct ids): the ``k`` words of highest ``prior(w) P(y | w)``
    (best first; ties: the more probable word under the prior) and their ``log P(y | w)``, shape ``(len(outputs), k)``.

    ``exact``: rows of ``distribution()``; else ``draws`` fitting outputs per candidate word drawn with ``rng``
    (independent of the attacked outputs), ``P(y | w) = (count(w, y) + smoothing m(y)) / (draws + smoothing)``.
    """
    cand = _candidates(prior, candidates)
    k = min(check_int("k", k, minimum=1), len(cand))
    v = mech.embedding.size
    n_y = len(outputs)
    log_prior = prior.log()
    best_w = np.zeros((0, n_y), dtype=np.int64)
    best_s = np.zeros((0, n_y))
    best_e = np.zeros((0, n_y))
    sparse = None
    if not exact:
        if rng is None:
            raise InvalidParameterError("rng", None, "a generator for the fitting draws")
        keys, counts = _fit_counts(mech, cand, check_int("draws", draws, minimum=1), rng)
        row, y = keys // v, keys % v
        pooled = np.bincount(y, weights=counts, minlength=v) / (len(cand) * draws)
        col = np.searchsorted(outputs, y)
        hit = (col < n_y) & (outputs[np.minimum(col, n_y - 1)] == y)
        sparse = (row[hit], col[hit], counts[hit], pooled[outputs])
    step = _block(max(v, n_y))  # rows of V probabilities (exact) or of n_y counts per block
    for a in range(0, len(cand), step):
        words = cand[a : a + step]
        if sparse is None:
            p = _dense_rows(mech, words)[:, outputs]
        else:
            row, col, cnt, pool = sparse
            p = np.zeros((len(words), n_y))
            sel = (row >= a) & (row < a + len(words))
            p[row[sel] - a, col[sel]] = cnt[sel]
            p = (p + smoothing * pool[None, :]) / (draws + smoothing)
        with np.errstate(divide="ignore"):
            e = np.log(p)
        s = e + log_prior[words][:, None]
        all_w = np.concatenate([best_w, np.broadcast_to(words[:, None], s.shape)])
        all_s = np.concatenate([best_s, s])
        all_e = np.concatenate([best_e, e])
        # best first; ties to the earlier row (the more probable word: candidates are in prior order)
        order = np.argsort(-all_s, axis=0, kind="stable")[:k]
        best_w = np.take_along_axis(all_w, order, axis=0)
        best_s = np.take_along_axis(all_s, order, axis=0)
        best_e = np.take_along_axis(all_e, order, axis=0)
    return best_w.T.copy(), best_e.T.copy()


@dataclass(frozen=True)
class ContextualResult:
    """What :func:`contextual_attack` measured: per attacker (:data:`ATTACKERS`) a :class:`GroupScore` per group
    (the same ``unchanged`` for both), and per group the paired gain ``(value, half-width of its 95% interval)``."""

    mechanism: str
    epsilon: float
    method: str
    decoder: str
    k: int
    groups: dict[str, dict[str, GroupScore]]
    gain: dict[str, tuple[float, float]]


def _text_chunks(offsets: npt.NDArray[np.int64], limit: int | None = None) -> list[tuple[int, int]]:
    """Consecutive text ranges ``[lo, hi)`` of at most ``limit`` tokens each (a longer text alone): decode memory."""
    limit = _POSITIONS_PER_DECODE if limit is None else limit
    chunks, lo, n = [], 0, len(offsets) - 1
    while lo < n:
        hi = max(int(np.searchsorted(offsets, offsets[lo] + limit, side="right")) - 1, lo + 1)
        chunks.append((lo, min(hi, n)))
        lo = min(hi, n)
    return chunks


def _check_overlap(tokens: TextTokens, model: NgramModel) -> None:
    if model.lines.size == 0 or tokens.hashes.size == 0:
        return
    share = float(np.isin(tokens.hashes, model.lines).mean())
    if share > MAX_OVERLAP:
        raise InvalidParameterError(
            "context",
            model.source or "n-gram model",
            f"a model trained on public text other than the attacked texts ({share:.0%} of them are its lines)",
        )


def contextual_attack(
    mechanism: Mechanism,
    tokens: TextTokens,
    model: NgramModel,
    prior: str | Prior = "zipf",
    *,
    k: int = DEFAULT_K,
    decoder: str = "marginal",
    method: str = "auto",
    draws: int = 1000,
    smoothing: float = 1.0,
    candidates: int | None = None,
    content_rank: int = CONTENT_RANK,
    rare_rank: int = RARE_RANK,
    random_state: int | np.random.Generator | None = None,
) -> ContextualResult:
    """The unigram and the contextual attacker on one privatization of ``tokens`` (module docstring)."""
    check_choice("method", method, METHODS)
    check_choice("decoder", decoder, DECODERS)
    vocab = mechanism.embedding
    model.check_vocabulary(vocab)
    pri = make_prior(prior, vocab)
    if not (isinstance(smoothing, int | float) and math.isfinite(smoothing) and smoothing >= 0):
        raise InvalidParameterError("smoothing", smoothing, "a number >= 0")
    known = tokens.known
    if not known.any():
        raise InvalidParameterError("tokens", 0, "at least one token of the embedding's vocabulary")
    _check_overlap(tokens, model)
    exact = method == "exact" or (
        method == "auto" and mechanism.has_distribution and mechanism.name not in SAMPLED_BY_DEFAULT
    )
    base = random_state if isinstance(random_state, np.random.Generator) else None
    randomness = ExperimentRandomness.from_random_state(None if base is not None else random_state)
    release_rng = base if base is not None else randomness.generator(0)
    fit_rng = np.random.default_rng(base.integers(2**63)) if base is not None else randomness.generator(1)
    v = vocab.size
    y = np.empty(tokens.ids.size, dtype=np.int64)
    y[known] = mechanism.privatize(tokens.ids[known], release_rng)
    y[~known] = release_rng.integers(0, v, size=int((~known).sum()))  # --oov random: a uniform word
    outputs, inv = np.unique(y, return_inverse=True)
    cand_y, emis_y = emission_candidates(
        mechanism, pri, outputs, k=k, exact=exact, draws=draws, smoothing=smoothing, candidates=candidates, rng=fit_rng
    )
    contextual = np.empty_like(y)
    for lo, hi in _text_chunks(tokens.offsets):
        a, b = int(tokens.offsets[lo]), int(tokens.offsets[hi])
        cand = np.concatenate([cand_y[inv[a:b]], np.full((b - a, 1), model.unk)], axis=1)
        emis = np.concatenate([emis_y[inv[a:b]], np.full((b - a, 1), -math.log(v))], axis=1)
        contextual[a:b] = decode(model, cand, emis, tokens.offsets[lo : hi + 1] - a, method=decoder, words_only=True)
    guesses = {"unigram": cand_y[inv, 0], "contextual": contextual}
    truth = tokens.ids[known]
    hits = {att: (g[known] == truth).astype(np.float64) for att, g in guesses.items()}
    unchanged = (y[known] == truth).astype(np.float64)
    sample = TokenSample(truth, tokens.name[known])
    groups: dict[str, dict[str, GroupScore]] = {a: {} for a in ATTACKERS}
    gain: dict[str, tuple[float, float]] = {}
    for g, mask in sample.groups(content_rank, rare_rank).items():
        n = int(mask.sum())
        unch = float(unchanged[mask].mean()) if n else math.nan
        for att in ATTACKERS:
            groups[att][g] = GroupScore(n, (unch, 0.0), (float(hits[att][mask].mean()) if n else math.nan, 0.0))
        d = hits["contextual"][mask] - hits["unigram"][mask]
        gain[g] = (float(d.mean()), _Z * float(d.std(ddof=1)) / math.sqrt(n)) if n > 1 else (math.nan, math.nan)
    return ContextualResult(
        mechanism.name, float(mechanism.epsilon), "exact" if exact else "sampled", decoder, k, groups, gain
    )


def contextual_evaluation(
    texts: Sequence[str],
    embedding: Vocabulary,
    mechanisms: Mapping[str, Callable[[Embedding, float], Mechanism]],
    epsilons: Sequence[float],
    model: NgramModel,
    *,
    prior: str | Prior = "zipf",
    k: int = DEFAULT_K,
    decoder: str = "marginal",
    method: str = "auto",
    draws: int = 1000,
    candidates: int | None = None,
    corpus: str = "texts",
    random_state: int | np.random.Generator | None = None,
    log: Callable[[str], None] | None = None,
    full_texts: Sequence[str] | None = None,
) -> Results:
    """:func:`contextual_attack` for every mechanism and epsilon: :class:`Results` with the setting columns
    ``mechanism``, ``epsilon``, ``group``, ``attacker`` (unigram / contextual) and the metrics ``unchanged``,
    ``recovered`` (and, for the contextual rows, ``gain`` over unigram), each with its interval.

    ``full_texts``: the attacked texts before any cut (``texts`` are cut after ``max_words``), checked against
    the model's training lines.
    """
    pri = make_prior(prior, embedding)
    model.check_vocabulary(embedding)
    tokens = TextTokens.from_texts(texts, embedding)
    if full_texts is not None:
        hashes = np.array([line_hash(t) for t in full_texts], dtype=np.int64)
        _check_overlap(TextTokens(tokens.ids[:0], tokens.offsets[:1], tokens.name[:0], hashes), model)
    randomness = ExperimentRandomness.from_random_state(random_state)
    rows: list[dict[str, Any]] = []
    for i, (name, factory) in enumerate(mechanisms.items()):
        for j, eps in enumerate(epsilons):
            res = contextual_attack(
                factory(Embedding.check(embedding), eps),
                tokens,
                model,
                pri,
                k=k,
                decoder=decoder,
                method=method,
                draws=draws,
                candidates=candidates,
                random_state=randomness.seed(i, j),
            )
            if log is not None:
                log(
                    f"{name} eps={eps:g}: recovered {res.groups['unigram']['all'].recovered[0]:.3f} (unigram), "
                    f"{res.groups['contextual']['all'].recovered[0]:.3f} (contextual)"
                )
            for attacker, per_group in res.groups.items():
                for g, score in per_group.items():
                    metrics = {"unchanged": score.unchanged, "recovered": score.recovered}
                    for metric, (value, _) in metrics.items():
                        lo, hi = GroupScore.interval(value, 0.0, score.n)
                        rows.append(_row(name, eps, g, attacker, metric, value, lo, hi, score.n, res))
                    if attacker == "contextual":
                        value, half = res.gain[g]
                        rows.append(
                            _row(name, eps, g, attacker, "gain", value, value - half, value + half, score.n, res)
                        )
    settings = {
        "attack": "reconstruction",
        "context": f"ngram:{model.source}",
        "ngram_training_tokens": model.tokens,
        "corpus": corpus,
        "texts": len(texts),
        "tokens": int(tokens.known.sum()),
        "oov_tokens_left_out": int((~tokens.known).sum()),
        "embedding": embedding.name,
        "vocabulary": embedding.size,
        "prior": pri.source,
        "method": method,
        "draws": draws,
        "candidates": candidates if candidates is not None else embedding.size,
        "k": k,
        "decoder": decoder,
        "content_rank": CONTENT_RANK,
        "rare_rank": RARE_RANK,
        "random_state": randomness.entropy,
    }
    return Results(
        f"{corpus} word reconstruction, unigram vs contextual",
        ("mechanism", "epsilon", "group", "attacker"),
        rows,
        settings=settings,
        notes=[
            "both attackers scored on the same single privatization of every token (out-of-vocabulary words "
            "released as a uniformly random word, left out of the shares); unigram: argmax prior(w) P(y|w) per "
            f"token ({pri.source}); contextual: the {k} best of those per token and <unk>, decoded jointly "
            f"({decoder}) with a bigram model trained on {model.source} (public text, not the attacked one)",
            "gain: contextual minus unigram recovered, paired 95% interval over tokens",
            f"groups: all in-vocabulary tokens; content: outside the {CONTENT_RANK} most frequent words; rare: "
            f"outside the {RARE_RANK:,} most frequent; name: capitalized where no sentence starts",
        ],
        own_interval="Wilson over tokens (gain: paired normal over tokens)",
    )


def _row(
    mech: str, eps: float, group: str, attacker: str, metric: str, value: float, lo: float, hi: float, n: int, res: Any
) -> dict[str, Any]:
    return {
        "mechanism": mech,
        "epsilon": float(eps),
        "group": group,
        "attacker": attacker,
        "repeat": 0,
        "metric": metric,
        "value": value,
        "ci_low": lo,
        "ci_high": hi,
        "n_tokens": n,
        "method": res.method,
        "decoder": res.decoder if attacker == "contextual" else "",
    }


def write_contextual_results(result: Results, folder: str | Path, *, command: str = "") -> dict[str, Path]:
    """results.csv (one row per setting, attacker and metric), results.md and settings.json."""
    table: dict[tuple[Any, ...], dict[Any, Any]] = {}
    for r in result.rows:
        row = table.setdefault((r["mechanism"], r["epsilon"], r["group"]), {"method": r["method"], "n": r["n_tokens"]})
        clip = None if r["metric"] == "gain" else (0.0, 1.0)
        row[(r["attacker"], r["metric"])] = format_interval(r["value"], r["ci_low"], r["ci_high"], clip=clip)
    md = [f"# {result.name}", ""]
    md += [f"- {n}" for n in result.notes]
    md += [
        "",
        "| mechanism | epsilon | method | group | N | unchanged | recovered, unigram | recovered, contextual | gain |",
        "|---|---:|---|---|---:|---|---|---|---|",
    ]
    for (mech, eps, group), vals in table.items():
        cells = [vals.get(key, "") for key in (("unigram", "unchanged"), *((a, "recovered") for a in ATTACKERS))]
        cells.append(vals.get(("contextual", "gain"), ""))
        md.append(f"| {mech} | {eps:g} | {vals['method']} | {group} | {vals['n']:,} | " + " | ".join(cells) + " |")
    settings = dict(result.settings)
    if command:
        settings["command"] = command
    cols = [
        "mechanism",
        "epsilon",
        "group",
        "attacker",
        "metric",
        "value",
        "ci_low",
        "ci_high",
        "n_tokens",
        "method",
        "decoder",
    ]
    return write_files(
        folder,
        tables={"results.csv": (result.rows, cols)},
        texts={"results.md": "\n".join(md) + "\n"},
        json_files={"settings.json": settings},
    )


def run_contextual(
    task: TaskData,
    embedding: Vocabulary,
    cfg: EvaluationConfig,
    model: NgramModel,
    *,
    prior: str | Prior = "zipf",
    k: int = DEFAULT_K,
    decoder: str = "marginal",
    draws: int = 1000,
    candidates: int | None = None,
    log: Callable[[str], None] | None = None,
) -> Results:
    """``deniable evaluate --attack reconstruction --context ngram:PATH``: :func:`contextual_evaluation` on
    ``task``'s training texts (``cfg.train_size`` of them, cut at ``cfg.max_words``)."""
    full = attack_texts(task, size=cfg.train_size)
    texts = truncate_words(full, cfg.max_words) if cfg.max_words is not None else full
    return contextual_evaluation(
        texts,
        embedding,
        cfg.mechanisms,
        cfg.epsilons,
        model,
        prior=prior,
        k=k,
        decoder=decoder,
        draws=draws,
        candidates=candidates,
        corpus=task.name,
        random_state=cfg.random_state,
        log=log,
        full_texts=full,
    )
