"""The layers import only downwards: the engine never reaches a protocol or a trigger.

``handlers`` (the tool API) imports no other toolfan package; ``tasks`` (the engine)
imports ``handlers`` only; the sources and triggers in ``dispatcher`` may import both. The
graph is read from the source (every ``import`` anywhere in a module, inside functions
too) and followed transitively, so an engine module that imports a helper that imports a
protocol fails as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("handlers", "tasks", "dispatcher", "emulator")
#: What each package may reach, directly or through others.
ALLOWED = {"handlers": {"handlers"}, "tasks": {"tasks", "handlers"}}


def modules() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports (``from a import b`` counts ``a.b`` if a module)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in out if m in known}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def reachable(start: str, edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """Every module reachable from ``start``, with one import chain leading to it."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        here = todo.pop()
        for there in sorted(edges[here]):
            if there not in paths:
                paths[there] = [*paths[here], there]
                todo.append(there)
    return paths


EDGES = graph()


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_reaches_only_the_layers_below_it(layer):
    allowed = ALLOWED[layer]
    crossings = []
    for module in sorted(m for m in EDGES if m.split(".")[0] == layer):
        for target, chain in reachable(module, EDGES).items():
            if target.split(".")[0] not in allowed:
                crossings.append(" -> ".join(chain))
    assert not crossings, "imports across the layers:\n" + "\n".join(sorted(set(crossings))[:20])


def test_the_graph_is_read_from_every_kind_of_import():
    """The reader sees plain, from, relative and in-function imports, or the check is void."""
    assert "tasks.app" in EDGES["tasks.execute"]
    assert "tasks.sources" in EDGES["tasks.app"]
    assert "dispatcher.client" in EDGES["dispatcher.sources.agents"]
    assert any(m.startswith("tasks.") for m in EDGES["dispatcher.poll"])
    source = "def f():\n    from dispatcher import poll\n"
    tree_file = ROOT / "tests" / "_layers_probe.py"
    try:
        tree_file.write_text(source)
        found = imports("tests._layers_probe", tree_file, modules())
    finally:
        tree_file.unlink()
    assert "dispatcher.poll" in found
