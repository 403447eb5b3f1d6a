"""Opening inputs and writing outputs: gzip, encodings, atomic replacement, signals, file modes."""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import signal
import stat
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import IO, Any

from .._errors import DataError, InvalidParameterError
from .._progress import progress
from ._formats import check_output_name, is_gz, is_std

PARTIAL_SUFFIX = ".partial"
# mkstemp's random part: 8 characters of [a-z0-9_]; ours are prefixed by the writer's pid
_PARTIAL_MIDDLE = re.compile(r"(?:(\d+)-)?[a-z0-9_]{8}")


class _CheckedGzip(gzip.GzipFile):
    """A gzip reader whose truncated or corrupt input is a :class:`DataError` naming the file and offset."""

    def __init__(self, raw: IO[bytes], label: str) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw
        self._label = label

    def _fail(self) -> DataError:
        try:
            at = self._raw.tell()
        except (OSError, ValueError):  # pragma: no cover - a closed file
            at = -1
        return DataError(
            f"input file {self._label} is truncated or not valid gzip data (at byte {at} of the compressed file)"
        )

    def read(self, size: int | None = -1) -> bytes:
        try:
            return super().read(size)
        except (EOFError, OSError, zlib.error):
            raise self._fail() from None

    def read1(self, size: int = -1) -> bytes:
        try:
            return super().read1(size)
        except (EOFError, OSError, zlib.error):
            raise self._fail() from None

    def peek(self, n: int = 0) -> bytes:
        try:
            return super().peek(n)
        except (EOFError, OSError, zlib.error):
            raise self._fail() from None

    def readline(self, size: int | None = -1) -> bytes:
        try:
            return super().readline(size)
        except (EOFError, OSError, zlib.error):
            raise self._fail() from None


def _check_encoding(stream: Any, label: str) -> None:
    """Refuse a UTF-16 / UTF-32 input up front (its byte order mark names it)."""
    head = stream.peek(4)[:4] if hasattr(stream, "peek") else b""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or head.startswith(b"\x00\x00\xfe\xff"):
        kind = "UTF-32" if head in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff") else "UTF-16"
        raise DataError(
            f"input file {label} looks like {kind} (it starts with a {kind} byte order mark); convert it to UTF-8"
        )


@contextlib.contextmanager
def open_input(path: str | Path) -> Iterator[tuple[IO[bytes], Callable[[], int], int | None]]:
    """Yield (binary stream, position-in-bytes function, total bytes or None).

    ``.gz`` is decompressed (a truncated or corrupt file is a DataError naming the byte
    offset); a UTF-16/UTF-32 byte order mark is refused.
    """
    if is_std(path):
        if sys.stdin is None:  # started with standard input closed (`<&-`)
            raise InvalidParameterError("input", "-", "a file, or - with standard input open (it is closed)")
        _check_encoding(sys.stdin.buffer, "<stdin>")
        yield sys.stdin.buffer, lambda: 0, None
        return
    p = Path(path)
    if not p.is_file():
        raise DataError(f"input file {p} does not exist or is not a file")
    try:
        raw = open(p, "rb")
    except OSError as exc:
        raise DataError(f"cannot read input file {p}: {exc.strerror}") from None
    with raw:
        total = p.stat().st_size
        if total == 0:
            raise DataError(f"input file {p} is empty")
        stream: Any = _CheckedGzip(raw, str(p)) if is_gz(p) else raw
        _check_encoding(stream, str(p))
        yield stream, raw.tell, total


@contextlib.contextmanager
def open_input_with_progress(
    path: str | Path, description: str, show_progress: bool | None
) -> Iterator[tuple[IO[bytes], Callable[[], None]]]:
    """:func:`open_input` with a progress bar in bytes: yield (binary stream, ``tick``).

    ``tick()`` advances the bar to the stream's current position (no bar without a known size).
    """
    with open_input(path) as (stream, position, total):
        with progress(total, description, enabled=show_progress and total is not None) as advance:
            last = [0]

            def tick() -> None:
                now = position()
                advance(now - last[0])
                last[0] = now

            yield stream, tick


# ------------------------------------------------------------------------ output
def _umask() -> int:
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)  # pragma: no cover - not Linux
    os.umask(mask)  # pragma: no cover
    return mask  # pragma: no cover


def final_mode(dst: Path) -> int:
    """The permission bits a plain ``open(dst, "w")`` would give: the existing file's, or 0666 & ~umask."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(os.stat(dst).st_mode)
    return 0o666 & ~_umask()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process: alive
        return True
    return True


def remove_stale_temporaries(dst: Path, suffix: str = PARTIAL_SUFFIX) -> list[Path]:
    """Remove temporaries of ``dst`` left by a killed run (their writer's process is gone).

    A temporary whose name carries the pid of a live process (another run writing the
    same output right now) is kept; one without a pid (written by an older version) is stale.
    """
    prefix = f".{dst.name}."
    removed: list[Path] = []
    try:
        entries = list(os.scandir(dst.parent))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        m = _PARTIAL_MIDDLE.fullmatch(name[len(prefix) : len(name) - len(suffix)])
        if m is None:
            continue
        if m.group(1) is not None:
            pid = int(m.group(1))
            if pid == os.getpid() or _pid_alive(pid):
                continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def cleanup_on_signals() -> Iterator[None]:
    """Turn SIGTERM / SIGHUP into ``SystemExit`` for the block, so ``finally`` cleanups run.

    SIGINT already raises ``KeyboardInterrupt``. Handlers are installed only from the main
    thread and only where the default action (die without cleanup) is in place.
    """
    installed: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGHUP"):
            sig = getattr(signal, name, None)
            if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
                installed[sig] = signal.signal(sig, _exit_on_signal)
    try:
        yield
    finally:
        for sig, old in installed.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def temporary_beside(dst: Path, suffix: str = PARTIAL_SUFFIX) -> Iterator[tuple[int, Path]]:
    """A temporary file beside ``dst`` (fd, path), renamed onto ``dst`` if the block succeeds.

    Stale temporaries of ``dst`` are removed first; a signal (SIGTERM, SIGHUP, SIGINT) or an
    error removes the temporary; the final file gets the mode a plain write would give.
    """
    remove_stale_temporaries(dst, suffix)
    mode = final_mode(dst)
    with cleanup_on_signals():
        fd, name = tempfile.mkstemp(prefix=f".{dst.name}.{os.getpid()}-", suffix=suffix, dir=dst.parent)
        tmp = Path(name)
        try:
            yield fd, tmp
            os.chmod(tmp, mode)
            os.replace(tmp, dst)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


@contextlib.contextmanager
def atomic_output(path: str | Path, *, input_path: str | Path | None = None) -> Iterator[IO[bytes]]:
    """A binary stream that becomes ``path`` only if the block finishes without error.

    ``-`` is standard output (streamed). ``.gz`` output is compressed.
    """
    if is_std(path):
        if sys.stdout is None:  # started with standard output closed (`>&-`)
            raise InvalidParameterError("output", "-", "a file, or - with standard output open (it is closed)")
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    check_output_name(path)
    dst = Path(path)
    if input_path is not None and not is_std(input_path):
        with contextlib.suppress(OSError):
            if dst.exists() and dst.resolve() == Path(input_path).resolve():
                raise InvalidParameterError(
                    "output", str(dst), "a different file than the input (it would be overwritten)"
                )
    if dst.parent and not dst.parent.exists():
        raise DataError(f"output folder {dst.parent} does not exist")
    with temporary_beside(dst) as (fd, _tmp):
        with os.fdopen(fd, "wb") as raw:
            if is_gz(dst):
                with gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=0) as gz:
                    yield gz  # type: ignore[misc]
            else:
                yield raw
