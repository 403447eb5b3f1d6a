"""The rooms of docs/architecture.md and what each may import, checked on the source.

- The privatization library (text, embedding, mechanisms, index, io, privatizer, calibrate,
  bow, ...: every module outside the rooms below) never imports the rooms built on top of
  it: experiments, the command line, the service or the engine integrations. A user
  importing ``deniable`` to privatize text meets the library first.
- Inside the library, imports point down the layers of :data:`LAYERS` (a room imports its own
  layer or lower ones), with the one documented exception of :data:`UPWARD`.
- No import circles: the module import graph (every ``import``, lazy ones inside functions
  included, ``TYPE_CHECKING`` blocks excluded, plus the lazy-export tables ``_LAZY`` of the
  package facades) has no cycle.
- Every room small enough to hold in your head: no source file over 800 lines, no function
  body over 120 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "deniable"

#: Rooms built on the library; the library may not import them.
UPPER = ("experiments", "cli", "service", "integrations", "spark", "sklearn")
#: The library's rooms from the bottom up (docs/architecture.md, "What each room may import"):
#: a module imports rooms of its own layer or of lower ones only.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_errors", "_version"),
    ("_validation", "_random", "_progress", "_cache", "_padding", "_threads", "io"),  # io: files and records only
    ("text",),
    ("embedding",),  # vocabularies, float embeddings, the BRR device vocabulary (_codes), loaders
    ("metrics", "artefacts", "priors", "ngram"),  # priors, ngram: public word priors and n-gram (decoders, attackers)
    ("binarize", "index"),
    ("mechanisms",),
    ("calibrate", "bow"),
    ("preparation", "privatizer", "report", "budget"),
    ("api",),
)
#: (module, room above it it may import, why): the documented exceptions.
UPWARD: tuple[tuple[str, str, str], ...] = (
    ("deniable.mechanisms._factory", "calibrate", 'make_mechanism resolves epsilon="auto" (lazy import)'),
)
#: The longest source file and function body (from the first statement after the docstring).
MAX_FILE_LINES = 800
MAX_BODY_LINES = 120


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (imports for annotations only, never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def _imports(path: Path, *, packages: bool = True) -> set[str]:
    """Absolute names of the deniable modules that ``path`` imports (at any depth of the file).

    ``TYPE_CHECKING`` imports are left out; the module names in a ``_LAZY`` table (a package
    facade's lazy exports, imported on first attribute access) are in. ``packages=False``:
    ``from pkg import name`` gives ``pkg.name`` only (the submodule when ``name`` is one, which
    :func:`_graph` resolves), not ``pkg`` itself as well.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_nodes(tree)
    here = _module_name(path).split(".")
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
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
                if packages:
                    found.add(name)
                found.update(f"{name}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets):
            found.update(
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and str(c.value).startswith("deniable.")
            )
    return found


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of the tree it imports (a name imported from a module is that module)."""

    def owner(name: str) -> str | None:
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name if name in modules else None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {owner(m) for m in _imports(path, packages=False)}
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _library_files() -> list[Path]:
    """Every module outside the upper rooms, but the ``deniable`` facade (its lazy exports offer all rooms)."""
    return [p for name, p in _modules().items() if name != "deniable" and _room(name) not in UPPER]


@pytest.mark.parametrize("path", _library_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_library_does_not_import_the_rooms_built_on_it(path: Path) -> None:
    bad = sorted(m for m in _imports(path) if _room(m) in UPPER)
    assert not bad, f"{path.relative_to(SRC)} imports {bad}"


def test_the_checker_sees_relative_imports() -> None:
    # the checker must be able to fail: experiments/harness.py imports the library relatively
    harness = SRC / "experiments" / "harness.py"
    assert "deniable.privatizer" in _imports(harness)
    assert _room("deniable.experiments.harness") in UPPER


def _upward(module: str, imports: set[str]) -> list[str]:
    """The imports of ``module`` that reach a higher layer than its own (less the :data:`UPWARD` exceptions)."""
    rank = {room: i for i, layer in enumerate(LAYERS) for room in layer}
    own = rank[_room(module)]
    allowed = {room for mod, room, _ in UPWARD if mod == module}
    return sorted(m for m in imports if rank.get(_room(m), -1) > own and _room(m) not in allowed)


def test_every_library_room_has_a_layer() -> None:
    rooms = {_room(name) for name in _modules() if name != "deniable"} - set(UPPER)
    layered = {room for layer in LAYERS for room in layer}
    assert rooms <= layered, f"rooms without a layer in LAYERS: {sorted(rooms - layered)}"


@pytest.mark.parametrize("path", _library_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_library_imports_point_down_the_layers(path: Path) -> None:
    bad = _upward(_module_name(path), _imports(path))
    assert not bad, f"{path.relative_to(SRC)} (layer of {_room(_module_name(path))}) imports higher rooms: {bad}"


def test_the_layer_checker_sees_a_lower_room_importing_a_higher_one() -> None:
    # it must be able to fail: the loaders once imported binarize.device (issue 40), a lazy import
    loaders = "deniable.embedding._loaders"
    assert _upward(loaders, {"deniable.binarize.device", "deniable.binarize.device.load_device_artefact"})
    assert _upward("deniable.text", {"deniable.embedding"}) == ["deniable.embedding"]
    assert not _upward(loaders, {"deniable.embedding._codes", "deniable.text", "deniable._cache"})
    assert not _upward("deniable.mechanisms._factory", {"deniable.calibrate.table"})  # the documented exception
    assert _upward("deniable.mechanisms.brr", {"deniable.calibrate.table"})  # only there


def test_no_import_circles() -> None:
    graph = _graph(_modules())
    assert len(graph) > 100  # the whole tree was read
    circles = _circles(graph)
    assert not circles, "import circles (each a set of modules that import each other): " + "; ".join(
        " <-> ".join(c) for c in circles
    )


def test_the_circle_checker_finds_circles() -> None:
    # it must be able to fail: a lazy import back, a three-module ring, and a clean chain
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}, "g": set()}
    assert _circles(graph) == [["a", "b", "c"], ["d", "e"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
    graph = _graph(_modules())
    assert "deniable.mechanisms.registry" in graph["deniable.mechanisms._factory"]  # relative import seen
    assert "deniable.calibrate.table" in graph["deniable.mechanisms._factory"]  # lazy import seen
    assert "deniable.api" in graph["deniable"]  # a _LAZY table seen


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = node.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring is not the body
    return (node.end_lineno or node.lineno) - body[0].lineno + 1


def test_every_room_is_small() -> None:
    long_files, long_functions = [], []
    for name, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_FILE_LINES:
            long_files.append(f"{name} ({len(text.splitlines())} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _body_lines(node) > MAX_BODY_LINES:
                long_functions.append(f"{name}.{node.name} ({_body_lines(node)} lines)")
    assert not long_files, f"files over {MAX_FILE_LINES} lines: {long_files}"
    assert not long_functions, f"function bodies over {MAX_BODY_LINES} lines: {long_functions}"
