"""The packages import one way: no cycle between the folders of `memoryos/` or of `services/`, nor between
their modules; the engine never imports the service; the service's front ends reach the Redis transport
only through `services/spaces/`.

Every import counts, those inside functions included (a lazy import is still a dependency: `cli.py` and
`cli_bundle.py` once imported each other that way). Between folders, a node is a subpackage
(`memoryos.space`, `services.api`, ...) or a top-level module (`memoryos.config`, `services.client`), and
an import inside one node is not an edge; between modules, a package's `__init__` importing its own
modules is not one either. ARCHITECTURE.md has the map these folders follow.
"""

import ast
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("memoryos", "services")

FRONT_ENDS = ("api", "mcp")
"""The service's front ends: they serve memory through `services.spaces` whichever mode is running."""
TRANSPORT = ("queue", "worker")
"""The Redis transport and the worker that consumes it: no front end imports them, save the queue's
settings (how an API process is pointed at Redis)."""
TRANSPORT_SETTINGS = "services.queue.settings"


def node_of(module: str) -> str:
    """`memoryos.space.pool` -> `space`; `memoryos.config` -> `config`; `memoryos` -> `memoryos`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, package: str) -> Iterator[tuple[str, int]]:
    """(module, line) of every import of `package` in the file, at any depth."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == package:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == package:  # `from memoryos import policy` names a module, or an export
                for alias in node.names:
                    base = ROOT / package / alias.name
                    is_module = base.with_suffix(".py").exists() or base.is_dir()
                    yield (f"{package}.{alias.name}" if is_module else package), node.lineno
            elif node.module.split(".")[0] == package:
                yield node.module, node.lineno


def edges(package: str, node: Callable[[str], str]) -> dict[str, dict[str, str]]:
    """node -> {node it imports: where, as `path:line`}, with `node` naming a module's node."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        module = module_of(path)
        source = node(module)
        for imported_module, line in imported(path, package):
            target = node(imported_module)
            if target != source and not (path.name == "__init__.py" and target.startswith(module + ".")):
                found.setdefault(source, {}).setdefault(target, f"{path.relative_to(ROOT)}:{line}")
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


@pytest.mark.parametrize("package", PACKAGES)
def test_subpackages_import_one_way(package: str) -> None:
    graph = edges(package, node_of)
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle between {package} subpackages: " + described(graph, cycle)


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_import_one_way(package: str) -> None:
    graph = edges(package, lambda module: module)
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle between {package} modules: " + described(graph, cycle)


def test_the_engine_never_imports_the_service() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "memoryos").rglob("*.py"))
        for module, line in imported(path, "services")
    ]
    assert found == [], "memoryos/ must not import services/ (entry points reach it): " + "; ".join(found)


def transport_imports_of_front_ends() -> list[str]:
    """`path:line imports module` for each import of the transport by a front end."""
    return [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for front_end in FRONT_ENDS
        for path in sorted((ROOT / "services" / front_end).rglob("*.py"))
        for module, line in imported(path, "services")
        if node_of(module) in TRANSPORT and module != TRANSPORT_SETTINGS
    ]


def test_front_ends_reach_the_transport_only_through_spaces() -> None:
    found = transport_imports_of_front_ends()
    assert found == [], "api/ and mcp/ go through services.spaces, not the transport: " + "; ".join(found)


def test_the_cycle_check_finds_a_lazy_import_cycle() -> None:
    """The check itself: a cycle made of one import at the top and one inside a function is found."""
    graph = {"cli": {"portability": "a.py:1"}, "portability": {"cli": "b.py:9 (inside a function)"}}
    assert find_cycle(graph) == ["cli", "portability", "cli"]
    assert find_cycle({"cli": {"space": "a.py:1"}, "space": {"config": "b.py:2"}}) is None


def test_lazy_imports_are_edges(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text("def later():\n    from memoryos.space.pool import SpacePool\n")
    assert list(imported(source, "memoryos")) == [("memoryos.space.pool", 2)]
