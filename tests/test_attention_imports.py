"""attention/ imports one way: no module of the package reaches, through any chain of imports, back
to itself (docs/design.md, "attention").

Every import counts: at the top of a module, inside a function (a lazy import is still a
dependency, only a later one) and under ``TYPE_CHECKING``.  ``from attention import x`` is an
import of the module ``attention.x`` when there is one, else of the package's ``__init__``.  The
package ``__init__`` that Python runs before any submodule is not an edge (every module would
otherwise import it); names resolved from strings (``importlib.import_module``, the registry's
``module:Class`` paths) are not imports.
"""

from __future__ import annotations

import ast
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "attention"


def modules(root: Path) -> dict[str, Path]:
    """Dotted name (``attention.x``; the package itself is ``attention``) -> file."""
    package = root.name
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports(module: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """(module of the package imported, line) for every import statement of the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = _package_of(module, path).split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                # ``from attention import registry``: the submodule; ``from attention import x``: the package
                sub = f"{base}.{alias.name}"
                found.append((sub if sub in known else base, node.lineno))
    return [(name, line) for name, line in found if name in known and name != module]


def import_cycles(root: Path) -> list[list[str]]:
    """Every import cycle among the modules under ``root``, each as ``a (file:line) -> b ... -> a``.

    Tarjan's strongly connected components: a component of more than one module (or a module
    that imports itself) is a cycle; one path around it is reported.
    """
    known = modules(root)
    edges: dict[str, dict[str, int]] = {m: {} for m in known}
    for module, path in known.items():
        for target, line in imports(module, path, known):
            edges[module].setdefault(target, line)

    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
            if len(component) > 1 or v in edges[v]:
                components.append(sorted(component))

    for v in known:
        if v not in index:
            visit(v)

    cycles = []
    for component in components:
        members = set(component)
        start = component[0]
        # shortest way round: breadth first from start, inside the component, back to start
        parent: dict[str, str] = {}
        frontier, end = [start], None
        while end is None:
            nxt = []
            for v in frontier:
                for w in sorted(edges[v]):
                    if w == start:
                        end = v
                        break
                    if w in members and w not in parent:
                        parent[w] = v
                        nxt.append(w)
                if end is not None:
                    break
            frontier = nxt
        path = [end]
        while path[-1] != start:
            path.append(parent[path[-1]])
        path = [*reversed(path), start]
        cycles.append(
            [f"{a} ({known[a].relative_to(root.parent)}:{edges[a][b]})" for a, b in pairwise(path)] + [start]
        )
    return cycles


def test_attention_has_no_import_cycle() -> None:
    cycles = "\n".join(" -> ".join(c) for c in import_cycles(ROOT))
    assert not cycles, f"import cycles in attention/ (move what both sides need to a leaf module):\n{cycles}"


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    """The check itself: a package whose only cycle closes inside a function is reported."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import thing\n")
    (pkg / "b.py").write_text("def thing():\n    from pkg import c\n    return c\n")
    (pkg / "c.py").write_text("from . import a\n")
    (pkg / "leaf.py").write_text("import pkg.a\n")
    cycles = import_cycles(pkg)
    assert len(cycles) == 1
    assert [step.split(" ")[0] for step in cycles[0]] == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    assert cycles[0][1] == "pkg.b (pkg/b.py:2)"
