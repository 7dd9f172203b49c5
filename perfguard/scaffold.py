"""What ``perfguard init`` writes into a repository, and the rule that it never overwrites a file.

A repository needs five things to be guarded (docs/guarding-your-package.md): ``asv.conf.json``;
the asv suite (``asv_benchmarks/``: perfguard's own suite, copied unchanged, so that plain
``python -m asv run`` runs it); the declaration in ``pyproject.toml`` (``[tool.perfguard]``
``package`` and ``registry``, :mod:`perfguard.declaration`); a registry with one worked entry
(``<package>/perfguard_registry.py``); and the workflows (``.github/workflows/perfguard-*.yml``:
the ones perfguard's own repository runs, fork approval, the untrusted check, the comment and the
Pages site included, with perfguard installed at the version that wrote them; docs/ci.md) and the
actionlint configuration that names their runner labels (``.github/actionlint.yaml``).

A file that exists is left as it is and reported as skipped; the one exception is a
``pyproject.toml`` without a ``[tool.perfguard]`` table, to which the table is appended (nothing
else in it changes).  Every file is written whole (:func:`perfguard.files.write_atomic`).
"""

from __future__ import annotations

import re
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path

from perfguard import __version__
from perfguard.errors import UsageError
from perfguard.files import write_atomic

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_HERE = Path(__file__).resolve().parent
TEMPLATES = _HERE / "templates" / "init"
SUITE = _HERE / "engine" / "asv_suite"
#: the workflows ``perfguard init`` writes (templates/init/, as .github/workflows/ of the repository)
WORKFLOWS = ("perfguard-main.yml", "perfguard-pr.yml", "perfguard-fork-approval.yml")
#: top-level directories that are never the guarded package
NOT_PACKAGES = frozenset({"tests", "test", "asv_benchmarks", "docs", "examples", "benchmarks", "scripts"})


@dataclass
class InitOutcome:
    """What ``perfguard init`` did: files written, files left alone (with why), the declaration."""

    root: Path
    package: str
    source: str
    written: list[Path] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def find_package(root: Path) -> tuple[str, str]:
    """(package, source) of the one package at the top of ``root`` or under ``src/``; else a
    :class:`UsageError` asking for ``--package``."""
    found: list[tuple[str, str]] = []
    for source in (".", "src"):
        base = root / source
        if not base.is_dir():
            continue
        for d in sorted(base.iterdir()):
            if d.is_dir() and (d / "__init__.py").is_file() and d.name not in NOT_PACKAGES:
                found.append((d.name, source))
    if len(found) == 1:
        return found[0]
    named = ", ".join(f"{s}/{p}" if s != "." else p for p, s in found) or "none"
    raise UsageError(
        f"cannot tell which package of {root} to guard (packages found: {named})",
        hint="pass --package NAME (and --source DIR when it is not at the top of the repository)",
    )


def init_repository(root: Path, package: str | None = None, source: str | None = None) -> InitOutcome:
    """Write what ``root`` needs to be guarded (module docstring); never overwrites a file."""
    root = root.resolve()
    if package is None:
        package, found_source = find_package(root)
        source = source or found_source
    source = source or "."
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", package):
        raise UsageError(f"--package {package!r} is not a top-level import name")
    package_dir = root / source / package
    if not (package_dir / "__init__.py").is_file():
        raise UsageError(
            f"{package_dir}/__init__.py does not exist: perfguard guards an existing package",
            hint="pass the import name of your package (--package) and its directory (--source)",
        )
    out = InitOutcome(root, package, source)
    values = {"package": package, "project": root.name, "version": __version__}

    def put(relative: str, text: str) -> None:
        target = root / relative
        if target.exists() or target.is_symlink():
            out.skipped.append((target, "exists"))
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, text)
        out.written.append(target)

    def template(name: str) -> str:
        return string.Template((TEMPLATES / name).read_text(encoding="utf-8")).safe_substitute(values)

    put("asv.conf.json", template("asv.conf.json"))
    put("asv_benchmarks/__init__.py", template("asv_init.py.tmpl"))
    for suite in sorted(SUITE.glob("bench_*.py")):
        put(f"asv_benchmarks/{suite.name}", suite.read_text(encoding="utf-8"))
    registry = (package_dir / "perfguard_registry.py").relative_to(root).as_posix()
    put(registry, template("perfguard_registry.py.tmpl"))
    _declare(root / "pyproject.toml", package, source, out)
    for workflow in WORKFLOWS:
        put(f".github/workflows/{workflow}", template(workflow))
    put(".github/actionlint.yaml", template("actionlint.yaml"))
    return out


def declaration_table(package: str, source: str) -> str:
    """The ``[tool.perfguard]`` table ``perfguard init`` writes."""
    lines = [
        "[tool.perfguard]",
        "# the guarded package and its registry (perfguard's docs/guarding-your-package.md)",
        f'package = "{package}"',
        f'registry = "{package}.perfguard_registry:IMPLEMENTATIONS"',
    ]
    if source != ".":
        lines.append(f'source = "{source}"')
    lines.append("threshold = 0.20  # a benchmark more than 20% slower (or bigger) fails the check")
    return "\n".join(lines) + "\n"


def _declare(pyproject: Path, package: str, source: str, out: InitOutcome) -> None:
    table = declaration_table(package, source)
    if not pyproject.exists():
        write_atomic(pyproject, table)
        out.written.append(pyproject)
        return
    text = pyproject.read_text(encoding="utf-8")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(
            f"{pyproject} is not valid TOML: {exc}", hint="fix it, then run init again"
        ) from None
    tool = document.get("tool", {})
    if isinstance(tool, dict) and "perfguard" in tool:
        declared = tool["perfguard"].get("package") if isinstance(tool["perfguard"], dict) else None
        why = (
            f"already declares package {declared!r}"
            if declared
            else "has a [tool.perfguard] table: add package and registry to it (see the lines below)"
        )
        out.skipped.append((pyproject, why))
        return
    separator = "" if text.endswith("\n\n") or not text else ("\n" if text.endswith("\n") else "\n\n")
    write_atomic(pyproject, f"{text}{separator}{table}")
    out.written.append(pyproject)
