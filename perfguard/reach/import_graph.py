"""The static import graph of a package, read from its sources on one side of a change.

Why static: deciding what a change can reach must not run the change (its code is untrusted), and
it must be cheap.  Why conservative: an edge too many only measures more, an edge too few lets a
regression through, so every ``import`` statement counts wherever it is (function bodies,
``TYPE_CHECKING`` blocks, ``try`` branches), ``from a import b`` counts ``a.b`` as a module when
one exists, and importing ``a.b.c`` executes ``a/__init__.py`` and ``a/b/__init__.py`` too.  What
cannot be read statically is recorded, not guessed: a call of ``importlib.import_module`` or
``__import__`` whose name is not a string literal, or of ``exec`` / ``eval``, is a *dynamic import*;
a file that does not parse is *unreadable*.  The caller decides what they mean (everything, for
the modules an implementation reaches).  ``importlib.util.find_spec`` is not an import: it locates
a module without running it.

One dynamic import is read, not given up on: a module-level ``__getattr__`` (PEP 562 lazy
attributes, as ``attention/__init__.py`` exports its classes) runs only when another module reads
a name the module does not define.  Its *lazy targets* are the package's modules named by a string
literal in the module (``"attention.factory"``, ``"attention.dilated:DilatedAttention"``); they
are reached from a module that reads names from it (``from attention import DilatedAttention``, or
``import attention`` and any attribute), not from one that imports a submodule of it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from perfguard.reach.trees import Tree


@dataclass(frozen=True)
class Module:
    """One module of the package: its file and what it imports (candidate module names)."""

    name: str
    path: str
    imports: frozenset[str]
    dynamic: tuple[int, ...] = ()  # lines of the imports that cannot be read statically
    reads_from: frozenset[str] = frozenset()  # modules whose attributes this one reads (lazy exports)
    lazy: frozenset[str] = frozenset()  # what its PEP 562 ``__getattr__`` may import


@dataclass(frozen=True)
class ImportGraph:
    """The modules of ``package`` (at ``package_dir``) on one side, and the files that did not parse."""

    package: str
    modules: dict[str, Module]
    unreadable: dict[str, str] = field(default_factory=dict)  # path -> the parse error

    @classmethod
    def read(cls, tree: Tree, package: str, package_dir: str) -> ImportGraph:
        """Parse every ``.py`` file under ``package_dir`` (repository-relative) on ``tree``."""
        parsed: dict[str, tuple[str, _Found]] = {}
        unreadable: dict[str, str] = {}
        for path in tree.files(package_dir):
            if not path.endswith(".py"):
                continue
            name = module_name(path, package, package_dir)
            if name is None:
                continue
            found = _read_source(tree.read(path), path, name)
            if isinstance(found, str):
                unreadable[path] = found
                continue
            parsed[name] = (path, found)
        names = set(parsed)
        modules = {}
        for name, (path, found) in parsed.items():
            named = {text.partition(":")[0] for text in found.literals}
            lazy = named & names if found.lazy else set()
            reads = {b for b, attr in found.reads_from if b in names and f"{b}.{attr}" not in names}
            modules[name] = Module(
                name, path, frozenset(found.imports), tuple(found.dynamic), frozenset(reads), frozenset(lazy)
            )
        return cls(package, modules, unreadable)

    def closure(self, roots: Iterable[str]) -> set[str]:
        """Every module of the package that importing ``roots`` may execute (roots included)."""
        seen: set[str] = set()
        todo = [r for r in roots]
        while todo:
            name = todo.pop()
            for candidate in (name, *_parents(name)):
                if candidate in self.modules and candidate not in seen:
                    seen.add(candidate)
                    module = self.modules[candidate]
                    todo.extend(module.imports)
                    for source in module.reads_from:  # names read from a module with lazy exports
                        todo.extend(self.modules[source].lazy)
        return seen


def module_name(path: str, package: str, package_dir: str) -> str | None:
    """``attention/sub/x.py`` -> ``attention.sub.x`` (``__init__.py``: the package); None when the
    file is not importable under the package's name (a directory with a dash, say)."""
    rel = PurePosixPath(path).relative_to(package_dir.rstrip("/"))
    parts = [*rel.parent.parts, rel.stem] if rel.stem != "__init__" else list(rel.parent.parts)
    if not all(p.isidentifier() for p in parts):
        return None
    return ".".join([package, *parts])


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(len(parts) - 1, 0, -1)]


@dataclass
class _Found:
    """What one module's source says about its imports."""

    imports: set[str] = field(default_factory=set)
    dynamic: list[int] = field(default_factory=list)
    reads_from: set[tuple[str, str]] = field(default_factory=set)  # (module, name read); "" = any
    lazy: bool = False
    literals: set[str] = field(default_factory=set)


@functools.lru_cache(maxsize=1024)
def _read_source(source: bytes, path: str, name: str) -> _Found | str:
    """What module ``name``'s source says about its imports, or the parse error (a string).

    Cached on the source itself: a check reads both sides of a change, and every file the change
    does not touch is the same bytes on both (parsing and walking them was ~0.2 CPU s a side for
    this repository's ``attention``).  A cached :class:`_Found` is shared, so nothing changes it.
    """
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        return str(exc)
    return _imports(tree, name, is_package=path.endswith("/__init__.py"))


def _imports(tree: ast.Module, module: str, *, is_package: bool) -> _Found:
    """Candidate module names imported anywhere in ``tree``, dynamic imports, lazy exports."""
    here = module if is_package else module.rpartition(".")[0]
    found = _Found()
    lazy_calls: set[int] = set()
    for top in tree.body:
        if isinstance(top, ast.FunctionDef) and top.name == "__getattr__":
            lazy_calls.update(id(n) for n in ast.walk(top) if isinstance(n, ast.Call))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.imports.update(alias.name for alias in node.names)
            found.reads_from.update((alias.name, "") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, here)
            if base is None:
                found.dynamic.append(node.lineno)  # a relative import above the top of the package
                continue
            found.imports.add(base)
            found.imports.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
            found.reads_from.update((base, alias.name) for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.literals.add(node.value)
        elif isinstance(node, ast.Call):
            target = _dynamic_target(node, here)
            if target is None:
                continue
            if target:
                found.imports.add(target)
            elif id(node) in lazy_calls:
                found.lazy = True
            else:
                found.dynamic.append(node.lineno)
    return found


def _resolve(name: str | None, level: int, here: str) -> str | None:
    if level == 0:
        return name
    parts = here.split(".") if here else []
    if level - 1 > len(parts) - 1:
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, *([name] if name else [])])


def _dynamic_target(call: ast.Call, here: str) -> str | None:
    """For an import done by a call: the module name when it is a literal, "" when it is not;
    None for any other call."""
    func = call.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    if called in ("exec", "eval") and isinstance(func, ast.Name):
        return ""
    if called not in ("import_module", "__import__"):
        return None
    owner = func.value if isinstance(func, ast.Attribute) else None
    if owner is not None and not (isinstance(owner, ast.Name) and owner.id == "importlib"):
        return None  # some other object's import_module: not the import system
    if not call.args or not isinstance(call.args[0], ast.Constant) or not isinstance(call.args[0].value, str):
        return ""
    name: str = call.args[0].value
    if name.startswith("."):
        level = len(name) - len(name.lstrip("."))
        resolved = _resolve(name.lstrip(".") or None, level, here)
        return resolved if resolved is not None else ""
    return name
