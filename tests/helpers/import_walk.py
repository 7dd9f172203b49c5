"""A second, independent reading of which modules of ``attention/`` an implementation imports.

The tests of perfguard.reach (which implementations a change reaches) must not take their expected
answer from the code under test, nor from a list written by hand: this walks the ``from attention...
import`` statements of the files itself, transitively, and maps implementations to modules through
the registry's own table.
"""

from __future__ import annotations

import ast
from pathlib import Path


def imported_by(path: Path) -> set[str]:
    """The ``attention.*`` modules a file names in its ``from ... import`` statements."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("attention"):
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def walk(package_dir: Path, module: str, seen: set[str] | None = None) -> set[str]:
    """Every ``attention`` module ``module`` imports, transitively (itself included)."""
    seen = set() if seen is None else seen
    files = {f"attention.{p.stem}": p for p in package_dir.glob("*.py") if p.stem != "__init__"}
    if module in seen or module not in files:
        return seen
    seen.add(module)
    for name in imported_by(files[module]):
        walk(package_dir, name, seen)
    return seen


def roots() -> dict[str, tuple[str, ...]]:
    """Implementation -> its class's module, and its core's for a multihead module (the table)."""
    from attention.registry import IMPLEMENTATIONS

    by_name = {s.name: s for s in IMPLEMENTATIONS}
    out = {}
    for spec in IMPLEMENTATIONS:
        if not spec.guarded:
            continue
        modules = [spec.class_path.partition(":")[0]]
        if spec.core is not None:
            modules.append(by_name[spec.core].class_path.partition(":")[0])
        out[spec.name] = tuple(modules)
    return out


def importers(package_dir: Path, module: str) -> set[str]:
    """The implementations whose modules import ``module`` (directly or not)."""
    return {impl for impl, mods in roots().items() if any(module in walk(package_dir, m) for m in mods)}
