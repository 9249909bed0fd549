"""The package's import graph: no module imports itself round a circle, and each layer of
docs/internals.md ("Layout (each layer imports only the ones above it)") imports only itself and
the layers above it. Every import counts, those inside functions and under TYPE_CHECKING too: a circle
that an import inside a function hides is still a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import streamrep

PACKAGE = Path(streamrep.__file__).parent

# docs/internals.md's order, top first: model, store, client, replication, the Spark engine, maprcli's rows
# (shared by the two front ends), Airflow
# (its DAGs after the provider they use), and the CLI. ``errors`` is shared by every layer;
# ``testing`` (fixtures for users' tests) may use them all.
LAYERS = ["errors", "model", "store", "client", "replication", "spark", "maprcli", "airflow", "dags", "cli", "testing"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # ``from package import module`` imports the module; ``from module import name`` the module.
            targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target != "streamrep":
                found.add(target)
    # ``from streamrep.x.y import z`` runs ``streamrep.x``'s __init__ too, but that is no edge of
    # this module's own: only the module named counts.
    return {t for t in found if t.startswith("streamrep.")}


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports(name, path, known) for name, path in found.items()}


def layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the package's own __init__
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read():
    edges = graph()
    assert "streamrep.replication.gateway" in edges
    assert "streamrep.client.admin" in edges["streamrep.replication.gateway"]
    # An import inside a function counts (service imports the supervisor's decision lazily or not).
    assert all(layer(name) is not None for name in edges if name != "streamrep"), "a module outside every layer"


def test_no_module_imports_itself_round_a_circle():
    assert cycles(graph()) == []


def test_each_layer_imports_only_the_layers_above_it():
    wrong = sorted(
        f"{name} (layer {LAYERS[layer(name)]}) imports {target} (layer {LAYERS[layer(target)]})"
        for name, targets in graph().items()
        if layer(name) is not None
        for target in targets
        if layer(target) is not None and layer(target) > layer(name)
    )
    assert wrong == []


def test_the_checker_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
