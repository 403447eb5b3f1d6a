"""Input-independent artefacts: built once, verified, memory-mapped by every process.

An artefact is a folder of ``.npy`` files plus a ``manifest.json``, content-addressed
by the embedding's fingerprint, a *kind* (``"tem-knn"``, ...) and its parameters::

    $DENIABLE_CACHE/artefacts/<fingerprint>/prepared/<kind>/<sha256(params)[:16]>/

Everything stored here is a function of public data only (the embedding, the metric,
the parameters), never of text being privatized: this is the only place mechanisms
write to disk (see docs/tem.md, "What is stored").

- **Manifest**: kind, parameters, fingerprint, each file's size and sha256, build time.
  :func:`open_artefact` checks sizes and checksums before anything is used; a truncated
  or altered file raises :class:`ArtefactError` and :func:`prepare` rebuilds it. A file is
  hashed whole once (at build, or by the first process that finds it changed); its stamp
  (``verified.json``: inode, size, mtime, a hash of 16 sampled blocks) lets later processes
  skip the full hash while the file is unchanged. :func:`verify_artefacts`
  (``deniable prepare --verify``) hashes everything whole on demand.
- **Atomic and locked**: a build writes into a temporary folder that is renamed into
  place with its manifest, under an ``fcntl`` lock, so two processes preparing the same
  artefact do the work once and readers never see half of one. A killed build's
  temporary folder is removed by the next build of that artefact, listed by
  :func:`stale_temporaries` and deleted by :func:`remove_temporaries` (never one whose
  build still holds the lock).
- **Generic**: a kind is registered with :func:`register_kind` (a builder writing its
  files into a folder, and optionally a ``stale`` test for an artefact computed from
  other artefacts: an intact copy that no longer fits them is rebuilt, and not opened
  meanwhile). Each kind registers itself in the module that defines its builder (the store
  knows no kind and imports nothing above it); :func:`deniable.preparation.prepare` maps
  mechanism names to the kinds they use.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._cache import cache_dir, file_lock
from ._errors import DataError, InvalidParameterError
from ._progress import building
from ._threads import usable_cores

if TYPE_CHECKING:
    from .embedding import Vocabulary

__all__ = [
    "ArtefactError",
    "ArtefactInfo",
    "Temporary",
    "artefact_path",
    "build_artefact",
    "content_id",
    "describe_build",
    "file_sha256",
    "legacy_tem_folders",
    "list_artefacts",
    "obtain_artefact",
    "open_artefact",
    "register_kind",
    "remove_artefacts",
    "remove_temporaries",
    "stale_temporaries",
    "verify_artefacts",
]

MANIFEST = "manifest.json"
_FORMAT = 1

#: builder(embedding, params, folder, show_progress) writes the artefact's files into folder and
#: returns the sha256 of those it hashed while writing ({file name: hex}; the others are hashed after)
Builder = Callable[["Vocabulary", dict[str, Any], Path, "bool | None"], "dict[str, str] | None"]
#: a builder for one call (folder, show_progress), for an artefact whose inputs the caller holds in memory
CallBuilder = Callable[[Path, "bool | None"], "dict[str, str] | None"]

_KINDS: dict[str, Builder] = {}
#: whether an intact artefact of a kind no longer fits its inputs (other artefacts)
Stale = Callable[["Vocabulary", dict[str, Any], Path], bool]
_STALE: dict[str, Stale] = {}
_ABOUT: dict[str, str] = {}  # kind -> what it is and what reads it (register_kind's ``about``)
_verified: dict[tuple[str, int, int, int], bool] = {}  # (file, inode, size, mtime_ns) -> checked
_verified_lock = threading.Lock()


class ArtefactError(DataError):
    """A prepared artefact is damaged (truncated, altered, or its manifest is unreadable)."""


@dataclass(frozen=True)
class ArtefactInfo:
    """One prepared artefact: where it is and what its manifest says."""

    kind: str
    params: dict[str, Any]
    path: Path
    fingerprint: str
    files: dict[str, int]  # file name -> bytes
    build_seconds: float
    created: str

    @property
    def disk_bytes(self) -> int:
        """Bytes of the artefact's data files."""
        return sum(self.files.values())

    def file(self, name: str) -> Path:
        return self.path / name


def register_kind(kind: str, builder: Builder, stale: Stale | None = None, *, about: str | None = None) -> None:
    """Declare how to build artefacts of ``kind`` (one builder per kind).

    ``stale(embedding, params, path)``: whether an intact copy at ``path`` no longer fits
    the artefacts it was computed from (it is then rebuilt by :func:`build_artefact` and not
    returned by :func:`open_artefact`). ``about``: what the artefact is and what reads it
    (e.g. ``"the k-NN tables TEM samples from"``), for the line a build shows (:func:`describe_build`).
    """
    _KINDS[kind] = builder
    if about is not None:
        _ABOUT[kind] = about
    if stale is not None:
        _STALE[kind] = stale
    else:
        _STALE.pop(kind, None)


def describe_build(embedding: Vocabulary, kind: str) -> str:
    """The line a build of ``kind`` shows: what it builds, why, and that it is done once.

    A function of public data only (the kind, the vocabulary's size)."""
    about = _ABOUT.get(kind, f"the prepared artefact {kind}")
    return f"deniable: building {about}, for {embedding.size:,} words: once per embedding and settings, then reused"


def _is_stale(embedding: Vocabulary, kind: str, params: dict[str, Any], path: Path) -> bool:
    """The ``stale`` test registered for ``kind`` (none: never stale)."""
    stale = _STALE.get(kind)
    return stale is not None and stale(embedding, params, path)


def content_id(embedding: Vocabulary, kind: str, params: dict[str, Any]) -> str | None:
    """An id of the content of a prepared artefact (from its manifest's checksums; not verified), or None."""
    try:
        manifest = _read_manifest(artefact_path(embedding, kind, params))
    except (ArtefactError, OSError):
        return None
    sums = sorted((name, str(meta["sha256"])) for name, meta in manifest["files"].items())
    return hashlib.sha256(json.dumps(sums).encode()).hexdigest()


def _params_key(params: dict[str, Any]) -> str:
    text = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _root_of(embedding: Vocabulary) -> Path:
    return cache_dir() / "artefacts" / embedding.fingerprint[:20] / "prepared"


def artefact_path(embedding: Vocabulary, kind: str, params: dict[str, Any]) -> Path:
    """The folder of the artefact ``kind`` with ``params`` for ``embedding`` (not created)."""
    return _root_of(embedding) / kind / _params_key(params)


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes (hex)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
            raise ValueError("format")
        _info(path, manifest)  # every field present and of the right type
        if not all(isinstance(m.get("sha256"), str) for m in manifest["files"].values()):
            raise ValueError("sha256")
        return manifest
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ArtefactError(f"prepared artefact {path}: unreadable manifest ({type(exc).__name__})") from None


def _info(path: Path, manifest: dict[str, Any]) -> ArtefactInfo:
    return ArtefactInfo(
        kind=str(manifest["kind"]),
        params=dict(manifest["params"]),
        path=path,
        fingerprint=str(manifest["fingerprint"]),
        files={name: int(f["bytes"]) for name, f in manifest["files"].items()},
        build_seconds=float(manifest["build_seconds"]),
        created=str(manifest["created"]),
    )


#: The stamp of a verified artefact: per file, what a full check saw (inode, size, mtime) and a
#: sampled hash, so that a later process opening an unchanged file need not hash it whole.
STAMP = "verified.json"
_SAMPLE_BLOCKS = 16
_SAMPLE_BYTES = 64 * 1024


def _sample_hash(f: Path, size: int) -> str:
    """sha256 of the size and of 16 blocks of 64 KiB spread over the file (first and last included)."""
    h = hashlib.sha256(str(size).encode())
    fd = os.open(f, os.O_RDONLY)
    try:
        last = max(size - _SAMPLE_BYTES, 0)
        for k in range(_SAMPLE_BLOCKS):
            h.update(os.pread(fd, _SAMPLE_BYTES, last * k // (_SAMPLE_BLOCKS - 1)))
    finally:
        os.close(fd)
    return h.hexdigest()


def _stamp_entry(f: Path, st: os.stat_result) -> dict[str, Any]:
    return {"inode": st.st_ino, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "sample": _sample_hash(f, st.st_size)}


def _read_stamp(path: Path) -> dict[str, Any]:
    try:
        stamp = json.loads((path / STAMP).read_text(encoding="utf-8"))
        return stamp if isinstance(stamp, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_stamp(path: Path, stamp: dict[str, Any]) -> None:
    """Best effort (a read-only shared cache keeps checking in full, once per process)."""
    tmp = path / f".{STAMP}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.write_text(json.dumps(stamp, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path / STAMP)
    except OSError:
        tmp.unlink(missing_ok=True)


def _stamped(f: Path, st: os.stat_result, entry: object) -> bool:
    """Whether ``f`` is the file a full check stamped: same inode, size, mtime and sampled blocks."""
    if not isinstance(entry, dict):
        return False
    if (entry.get("inode"), entry.get("bytes"), entry.get("mtime_ns")) != (st.st_ino, st.st_size, st.st_mtime_ns):
        return False
    return entry.get("sample") == _sample_hash(f, st.st_size)


def _verify(path: Path, manifest: dict[str, Any], *, full: bool = False) -> None:
    """Raise ArtefactError unless every file has the size and checksum of the manifest.

    A file is hashed whole once: after a full check its stamp (:data:`STAMP`: inode, size,
    mtime and a sampled hash) is recorded, and a later process accepts a file that still
    matches its stamp without hashing it again. A changed size is refused at once; a
    changed mtime, inode or sampled block means a full check again. ``full=True``
    (``deniable prepare --verify``) hashes every file whole regardless.
    """
    stamp = _read_stamp(path)
    changed = False
    for name, meta in manifest["files"].items():
        f = path / name
        try:
            st = f.stat()
        except OSError:
            raise ArtefactError(f"prepared artefact {path}: file {name} is missing") from None
        if st.st_size != int(meta["bytes"]):
            raise ArtefactError(
                f"prepared artefact {path}: file {name} has {st.st_size:,} bytes, the manifest says "
                f"{int(meta['bytes']):,} (truncated?)"
            )
        key = (str(f), st.st_ino, st.st_size, st.st_mtime_ns)
        if not full:
            with _verified_lock:
                if _verified.get(key):
                    continue
            if _stamped(f, st, stamp.get(name)):
                with _verified_lock:
                    _verified[key] = True
                continue
        if file_sha256(f) != meta["sha256"]:
            raise ArtefactError(f"prepared artefact {path}: file {name} does not match its checksum (altered?)")
        with _verified_lock:
            _verified[key] = True
        stamp[name] = _stamp_entry(f, st)
        changed = True
    if changed:
        _write_stamp(path, {k: v for k, v in stamp.items() if k in manifest["files"]})


def verify_artefacts(embedding: Vocabulary | None = None) -> list[tuple[ArtefactInfo, str | None]]:
    """Hash every file of every prepared artefact (of ``embedding``, or of all) whole against its
    manifest, whatever its stamp says: ``(info, None)`` when intact, ``(info, what is wrong)`` else."""
    out: list[tuple[ArtefactInfo, str | None]] = []
    for info in list_artefacts(embedding):
        try:
            _verify(info.path, _read_manifest(info.path), full=True)
            out.append((info, None))
        except ArtefactError as exc:
            out.append((info, str(exc)))
    return out


def _damaged_hint(kind: str) -> str:
    return f"; rebuild it with `deniable prepare` (or deniable.prepare()), or delete it (kind {kind})"


def open_artefact(embedding: Vocabulary, kind: str, params: dict[str, Any]) -> ArtefactInfo | None:
    """The verified artefact, or None when it was never prepared.

    Raises :class:`ArtefactError` when it exists but is damaged: it is never used then.
    """
    path = artefact_path(embedding, kind, params)
    if not (path / MANIFEST).is_file():
        return None
    try:
        manifest = _read_manifest(path)
        _verify(path, manifest)
    except ArtefactError as exc:
        raise ArtefactError(str(exc) + _damaged_hint(kind)) from None
    if _is_stale(embedding, kind, params, path):
        return None  # computed from other inputs than those prepared now: as if never prepared
    return _info(path, manifest)


def obtain_artefact(
    embedding: Vocabulary,
    kind: str,
    params: dict[str, Any],
    *,
    notice: str | None = None,
    builder: CallBuilder | None = None,
) -> ArtefactInfo:
    """The verified artefact, built now (once, under its lock) when it is missing or damaged.

    ``notice`` (one line, no user text) describes the build in its log records (the CLI
    shows it on stderr when the build takes over a second); nothing is logged when the
    artefact is already prepared. ``builder`` as for :func:`build_artefact`.
    """
    try:
        info = open_artefact(embedding, kind, params)
    except ArtefactError:
        info = None  # damaged: rebuilt below
    if info is not None:
        return info
    return build_artefact(embedding, kind, params, builder=builder, description=notice)


def build_artefact(
    embedding: Vocabulary,
    kind: str,
    params: dict[str, Any],
    *,
    show_progress: bool | None = None,
    rebuild: bool = False,
    builder: CallBuilder | None = None,
    description: str | None = None,
) -> ArtefactInfo:
    """Build the artefact unless a verified copy exists; the work is done once across processes.

    Under the artefact's lock: an existing copy is verified and returned; a damaged one
    (or any with ``rebuild=True``) is removed; then the builder writes into a temporary
    folder, the manifest (sizes, sha256, build time) is written, and the folder is renamed
    into place. ``builder(folder, show_progress)`` replaces the registered builder of
    ``kind`` for this call (a caller that holds the inputs in memory, e.g. given codes).
    The build is logged (:func:`deniable._progress.building`) with ``description``.
    """
    registered = _KINDS.get(kind)
    if registered is None:
        # a kind registers itself where its builder is defined: importing that module (the
        # mechanism or index that reads the artefact) registers it
        raise InvalidParameterError("kind", kind, "a registered kind: " + ", ".join(sorted(_KINDS)))
    path = artefact_path(embedding, kind, params)
    with file_lock(path.parent / f"{path.name}.lock"):
        if (path / MANIFEST).is_file() and not rebuild:
            try:
                manifest = _read_manifest(path)
                _verify(path, manifest)
                if not _is_stale(embedding, kind, params, path):
                    return _info(path, manifest)
            except ArtefactError:
                pass  # damaged (or stale): rebuilt below
        if path.exists():
            shutil.rmtree(path)
        for old in path.parent.glob(f"{_TMP}{path.name}-*"):  # an interrupted build's (we hold its lock)
            shutil.rmtree(old, ignore_errors=True)
        tmp = path.parent / f"{_TMP}{path.name}-{uuid.uuid4().hex}"
        tmp.mkdir(parents=True)
        what = description or describe_build(embedding, kind)
        try:
            t0 = time.perf_counter()
            with building(what, enabled=show_progress):
                if builder is not None:
                    sums = builder(tmp, show_progress) or {}
                else:
                    sums = registered(embedding, params, tmp, show_progress) or {}
            seconds = time.perf_counter() - t0
            built = sorted(tmp.iterdir())
            todo = [f for f in built if not sums.get(f.name)]
            # the files at once, one per core (hashlib lets go of the GIL): the k-NN tables' 1.4 GB at 400k
            # words in 0.9-1.1 s against 1.4-1.5 s one after the other
            with ThreadPoolExecutor(max(1, min(len(todo), usable_cores()))) as pool:
                sums = {**sums, **dict(zip((f.name for f in todo), pool.map(file_sha256, todo), strict=True))}
            files = {f.name: {"bytes": f.stat().st_size, "sha256": sums[f.name]} for f in built}
            manifest = {
                "format": _FORMAT,
                "kind": kind,
                "params": params,
                "fingerprint": embedding.fingerprint,
                "files": files,
                "build_seconds": round(seconds, 3),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
            # checked as written: the stamp lets the next process skip hashing (a rename keeps inode and mtime)
            _write_stamp(tmp, {name: _stamp_entry(tmp / name, (tmp / name).stat()) for name in files})
            os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return _info(path, manifest)


def _folders(embedding: Vocabulary | None) -> list[Path]:
    """Artefact folders that have a manifest (of ``embedding``, or of every embedding)."""
    fp = embedding.fingerprint[:20] if embedding is not None else "*"
    return [m.parent for m in sorted((cache_dir() / "artefacts").glob(f"{fp}/prepared/*/*/{MANIFEST}"))]


def list_artefacts(embedding: Vocabulary | None = None) -> list[ArtefactInfo]:
    """Prepared artefacts (of ``embedding``, or of every embedding), from their manifests.

    Checksums are not recomputed here (that is done when an artefact is opened); a folder
    whose manifest is unreadable is left out (:func:`remove_artefacts` deletes it).
    """
    out = []
    for path in _folders(embedding):
        try:
            out.append(_info(path, _read_manifest(path)))
        except ArtefactError:
            continue
    return out


_TMP = ".tmp-"


@dataclass(frozen=True)
class Temporary:
    """The folder an interrupted build left behind (killed before its rename)."""

    path: Path
    disk_bytes: int


def _lock_of(tmp: Path) -> Path:
    """The lock of the artefact a temporary folder ``.tmp-<name>-<uuid>`` was building."""
    return tmp.parent / f"{tmp.name[len(_TMP) :].rsplit('-', 1)[0]}.lock"


@contextmanager
def _unless_building(lock: Path) -> Iterator[bool]:
    """Take ``lock`` without waiting: True (held for the block) when no build runs, else False."""
    import fcntl

    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        yield True  # never locked: nothing can be building it
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _temporary_folders(embedding: Vocabulary | None) -> list[Path]:
    fp = embedding.fingerprint[:20] if embedding is not None else "*"
    return sorted(p for p in (cache_dir() / "artefacts").glob(f"{fp}/prepared/*/{_TMP}*") if p.is_dir())


def stale_temporaries(embedding: Vocabulary | None = None) -> list[Temporary]:
    """Folders interrupted builds left in the cache (of ``embedding``, or of every one).

    A temporary whose artefact is being built now (its lock is held by a live process)
    is not stale and is left out. :func:`remove_temporaries` deletes the stale ones; a
    later build of the same artefact deletes its own.
    """
    out = []
    for tmp in _temporary_folders(embedding):
        with _unless_building(_lock_of(tmp)) as free:
            if free:
                out.append(Temporary(tmp, _tree_bytes(tmp)))
    return out


def remove_temporaries(embedding: Vocabulary | None = None) -> list[Temporary]:
    """Delete the stale temporaries (:func:`stale_temporaries`); returns what was removed.

    Each is removed holding its artefact's lock, so a build starting meanwhile waits.
    """
    removed = []
    for tmp in _temporary_folders(embedding):
        with _unless_building(_lock_of(tmp)) as free:
            if free and tmp.is_dir():
                size = _tree_bytes(tmp)
                shutil.rmtree(tmp, ignore_errors=True)
                removed.append(Temporary(tmp, size))
    return removed


def legacy_tem_folders(embedding: Vocabulary | None = None) -> list[Path]:
    """Folders of the TEM disk cache of versions before 2026-11-23 (``artefacts/<fp>/tem``).

    They hold the tables of the words those versions privatized (so they record which
    words were privatized): :func:`remove_artefacts` deletes them.
    """
    root = cache_dir() / "artefacts"
    pattern = f"{embedding.fingerprint[:20]}/tem" if embedding is not None else "*/tem"
    return sorted(p for p in root.glob(pattern) if p.is_dir())


def remove_artefacts(
    embedding: Vocabulary | None = None, artefacts: Iterable[tuple[str, dict[str, Any]]] | None = None
) -> list[ArtefactInfo]:
    """Delete prepared artefacts (of ``embedding``; only ``(kind, params)`` in ``artefacts`` if
    given, see :func:`planned_artefacts`); returns what was removed.

    Without ``artefacts``, the legacy TEM folders (:func:`legacy_tem_folders`) and the
    stale temporaries of interrupted builds (:func:`remove_temporaries`) go too.
    """
    wanted = None if artefacts is None else {(k, _params_key(p)) for k, p in artefacts}
    if wanted is None:
        remove_temporaries(embedding)
        for folder in legacy_tem_folders(embedding):
            shutil.rmtree(folder, ignore_errors=True)
        listed = {i.path for i in list_artefacts(embedding)}
        for folder in _folders(embedding):
            if folder not in listed:  # an unreadable manifest
                shutil.rmtree(folder, ignore_errors=True)
    removed = []
    for info in list_artefacts(embedding):
        if wanted is None or (info.kind, _params_key(info.params)) in wanted:
            with file_lock(info.path.parent / f"{info.path.name}.lock"):
                shutil.rmtree(info.path, ignore_errors=True)
            removed.append(info)
    return removed
