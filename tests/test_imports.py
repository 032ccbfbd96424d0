"""The house's layout, read from the source (no database, no import run):

- qtg_runner is the runtime and never imports qtg_world, the local outside
  world (the doubles, their deployers, the demo's world), nor qtg_rehearsal
  (the rehearsal on forks, which runs the runtime's executors on the world's
  doubles): not at the top of a module, not lazily inside a function, not by
  a module path in a string (a lazily loaded command, importlib);
- no circle of imports among qtg_runner, qtg_world, qtg_rehearsal, qtg_cli
  (the `qtg` console script, which joins them) and chaos/.

A module's imports are every ``import`` and ``from ... import`` statement in
it, wherever it stands (top level, a function, ``if TYPE_CHECKING``); ``from
a.b import c`` imports ``a.b`` and, when it is a module of ours, ``a.b.c``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("qtg_runner", "qtg_world", "qtg_rehearsal", "qtg_cli", "chaos")
RUNTIME = "qtg_runner"
OUTSIDE_THE_RUNTIME = ("qtg_world", "qtg_rehearsal")
"""What the runtime never imports: the world's doubles, and the rehearsal that uses them."""

MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?")
"""A string that names a module (``a.b``, ``a.b:attr``), as importlib and the
lazily loaded commands take one; a docstring or a message is not one."""


def modules() -> dict[str, Path]:
    """Every module of PACKAGES by its dotted name (a package by its own)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The module ``node`` imports from, a relative import resolved against ``module``."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """Each module ``module`` imports, with the line it is imported on."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, path, node)
            yield source, node.lineno
            for alias in node.names:
                yield f"{source}.{alias.name}", node.lineno


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_no_runtime_module_imports_the_world() -> None:
    """The runtime runs without the world and the rehearsal: they import the
    runtime, never the other way round."""
    found = []
    for module, path in modules().items():
        if not _in(module, RUNTIME):
            continue
        lines = {line: name for name, line in sorted(imports(module, path), reverse=True)}
        found.extend(
            f"{path.relative_to(REPO)}:{line} imports {name}"
            for line, name in sorted(lines.items())
            if any(_in(name, outside) for outside in OUTSIDE_THE_RUNTIME)
        )
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and MODULE_PATH.fullmatch(node.value)
                and any(_in(node.value.split(":")[0], o) for o in OUTSIDE_THE_RUNTIME)
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} names {node.value!r}")
    assert not found, "the runtime imports the world:\n" + "\n".join(found)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_circle_of_imports() -> None:
    ours = modules()
    graph = {
        module: {name for name, _ in imports(module, path) if name in ours and name != module}
        for module, path in ours.items()
    }
    cycles = _cycles(graph)
    assert not cycles, "circles of imports:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_graph_is_read() -> None:
    """The scan sees what it should: the packages' modules, and imports both
    ways between them (a scan that found nothing would pass the tests above)."""
    ours = modules()
    assert {
        "qtg_runner.cli",
        "qtg_world.local",
        "qtg_rehearsal.forks",
        "qtg_cli",
        "chaos.checker",
    } <= set(ours)
    world_imports = {n for n, _ in imports("qtg_world.local", ours["qtg_world.local"])}
    assert any(_in(n, RUNTIME) for n in world_imports)
    cli_imports = {n for n, _ in imports("qtg_cli", ours["qtg_cli"])}
    assert "qtg_runner.cli" in cli_imports
