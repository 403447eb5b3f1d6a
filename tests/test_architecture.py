"""The rooms of docs/architecture.md and what each may import, checked on the source.

The privatization library (text, embedding, mechanisms, index, io, privatizer, calibrate,
bow, ...) never imports the rooms built on top of it: experiments, the command line, the
service or the engine integrations. A user importing ``deniable`` to privatize text meets
the library first.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "deniable"

#: Rooms built on the library; the library may not import them.
UPPER = ("experiments", "cli", "service", "integrations", "spark", "sklearn")
#: The library's rooms (a top-level module or package of deniable).
LIBRARY_ROOTS = (
    "text",
    "embedding",
    "mechanisms",
    "index",
    "io",
    "privatizer",
    "metrics",
    "calibrate",
    "bow",
    "binarize",
    "artefacts",
    "api",
    "prepare",
    "report",
    "_cache",
    "_errors",
    "_random",
    "_validation",
    "_progress",
)


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of the deniable modules that ``path`` imports (at any depth of the file)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module_name(path).split(".")
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("deniable"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name.startswith("deniable"):
                found.add(name)
                found.update(f"{name}.{a.name}" for a in node.names)
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _library_files() -> list[Path]:
    files = []
    for path in sorted(SRC.rglob("*.py")):
        if _room(_module_name(path)) in LIBRARY_ROOTS:
            files.append(path)
    return files


@pytest.mark.parametrize("path", _library_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_library_does_not_import_the_rooms_built_on_it(path: Path) -> None:
    bad = sorted(m for m in _imports(path) if _room(m) in UPPER)
    assert not bad, f"{path.relative_to(SRC)} imports {bad}"


def test_the_checker_sees_relative_imports() -> None:
    # the checker must be able to fail: experiments/harness.py imports the library relatively
    harness = SRC / "experiments" / "harness.py"
    assert "deniable.privatizer" in _imports(harness)
    assert _room("deniable.experiments.harness") in UPPER
