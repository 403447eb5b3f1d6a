"""Privatize a file, and the run manifest written beside every output.

:func:`privatize_file` is what ``deniable privatize`` calls; the engines
(:mod:`deniable.integrations`) write the same :func:`run_manifest` beside their output.
A manifest records how an output was made -- mechanism and its parameters, embedding
fingerprint, vocabulary / OOV / case policies, counts, library version, start and end
time, engine -- and never any text (nor a value derived from one text).
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import DataError, NotPrivateWarning
from ._random import RandomState

if TYPE_CHECKING:
    from .privatizer import Privatizer, PrivatizeStats

__all__ = [
    "MANIFEST_FOLDER_NAME",
    "MANIFEST_SUFFIX",
    "manifest_path",
    "privatize_file",
    "read_manifest",
    "run_manifest",
    "write_manifest",
]

MANIFEST_SUFFIX = ".manifest.json"
#: The manifest's name inside an output folder (Spark-style partitioned output).
MANIFEST_FOLDER_NAME = "_MANIFEST.json"
MANIFEST_VERSION = 1


def now() -> str:
    """The current UTC time, ISO 8601 (seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def manifest_path(output: str | Path) -> Path:
    """``<output>.manifest.json`` beside a file, ``<output>/_MANIFEST.json`` inside a folder."""
    out = Path(output)
    if out.is_dir():
        return out / MANIFEST_FOLDER_NAME
    return out.with_name(out.name + MANIFEST_SUFFIX)


def run_manifest(
    privatizer: Privatizer,
    stats: PrivatizeStats,
    *,
    started: str,
    finished: str,
    engine: str = "local",
    embedding: str | None = None,
    vocabulary: str | None = None,
    columns: Sequence[str] | None = None,
    format: str | None = None,
    seeded: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest of a run: parameters, fingerprints, policies and counts -- never text."""
    from . import __version__

    mech = privatizer.mechanism
    emb = mech.embedding
    policy = privatizer.describe()
    manifest: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "library": "deniable",
        "version": __version__,
        "engine": engine,
        "mechanism": _jsonable(mech.describe()),
        "embedding": {
            "source": embedding or "glove-6b-50d",
            "name": emb.name,
            "fingerprint": emb.fingerprint,
            "size": emb.size,
            "dim": emb.dim,
        },
        "vocabulary": vocabulary,
        "oov": privatizer.oov,
        "case": privatizer.case,
        "case_sensitive_vocabulary": policy["case_sensitive_vocabulary"],
        "not_protected": policy["not_protected"],
        "seeded": seeded,
        "format": format,
        "columns": list(columns or []),
        # only what the output itself reveals (it keeps every text and its word tokens): how many
        # tokens changed or were out of vocabulary depends on the input beyond the guarantee, so it
        # is shown to the operator on stderr and never persisted beside a release
        "counts": {"texts": stats.texts, "tokens": stats.tokens},
        "started": started,
        "finished": finished,
    }
    if extra:
        manifest.update(_jsonable(dict(extra)))
    return manifest


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
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


def privatize_file(
    src: str | Path,
    dst: str | Path,
    privatizer: Privatizer,
    *,
    columns: Sequence[str] | None = None,
    format: str | None = None,
    batch_size: int = 1000,
    random_state: RandomState = None,
    show_progress: bool | None = None,
    manifest: bool = True,
    embedding: str | None = None,
    vocabulary: str | None = None,
) -> PrivatizeStats:
    """Privatize the text of ``src`` (its ``columns``) into ``dst``; return the counts.

    The output is written atomically (:func:`deniable.io.transform_file`), then the run
    manifest ``<dst>.manifest.json`` (not for ``dst="-"``, nor with ``manifest=False``).
    ``embedding`` and ``vocabulary`` only label the manifest (where the embedding came
    from); its fingerprint is always computed from the embedding itself.
    """
    from ._random import check_random_state
    from .io import detect_format, transform_file
    from .privatizer import PrivatizeStats

    fmt = detect_format(src, format)
    if random_state is not None:
        rng = check_random_state(random_state, stacklevel=2)
    else:
        rng = None
    started = now()
    totals = PrivatizeStats()

    def fn(texts: list[str]) -> list[str]:
        out, stats = privatizer.privatize_batch_with_stats(texts, rng)
        totals.__iadd__(stats)
        return out

    transform_file(src, dst, fn, columns=columns, format=format, batch_size=batch_size, show_progress=show_progress)
    if manifest and str(dst) != "-":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)
            m = run_manifest(
                privatizer,
                totals,
                started=started,
                finished=now(),
                embedding=embedding,
                vocabulary=vocabulary,
                columns=columns,
                format=fmt,
                seeded=random_state is not None or privatizer.random_state is not None,
            )
        write_manifest(manifest_path(dst), m)
    return totals
