"""What a repository guards: ``package``, ``registry`` and ``source`` of its ``[tool.perfguard]``.

perfguard measures the package a repository *declares*, never whatever ``import`` happens to find
(DESIGN.md, "The guarded package")::

    [tool.perfguard]
    package = "flashdil"                                  # import name of the guarded package
    registry = "flashdil.perfguard_registry:IMPLEMENTATIONS"  # module:attribute of its registry
    source = "src"                                        # the directory holding it (default ".")

The declaration is read from the tree being measured (the work tree, or a worktree of the baseline
commit), so a pull request's ``pyproject.toml`` decides what its own side measures and never what
the baseline measures (docs/ci.md, "Trust model").  Every problem is a :class:`ConfigError`
(exit 2) that says what to write.  The registry's entries are read by
:mod:`perfguard.engine.guarded`; what they hold is documented in docs/guarding-your-package.md.

This module is a leaf: it reads TOML and paths, imports nothing of the guarded package.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from perfguard.errors import ConfigError, GitError
from perfguard.gitrepo import repo_root

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

#: The repository whose declaration (and package) a process measures, when it is not the one
#: holding the working directory: perfguard sets it for the processes of a round and of a check's
#: verification (a worktree of another commit).
SOURCE_ENV = "PERFGUARD_SOURCE"

#: The keys of ``[tool.perfguard]`` this module owns (perfguard.config accepts and skips them).
KEYS = ("package", "registry", "source")

#: What a registry entry may declare it computes (``computes``: the float64 reference of ``verify``,
#: docs/guarding-your-package.md): softmax over every key; dilated attention in one mode; dilated
#: attention in the mode each case is built with, whose own ``attention_pattern`` must equal it;
#: the module's own ``attention_pattern``.
COMPUTES = ("dense", "longnet", "head_groups", "dilated", "pattern")
#: What the module an entry names as ``kernels`` provides: ``KERNELS``, the kernel names given to the
#: factory as ``backend=``; ``available(device, dtype, head_dim)``, ``[(kernel, None or why it cannot
#: run here), ...]``; ``running(device, dtype, head_dim, kernel)``, the kernel a plain call of a
#: module built with ``backend=kernel`` runs now (after any fallback of the package's own).
KERNEL_MODULE_NAMES = ("KERNELS", "available", "running")

DOTTED_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: What perfguard's own repository declares; a commit of it from before ``[tool.perfguard] package``
#: existed (a baseline measured in a worktree) is read as declaring this, and nothing else is.
PERFGUARDS_OWN = {"package": "attention", "registry": "attention.registry:REGISTRY"}

EXAMPLE = '[tool.perfguard]\npackage = "mypkg"\nregistry = "mypkg.perfguard_registry:IMPLEMENTATIONS"'
HINT = (
    "declare the guarded package in pyproject.toml (docs/guarding-your-package.md), e.g.\n"
    f"{EXAMPLE}\nor run `perfguard init` to write it with a registry stub"
)


@dataclass(frozen=True)
class Declaration:
    """One repository's declaration, validated (paths exist, names are Python names)."""

    root: Path  # the repository (the tree being measured)
    pyproject: Path
    package: str  # import name of the guarded package (top level)
    registry: str  # "module:attribute"
    source: str  # directory under root that holds the package ("." by default)

    @property
    def source_dir(self) -> Path:
        """The directory that goes first on ``sys.path`` so that ``package`` comes from this tree."""
        return (self.root / self.source).resolve()

    @property
    def package_dir(self) -> Path:
        return self.source_dir / self.package

    @property
    def registry_module(self) -> str:
        return self.registry.partition(":")[0]

    @property
    def registry_attribute(self) -> str:
        return self.registry.partition(":")[2]


def repository_root(cwd: Path | None = None) -> Path:
    """The repository a command measures: ``$PERFGUARD_SOURCE``, else git's top level of ``cwd``
    (or ``cwd`` itself outside git)."""
    wanted = os.environ.get(SOURCE_ENV, "").strip()
    if wanted:
        return Path(wanted).resolve()
    start = (cwd or Path.cwd()).resolve()
    try:
        return repo_root(start).resolve()
    except GitError:
        return start


def read_declaration(root: Path) -> Declaration:
    """``root``'s declaration, or a :class:`ConfigError` naming the file and saying what to write."""
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        raise ConfigError(
            f"{root} has no pyproject.toml: perfguard does not know which package to guard", HINT
        )
    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{pyproject} is not valid TOML: {exc}", hint="fix the file's syntax") from None
    tool = document.get("tool", {})
    table = tool.get("perfguard") if isinstance(tool, dict) else None
    project = document.get("project", {})
    if isinstance(project, dict) and project.get("name") == "perfguard" and "package" not in (table or {}):
        table = dict(PERFGUARDS_OWN)  # a commit of this repository from before the declaration
    if not isinstance(table, dict) or "package" not in table:
        raise ConfigError(
            f"{pyproject} declares no guarded package ([tool.perfguard] package is missing)", HINT
        )
    package, registry = table.get("package"), table.get("registry")
    source = table.get("source", ".")
    if not isinstance(package, str) or not _NAME.match(package):
        raise ConfigError(
            f"{pyproject}: [tool.perfguard] package = {package!r} is not a top-level import name",
            hint='write the name you import, e.g. package = "flashdil" (a sub-package: use `source`)',
        )
    if not isinstance(registry, str):
        raise ConfigError(
            f"{pyproject}: [tool.perfguard] names package {package!r} but no registry",
            hint=f'add registry = "{package}.perfguard_registry:IMPLEMENTATIONS" (module:attribute)',
        )
    module, sep, attr = registry.partition(":")
    if not sep or not DOTTED_NAME.match(module) or not _NAME.match(attr):
        raise ConfigError(
            f"{pyproject}: [tool.perfguard] registry = {registry!r} is not of the form module:attribute",
            hint=f'e.g. registry = "{package}.perfguard_registry:IMPLEMENTATIONS"',
        )
    if module.split(".")[0] != package:
        raise ConfigError(
            f"{pyproject}: registry module {module!r} is not inside the guarded package {package!r}",
            hint="keep the registry in the package it describes, so that it is measured with the same commit",
        )
    if not isinstance(source, str) or Path(source).is_absolute():
        raise ConfigError(
            f"{pyproject}: [tool.perfguard] source = {source!r} must be relative to the repository",
            hint='e.g. source = "src" for a src layout (default ".")',
        )
    declaration = Declaration(root.resolve(), pyproject, package, registry, source)
    if not declaration.source_dir.is_relative_to(declaration.root):
        raise ConfigError(f"{pyproject}: source = {source!r} leads outside the repository {root}")
    if not (declaration.package_dir / "__init__.py").is_file():
        raise ConfigError(
            f"{pyproject} declares package {package!r}, but "
            f"{declaration.package_dir}/__init__.py does not exist",
            hint="fix `package` / `source` in [tool.perfguard], or check out a commit that has the package",
        )
    return declaration
