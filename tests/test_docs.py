"""The README and the documentation site: the set-up commands, the tour's commands, links, the site build.

The tour's commands are checked without running them: each ``deniable ...`` line is parsed by the
command line's own click/typer tree (the sub-command exists, every option exists, the arguments fit),
with callbacks off, so nothing is built or read. ``mkdocs build --strict`` (warnings, broken links and
anchors are errors; see mkdocs.yml) is a slow test (CI runs ``pytest -m slow``); it needs the ``docs``
extra, which ``dev`` includes and .ci/run installs, and skips, saying so, only without it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from deniable.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

SETUP_COMMANDS = [
    "python3 -m pip install . && deniable privatize examples/reviews.csv --column text --epsilon 8 "
    "-o reviews.private.csv && cat reviews.private.csv",
    'python3 -m pip install -e ".[dev]" && python3 -m pytest',
]


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _tour_lines() -> list[str]:
    """The command lines of the README's tour (its first ```bash block after the tour heading)."""
    text = _readme()
    match = re.search(r"^## A 10-line tour\n(.*?)^```bash\n(.*?)^```", text, flags=re.M | re.S)
    assert match, "README.md has no '## A 10-line tour' section with a bash block"
    return [line for line in match.group(2).splitlines() if line.strip()]


def _deniable_invocations(line: str) -> list[list[str]]:
    """Every ``deniable ...`` command of a shell line (split on pipes and &&; comments dropped)."""
    tokens = shlex.split(line, comments=True)
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in {"|", "&&", ";", "||"}:
            commands.append([])
        else:
            commands[-1].append(token)
    return [c[1:] for c in commands if c and c[0] == "deniable"]


def _is_group(command: Any) -> bool:
    # duck-typed: recent typer vendors click (typer._click), whose group is not a click.Group
    return hasattr(command, "commands") and hasattr(command, "get_command")


def _resolve(args: list[str]) -> tuple[Any, list[str], str]:
    """The click command an argument list names (through groups), the rest of the arguments, its path."""
    command: Any = typer.main.get_command(app)
    path = "deniable"
    while _is_group(command) and args and not args[0].startswith("-"):
        sub = command.get_command(command.context_class(command), args[0])
        assert sub is not None, f"{path}: no sub-command {args[0]!r}"
        path, command, args = f"{path} {args[0]}", sub, args[1:]
    return command, args, path


def test_readme_setup_commands_verbatim() -> None:
    text = _readme()
    for command in SETUP_COMMANDS:
        assert command in text.splitlines(), f"README.md lost the set-up command line: {command}"


def test_readme_tour_is_short_and_uses_editable_installs() -> None:
    lines = _tour_lines()
    assert 1 <= len(lines) <= 10, f"the tour has {len(lines)} lines"
    for line in lines:
        for install in re.findall(r"pip install ([^&|#]+)", line):
            assert install.split()[0] == "-e", f"the tour replaces the editable install: {line}"


def test_readme_tour_files_exist() -> None:
    """The input files the tour names ship with the repository (``examples/``)."""
    for line in _tour_lines():
        for name in re.findall(r"\bexamples/[\w./-]+", line):
            assert (ROOT / name).is_file(), f"the tour names {name}, which is not in the repository"


def _check_parses(args: list[str]) -> None:
    command, rest, path = _resolve(args)
    assert not _is_group(command), f"{path}: a group, not a command"
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}
    for token in rest:
        if token.startswith("-") and token != "-":
            name = token.split("=", 1)[0]
            assert name in known, f"{path}: no option {name} (line: deniable {shlex.join(args)})"
    # the options' arity and the arguments' count, as click parses them; callbacks are off
    with command.make_context(path, list(rest), resilient_parsing=True) as ctx:
        assert ctx.command is command


def test_readme_tour_commands_parse() -> None:
    invocations = [inv for line in _tour_lines() for inv in _deniable_invocations(line)]
    assert len(invocations) >= 5
    for args in invocations:
        _check_parses(args)


@pytest.mark.parametrize("page", ["tour.md", "index.md", "choosing.md"])
def test_docs_page_commands_parse(page: str) -> None:
    """The same check for every ``deniable`` line of the site's tour pages' bash blocks."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    for line in lines:
        for args in _deniable_invocations(line):
            _check_parses(args)


def test_tour_check_catches_a_wrong_flag() -> None:
    """The parse check above fails on an option or a sub-command that does not exist."""
    command, _rest, _ = _resolve(["privatize", "x.csv", "--no-such-flag"])
    known = {opt for param in command.params for opt in param.opts}
    assert "--no-such-flag" not in known and "--column" in known
    with pytest.raises(AssertionError, match="no sub-command"):
        _resolve(["no-such-command", "x"])


def test_readme_relative_links_resolve() -> None:
    text = _readme()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link for link in links if not re.match(r"[a-z][a-z0-9+.-]*:", link) and not link.startswith("#")]
    assert relative, "README.md links to no page"
    for link in relative:
        target = (ROOT / link.split("#", 1)[0]).resolve()
        assert target.exists(), f"README.md links to {link}, which does not exist"
        assert ROOT in target.parents or target == ROOT


@pytest.mark.slow  # about 15 s; CI runs it (pytest -m slow) and .ci/run builds the site as well
@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
    reason="mkdocs is not installed (the 'docs' extra: pip install -e '.[docs]'; .ci/run installs it)",
)
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """The site builds with warnings as errors: broken internal links and anchors fail it (mkdocs.yml)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert (site / "choosing.html").is_file()
    assert (site / "reference" / "deniable.html").is_file()
