"""A public word n-gram model and the joint decoders built on it (contextual attacker, contextual decode).

A :class:`NgramModel` is a bigram model over an embedding's word ids, trained on a public text file
the user names (:func:`train_ngram`): one line is one text (a history ``<s>`` starts each line),
tokenized with the one tokenizer (:mod:`deniable.text`, ``vocab.tokenizer``); a word outside the
vocabulary is the class :attr:`NgramModel.unk` (id ``V``). It is saved as a compact ``.npz`` of
sparse counts (:meth:`NgramModel.save`, :func:`load_ngram`) tied to the vocabulary's words, or
prepared once in the artefact store (:func:`prepare_ngram`, ``deniable prepare --ngram FILE``: a
folder of ``.npy`` files keyed by the text's sha256, verified and memory-mapped when read; what the
decode prior ``prior="ngram:PATH"`` of madlib and Mahalanobis names). :meth:`NgramModel.digest` is
its identity in manifests (the sha256 of its vocabulary and counts).

Smoothing: **interpolated Kneser-Ney** (Chen & Goodman 1998, the modified form's single-discount
case), chosen over Witten-Bell because it is the best-measured of the classic estimators on small
corpora, needs no tuning (the discount ``D = n1 / (n1 + 2 n2)`` comes from the count-of-counts)
and its lower order, the *continuation* probability (how many distinct words precede ``w``), is
the right back-off for a history never seen with ``w``: a word frequent only after one history
("angeles" after "los") gets little mass elsewhere. Every probability is > 0 and
``sum_w P(w | h) = 1`` over the ``V + 1`` outputs (words and ``<unk>``) for every history ``h``::

    P(w | h)  = max(c(h, w) - D, 0) / c(h) + D N1+(h .) / c(h) * P1(w)      (c(h) > 0; else P1(w))
    P1(w)     = max(N1+(. w) - D1, 0) / N1+(. .) + D1 |{w: N1+(. w) > 0}| / N1+(. .) / (V + 1)

Trigrams were left out: on a few million training tokens (IMDb's test side) most trigrams of a
2,000-word text are unseen, and the decoders' state space would grow from ``K`` to ``K^2``.

The decoders (:func:`viterbi`, :func:`posterior_decode`) take, per token ``t``, ``K`` candidate
ids ``candidates[t]`` (words or :attr:`~NgramModel.unk`) with emission log-likelihoods
``emission[t] = log P(y_t | candidate)`` (``-inf`` for padding), and the text boundaries
``offsets``. They are post-processing of public data and the observed ``y``: the reconstruction
attacker (:mod:`deniable.experiments.contextual`) feeds them the Bayes candidates of a privatized
token, a perturb-then-decode mechanism's contextual prior (issue 44, ``prior="ngram:PATH"``) the
nearest words of each noisy vector with ``-eps * distance`` (no ``<unk>`` candidate, or
``words_only=True``: a release is a word). Vectorised over ``K`` (numpy), one Python step per
position; transitions are computed in blocks of positions (memory), from a dense count table when
the vocabulary is small (2,000 words: 16 MB) and by binary search in the sorted keys otherwise.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

import numpy as np
import numpy.typing as npt

from ._errors import DataError, InvalidParameterError
from .artefacts import (
    MANIFEST,
    ArtefactInfo,
    artefact_path,
    build_artefact,
    file_sha256,
    open_artefact,
    register_kind,
)
from .embedding import Vocabulary

__all__ = [
    "DECODERS",
    "NGRAM_KIND",
    "NgramModel",
    "decode",
    "is_model_path",
    "load_ngram",
    "posterior_decode",
    "prepare_ngram",
    "train_ngram",
    "viterbi",
]

#: ``method`` of :func:`decode`: the jointly most probable sequence, or each token's most probable word
DECODERS = ("viterbi", "marginal")
#: File format version of :meth:`NgramModel.save` and of a prepared folder
FORMAT = 1
#: Artefact kind of a prepared model (``deniable prepare --ngram FILE``, :func:`prepare_ngram`)
NGRAM_KIND = "ngram"
#: A prepared folder's description of its model (format, vocabulary, source, the model's sha256)
MODEL_META = "model.json"
_LINES_PER_BATCH = 20_000
#: Largest dense ``(histories x outputs)`` count table kept for fast lookups (int32 cells)
_DENSE_CELLS = 1 << 24
#: Positions whose transition blocks are computed at once by the decoders
_POSITIONS_PER_BLOCK = 2048


def vocabulary_hash(vocab: Vocabulary) -> str:
    """SHA-256 of the vocabulary's words in id order: what a model's ids mean."""
    h = hashlib.sha256()
    for w in vocab.vocabulary:
        h.update(w.encode("utf-8", "surrogatepass") + b"\n")
    return h.hexdigest()


def line_hash(text: str) -> int:
    """A 63-bit hash of a text with its white space normalised (to spot a training line among attacked texts)."""
    norm = " ".join(text.split())
    return int.from_bytes(hashlib.blake2b(norm.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little") >> 1


def _discount(counts: npt.NDArray[np.int64]) -> float:
    """Ney's absolute discount ``n1 / (n1 + 2 n2)`` from the count-of-counts (0.5 when undefined)."""
    n1 = int((counts == 1).sum())
    n2 = int((counts == 2).sum())
    return n1 / (n1 + 2 * n2) if n1 + n2 > 0 and n1 > 0 else 0.5


@dataclass(frozen=True, eq=False)
class NgramModel:
    """Interpolated Kneser-Ney bigram model over ``vocab_size`` words, ``<unk>`` (id V) and ``<s>`` (history V + 1).

    ``keys`` (sorted, int64) are ``h * (V + 1) + w`` for every seen bigram and ``counts`` their counts;
    ``lines`` the :func:`line_hash` of every training line (sorted), so an attack can refuse a text the
    model was trained on. ``source`` names the training file, ``vocab_hash`` the vocabulary.
    """

    vocab_size: int
    keys: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]
    vocab_hash: str
    source: str = ""
    lines: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    _log_p1: npt.NDArray[np.float64] = field(init=False, repr=False)
    _hist_total: npt.NDArray[np.float64] = field(init=False, repr=False)
    _backoff: npt.NDArray[np.float64] = field(init=False, repr=False)
    _discount: float = field(init=False, repr=False)
    _dense: npt.NDArray[np.int32] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        v = int(self.vocab_size)
        w_out = v + 1
        keys = np.asarray(self.keys, dtype=np.int64)
        counts = np.asarray(self.counts, dtype=np.int64)
        if keys.ndim != 1 or keys.shape != counts.shape or np.any(counts <= 0) or np.any(np.diff(keys) <= 0):
            raise DataError("n-gram model: keys must be sorted and distinct, counts positive")
        if keys.size and (keys[0] < 0 or keys[-1] >= (v + 2) * w_out):
            raise DataError("n-gram model: a bigram key lies outside the vocabulary")
        hist, word = keys // w_out, keys % w_out
        total = np.bincount(hist, weights=counts, minlength=v + 2)
        types = np.bincount(hist, minlength=v + 2).astype(np.float64)
        d = _discount(counts)
        cont = np.bincount(word, minlength=w_out).astype(np.int64)  # N1+(. w): distinct histories before w
        n_cont = max(int(cont.sum()), 1)
        d1 = _discount(cont[cont > 0])
        p1 = np.maximum(cont - d1, 0) / n_cont + d1 * int((cont > 0).sum()) / n_cont / w_out
        if not cont.any():
            p1 = np.full(w_out, 1.0 / w_out)
        with np.errstate(divide="ignore", invalid="ignore"):
            backoff = np.where(total > 0, d * types / np.maximum(total, 1), 1.0)
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "lines", np.asarray(self.lines, dtype=np.int64))
        object.__setattr__(self, "_log_p1", np.log(p1))
        object.__setattr__(self, "_hist_total", total)
        object.__setattr__(self, "_backoff", backoff)
        object.__setattr__(self, "_discount", float(d))
        dense = None
        if (v + 2) * w_out <= _DENSE_CELLS:
            dense = np.zeros((v + 2) * w_out, dtype=np.int32)
            dense[keys] = counts
        object.__setattr__(self, "_dense", dense)

    # -- ids
    @property
    def unk(self) -> int:
        """The output id of a word outside the vocabulary."""
        return int(self.vocab_size)

    @property
    def bos(self) -> int:
        """The history id at the start of a text."""
        return int(self.vocab_size) + 1

    @property
    def discount(self) -> float:
        return self._discount

    @property
    def tokens(self) -> int:
        """Training tokens (bigram events)."""
        return int(self.counts.sum())

    def check_vocabulary(self, vocab: Vocabulary) -> None:
        """Raise unless ``vocab`` is the vocabulary the model's ids refer to."""
        if vocab.size != self.vocab_size or vocabulary_hash(vocab) != self.vocab_hash:
            raise InvalidParameterError(
                "ngram", self.source or "model", f"a model trained over this embedding's {vocab.size:,} words"
            )

    # -- probabilities
    def _pair_counts(self, hist: npt.NDArray[np.int64], word: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        key = hist * (self.vocab_size + 1) + word
        if self._dense is not None:
            return self._dense[key].astype(np.float64)
        if self.keys.size == 0:
            return np.zeros(key.shape)
        idx = np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)
        return np.where(self.keys[idx] == key, self.counts[idx], 0).astype(np.float64)

    def log_prob(self, hist: npt.ArrayLike, word: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``log P(word | hist)``, broadcast over the two id arrays (words ``0..V``, histories ``0..V + 1``)."""
        h = np.asarray(hist, dtype=np.int64)
        w = np.asarray(word, dtype=np.int64)
        h, w = np.broadcast_arrays(h, w)
        if h.size and (h.min() < 0 or h.max() > self.bos or w.min() < 0 or w.max() > self.unk):
            raise InvalidParameterError("ngram ids", "out of range", f"histories 0..{self.bos}, words 0..{self.unk}")
        c = self._pair_counts(h, w)
        total = self._hist_total[h]
        p = self._backoff[h] * np.exp(self._log_p1[w])
        seen = total > 0
        p = np.where(seen, np.maximum(c - self._discount, 0.0) / np.where(seen, total, 1.0) + p, p)
        return np.log(p)

    def unigram(self) -> npt.NDArray[np.float64]:
        """``P1``: the model's lowest order (continuation probabilities) over words and ``<unk>``."""
        return np.exp(self._log_p1)

    # -- files
    def digest(self) -> str:
        """SHA-256 of what the model's probabilities are computed from (format, vocabulary, bigram keys and
        counts; not the training-line hashes nor the file's name): its identity in manifests."""
        h = hashlib.sha256(f"deniable-ngram {FORMAT} {self.vocab_size} {self.vocab_hash}\n".encode())
        h.update(np.ascontiguousarray(self.keys, dtype="<i8").tobytes())
        h.update(np.ascontiguousarray(self.counts, dtype="<i8").tobytes())
        return h.hexdigest()

    def write_folder(self, folder: str | Path) -> dict[str, str]:
        """Write the model as ``.npy`` files (memory-mapped when read) and ``model.json``; returns nothing hashed."""
        out = Path(folder)
        np.save(out / "keys.npy", np.ascontiguousarray(self.keys, dtype="<i8"))
        np.save(out / "counts.npy", np.ascontiguousarray(self.counts, dtype="<i8"))
        np.save(out / "lines.npy", np.ascontiguousarray(self.lines, dtype="<i8"))
        meta = {
            "format": FORMAT,
            "vocab_size": int(self.vocab_size),
            "vocab_hash": self.vocab_hash,
            "source": self.source,
            "sha256": self.digest(),
            "tokens": self.tokens,
        }
        (out / MODEL_META).write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
        return {}

    def save(self, path: str | Path) -> Path:
        """Write the model as a compressed ``.npz`` (sparse counts, vocabulary hash, training-line hashes)."""
        p = Path(path)
        with open(p, "wb") as fh:
            np.savez_compressed(
                fh,
                format=np.int64(FORMAT),
                vocab_size=np.int64(self.vocab_size),
                keys=self.keys,
                counts=self.counts.astype(np.int32 if self.counts.max(initial=0) < 2**31 else np.int64),
                lines=self.lines,
                vocab_hash=np.array(self.vocab_hash),
                source=np.array(self.source),
            )
        return p


def load_ngram(path: str | Path, vocab: Vocabulary | None = None) -> NgramModel:
    """A model written by :meth:`NgramModel.save` (``.npz``) or prepared by :func:`prepare_ngram` (a folder,
    memory-mapped and verified against its manifest); checked against ``vocab`` when given."""
    p = Path(path)
    if p.is_dir():
        return _open_folder(p, vocab)
    if not p.is_file():
        raise InvalidParameterError("ngram", str(path), "an existing .npz written by deniable's n-gram trainer")
    try:
        with np.load(p, allow_pickle=False) as z:
            if int(z["format"]) != FORMAT:
                raise DataError(f"n-gram model {p.name}: format {int(z['format'])}, expected {FORMAT}")
            model = NgramModel(
                int(z["vocab_size"]),
                z["keys"].astype(np.int64),
                z["counts"].astype(np.int64),
                str(z["vocab_hash"]),
                str(z["source"]),
                z["lines"].astype(np.int64),
            )
    except (OSError, KeyError, ValueError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(f"n-gram model {p.name}: not a deniable n-gram file ({type(exc).__name__})") from None
    if vocab is not None:
        model.check_vocabulary(vocab)
    return model


# ----------------------------------------------------------------------------- prepared models
def ngram_params(path: str | Path) -> dict[str, Any]:
    """The store parameters of the model of the public text file ``path``: its content hash and name."""
    p = Path(path)
    if not p.is_file():
        raise InvalidParameterError("ngram", str(path), "an existing public text file")
    return {"format": FORMAT, "order": 2, "text_sha256": file_sha256(p), "source": p.name}


def prepare_ngram(
    vocab: Vocabulary, path: str | Path, *, rebuild: bool = False, show_progress: bool | None = None
) -> ArtefactInfo:
    """The bigram model of the public text file ``path`` over ``vocab``, trained once and kept in the artefact
    store (``deniable prepare --ngram FILE``): a folder of ``.npy`` files every later process memory-maps.

    Keyed by the text's sha256 (and the embedding's fingerprint), so the same text is trained once. The
    folder (:attr:`ArtefactInfo.path`) is what ``prior="ngram:PATH"`` names. The text must be public:
    the model is what anyone could know in advance, never the text being privatized.
    """
    params = ngram_params(path)

    def build(folder: Path, _show: bool | None) -> dict[str, str]:
        return train_ngram(vocab, path).write_folder(folder)

    return build_artefact(
        vocab,
        NGRAM_KIND,
        params,
        rebuild=rebuild,
        show_progress=show_progress,
        builder=build,
        description=f"deniable: training the n-gram model of {params['source']} over {vocab.size:,} words (once)",
    )


def _refuse_build(vocab: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None) -> None:
    raise InvalidParameterError(
        "ngram", params.get("source", "?"), "a model built from its text file: `deniable prepare --ngram FILE`"
    )


register_kind(NGRAM_KIND, _refuse_build, about="the n-gram model of a public text file")


def is_model_path(path: str | Path) -> bool:
    """Whether ``path`` looks like a model (a prepared folder with ``model.json``, or a ``.npz``); not verified."""
    p = Path(path)
    return (p.is_dir() and (p / MODEL_META).is_file()) or (p.is_file() and p.suffix == ".npz")


def _open_folder(p: Path, vocab: Vocabulary | None) -> NgramModel:
    """A prepared model folder, verified against its manifest (the store's check where it is the store's
    copy, a whole hash otherwise), its arrays memory-mapped."""
    try:
        manifest = json.loads((p / MANIFEST).read_text(encoding="utf-8"))
        meta = json.loads((p / MODEL_META).read_text(encoding="utf-8"))
        files = manifest["files"]
        params = manifest["params"]
        if manifest.get("kind") != NGRAM_KIND or int(meta["format"]) != FORMAT:
            raise ValueError("kind")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(
            f"n-gram model {p.name}: not a prepared deniable n-gram folder ({type(exc).__name__})"
        ) from None
    if vocab is not None and artefact_path(vocab, NGRAM_KIND, params).resolve() == p.resolve():
        if open_artefact(vocab, NGRAM_KIND, params) is None:
            raise DataError(f"n-gram model {p.name}: stale or incomplete; `deniable prepare --ngram FILE --rebuild`")
    else:  # a copy outside the store: every file hashed whole
        for name, entry in files.items():
            f = p / name
            if not f.is_file() or f.stat().st_size != int(entry["bytes"]) or file_sha256(f) != entry["sha256"]:
                raise DataError(f"n-gram model {p.name}: file {name} does not match its manifest (altered?)")
    try:
        arrays = {k: np.load(p / f"{k}.npy", mmap_mode="r", allow_pickle=False) for k in ("keys", "counts", "lines")}
        model = NgramModel(
            int(meta["vocab_size"]),
            arrays["keys"],
            arrays["counts"],
            str(meta["vocab_hash"]),
            str(meta["source"]),
            arrays["lines"],
        )
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"n-gram model {p.name}: unreadable ({type(exc).__name__})") from None
    if vocab is not None:
        model.check_vocabulary(vocab)
    return model


def _lines(fh: IO[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for line in fh:
        batch.append(line)
        if len(batch) >= _LINES_PER_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def bigram_keys(ids: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64], vocab_size: int) -> npt.NDArray[np.int64]:
    """The bigram keys ``h * (V + 1) + w`` of tokenized texts (``ids``: -1 for unknown; ``offsets``: text starts)."""
    v = int(vocab_size)
    w = np.where(ids < 0, v, ids).astype(np.int64)
    hist = np.empty_like(w)
    hist[1:] = w[:-1]
    starts = offsets[:-1][offsets[1:] > offsets[:-1]]
    hist[starts] = v + 1
    return hist * (v + 1) + w


def train_ngram(vocab: Vocabulary, path: str | Path) -> NgramModel:
    """The bigram model of the public UTF-8 text file ``path`` (``.gz`` read as gzip), one text per line.

    It must not be the text under attack or being privatized: the model is what anyone could know
    in advance (:mod:`deniable.experiments.contextual` refuses an attacked text found among its lines).
    """
    p = Path(path)
    if not p.is_file():
        raise InvalidParameterError("ngram", str(path), "an existing public text file")
    tokenizer = vocab.tokenizer
    v = vocab.size
    keys: list[npt.NDArray[np.int64]] = []
    counts: list[npt.NDArray[np.int64]] = []
    hashes: list[int] = []
    raw: BinaryIO = gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")  # type: ignore[assignment]  # noqa: SIM115
    try:
        with io.TextIOWrapper(raw, encoding="utf-8", errors="strict") as fh:
            for batch in _lines(fh):
                hashes.extend(line_hash(t) for t in batch if t.strip())
                doc = tokenizer.tokenize(batch, name="n-gram lines")
                k, c = np.unique(bigram_keys(doc.ids, doc.offsets, v), return_counts=True)
                keys.append(k)
                counts.append(c)
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        raise DataError(f"n-gram file {p.name}: not readable UTF-8 text ({type(exc).__name__})") from None
    if not keys or not any(k.size for k in keys):
        raise DataError(f"n-gram file {p.name}: no word")
    all_keys = np.concatenate(keys)
    uk, inv = np.unique(all_keys, return_inverse=True)
    uc = np.bincount(inv, weights=np.concatenate(counts)).astype(np.int64)
    return NgramModel(v, uk, uc, vocabulary_hash(vocab), p.name, np.unique(np.array(hashes, dtype=np.int64)))


# ----------------------------------------------------------------------------- decoders
def _check_inputs(
    model: NgramModel, candidates: npt.ArrayLike, emission: npt.ArrayLike, offsets: npt.ArrayLike | None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    cand = np.asarray(candidates, dtype=np.int64)
    emis = np.asarray(emission, dtype=np.float64)
    if cand.ndim != 2 or cand.shape[1] == 0 or emis.shape != cand.shape:
        raise InvalidParameterError("candidates", cand.shape, "a (tokens, K) id array with an emission of its shape")
    if cand.size and (cand.min() < 0 or cand.max() > model.unk):
        raise InvalidParameterError(
            "candidates", "an id out of range", f"word ids 0..{model.unk} (<unk> = {model.unk})"
        )
    if (
        np.any(np.isnan(emis))
        or np.any(emis == np.inf)
        or (cand.shape[0] and not np.all(np.isfinite(emis).any(axis=1)))
    ):
        raise InvalidParameterError(
            "emission", "not finite", "finite log-likelihoods (-inf for padding), one per token"
        )
    t = cand.shape[0]
    off = np.array([0, t], dtype=np.int64) if offsets is None else np.asarray(offsets, dtype=np.int64)
    if off.ndim != 1 or off.size < 1 or off[0] != 0 or off[-1] != t or np.any(np.diff(off) < 0):
        raise InvalidParameterError("offsets", "invalid", f"non-decreasing text starts from 0 to {t}")
    start = np.zeros(t, dtype=bool)
    start[off[:-1][off[1:] > off[:-1]]] = True
    return cand, emis, start


def _transitions(
    model: NgramModel, cand: npt.NDArray[np.int64], start: npt.NDArray[np.bool_], a: int, b: int
) -> npt.NDArray[np.float64]:
    """``trans[t - a, i, j] = log P(cand[t, j] | cand[t - 1, i])`` for ``t`` in ``[a, b)`` (``<s>`` at a text start)."""
    hist = np.empty((b - a, cand.shape[1]), dtype=np.int64)
    if a > 0:
        hist[0] = cand[a - 1]
    hist[1:] = cand[a : b - 1]
    hist[start[a:b]] = model.bos
    return model.log_prob(hist[:, :, None], cand[a:b, None, :])


def viterbi(
    model: NgramModel, candidates: npt.ArrayLike, emission: npt.ArrayLike, offsets: npt.ArrayLike | None = None
) -> npt.NDArray[np.int64]:
    """The jointly most probable word sequence ``argmax prod_t P(w_t | w_{t-1}) P(y_t | w_t)`` per text.

    ``candidates`` ``(T, K)`` ids, ``emission`` ``(T, K)`` log-likelihoods, ``offsets`` the ``n + 1``
    text starts (one text when None). Returns ``(T,)`` ids (ties: the earlier candidate).

    Texts are decoded side by side: short texts in groups of about ``_POSITIONS_PER_BLOCK`` tokens, one
    numpy step per position *within* a text for the whole group (many short texts cost as many steps as
    the longest), a long text alone, one step per token. Each text's result is its own whatever its group
    (the same operations on its own numbers).
    """
    cand, emis, start = _check_inputs(model, candidates, emission, offsets)
    t_len = cand.shape[0]
    out = np.empty(t_len, dtype=np.int64)
    starts = np.flatnonzero(start)
    ends = np.r_[starts[1:], t_len].astype(np.int64)
    lengths = ends - starts
    group: list[int] = []
    held = 0
    for i in range(starts.size):
        if lengths[i] * 4 > _POSITIONS_PER_BLOCK:
            a, b = int(starts[i]), int(ends[i])
            out[a:b] = _viterbi_one(model, cand[a:b], emis[a:b])
            continue
        group.append(i)
        held += int(lengths[i])
        if held >= _POSITIONS_PER_BLOCK:
            _viterbi_group(model, cand, emis, starts[group], lengths[group], out)
            group, held = [], 0
    if group:
        _viterbi_group(model, cand, emis, starts[group], lengths[group], out)
    return out


def _viterbi_one(
    model: NgramModel, cand: npt.NDArray[np.int64], emis: npt.NDArray[np.float64]
) -> npt.NDArray[np.int64]:
    """One text, one step per token (transitions computed in blocks of positions)."""
    t_len, k = cand.shape
    start = np.zeros(t_len, dtype=bool)
    start[0] = True
    back = np.zeros((t_len, k), dtype=np.int64)
    delta = np.zeros(k)
    cols = np.arange(k)
    for a in range(0, t_len, _POSITIONS_PER_BLOCK):
        b = min(a + _POSITIONS_PER_BLOCK, t_len)
        trans = _transitions(model, cand, start, a, b)
        for t in range(a, b):
            if t == 0:
                delta = trans[0, 0] + emis[0]
            else:
                s = delta[:, None] + trans[t - a]
                arg = s.argmax(axis=0)
                back[t] = arg
                delta = s[arg, cols] + emis[t]
    out = np.empty(t_len, dtype=np.int64)
    j = int(delta.argmax())
    for t in range(t_len - 1, -1, -1):
        out[t] = cand[t, j]
        j = int(back[t, j])
    return out


def _viterbi_group(
    model: NgramModel,
    cand: npt.NDArray[np.int64],
    emis: npt.NDArray[np.float64],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    out: npt.NDArray[np.int64],
) -> None:
    """Short texts side by side: step ``j`` advances every text longer than ``j`` at once."""
    k = cand.shape[1]
    order = np.argsort(-lengths, kind="stable")  # longest first: the texts still running are a prefix
    starts, lengths = starts[order], lengths[order]
    n, longest = starts.size, int(lengths[0])
    alive = np.searchsorted(-lengths, -np.arange(longest), side="left")  # texts longer than j: the first alive[j]
    back: list[npt.NDArray[np.int64]] = [np.zeros((n, k), dtype=np.int64)]  # back[j]: (alive[j], k)
    delta = model.log_prob(np.full((n, 1), model.bos, dtype=np.int64), cand[starts]) + emis[starts]
    for j in range(1, longest):
        m = int(alive[j])
        pos = starts[:m] + j
        trans = model.log_prob(cand[pos - 1][:, :, None], cand[pos][:, None, :])
        s = delta[:m, :, None] + trans
        arg = s.argmax(axis=1)
        back.append(arg)
        delta[:m] = np.take_along_axis(s, arg[:, None, :], axis=1)[:, 0, :] + emis[pos]
    state = delta.argmax(axis=1)
    for j in range(longest - 1, -1, -1):
        m = int(alive[j])
        pos = starts[:m] + j
        out[pos] = cand[pos, state[:m]]
        state[:m] = np.take_along_axis(back[j], state[:m, None], axis=1)[:, 0]


def _logsumexp(x: npt.NDArray[np.float64], axis: int) -> npt.NDArray[np.float64]:
    m = x.max(axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(m, axis=axis) + np.log(np.exp(x - m).sum(axis=axis))


def posterior_marginals(
    model: NgramModel, candidates: npt.ArrayLike, emission: npt.ArrayLike, offsets: npt.ArrayLike | None = None
) -> npt.NDArray[np.float64]:
    """``P(w_t = candidates[t, k] | y_1..y_n)`` per token and candidate (forward-backward over each text)."""
    cand, emis, start = _check_inputs(model, candidates, emission, offsets)
    t_len, k = cand.shape
    alpha = np.zeros((t_len, k))
    beta = np.zeros((t_len, k))
    blocks = [(a, min(a + _POSITIONS_PER_BLOCK, t_len)) for a in range(0, t_len, _POSITIONS_PER_BLOCK)]
    for a, b in blocks:
        trans = _transitions(model, cand, start, a, b)
        for t in range(a, b):
            if start[t]:
                alpha[t] = trans[t - a, 0] + emis[t]
            else:
                alpha[t] = _logsumexp(alpha[t - 1][:, None] + trans[t - a], axis=0) + emis[t]
    for a, b in reversed(blocks):  # the transitions again (memory: one block at a time)
        trans = _transitions(model, cand, start, a, b)
        for t in range(b - 1, max(a, 1) - 1, -1):
            if not start[t]:  # beta = 0 at the last token of a text
                beta[t - 1] = _logsumexp(trans[t - a] + (emis[t] + beta[t])[None, :], axis=1)
    post = alpha + beta
    post -= _logsumexp(post, axis=1)[:, None]
    return np.exp(post)


def posterior_decode(
    model: NgramModel,
    candidates: npt.ArrayLike,
    emission: npt.ArrayLike,
    offsets: npt.ArrayLike | None = None,
    *,
    words_only: bool = False,
) -> npt.NDArray[np.int64]:
    """Each token's most probable value given the whole text (maximises the expected share of tokens right).

    ``words_only``: the most probable *word* (never ``<unk>``, which still carries the context): the
    decision when only vocabulary tokens are scored or a word must be released.
    """
    cand = np.asarray(candidates, dtype=np.int64)
    post = posterior_marginals(model, cand, emission, offsets)
    if words_only:
        post = np.where(cand == model.unk, -1.0, post)
    return cand[np.arange(cand.shape[0]), post.argmax(axis=1)] if cand.shape[0] else np.zeros(0, dtype=np.int64)


def decode(
    model: NgramModel,
    candidates: npt.ArrayLike,
    emission: npt.ArrayLike,
    offsets: npt.ArrayLike | None = None,
    *,
    method: str = "viterbi",
    words_only: bool = False,
) -> npt.NDArray[np.int64]:
    """:func:`viterbi` (``method="viterbi"``) or :func:`posterior_decode` (``"marginal"``).

    ``words_only``: never return ``<unk>``: where the Viterbi path passes through it, the token's first
    candidate (put the unigram-best word first); the marginal decode takes its most probable word.
    """
    if method == "viterbi":
        out = viterbi(model, candidates, emission, offsets)
        if words_only:
            cand = np.asarray(candidates, dtype=np.int64)
            if np.any(cand[:, 0] == model.unk):
                raise InvalidParameterError("candidates", "<unk> first", "a word as each token's first candidate")
            out = np.where(out == model.unk, cand[:, 0], out)
        return out
    if method == "marginal":
        return posterior_decode(model, candidates, emission, offsets, words_only=words_only)
    raise InvalidParameterError("method", method, "viterbi or marginal")
