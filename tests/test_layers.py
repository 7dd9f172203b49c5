"""The module map of docs/design.md, held: data flows one way, only the CLI knows click, and the
guarded package is reached only through its declaration.

Every module of ``perfguard/`` has a stage (machine → timing → suite → run → store → compare →
report → the commands → api → cli); an import, at the top of a module or inside a function, may
only reach the same stage or an earlier one.  The records (``perfguard.store.records``: plain
values, no SQLAlchemy; their checks, and the typed readers of a result's ``info`` and a check's
``summary``) travel the whole flow and are imported from every stage.  A new module needs a
stage here and a row in docs/design.md's module map.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "perfguard"

#: stage -> the modules (or packages) in it, in the order of the data flow
STAGES: tuple[tuple[str, ...], ...] = (
    (
        "errors",
        "units",
        "metrics",
        "console",
        "files",
        "output_paths",
        "config",
        "declaration",
        "declare",
        "profiles",
        "gitrepo",
        "tree_state",
        "reach",
        "reach.trees",
        "reach.import_graph",
        "reach.selection",
        "device_lock",
        "store.record_checks",
        "store.result_info",
        "store.check_summary",
        "store.records",
    ),  # leaves
    # the measuring engine (perfguard/engine/, its __init__ names the flow)
    ("engine", "engine.machine", "engine.compile_cache"),
    (
        "engine.timing",
        "engine.timing.settings",
        "engine.timing.samples",
        "engine.timing.ranks",
        "engine.timing.nvml",
        "engine.timing.cpu",
        "engine.timing.cuda",
        "engine.timing.memory",
        "engine.work",
        "engine.communication",
    ),
    (
        "engine.guarded",
        "engine.dilation",
        "engine.asv_suite",
        "engine.benchmark_methods",
        "engine.cases",
        "engine.passes",
        "engine.accuracy",
        "engine.outcomes",
        "engine.suite",
        "engine.shards",
        "engine.rank_group",
        "engine.round_protocol",
    ),
    ("engine.fallbacks", "engine.round_worker", "engine.round_output", "engine.rounds"),
    ("store", "store.connection", "migrations"),
    ("stats", "stats.samples", "stats.ratio", "stats.rounds_test", "compare", "accept"),
    ("report", "report.site_benchmark", "report.site_index"),
    (
        "measuring",
        "gate",
        "bisect",
        "changepoints",
        "calibrate",
        "verify",
        "scaffold",
        "fidelity",
    ),  # the commands' libraries
    ("api",),
    ("cli", "__main__", "github"),
)


def stage_of(module: str) -> int:
    """The stage of ``perfguard.<module>`` (its longest listed prefix)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        for stage, names in enumerate(STAGES):
            if name in names:
                return stage
    raise AssertionError(
        f"perfguard.{module} has no stage: add it to STAGES in tests/test_layers.py and to the "
        "module map of docs/design.md"
    )


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:  # perfguard/__init__.py itself: imports perfguard.api lazily, for perfguard.check(...)
            out[".".join(parts)] = path
    return out


def imports(path: Path) -> list[tuple[str, int]]:
    """(imported name, line) of every import in the file, function bodies and TYPE_CHECKING included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
            found.append((node.module, node.lineno))
    return found


def test_every_module_has_a_stage() -> None:
    for module in modules():
        stage_of(module)


def test_no_module_imports_a_later_stage() -> None:
    known = modules()
    wrong = []
    for module, path in known.items():
        own = stage_of(module)
        for name, line in imports(path):
            if not name.startswith("perfguard."):
                continue
            target = name.removeprefix("perfguard.")
            if not any(target == m or target.startswith(m + ".") for m in known):
                continue  # an attribute: ``from perfguard.store import Store``
            if stage_of(target) > own:
                wrong.append(f"perfguard/{path.relative_to(ROOT)}:{line} imports perfguard.{target}")
    assert not wrong, "imports against the data flow (docs/design.md, module map):\n" + "\n".join(wrong)


def test_only_the_cli_imports_click() -> None:
    cli = stage_of("cli")
    offenders = [
        f"perfguard/{path.relative_to(ROOT)}:{line}"
        for module, path in modules().items()
        if stage_of(module) < cli
        for name, line in imports(path)
        if name == "click" or name.startswith("click.")
    ]
    assert not offenders, "the library must be callable without click: " + ", ".join(offenders)


#: The guarded package of this repository: perfguard may reach it only through the declaration
#: (``[tool.perfguard]`` and the registry it names, read by perfguard.engine.guarded), as it reaches
#: any other package (docs/guarding-your-package.md).
GUARDED = "attention"


def reaches_by_name(path: Path) -> list[str]:
    """Where the file reaches a package module by a name it holds itself: an ``import`` of the
    guarded package (function bodies included), or an ``import_module`` / ``__import__`` of a name
    written in the code (a literal or an f-string), which is how a private path would come back."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        if any(n == GUARDED or n.startswith(GUARDED + ".") for n in names):
            found.append(f"{node.lineno}: imports {', '.join(names)}")
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if (
                called in ("import_module", "__import__")
                and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))
                and not _names_perfguard(node.args[0])
            ):
                found.append(f"{node.lineno}: {called}({ast.unparse(node.args[0])})")
    return found


def _names_perfguard(name: ast.expr) -> bool:
    """A module name that is perfguard's own: ``"perfguard.x"``, ``f"perfguard.{x}"`` or
    ``f"{__name__}.{x}"`` (a package of perfguard loading its own submodules on first use)."""
    first = name.values[0] if isinstance(name, ast.JoinedStr) and name.values else name
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value == "perfguard" or first.value.startswith("perfguard.")
    return isinstance(first, ast.FormattedValue) and getattr(first.value, "id", None) == "__name__"


def test_perfguard_reaches_the_guarded_package_only_through_its_declaration() -> None:
    offenders = [
        f"perfguard/{path.relative_to(ROOT)}:{where}"
        for path in modules().values()
        for where in reaches_by_name(path)
    ]
    # the templates `perfguard init` writes are code of the user's repository, not perfguard's
    assert not offenders, (
        f"perfguard reaches {GUARDED} (or a module it names itself) outside the declaration; compute it in "
        "perfguard or make it part of the declaration (docs/guarding-your-package.md):\n"
        + "\n".join(offenders)
    )


def test_the_scan_sees_a_private_import(tmp_path: Path) -> None:
    """The scan above finds each way a private path came in before (issue 29)."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import importlib\n"
        "def f(name):\n"
        "    from attention.pattern import dilated_pattern\n"
        "    import attention._plan\n"
        "    return importlib.import_module(f'{name}._kernel_selection')\n",
        encoding="utf-8",
    )
    assert [w.split(":")[0] for w in reaches_by_name(planted)] == ["3", "4", "5"]
