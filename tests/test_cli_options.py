"""The options several commands share are declared once, in ``deniable.cli._options`` (issue 30).

A command words the help of a shared option for itself (``opt.seed("...")``), but its flag
names come from that one declaration: no command module spells a shared flag in a
``typer.Option`` of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import typer

import deniable.cli
from deniable.cli import _options

CLI = Path(deniable.cli.__file__).parent

#: (module, flag): an option of the same name that means something else there
OWN_MEANING = {("device.py", "--format")}  # npy or web, not a record format (and no -f)


def _shared_flags() -> set[str]:
    """Every flag name the shared declarations give (their long names and short forms)."""
    flags: set[str] = set()
    for name in _options.__all__:
        value = getattr(_options, name)
        info = value.__metadata__[0] if name[0].isupper() else value("help")  # an alias, or a flag of a help text
        if isinstance(info, typer.models.OptionInfo):
            decls = (info.default, *(info.param_decls or ()))
            flags.update(d.split("/")[0] for d in decls if isinstance(d, str) and d.startswith("--"))
    return flags


def _declared_by_hand(source: str) -> set[str]:
    """The flags a module's own ``typer.Option("--flag", ...)`` calls spell."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "Option"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "typer"
        ):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                    found.add(arg.value.split("/")[0])
    return found


def test_the_shared_declarations_cover_the_common_flags() -> None:
    shared = _shared_flags()
    expected = {"--output", "--out", "--format", "--column", "--epsilon", "--mechanism", "--embedding", "--seed"}
    expected |= {"--quiet", "--batch-size", "--oov", "--plots", "--vocab-size", "--vocabulary", "--eta"}
    assert expected <= shared


def test_no_command_declares_a_shared_flag_by_hand() -> None:
    shared = _shared_flags()
    spelled = {
        (path.name, flag)
        for path in sorted(CLI.glob("*.py"))
        if path.name != "_options.py"
        for flag in _declared_by_hand(path.read_text(encoding="utf-8")) & shared
    }
    assert spelled <= OWN_MEANING, sorted(spelled - OWN_MEANING)


def test_the_check_finds_a_flag_declared_by_hand() -> None:
    source = 'import typer\ndef f(seed: int = typer.Option(None, "--seed", help="x")) -> None: ...\n'
    assert _declared_by_hand(source) & _shared_flags() == {"--seed"}


def test_a_shared_option_keeps_its_short_form() -> None:
    info = _options.quiet("No progress bars.")
    assert isinstance(info, typer.models.OptionInfo)
    assert (info.default, *(info.param_decls or ())) == ("--quiet", "-q")
    assert info.help == "No progress bars."
