"""The guarded package of the tree being measured, imported from that tree, and its registry.

:func:`load` puts the declared source directory (:mod:`perfguard.declaration`) first on ``sys.path``,
imports the package and refuses, with a :class:`ConfigError` (exit 2) naming both files, a package
that came from anywhere else: an installed copy, an editable install of another checkout, a module
imported before perfguard could choose.  Measuring or verifying the wrong code and saying "passed"
is the one thing perfguard must never do (issue 29).  Then it reads the registry the declaration
names and checks every entry's attributes (:data:`ENTRY_ATTRIBUTES`, and the optional ``computes``,
``kernels`` and ``sequence_parallel``), so a bad registry is a clear error before anything is built.

The declaration is perfguard's only way into the guarded package: the package, its registry, and
the modules its entries name (factories, a ``kernels`` module).  perfguard never imports a module
of the package by a name it knows itself (tests/test_layers.py holds that for ``attention``).

:func:`current` is the package of this process: the repository of ``$PERFGUARD_SOURCE`` (set for a
round's worker and a check's verification) or of the working directory, loaded once.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from perfguard.declaration import (
    COMPUTES,
    DOTTED_NAME,
    KERNEL_MODULE_NAMES,
    Declaration,
    read_declaration,
    repository_root,
)
from perfguard.engine.compile_cache import use_checked_bytecode
from perfguard.errors import ConfigError

#: What perfguard reads from a registry entry (perfguard.declare.Implementation has them all;
#: ``attention.registry.ImplSpec`` too).  Optional: ``computes`` (default "pattern"), ``guarded``
#: (True), ``kernels`` and ``sequence_parallel`` (None: the entry is in neither of those suites).
ENTRY_ATTRIBUTES = (
    "name",
    "multihead",
    "build",
    "config",
    "make_inputs",
    "cpu_dtypes",
    "cuda_dtypes",
    "supports_causal",
    "modes",
    "same_function_as",
    "needs_distributed",
)


@dataclass(frozen=True)
class GuardedPackage:
    """The imported package and its implementations under guard (name -> entry, registry order)."""

    declaration: Declaration
    module: ModuleType
    implementations: Mapping[str, Any]

    @property
    def name(self) -> str:
        return self.declaration.package

    def names(self, *, multihead: bool | None = None) -> list[str]:
        return [n for n, e in self.implementations.items() if multihead is None or e.multihead == multihead]

    def get(self, name: str) -> Any:
        try:
            return self.implementations[name]
        except KeyError:
            known = ", ".join(self.implementations)
            raise KeyError(f"unknown implementation {name!r} of {self.name}; known: {known}") from None

    def sequence_parallel(self) -> list[str]:
        """The implementations that declare a sequence-parallel path (the distributed suite's)."""
        return [n for n, e in self.implementations.items() if sequence_parallel(e) is not None]

    def with_kernels(self) -> list[str]:
        """The implementations that declare a ``kernels`` module (the kernel comparison's)."""
        return [n for n, e in self.implementations.items() if getattr(e, "kernels", None)]

    def kernels(self, name: str) -> ModuleType:
        """The ``kernels`` module implementation ``name`` declares, imported and checked."""
        return kernels_of(self.get(name))


def computes(entry: Any) -> str:
    """What ``entry`` must compute: ``dense``, ``longnet``, ``head_groups`` or ``pattern``."""
    return str(getattr(entry, "computes", "pattern"))


def kernels_of(entry: Any) -> ModuleType:
    """The ``kernels`` module ``entry`` declares, imported and checked (:data:`KERNEL_MODULE_NAMES`)."""
    declared = getattr(entry, "kernels", None)
    where = f"registry entry {entry.name!r}: kernels = {declared!r}"
    if not declared:
        raise ConfigError(f"{where}: the entry declares no kernels module")
    try:
        module = importlib.import_module(declared)
    except Exception as exc:
        raise ConfigError(
            f"{where}: importing it raised {type(exc).__name__}: {exc}", hint="fix the module or the name"
        ) from exc
    missing = [a for a in KERNEL_MODULE_NAMES if not hasattr(module, a)]
    if missing:
        raise ConfigError(
            f"{where}: the module has no {', '.join(missing)}",
            hint="a kernels module defines KERNELS, available(device, dtype, head_dim) and "
            "running(device, dtype, head_dim, kernel) (docs/guarding-your-package.md)",
        )
    return module


def sequence_parallel(entry: Any) -> Any | None:
    """The entry's sequence-parallel declaration (``ranks``, ``one_rank`` keywords), or None."""
    return getattr(entry, "sequence_parallel", None)


_LOADED: dict[Path, GuardedPackage] = {}


def current() -> GuardedPackage:
    """The guarded package of this process's repository (see the module docstring), loaded once."""
    root = repository_root()
    if root not in _LOADED:
        _LOADED[root] = load(read_declaration(root))
    return _LOADED[root]


def load(declaration: Declaration) -> GuardedPackage:
    """Import ``declaration``'s package from its tree and read its registry (module docstring)."""
    source = str(declaration.source_dir)
    if not sys.path or sys.path[0] != source:
        sys.path.insert(0, source)
    importlib.invalidate_caches()
    use_checked_bytecode(declaration.package_dir)  # never stale bytecode of the measured code
    try:
        module = importlib.import_module(declaration.package)
    except Exception as exc:
        raise ConfigError(
            f"importing the guarded package {declaration.package!r} from {source} raised "
            f"{type(exc).__name__}: {exc}",
            hint="fix the package (or the environment it needs) so that `import "
            f"{declaration.package}` works from the repository",
        ) from exc
    check_origin(declaration, module)
    registry = _registry(declaration)
    return GuardedPackage(declaration, module, MappingProxyType(registry))


def check_origin(declaration: Declaration, module: ModuleType) -> None:
    """The imported package must be the tree's: else exit 2 naming the file that was imported."""
    imported = getattr(module, "__file__", None)
    expected = declaration.package_dir / "__init__.py"
    if imported is None or Path(imported).resolve() != expected.resolve():
        raise ConfigError(
            f"`import {declaration.package}` gave {imported or 'a namespace package'}, not "
            f"{expected} of the repository being measured; perfguard measures only the declared tree",
            hint=f"uninstall or remove the other copy of {declaration.package} from the path (it was "
            "imported first: a .pth file, sitecustomize, an editable install), then run again",
        )


def _registry(declaration: Declaration) -> dict[str, Any]:
    where = f"[tool.perfguard] registry = {declaration.registry!r} ({declaration.pyproject})"
    try:
        module = importlib.import_module(declaration.registry_module)
    except Exception as exc:
        raise ConfigError(
            f"{where}: importing {declaration.registry_module!r} raised {type(exc).__name__}: {exc}",
            hint="fix the registry module, or the name in [tool.perfguard] registry",
        ) from exc
    try:
        obj = getattr(module, declaration.registry_attribute)
    except AttributeError:
        raise ConfigError(
            f"{where}: module {declaration.registry_module!r} has no attribute "
            f"{declaration.registry_attribute!r}",
            hint="name the mapping or list of implementations the module defines",
        ) from None
    if callable(obj) and not isinstance(obj, Mapping):
        obj = obj()
    entries: Iterable[Any] = obj.values() if isinstance(obj, Mapping) else obj
    try:
        entries = list(entries)
    except TypeError:
        raise ConfigError(
            f"{where} is a {type(obj).__name__}, not a mapping or list of implementations",
            hint="e.g. IMPLEMENTATIONS = [perfguard.declare.Implementation(...), ...]",
        ) from None
    out: dict[str, Any] = {}
    for entry in entries:
        missing = [a for a in ENTRY_ATTRIBUTES if not hasattr(entry, a)]
        if missing:
            raise ConfigError(
                f"{where}: entry {entry!r:.80} lacks {', '.join(missing)}",
                hint="build entries with perfguard.declare.Implementation (docs/guarding-your-package.md)",
            )
        if computes(entry) not in COMPUTES:
            raise ConfigError(
                f"{where}: {entry.name} declares computes={computes(entry)!r}",
                hint=f"use one of {', '.join(COMPUTES)}",
            )
        _check_optional(where, declaration.package, entry)
        if not getattr(entry, "guarded", True):
            continue
        if entry.name in out:
            raise ConfigError(f"{where}: implementation {entry.name!r} is registered twice")
        out[entry.name] = entry
    if not out:
        raise ConfigError(f"{where} registers no implementation", hint="add at least one entry")
    # ``same_function_as`` may name an implementation this registry leaves out (a registry trimmed
    # to the ring for the distributed suite): verify then has no sibling to compare it with, and
    # says so in its row; it is not a reason to refuse the whole package.
    return out


def _check_optional(where: str, package: str, entry: Any) -> None:
    """The optional parts of an entry (``kernels``, ``sequence_parallel``) hold what they must."""
    kernels = getattr(entry, "kernels", None)
    if kernels is not None and (not isinstance(kernels, str) or not DOTTED_NAME.match(kernels)):
        raise ConfigError(
            f"{where}: {entry.name} declares kernels={kernels!r}, not the dotted name of a module",
            hint=f'name the module that lists its kernels, e.g. kernels="{package}.backends"',
        )
    parallel = sequence_parallel(entry)
    if parallel is not None and not all(
        isinstance(getattr(parallel, part, None), Mapping) for part in ("ranks", "one_rank")
    ):
        raise ConfigError(
            f"{where}: {entry.name} declares sequence_parallel={parallel!r:.80}",
            hint="use perfguard.declare.SequenceParallel(ranks={...}, one_rank={...}): the constructor "
            "keywords for a group of ranks and for one rank",
        )
