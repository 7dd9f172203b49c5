"""What a change can reach (perfguard.reach, issue 32): real git repositories, real diffs.

The import graph is read from the sources at both commits; these tests build small packages
whose import structure is known, and one copy of this repository's ``attention/`` whose expected
selection is computed from its own import statements (never listed by hand).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from perfguard.reach import reach
from perfguard.reach.trees import Tree
from tests.helpers import import_walk

REPO = Path(__file__).resolve().parents[1]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _commit(root: Path, message: str) -> str:
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
    return _git(root, "rev-parse", "HEAD")


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


PACKAGE = {
    "kern/__init__.py": (
        "import importlib\n"
        "_NAMES = {'Fast': 'kern.fast:Fast', 'plot': 'kern.plotting'}\n"
        "def __getattr__(name):\n"
        "    module, _, attr = _NAMES[name].partition(':')\n"
        "    loaded = importlib.import_module(module)\n"
        "    return getattr(loaded, attr) if attr else loaded\n"
    ),
    "kern/_common.py": "def scale(x):\n    return x\n",
    "kern/fast.py": "from kern._common import scale\n\nclass Fast:\n    pass\n",
    "kern/slow.py": "from . import _math\n\nclass Slow:\n    pass\n",
    "kern/_math.py": "from ._common import scale\n",
    "kern/plotting.py": "X = 1\n",
    "kern/registry.py": (
        "import importlib\n"
        "TABLE = {'fast': 'kern.fast:Fast', 'slow': 'kern.slow:Slow'}\n"
        "def load(name):\n"
        "    module, _, attr = TABLE[name].partition(':')\n"
        "    return getattr(importlib.import_module(module), attr)\n"
    ),
    "bench/suite.py": "import kern\n",
    "docs/index.md": "# kern\n",
    "README.md": "kern\n",
}
ROOTS = {"fast": ("kern.fast",), "slow": ("kern.slow",)}


@pytest.fixture
def kern_repo(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "kern_repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    _write(root, PACKAGE)
    return root, _commit(root, "base")


def _reach(root: Path, base: str, head: str | None = None):
    return reach(
        Tree(root, base),
        Tree(root, head),
        package="kern",
        package_dir="kern",
        roots=ROOTS,
        declaration_modules=("kern.registry",),
    )


def test_a_change_in_one_module_reaches_only_the_implementations_importing_it(kern_repo) -> None:
    root, base = kern_repo
    _write(root, {"kern/_math.py": "from ._common import scale\nSLOWER = 2\n"})
    result = _reach(root, base, _commit(root, "slow down the math"))
    assert not result.everything, result.reason
    assert result.implementations == {"slow"}  # kern.slow -> (relative) kern._math
    assert result.why == {"slow": ("kern._math",)}


def test_a_module_both_import_reaches_both(kern_repo) -> None:
    root, base = kern_repo
    _write(root, {"kern/_common.py": "def scale(x):\n    return 2 * x\n"})
    result = _reach(root, base, _commit(root, "common"))
    assert result.implementations == {"fast", "slow"}


def test_docs_and_readme_reach_nothing_and_say_so(kern_repo) -> None:
    root, base = kern_repo
    _write(root, {"docs/index.md": "# kern, documented\n", "README.md": "kern!\n"})
    result = _reach(root, base, _commit(root, "docs"))
    assert not result.everything
    assert result.implementations == frozenset()
    assert result.ignored == ("README.md", "docs/index.md")
    assert result.reason == "no implementation imports a changed file"


def test_the_suite_the_declaration_and_non_python_files_reach_everything(kern_repo) -> None:
    root, base = kern_repo
    _write(root, {"bench/suite.py": "import kern\nN = 2\n"})
    suite = _commit(root, "suite")
    assert _reach(root, base, suite).everything
    assert "bench/suite.py" in _reach(root, base, suite).reason
    _write(root, {"kern/registry.py": PACKAGE["kern/registry.py"] + "# a new row\n"})
    declared = _commit(root, "registry")
    assert "declares the implementations" in _reach(root, suite, declared).reason
    _write(root, {"kern/kernel.cu": "__global__ void k() {}\n"})
    kernel = _commit(root, "a CUDA source")
    assert "not Python" in _reach(root, declared, kernel).reason


def test_an_import_added_by_the_change_counts(kern_repo) -> None:
    """The union of both sides' graphs: fast starts importing plotting in the same change that edits it."""
    root, base = kern_repo
    _write(
        root,
        {"kern/fast.py": "from kern._common import scale\nimport kern.plotting\n\nclass Fast:\n    pass\n"},
    )
    _write(root, {"kern/plotting.py": "X = 2\n"})
    result = _reach(root, base, _commit(root, "fast plots"))
    assert result.implementations == {"fast"}
    assert result.why["fast"] == ("kern.fast", "kern.plotting")


def test_a_dynamic_import_an_implementation_reaches_means_everything(kern_repo) -> None:
    root, base = kern_repo
    _write(
        root, {"kern/fast.py": "import importlib\nimportlib.import_module(NAME)\n\nclass Fast:\n    pass\n"}
    )
    result = _reach(root, base, _commit(root, "dynamic"))
    assert result.everything
    assert "kern/fast.py:2 imports dynamically" in result.reason


def test_lazy_exports_are_followed_only_by_modules_that_read_names(kern_repo) -> None:
    """``kern/__init__.py`` exports lazily (PEP 562); a module reading a name from it reaches what
    the lazy table names, one importing a submodule does not."""
    root, base = kern_repo
    _write(root, {"kern/plotting.py": "X = 3\n"})
    plot = _commit(root, "plot")
    assert _reach(root, base, plot).implementations == frozenset()
    _write(root, {"kern/slow.py": "from . import _math\nfrom kern import plot\n\nclass Slow:\n    pass\n"})
    reads = _commit(root, "slow reads a lazy name")
    _write(root, {"kern/plotting.py": "X = 4\n"})
    result = _reach(root, reads, _commit(root, "plot again"))
    assert result.implementations == {"slow"}


def test_the_work_tree_is_a_side(kern_repo) -> None:
    root, base = kern_repo
    _write(root, {"kern/fast.py": "from kern._common import scale\n\nclass Fast:\n    SPEED = 2\n"})
    _write(root, {"kern/new_helper.py": "Y = 1\n"})  # untracked: reaches nothing yet
    result = _reach(root, base, None)
    assert result.implementations == {"fast"}
    assert "kern/new_helper.py" in result.changed


def test_a_file_that_does_not_parse_reaches_everything(kern_repo) -> None:
    root, base = kern_repo
    _write(root, {"kern/plotting.py": "def (:\n"})
    result = _reach(root, base, _commit(root, "broken"))
    assert result.everything and "does not parse" in result.reason


def test_a_change_in_this_repositorys_dilated_module_reaches_what_imports_it(tmp_path: Path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(REPO / "attention", root / "attention", ignore=shutil.ignore_patterns("__pycache__"))
    _git(root, "init", "-q", "-b", "main")
    base = _commit(root, "base")
    target = root / "attention" / "dilated.py"
    target.write_text(target.read_text() + "\n# a change\n")
    result = reach(
        Tree(root, base),
        Tree(root, _commit(root, "dilated")),
        package="attention",
        package_dir="attention",
        roots=import_walk.roots(),
        declaration_modules=("attention.registry",),
    )
    expected = import_walk.importers(root / "attention", "attention.dilated")  # the test's own reading
    assert not result.everything, result.reason
    assert result.implementations == expected
    assert {"dilated", "multihead_dilated"} <= expected  # the module itself and its multihead module
    assert "ring" not in expected
