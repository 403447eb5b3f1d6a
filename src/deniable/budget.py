"""A privacy budget that refuses a release before it is made: :class:`BudgetAccountant`.

In the style of diffprivlib's ``BudgetAccountant``: ``BudgetAccountant(epsilon=10)`` holds
a ceiling, :meth:`~BudgetAccountant.check` raises :class:`BudgetError` when a release would
go over it (before anything is spent or any noise drawn), :meth:`~BudgetAccountant.spend`
records a release, :meth:`~BudgetAccountant.remaining` says what is left, and a process-wide
default accountant (infinite budget: it records, never refuses) is charged when none is given.

What is counted differs from diffprivlib's one global total: deniable's epsilon is *per word*,
and the accountant keeps it per data set (a file's resolved path, a name the user gives, or
``unlabelled`` for everything released without one) and per column. Composition is
sequential: each release of a data set at epsilon ``e`` adds ``e`` to every word of every
record it covers. The sums are those of the privacy ledger (:func:`deniable.api.privacy_ledger`,
the one place of that rule): two releases are one (a recomputation that reproduces the same
output, costing nothing) only when run key id, mechanism parameters and the keyed input digest
all match. The accountant stores the ledger entries of the run manifests (``release`` and the
parameters), never any text nor a value derived from one text without the run's secret key.

The run manifests' files (:func:`write_manifest`, :func:`read_manifest`, :func:`manifest_path`)
and the ledger itself (:func:`privacy_ledger`, :func:`input_id`) live here, below
:mod:`deniable.api` (which re-exports them), so that the budget and the ledger are one rule.

A file-backed accountant (``path=``; ``deniable privatize --budget``) keeps its releases in a
small JSON file (:data:`BUDGET_FILE_NAME`, beside the outputs by default), written atomically
and under a lock, so concurrent runs see each other's releases; ``deniable inspect-manifest
FILE`` prints its ledger.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ._errors import DataError, InvalidParameterError

__all__ = [
    "BUDGET_FILE_NAME",
    "MANIFEST_FOLDER_NAME",
    "MANIFEST_SUFFIX",
    "UNLABELLED",
    "BudgetAccountant",
    "BudgetError",
    "LedgerEntry",
    "Reservation",
    "dataset_id",
    "input_id",
    "manifest_path",
    "privacy_ledger",
    "read_budget_file",
    "read_manifest",
    "write_manifest",
]

#: the budget file's default name (in the output's folder, for ``deniable privatize --budget``)
BUDGET_FILE_NAME = "deniable-budget.json"
BUDGET_VERSION = 1
#: the data set of releases made without a name for their input: all counted together
UNLABELLED = "unlabelled"
#: the fields of a run manifest the ledger reads (nothing else is kept)
_LEDGER_FIELDS = ("manifest_version", "mechanism", "vocabulary", "oov", "case", "options", "release")
_TOLERANCE = 1e-9  # relative slack for sums of floats (0.1 + 0.2 is within a budget of 0.3)
#: records an accountant keeps one by one; beyond, the older ones are summed per data set and
#: column (:meth:`BudgetAccountant._compact`: totals kept exactly, their reproductions no longer free)
MAX_RECORDS = 10_000
_KEEP_RECENT = 1_000


# ------------------------------------------------------------- run manifests and the ledger
MANIFEST_SUFFIX = ".manifest.json"
#: The manifest's name inside an output folder (Spark-style partitioned output).
MANIFEST_FOLDER_NAME = "_MANIFEST.json"


def manifest_path(output: str | Path) -> Path:
    """``<output>.manifest.json`` beside a file, ``<output>/_MANIFEST.json`` inside a folder."""
    out = Path(output)
    if out.is_dir():
        return out / MANIFEST_FOLDER_NAME
    return out.with_name(out.name + MANIFEST_SUFFIX)


def jsonable(value: Any) -> Any:
    """``value`` with every mapping, sequence and numpy scalar turned into plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def write_manifest(path: str | Path, manifest: Mapping[str, Any]) -> Path:
    """Write ``manifest`` to ``path`` atomically (a temporary beside it, then a rename)."""
    dst = Path(path)
    fd, tmp = tempfile.mkstemp(prefix="." + dst.name + ".", suffix=".tmp", dir=dst.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, sort_keys=False)
            f.write("\n")
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dst


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_manifest(path: str | Path) -> dict[str, Any]:
    """A manifest: ``path`` itself, or the manifest of the output ``path`` names."""
    p = Path(path)
    if not p.name.endswith(MANIFEST_SUFFIX) and p.name != MANIFEST_FOLDER_NAME:
        p = manifest_path(p)
    if not p.is_file():
        raise DataError(f"no manifest at {p}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise DataError(f"{p} is not a JSON manifest") from None
    if not isinstance(data, dict) or "manifest_version" not in data:
        raise DataError(f"{p} is not a deniable run manifest")
    return data


@dataclass
class LedgerEntry:
    """What several releases spent on the words of one column of one input."""

    input: str | None
    column: str
    releases: int
    epsilon: float
    records: list[int]
    mechanisms: list[str]
    metrics: list[str]
    manifests: list[str]

    def describe(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "column": self.column,
            "releases": self.releases,
            "epsilon_per_word": self.epsilon,
            "records": self.records,
            "mechanisms": self.mechanisms,
            "metrics": self.metrics,
            "manifests": self.manifests,
        }


def privacy_ledger(
    manifests: Sequence[str | Path | Mapping[str, Any]], budget: float | None = None
) -> tuple[list[LedgerEntry], list[str]]:
    """Sum what the releases described by ``manifests`` spent per input and column; and warnings.

    Composition: a word released ``k`` times at epsilons ``e_1..e_k`` (independent noise)
    is protected at ``e_1 + ... + e_k``, as by one release at that epsilon. The ledger never
    undercounts: two manifests of a column are ONE release (a recomputation, a re-run with
    the exported key: the same noise, so the same output) only when they provably are --
    the same run key id, the same mechanism and parameters (:func:`_release_params`), and
    the same keyed input digest of that column (the same texts at the same positions).
    Anything else -- another batch size is the same release; a line inserted, another
    mechanism or epsilon, a manifest without a digest (engines, old manifests, seeds) -- is
    counted as a release of its own. A manifest without an input id (standard input
    without --input-label) cannot be matched and is its own input.
    ``budget``: warn where a column's total exceeds it (like diffprivlib's BudgetAccountant).
    """
    groups: dict[tuple[str | None, str, int], dict[str, Any]] = {}
    warnings_: list[str] = []
    for i, item in enumerate(manifests):
        m = dict(item) if isinstance(item, Mapping) else read_manifest(item)
        name = str(item) if not isinstance(item, Mapping) else f"manifest {i + 1}"
        rel = m.get("release") or {}
        eps = rel.get("epsilon_per_word", (m.get("mechanism") or {}).get("epsilon"))
        if not isinstance(eps, int | float):
            raise DataError(f"{name}: no epsilon in the manifest")
        inp = rel.get("input")
        cols = rel.get("columns", m.get("columns")) or ["(text)"]
        records = int(rel.get("records", (m.get("counts") or {}).get("texts", 0)) or 0)
        key_id = rel.get("run_key_id")
        found = rel.get("input_digest")
        digests: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        params = _release_params(m, eps)
        mech = rel.get("mechanism") or (m.get("mechanism") or {}).get("mechanism") or "?"
        metric = rel.get("metric") or (m.get("mechanism") or {}).get("metric") or "?"
        for col in cols:
            g = groups.setdefault(
                (inp, col, i if inp is None else -1),
                {"runs": {}, "records": set(), "mechs": set(), "metrics": set(), "files": [], "keys": {}},
            )
            digest = digests.get(col)
            if key_id and isinstance(digest, str) and digest:
                run: Any = (key_id, params, digest)  # provably the same noise on the same texts
                seen = g["keys"].setdefault(key_id, set())
                seen.add(run)
                if len(seen) == 2:
                    warnings_.append(
                        f"{name}: run key {key_id} was used over another input or with other parameters for "
                        f"column {col}: counted as separate releases (a run key belongs to one input)"
                    )
            else:
                run = f"manifest:{i}"  # nothing proves it is another's recomputation: a release of its own
            g["runs"][run] = float(eps)
            g["records"].add(records)
            g["mechs"].add(mech)
            g["metrics"].add(metric)
            g["files"].append(name)
    entries = []
    for (inp, col, _), g in groups.items():
        total = sum(g["runs"].values())
        entry = LedgerEntry(
            inp, col, len(g["runs"]), total, sorted(g["records"]), sorted(g["mechs"]), sorted(g["metrics"]), g["files"]
        )
        entries.append(entry)
        where = f"input {inp or '(unknown)'} column {col}"
        if entry.releases > 1:
            warnings_.append(
                f"{where} was released {entry.releases} times: each word of it is protected at "
                f"epsilon {total:g} in total (the epsilons add up), not at any one release's epsilon"
            )
            if len(g["metrics"]) > 1:
                warnings_.append(
                    f"{where}: releases under different metrics ({', '.join(entry.metrics)}) add up per metric"
                )
            if len(g["records"]) > 1:
                warnings_.append(f"{where}: the releases cover different numbers of records (the input changed?)")
        if budget is not None and total > budget:
            warnings_.append(f"{where}: epsilon {total:g} spent, over the budget of {budget:g}")
        if inp is None:
            warnings_.append(f"{', '.join(g['files'])}: no input id, cannot be matched with other releases")
    return entries, warnings_


def _release_params(manifest: Mapping[str, Any], eps: float) -> str:
    """What the output depends on besides the key and the input: mechanism and its parameters,
    embedding, policies (a canonical string). The decode's description is left out: the same
    noise decoded otherwise is post-processing of one release."""
    mech = {k: v for k, v in dict(manifest.get("mechanism") or {}).items() if k != "decode"}
    emb = dict(manifest.get("embedding") or {})
    fields = {
        "mechanism": mech,
        "epsilon": float(eps),
        "options": manifest.get("options"),
        "embedding": emb.get("fingerprint"),
        "vocabulary": manifest.get("vocabulary"),
        "oov": manifest.get("oov"),
        "case": manifest.get("case"),
    }
    return json.dumps(fields, sort_keys=True, default=str)


def input_id(src: str | Path | None, label: str | None = None) -> str | None:
    """The input's public id in a ledger: the user's ``label`` (``dataset:LABEL``), else a hash of its path.

    Never derived from the content: a content hash would let anyone holding a guessed
    file confirm it was the input. ``None`` for standard input without a label.
    """
    if label is not None:
        return f"dataset:{label}"
    if src is None or str(src) == "-":
        return None
    path = os.path.realpath(os.fspath(src))
    return "path:" + hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:16]


# ---------------------------------------------------------------------------- the budget
class BudgetError(InvalidParameterError):
    """A release would take a data set over its privacy budget; nothing was spent, nothing drawn.

    ``spent``, ``asked``, ``remaining`` and ``budget`` are epsilons per word; ``dataset`` and
    ``column`` name where (public ids, never text).
    """

    def __init__(
        self,
        *,
        spent: float,
        asked: float,
        budget: float,
        dataset: str,
        column: str,
        name: str = "accountant",
    ) -> None:
        self.spent = spent
        self.asked = asked
        self.budget = budget
        self.remaining = max(0.0, budget - spent)
        self.dataset = dataset
        self.column = column
        where = f"data set {dataset}" + ("" if column == "(text)" else f" column {column}")
        message = (
            f"{name} {budget:g}: release refused before any noise was drawn (nothing written): {where} has "
            f"spent epsilon {spent:g} per word, this release asks {asked:g}, {self.remaining:g} remains"
        )
        self.name = name
        self.value = asked
        self.allowed = message
        Exception.__init__(self, message)


def dataset_id(dataset: str | os.PathLike[str] | None) -> str:
    """The public id of a data set: a path -> the ledger's path id, a str -> ``dataset:NAME``, None -> unlabelled."""
    if dataset is None:
        return UNLABELLED
    if isinstance(dataset, os.PathLike):
        found = input_id(Path(dataset))
        return found if found is not None else UNLABELLED
    if not isinstance(dataset, str) or not dataset:
        raise InvalidParameterError("dataset", type(dataset).__name__, "a name (str), a path, or None")
    return str(input_id(None, dataset))


def ledger_record(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What the ledger reads of a run manifest: its ``release`` and the parameters (no times, no counts)."""
    out = {k: manifest.get(k) for k in _LEDGER_FIELDS if k in manifest}
    emb = manifest.get("embedding")
    if isinstance(emb, Mapping):
        out["embedding"] = {"fingerprint": emb.get("fingerprint")}
    out.setdefault("manifest_version", 1)
    return dict(jsonable(out))


def simple_release(
    epsilon: float, dataset: str, columns: Sequence[str] | None = None, **release: Any
) -> dict[str, Any]:
    """A release described by its epsilon alone (a new release: it matches no other)."""
    from ._validation import check_epsilon

    eps = float(check_epsilon(epsilon, "epsilon"))
    rel = {"input": dataset, "columns": list(columns or ["(text)"]), "epsilon_per_word": eps, **release}
    return {"manifest_version": 1, "mechanism": {"epsilon": eps}, "release": rel}


def read_budget_file(path: str | os.PathLike[str]) -> tuple[float, list[dict[str, Any]]]:
    """A budget file's ceiling and its releases (ledger records)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"no budget file at {p}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise DataError(f"{p} is not a readable budget file") from None
    if not isinstance(data, dict) or data.get("deniable_budget") != BUDGET_VERSION:
        raise DataError(f"{p} is not a deniable budget file")
    eps = data.get("epsilon")
    releases = data.get("releases")
    if not isinstance(releases, list) or not all(isinstance(r, dict) for r in releases):
        raise DataError(f"{p}: no list of releases")
    return (math.inf if eps is None else float(eps)), releases


def is_budget_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a budget file (by content; a manifest or an output is not)."""
    p = Path(path)
    if not p.is_file() or p.suffix != ".json":
        return False
    try:
        read_budget_file(p)
    except DataError:
        return False
    return True


class BudgetAccountant:
    """The privacy budget of data sets: refuses a release that would exceed ``epsilon`` per word.

    Parameters
    ----------
    epsilon
        The ceiling, per word of each record of a data set (default: infinite -- records, never refuses).
    spent_budget
        Releases made before: run manifests (paths, or the mappings), or ledger records.
    path
        A budget file: its releases are loaded (if it exists) and every spend is written to it
        atomically, under a lock (``<path>.lock``), re-reading it first: several processes
        sharing one file see each other's releases.
    """

    _default: ClassVar[BudgetAccountant | None] = None

    def __init__(
        self,
        epsilon: float = math.inf,
        *,
        spent_budget: Sequence[str | os.PathLike[str] | Mapping[str, Any]] | None = None,
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not epsilon > 0:
            raise InvalidParameterError("epsilon", epsilon, "a budget > 0 per word (math.inf: no ceiling)")
        self.epsilon = float(epsilon)
        self._path = None if path is None else Path(path)
        self._records: list[dict[str, Any]] = []
        self._lock = threading.RLock()
        if self._path is not None and self._path.exists():
            self._records = read_budget_file(self._path)[1]
        for item in spent_budget or ():
            self._records.append(self._record_of(item))
        self._old_default: BudgetAccountant | None = None

    # ------------------------------------------------------------------ diffprivlib's surface
    @property
    def path(self) -> Path | None:
        """The budget file (None: in memory only)."""
        return self._path

    @property
    def spent_budget(self) -> list[dict[str, Any]]:
        """The releases recorded (ledger records: a copy)."""
        return [dict(r) for r in self._records]

    def __len__(self) -> int:
        return len(self._records)

    def __repr__(self) -> str:
        eps = "" if math.isinf(self.epsilon) else f"epsilon={self.epsilon:g}, "
        where = f", path={str(self._path)!r}" if self._path is not None else ""
        return f"BudgetAccountant({eps}releases={len(self._records)}{where})"

    def total(self, dataset: str | os.PathLike[str] | None = None, column: str | None = None) -> float:
        """Epsilon per word spent on ``dataset`` (its most spent column, or ``column``)."""
        return self._spent(self._records, dataset_id(dataset), [column] if column else None)

    def remaining(self, dataset: str | os.PathLike[str] | None = None, column: str | None = None) -> float:
        """Epsilon per word that ``dataset`` (``column``) may still spend."""
        return max(0.0, self.epsilon - self.total(dataset, column))

    def check(
        self,
        epsilon: float | None = None,
        *,
        dataset: str | os.PathLike[str] | None = None,
        columns: Sequence[str] | None = None,
        release: Mapping[str, Any] | None = None,
        name: str = "accountant",
    ) -> float:
        """Raise :class:`BudgetError` if this release would exceed the budget; else return its cost.

        Give ``epsilon`` (a new release of ``dataset``'s ``columns``), or ``release`` (a run
        manifest or its ledger record: a reproduction of a recorded release costs 0).
        """
        with self._lock:
            return self._check(self._records, self._candidate(epsilon, dataset, columns, release), name)

    def spend(
        self,
        epsilon: float | None = None,
        *,
        dataset: str | os.PathLike[str] | None = None,
        columns: Sequence[str] | None = None,
        release: Mapping[str, Any] | None = None,
        name: str = "accountant",
    ) -> BudgetAccountant:
        """Check, then record the release (in the budget file too); :class:`BudgetError` spends nothing."""
        self.reserve(epsilon, dataset=dataset, columns=columns, release=release, name=name).commit()
        return self

    def reserve(
        self,
        epsilon: float | None = None,
        *,
        dataset: str | os.PathLike[str] | None = None,
        columns: Sequence[str] | None = None,
        release: Mapping[str, Any] | None = None,
        name: str = "accountant",
    ) -> Reservation:
        """Check and record a release about to be made; :meth:`Reservation.cancel` takes it back
        (the release failed: nothing was written), :meth:`Reservation.commit` completes its record."""
        cand = self._candidate(epsilon, dataset, columns, release)
        with self._locked():
            cost = self._check(self._records, cand, name)
            rid = None
            if cost > 0:  # a reproduction of a recorded release adds nothing: nothing to record
                rid = secrets.token_hex(8)
                self._records.append({**cand, "reservation": rid})
                if len(self._records) > MAX_RECORDS:
                    self._compact()
                self._save()
        return Reservation(self, rid, cost)

    def ledger(self) -> tuple[list[Any], list[str]]:
        """The privacy ledger of the recorded releases (:func:`deniable.api.privacy_ledger`)."""
        budget = None if math.isinf(self.epsilon) else self.epsilon
        return privacy_ledger(self._records, budget=budget)

    def would_refuse(self, release: Mapping[str, Any]) -> bool:
        """Whether :meth:`check` would refuse ``release`` (without raising)."""
        try:
            self.check(release=release)
        except BudgetError:
            return True
        return False

    def has_run_key(self, dataset: str, run_key_id: str) -> bool:
        """Whether a release of ``dataset`` (an id) under ``run_key_id`` is recorded (it may be reproduced)."""
        return any(
            (r.get("release") or {}).get("input") == dataset
            and (r.get("release") or {}).get("run_key_id") == run_key_id
            for r in self._records
        )

    # --------------------------------------------------------------------- the default
    @staticmethod
    def load_default(accountant: BudgetAccountant | None = None) -> BudgetAccountant:
        """``accountant``, or the default one (made, with no ceiling, on first use)."""
        if accountant is None:
            if BudgetAccountant._default is None:
                BudgetAccountant._default = BudgetAccountant()
            return BudgetAccountant._default
        if not isinstance(accountant, BudgetAccountant):
            raise InvalidParameterError("accountant", type(accountant).__name__, "a BudgetAccountant or None")
        return accountant

    def set_default(self) -> BudgetAccountant:
        """Make this the accountant of every release given none."""
        BudgetAccountant._default = self
        return self

    @staticmethod
    def pop_default() -> BudgetAccountant | None:
        """Remove the default accountant (the next use makes a fresh one) and return it."""
        default, BudgetAccountant._default = BudgetAccountant._default, None
        return default

    def __enter__(self) -> BudgetAccountant:
        self._old_default = BudgetAccountant.pop_default()
        return self.set_default()

    def __exit__(self, *exc: object) -> None:
        BudgetAccountant.pop_default()
        if self._old_default is not None:
            self._old_default.set_default()
        self._old_default = None

    # ------------------------------------------------------------------------- file
    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the ceiling and the releases to ``path`` (default: :attr:`path`) atomically."""
        dst = Path(path) if path is not None else self._path
        if dst is None:
            raise InvalidParameterError("path", None, "a file to save the budget to")
        data = {
            "deniable_budget": BUDGET_VERSION,
            "epsilon": None if math.isinf(self.epsilon) else self.epsilon,
            "releases": self._records,
        }
        return write_manifest(dst, data)

    @classmethod
    def load(cls, path: str | os.PathLike[str], epsilon: float | None = None) -> BudgetAccountant:
        """The accountant of a budget file (its ceiling unless ``epsilon`` is given)."""
        saved, _ = read_budget_file(path)
        return cls(saved if epsilon is None else epsilon, path=path)

    # --------------------------------------------------------------------- internals
    def _save(self) -> None:
        if self._path is not None:
            self.save()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """This accountant's lock, and the budget file's (re-read under it: other processes' spends count)."""
        with self._lock:
            if self._path is None:
                yield
                return
            lock = self._path.with_name(self._path.name + ".lock")
            with open(lock, "a+b") as fh:
                try:
                    import fcntl

                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
                except ImportError:  # pragma: no cover - Windows: one process per budget file
                    pass
                if self._path.exists():
                    self._records = read_budget_file(self._path)[1]
                yield

    def _finish(self, rid: str | None, record: Mapping[str, Any] | None, cancel: bool) -> None:
        if rid is None:
            return
        with self._locked():
            n = len(self._records)  # the newest first: a reservation is near the end
            at = next((i for i in range(n - 1, -1, -1) if self._records[i].get("reservation") == rid), None)
            if at is not None:
                if cancel:
                    del self._records[at]
                else:
                    new = dict(self._records[at]) if record is None else self._record_of(record)
                    new.pop("reservation", None)
                    self._records[at] = new
            self._save()

    def _compact(self) -> None:
        """Sum the older records per data set and column into one record each (memory and file stay
        bounded, e.g. the default accountant of a long-running process). Totals are kept exactly;
        a later reproduction of a summed release is counted again (an overcount, never an undercount)."""
        old = self._records[:-_KEEP_RECENT]
        kept = [r for r in old if "reservation" in r]  # runs still in progress stay as they are
        entries, _ = privacy_ledger([r for r in old if "reservation" not in r])
        summed = [
            {
                "manifest_version": 1,
                "mechanism": {"epsilon": e.epsilon},
                "release": {
                    "input": e.input,
                    "columns": [e.column],
                    "records": max(e.records, default=0),
                    "epsilon_per_word": e.epsilon,
                    "mechanism": "+".join(e.mechanisms),
                    "summed_releases": e.releases,
                },
            }
            for e in entries
        ]
        self._records = [*summed, *kept, *self._records[-_KEEP_RECENT:]]

    @staticmethod
    def _record_of(item: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
        m = item if isinstance(item, Mapping) else read_manifest(Path(item))
        return ledger_record(m)

    def _candidate(
        self,
        epsilon: float | None,
        dataset: str | os.PathLike[str] | None,
        columns: Sequence[str] | None,
        release: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        if release is not None:
            if epsilon is not None:
                raise InvalidParameterError("epsilon", epsilon, "None when release= is given")
            rec = self._record_of(release)
            rel = rec.setdefault("release", {})
            if rel.get("input") is None:
                rel["input"] = dataset_id(dataset)
            return rec
        if epsilon is None:
            raise InvalidParameterError("epsilon", None, "the epsilon of the release, or release=")
        return simple_release(epsilon, dataset_id(dataset), columns)

    def _check(self, records: list[dict[str, Any]], cand: Mapping[str, Any], name: str) -> float:
        """The cost of ``cand`` (0: a reproduction); :class:`BudgetError` if it takes a column over."""
        rel = cand.get("release") or {}
        inp = rel.get("input")
        cols = list(rel.get("columns") or ["(text)"])
        if math.isinf(self.epsilon):  # nothing to refuse: recorded as asked (the ledger tells reproductions)
            return float(rel.get("epsilon_per_word") or 0.0)
        before = self._per_column(records, inp, cols)
        after = self._per_column([*records, dict(cand)], inp, cols)
        cost = 0.0
        for col in cols:
            spent, total = before.get(col, 0.0), after.get(col, 0.0)
            cost = max(cost, total - spent)
            if total > spent and total > self.epsilon * (1 + _TOLERANCE):
                raise BudgetError(
                    spent=spent, asked=total - spent, budget=self.epsilon, dataset=str(inp), column=col, name=name
                )
        return cost

    @staticmethod
    def _per_column(records: list[dict[str, Any]], inp: Any, cols: Sequence[str]) -> dict[str, float]:
        mine = [r for r in records if (r.get("release") or {}).get("input") == inp]
        if not mine:
            return {}
        entries, _ = privacy_ledger(mine)
        return {e.column: e.epsilon for e in entries if e.column in cols}

    @staticmethod
    def _spent(records: list[dict[str, Any]], inp: str, cols: Sequence[str] | None) -> float:
        mine = [r for r in records if (r.get("release") or {}).get("input") == inp]
        if not mine:
            return 0.0
        entries, _ = privacy_ledger(mine)
        return max((e.epsilon for e in entries if cols is None or e.column in cols), default=0.0)


class Reservation:
    """A release checked and recorded before it is made (:meth:`BudgetAccountant.reserve`)."""

    def __init__(self, accountant: BudgetAccountant, rid: str | None, cost: float) -> None:
        self.accountant = accountant
        self.cost = cost
        self._rid = rid
        self._done = False

    def commit(self, record: Mapping[str, Any] | None = None) -> None:
        """The release was made: keep it (``record``: its run manifest, e.g. with the input digest)."""
        if not self._done:
            self._done = True
            self.accountant._finish(self._rid, record, cancel=False)

    def cancel(self) -> None:
        """The release was not made (nothing was written): take it back."""
        if not self._done:
            self._done = True
            self.accountant._finish(self._rid, None, cancel=True)
