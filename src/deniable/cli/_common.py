"""Shared CLI pieces: the app, error handling, loading the embedding, the options generated from the
registry's mechanism declarations (the other shared options are declared in ``_options``)."""

from __future__ import annotations

import contextlib
import errno
import inspect
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape

from .._errors import DeniableError, InvalidParameterError, NotPrivateWarning
from ..mechanisms.registry import Option

if TYPE_CHECKING:
    from ..embedding import Vocabulary
    from ..mechanisms.base import Mechanism

T = TypeVar("T")

app = typer.Typer(
    name="deniable",
    help="Privatize text with metric differential privacy (multivariate Laplace, TEM, BRR), "
    "calibrate epsilon, and evaluate what privacy costs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

# soft_wrap: an error is one line, also when stderr is a file or a pipe (no wrap at 80 columns).
err = Console(stderr=True, soft_wrap=True)


def stdout_console() -> Console:
    """A console for tables on stdout: the terminal's width, or 200 columns when piped (rich would cut at 80)."""
    out = Console()
    return out if out.is_terminal else Console(width=200)


EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_DATA = 3
#: standard output's reader went away (``deniable privatize big.txt -o - | head``): 128 + SIGPIPE,
#: the status a shell reports for a Unix tool (cat, grep) stopped the same way; nothing is printed
EXIT_BROKEN_PIPE = 141


@app.callback()
def _root(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="On an unexpected error, print its traceback (it may quote input text). Also DENIABLE_DEBUG=1.",
        ),
    ] = False,
) -> None:
    """Privatize text with metric differential privacy."""


class _BuildNotices(logging.Handler):
    """The library's long one-time work (:func:`deniable._progress.building`) as lines on
    stderr: what is built and why when it is still running after a second (the outermost build
    of each thread), and "...: done in N s" when a build so announced ends. Off a terminal (a
    log file, CI) these two lines are all that shows; on one, the bars show the work instead."""

    def __init__(self, after: float = 1.0) -> None:
        super().__init__(logging.INFO)
        self.after = after
        self._open: dict[int, list[_Notice | None]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        from .._progress import BUILD

        stage = getattr(record, BUILD, None)
        stack = self._open.setdefault(record.thread or 0, [])
        if stage == "start":
            notice = None
            if not stack:
                notice = _Notice(self.after, record.getMessage())
            stack.append(notice)
        elif stage == "end" and stack:
            notice = stack.pop()
            if notice is not None:
                notice.finish(record.getMessage())


class _Notice:
    """One build's start line, said after ``after`` seconds, and its end line if the start was said."""

    def __init__(self, after: float, message: str) -> None:
        self._lock = threading.Lock()
        self._said = False
        self._timer = threading.Timer(after, self._start, (message,))
        self._timer.daemon = True
        self._timer.start()

    def _start(self, message: str) -> None:
        with self._lock:
            self._said = _say(message)

    def finish(self, message: str) -> None:
        self._timer.cancel()
        with self._lock:
            if self._said:
                _say(message)


def _say(message: str) -> bool:
    """Print ``message`` on stderr unless a progress display is on screen (it shows the work); True if printed."""
    from .. import _progress

    if _progress._bar is not None:
        return False
    err.print(escape(message), highlight=False)
    return True


def _cause(exc: BaseException) -> tuple[str, int] | None:
    """A user-facing message and exit code for the exceptions whose cause we can name
    (never their message, which may quote input text), or None."""
    if isinstance(exc, OSError) and exc.errno is not None:
        what = os.strerror(exc.errno).lower()
        path = exc.filename2 if isinstance(exc.filename2, str) else exc.filename  # a rename: its target
        where = f": {path}" if isinstance(path, str) else ""
        hints = {
            errno.EACCES: "check the permissions of the file or folder (an output folder must be writable)",
            errno.EPERM: "check the permissions of the file or folder",
            errno.EROFS: "write the output to a writable file system",
            errno.EISDIR: "give a file name, not a folder",
            errno.ENOTDIR: "a part of the path is a file, not a folder",
            errno.ENOENT: "check the path",
            errno.ENOSPC: "free some disk space or write elsewhere",
            errno.EEXIST: "remove it or choose another name",
        }
        hint = hints.get(exc.errno)
        code = EXIT_DATA if exc.errno == errno.ENOSPC else EXIT_USAGE
        return f"{what}{where}" + (f" ({hint})" if hint else ""), code
    if isinstance(exc, ImportError):
        package = _failing_package(exc)
        return (
            f"the installed package '{package}' failed to import ({type(exc).__name__}); it may be built for "
            f"another version of its dependencies (e.g. numpy): reinstall it with "
            f"`pip install --force-reinstall {package}`, or run with --debug for the traceback",
            EXIT_DATA,
        )
    if isinstance(exc, MemoryError):
        return "out of memory (try a smaller --batch-size, a smaller --vocab-size, or a machine with more memory)", (
            EXIT_DATA
        )
    return None


def _broken_pipe(exc: SystemExit) -> bool:
    """Whether typer (or click) raised ``exc`` on a write to a closed pipe (its EPIPE handler exits 1)."""
    cause = exc.__context__
    return isinstance(cause, OSError) and cause.errno == errno.EPIPE


def _reader_gone() -> int:
    """Standard output's reader went away: stop quietly with :data:`EXIT_BROKEN_PIPE`.

    As Python's documentation advises, standard output is pointed at ``os.devnull`` so that
    the flush at exit cannot fail again (and print "Exception ignored ...").
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    return EXIT_BROKEN_PIPE


def _failing_package(exc: ImportError) -> str:
    """The top-level package an ImportError comes from: its ``name``, else the deepest frame outside deniable."""
    import traceback

    if exc.name:
        return exc.name.split(".")[0]
    package = "unknown"
    for frame in traceback.extract_tb(exc.__traceback__):
        parts = Path(frame.filename).parts
        for marker in ("site-packages", "dist-packages"):
            if marker in parts and parts.index(marker) + 1 < len(parts):
                top = parts[parts.index(marker) + 1].removesuffix(".py")
                if top != "deniable":
                    package = top
    return package


def _show_warning(message: Warning | str, category: type[Warning], *_args: object, **_kwargs: object) -> None:
    err.print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False)


def run_app(argv: list[str] | None = None) -> int:
    """Run the typer app; map our errors to a message and a non-zero exit code.

    Usage errors (unknown option, missing argument) exit with 2 via click; our own
    errors print one line (never user text) and exit with 2 (bad parameter) or 3 (bad data).
    Exceptions whose cause is known are named without their message (:func:`_cause`: a
    file-system error with its path and a hint, exit 2, or 3 for a full disk; an optional
    package that fails to import, with the fix, exit 3; out of memory, exit 3). Any other
    exception is a bug: only its type is printed (its message could quote the input) and
    the exit code is 1; ``--debug`` (anywhere on the line) or ``DENIABLE_DEBUG=1`` adds
    its traceback. Long one-time work of the library (an index, prepared tables) is shown
    as one line on stderr when it takes over a second (:class:`_BuildNotices`). Output
    files are written atomically, so a failed run leaves none behind. Library warnings
    (e.g. NotPrivateWarning) print as one ``warning:`` line, without the source location.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = os.environ.get("DENIABLE_DEBUG", "").strip().lower() in ("1", "true", "yes") or "--debug" in args
    args = [a for a in args if a != "--debug"]  # accepted anywhere on the line, not only before the command
    notices = _BuildNotices()
    logger = logging.getLogger("deniable")
    level = logger.level
    logger.addHandler(notices)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        return _run(args, debug)
    finally:
        logger.removeHandler(notices)
        logger.setLevel(level)


def _run(argv: list[str], debug: bool) -> int:
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            app(args=argv, standalone_mode=True)
    except SystemExit as exc:
        if _broken_pipe(exc):
            return _reader_gone()
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BrokenPipeError:
        return _reader_gone()
    except DeniableError as exc:
        if isinstance(exc, InvalidParameterError) and not exc.name.startswith("-"):
            # the library names its parameters; the user knows the flags
            flag = flag_names(argv).get(exc.name)
            if flag is not None:
                exc = InvalidParameterError(flag, exc.value, exc.allowed)
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return EXIT_USAGE if isinstance(exc, InvalidParameterError) else EXIT_DATA
    except KeyboardInterrupt:
        err.print("aborted")
        return 130
    except Exception as exc:  # last resort: never the message (it may hold user text); a traceback only on --debug
        if debug:
            import traceback

            err.print("[yellow]--debug:[/] the traceback below may quote input text", highlight=False)
            traceback.print_exception(exc, file=sys.stderr)
        known = _cause(exc)
        if known is not None:
            err.print(f"[bold red]error:[/] {escape(known[0])}", highlight=False)
            return known[1]
        err.print(
            f"[bold red]error:[/] unexpected internal error ({escape(type(exc).__name__)}); "
            "its message is not shown because it may contain input text. Please report it"
            + ("." if debug else " (run with --debug or DENIABLE_DEBUG=1 for the traceback)."),
            highlight=False,
        )
        return EXIT_INTERNAL
    return 0


def warn_seed(seed: int | None) -> None:
    if seed is not None:
        err.print(
            f"[yellow]warning:[/] --seed {seed} makes the output reproducible; seeded output is "
            "NOT private. Use it for experiments only."
        )


def seeded(seed: int | None) -> np.random.Generator:
    """A generator for ``--seed`` (warning printed once, by the caller) or the secure default."""
    from .._random import check_random_state, seeded_generator

    if seed is None:
        return check_random_state(None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return seeded_generator(seed)


def load_embedding_option(embedding: str | None, vocab_size: int | None, vocabulary: str = "words") -> Vocabulary:
    from ..embedding import load_embedding

    if vocab_size is not None and vocab_size < 1:
        raise InvalidParameterError("--vocab-size", vocab_size, "an integer >= 1")
    return load_embedding(embedding, vocab_size=vocab_size, vocabulary=vocabulary)


def parse_list(name: str, text: str, convert: Callable[[str], T], kind: str, example: str) -> list[T]:
    """``"5,7,9"`` -> ``[convert("5"), ...]`` with a clear error naming the flag."""
    try:
        values = [convert(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidParameterError(name, text, f"comma-separated {kind}s, e.g. {example}") from None
    if not values:
        raise InvalidParameterError(name, text, f"at least one {kind}")
    return values


def parse_floats(name: str, text: str) -> list[float]:
    """``"5,7,9"`` -> [5.0, 7.0, 9.0], each a valid epsilon."""
    from .._validation import check_epsilon

    return [check_epsilon(v, name) for v in parse_list(name, text, float, "number", "5,7,9")]


def parse_ints(name: str, text: str, minimum: int = 1) -> list[int]:
    """``"50,200"`` -> [50, 200], each >= ``minimum``."""
    from .._validation import check_int

    return [check_int(name, v, minimum=minimum) for v in parse_list(name, text, int, "integer", "50,200,1000")]


# -- mechanism options, generated from the registry's declarations ----------------------------
#: Prefix of the generated keyword parameters (never a flag name: flags come from the declarations).
_PREFIX = "mechopt_"


@dataclass(frozen=True)
class _Flag:
    """One generated flag: the declared options (per mechanism) it sets."""

    flag: str
    type: type
    per_mechanism: dict[str, Option]

    @property
    def param(self) -> str:
        return _PREFIX + self.flag.lstrip("-").replace("-", "_")

    def help(self) -> str:
        parts = []
        for mech, opt in self.per_mechanism.items():
            text = opt.help
            if opt.choices is not None:
                text += " [" + "|".join(str(c) for c in opt.choices) + "]"
            if opt.default is not None:
                text += f" (default {opt.default})"
            parts.append(f"{mech}: {text}.")
        return " ".join(parts)


def generated_flags() -> dict[str, _Flag]:
    """``--flag -> _Flag`` for every command-line option of every registered mechanism."""
    from ..mechanisms import mechanism_names, options_of

    flags: dict[str, _Flag] = {}
    for mech in mechanism_names():
        for opt in options_of(mech):
            if not opt.cli or opt.type is dict:
                continue
            found = flags.get(opt.cli_flag)
            if found is None:
                flags[opt.cli_flag] = found = _Flag(opt.cli_flag, opt.type, {})
            elif found.type is not opt.type:
                raise TypeError(f"{opt.cli_flag}: declared as {found.type.__name__} and {opt.type.__name__}")
            found.per_mechanism[mech] = opt
    return flags


@dataclass(frozen=True)
class MechanismFlags:
    """The mechanism flags given on a command line (``--flag -> value``, unset ones left out)."""

    given: dict[str, Any]

    def for_mechanism(self, mechanism: str) -> dict[str, Any]:
        """Constructor options of ``mechanism``; a flag it does not take is rejected (exit 2)."""
        return self.for_mechanisms([mechanism], each=True)[mechanism]

    def for_mechanisms(self, mechanisms: list[str], *, each: bool = False) -> dict[str, dict[str, Any]]:
        """Options per mechanism: each flag goes to every chosen mechanism that declares it.

        A flag that no chosen mechanism takes is rejected (with ``each=True``: a flag that
        any chosen mechanism does not take).
        """
        from ..mechanisms import options_of, validate_options

        names = [check_mechanism_name(m) for m in mechanisms]
        per: dict[str, dict[str, Any]] = {m: {} for m in names}
        for flag, value in self.given.items():
            takers = [m for m in names if any(o.cli_flag == flag for o in options_of(m))]
            if not takers or (each and len(takers) < len(names)):
                missing = next(m for m in names if m not in takers)
                raise InvalidParameterError(flag, value, f"not an option of --mechanism {missing}")
            for m in takers:
                opt = next(o for o in options_of(m) if o.cli_flag == flag)
                per[m][opt.name] = value
        for m in names:
            try:
                per[m] = validate_options(m, per[m])
            except InvalidParameterError as exc:
                flag = next((o.cli_flag for o in options_of(m) if o.name == exc.name), exc.name)
                raise InvalidParameterError(flag, exc.value, exc.allowed) from None
        return per


class MechanismCommand:
    """A command whose mechanism flags are generated from the registry each time typer reads it.

    The wrapped function takes ``mechanism_flags: MechanismFlags`` instead of one parameter per
    option; the signature typer sees (``__signature__``, recomputed on every read) has one
    ``typer.Option`` per declared command-line option of every registered mechanism, so a
    mechanism registered later shows up in ``--help`` with no other edit.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__

    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        return {}  # typer reads the types from __signature__ (Annotated), not from here

    @property
    def __signature__(self) -> inspect.Signature:
        base = inspect.signature(self.func, eval_str=True)
        params = [p for p in base.parameters.values() if p.name != "mechanism_flags"]
        own: set[str] = set()
        for p in params:
            for meta in getattr(p.annotation, "__metadata__", ()):
                decls = [meta.default] if isinstance(meta.default, str) else []
                own.update(d for d in (*decls, *(meta.param_decls or ())) if d.startswith("--"))
        for flag in generated_flags().values():
            if flag.flag in own:
                raise TypeError(f"mechanism option {flag.flag} collides with an option of {self.__name__}")
            kind: Any = flag.type | None
            annotation = Annotated[kind, typer.Option(flag.flag, help=flag.help(), show_default=False)]
            params.append(
                inspect.Parameter(flag.param, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
            )
        return base.replace(parameters=params, return_annotation=inspect.Signature.empty)

    def __call__(self, **kwargs: Any) -> Any:
        given = {}
        for flag in generated_flags().values():
            value = kwargs.pop(flag.param, None)
            if value is not None:
                given[flag.flag] = value
        return self.func(**kwargs, mechanism_flags=MechanismFlags(given))


def mechanism_command(name: str) -> Callable[[Callable[..., Any]], MechanismCommand]:
    """``@app.command(name)`` for a command that takes the generated mechanism flags."""

    def decorate(func: Callable[..., Any]) -> MechanismCommand:
        cmd = MechanismCommand(func)
        app.command(name)(cmd)
        return cmd

    return decorate


def build_mechanism(mechanism: str, embedding: Any, epsilon: float, flags: MechanismFlags) -> Mechanism:
    """The mechanism ``--mechanism`` names, with the flags given for it."""
    from ..mechanisms import make_mechanism

    options = flags.for_mechanism(mechanism)
    return make_mechanism(mechanism, embedding, epsilon, **options)


def check_mechanism_name(mechanism: str, flag: str = "--mechanism") -> str:
    """Fail fast (before loading an embedding) on an unknown mechanism given by ``flag``."""
    from ..mechanisms import mechanism_class

    try:
        mechanism_class(mechanism)
    except InvalidParameterError as exc:
        raise InvalidParameterError(flag, exc.value, exc.allowed) from None
    return mechanism


def flag_names(argv: list[str]) -> dict[str, str]:
    """Library parameter name -> the flag (or argument) of the command in ``argv`` that sets it."""
    out: dict[str, str] = {}
    try:
        root = cmd = typer.main.get_command(app)
        for token in argv:  # down through groups: `bow privatize` is the command privatize of the group bow
            sub = getattr(cmd, "commands", {}).get(token)
            if sub is None:
                break
            cmd = sub
    except Exception:  # noqa: BLE001 - only used to word an error message
        return out
    if cmd is root:
        return out
    for flag in generated_flags().values():
        for opt in flag.per_mechanism.values():
            out.setdefault(opt.name, flag.flag)
    for param in cmd.params:
        if param.param_type_name == "argument":
            out[str(param.name)] = str(param.name).upper()
            continue
        longs = [o for o in param.opts if o.startswith("--")]
        if longs and param.name and not param.name.startswith(_PREFIX):
            out[param.name] = longs[0]
    return out


def stderr_is_tty() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())
