"""The engine's folders import one way: no cycle between `memoryos` subpackages, nor between modules.

Every import counts, those inside functions included (a lazy import is still a dependency: `cli.py` and
`cli_bundle.py` once imported each other that way). Between folders, a node is a subpackage
(`memoryos.space`, `memoryos.planning`, ...) or a top-level module (`memoryos.config`), and an import
inside one node is not an edge; between modules, a package's `__init__` importing its own modules is not
one either. docs/engine.md has the map these folders follow.
"""

import ast
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "memoryos"


def node_of(module: str) -> str:
    """`memoryos.space.pool` -> `space`; `memoryos.config` -> `config`; `memoryos` -> `memoryos`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> Iterator[tuple[str, int]]:
    """(module, line) of every `memoryos` import in the file, at any depth."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "memoryos":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "memoryos":  # `from memoryos import policy` names a module, or an export
                for alias in node.names:
                    is_module = (PACKAGE / f"{alias.name}.py").exists() or (PACKAGE / alias.name).is_dir()
                    yield (f"memoryos.{alias.name}" if is_module else "memoryos"), node.lineno
            elif node.module.split(".")[0] == "memoryos":
                yield node.module, node.lineno


def edges(node: Callable[[str], str]) -> dict[str, dict[str, str]]:
    """node -> {node it imports: where, as `path:line`}, with `node` naming a module's node."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_of(path)
        source = node(module)
        for imported_module, line in imported(path):
            target = node(imported_module)
            if target != source and not (path.name == "__init__.py" and target.startswith(module + ".")):
                found.setdefault(source, {}).setdefault(target, f"{path.relative_to(PACKAGE.parent)}:{line}")
    return found


def find_cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    """One cycle as a list of nodes (first == last), or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, {})):
            if state.get(target) == "open":
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def described(graph: dict[str, dict[str, str]], cycle: list[str]) -> str:
    return " -> ".join(f"{a} ({graph[a][b]})" for a, b in itertools.pairwise(cycle))


def test_subpackages_import_one_way() -> None:
    graph = edges(node_of)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between memoryos subpackages: " + described(graph, cycle)


def test_modules_import_one_way() -> None:
    graph = edges(lambda module: module)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between memoryos modules: " + described(graph, cycle)


def test_the_cycle_check_finds_a_lazy_import_cycle() -> None:
    """The check itself: a cycle made of one import at the top and one inside a function is found."""
    graph = {"cli": {"portability": "a.py:1"}, "portability": {"cli": "b.py:9 (inside a function)"}}
    assert find_cycle(graph) == ["cli", "portability", "cli"]
    assert find_cycle({"cli": {"space": "a.py:1"}, "space": {"config": "b.py:2"}}) is None


def test_lazy_imports_are_edges(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text("def later():\n    from memoryos.space.pool import SpacePool\n")
    assert list(imported(source)) == [("memoryos.space.pool", 2)]
