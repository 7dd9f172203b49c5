"""The declaration of the guarded package (``[tool.perfguard]`` package / registry / source), and a
repository without one: exit 2 saying what to write, never a pass of another package (issue 29)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfguard.declaration import read_declaration
from perfguard.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def project(tmp_path: Path, table: str, package: str = "flashdil") -> Path:
    (tmp_path / package).mkdir(parents=True, exist_ok=True)
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "{package}"\n\n{table}')
    return tmp_path


def test_a_declaration_is_read_with_its_paths(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    root = project(tmp_path / "src", "", "flashdil").parent
    (root / "pyproject.toml").write_text(
        '[tool.perfguard]\npackage = "flashdil"\nregistry = "flashdil.reg:IMPLS"\nsource = "src"\n'
    )
    declared = read_declaration(root)
    assert (declared.package, declared.registry_module, declared.registry_attribute) == (
        "flashdil",
        "flashdil.reg",
        "IMPLS",
    )
    assert declared.package_dir == (root / "src" / "flashdil").resolve()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("", "declares no guarded package"),
        ("[tool.perfguard]\nthreshold = 0.2\n", "declares no guarded package"),
        ('[tool.perfguard]\npackage = "flash-dil"\nregistry = "x:Y"\n', "is not a top-level import name"),
        ('[tool.perfguard]\npackage = "flashdil"\n', "names package 'flashdil' but no registry"),
        (
            '[tool.perfguard]\npackage = "flashdil"\nregistry = "flashdil.reg"\n',
            "not of the form module:attribute",
        ),
        (
            '[tool.perfguard]\npackage = "flashdil"\nregistry = "other.reg:X"\n',
            "is not inside the guarded package",
        ),
        (
            '[tool.perfguard]\npackage = "flashdil"\nregistry = "flashdil:X"\nsource = "../.."\n',
            "leads outside",
        ),
        (
            '[tool.perfguard]\npackage = "nothere"\nregistry = "nothere:X"\n',
            "nothere/__init__.py does not exist",
        ),
    ],
)
def test_a_bad_declaration_says_what_is_wrong(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        read_declaration(project(tmp_path, table))
    assert caught.value.exit_code == 2


def test_a_commit_of_perfguard_itself_from_before_the_declaration_reads_as_attention(tmp_path: Path) -> None:
    """The merge-base of this repository's first checks predates ``[tool.perfguard] package``."""
    (tmp_path / "attention").mkdir()
    (tmp_path / "attention" / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "perfguard"\n\n[tool.perfguard]\nthreshold = 0.2\n'
    )
    declared = read_declaration(tmp_path)
    assert (declared.package, declared.registry) == ("attention", "attention.registry:REGISTRY")


def test_this_repository_declares_attention_publicly() -> None:
    declared = read_declaration(ROOT)
    assert (declared.package, declared.registry) == ("attention", "attention.registry:REGISTRY")


def test_verify_and_check_in_an_undeclared_repository_exit_2(tmp_path: Path) -> None:
    """Issue 29's new user: perfguard's asv files copied into a repository of their own package.

    ``verify`` once said "all 10 rows passed" here (it verified perfguard's own ``attention``), and
    ``check`` stopped with "has no attention/ package"; both must exit 2 and say what to write.
    """
    repo = project(tmp_path / "repo", "")
    shutil.copy2(ROOT / "asv.conf.json", repo / "asv.conf.json")
    shutil.copytree(ROOT / "asv_benchmarks", repo / "asv_benchmarks")  # links copied as their files
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGUARD_")}
    env["PERFGUARD_DB"] = f"sqlite:///{tmp_path / 'history.db'}"
    for command in (
        ["verify"],
        ["check", "--baseline", "main", "--no-verify"],
        ["check", "--baseline", "main"],
    ):
        proc = subprocess.run([sys.executable, "-m", "perfguard", *command], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, (command, out)
        assert "declares no guarded package" in out and "perfguard init" in out, (command, out)
        assert "passed" not in proc.stdout, (command, out)


# --- the optional parts of an entry: the kernel comparison and the distributed suite ---------------

ENTRY = (
    "from perfguard.declare import Implementation, SequenceParallel, config\n"
    "CPU = config(1, 16, 2, 8)\n"
    "def build(**given):\n"
    "    import torch\n"
    "    module = torch.nn.Identity()\n"
    "    module.given = given\n"
    "    return module\n"
)


def guarded_package(
    tmp_path: Path, package: str, entries: str, modules: dict[str, str] | None = None
) -> Path:
    """A repository whose package ``package`` declares ``IMPLS = [<entries>]`` (and holds ``modules``)."""
    root = project(
        tmp_path, f'[tool.perfguard]\npackage = "{package}"\nregistry = "{package}.reg:IMPLS"\n', package
    )
    (root / package / "reg.py").write_text(f"{ENTRY}IMPLS = [{entries}]\n")
    for name, text in (modules or {}).items():
        (root / package / f"{name}.py").write_text(text)
    return root


@pytest.mark.parametrize(
    ("package", "entry", "message"),
    [
        ("badkernels", "kernels=3", "declares kernels=3, not the dotted name of a module"),
        ("badkernelname", "kernels='a b'", "not the dotted name of a module"),
        (
            "badparallel",
            "sequence_parallel={'ranks': {}}",
            "declares sequence_parallel=\\{'ranks': \\{\\}\\}",
        ),
    ],
)
def test_a_bad_optional_part_of_an_entry_says_what_to_write(
    tmp_path: Path, package: str, entry: str, message: str
) -> None:
    from perfguard.engine import guarded

    root = guarded_package(tmp_path, package, f"Implementation(name='one', factory=build, cpu=CPU, {entry})")
    with pytest.raises(ConfigError, match=message) as caught:
        guarded.load(read_declaration(root))
    assert caught.value.exit_code == 2
    assert "SequenceParallel" in caught.value.hint if "parallel" in entry else "module" in caught.value.hint


def test_a_package_that_declares_neither_part_gets_neither_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``kernels``, no ``sequence_parallel``: no kernel comparison, and the distributed suite skips
    every implementation saying what to declare, instead of reaching into the package."""
    from perfguard import profiles
    from perfguard.declaration import SOURCE_ENV
    from perfguard.engine import cases, guarded, shards

    root = guarded_package(tmp_path, "plainpkg", "Implementation(name='one', factory=build, cpu=CPU)")
    monkeypatch.setenv(SOURCE_ENV, str(root))
    package = guarded.current()
    assert package.name == "plainpkg"
    assert (package.with_kernels(), package.sequence_parallel(), cases.kernel_comparison()) == ([], [], {})
    with pytest.raises(cases.Unsupported, match="one declares no sequence-parallel path"):
        shards.build("one", 2048, "float32", "cpu", profiles.PROFILES["distributed-quick"])
    with pytest.raises(ConfigError, match="declares no kernels module"):
        package.kernels("one")


def test_declared_parts_are_read_and_a_kernels_module_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfguard.declaration import SOURCE_ENV
    from perfguard.engine import cases, guarded

    entries = (
        "Implementation(name='fast', factory=build, cpu=CPU, kernels='kernpkg.kernels'),"
        "Implementation(name='half', factory=build, cpu=CPU, kernels='kernpkg.half'),"
        "Implementation(name='spread', factory=build, cpu=CPU,"
        " sequence_parallel=SequenceParallel(ranks={'spread': True}, one_rank={'spread': False}))"
    )
    modules = {
        "kernels": "KERNELS = ('a', 'b')\ndef available(device, dtype, head_dim):\n    return [('a', None), "
        "('b', 'no b here')]\ndef running(device, dtype, head_dim, kernel):\n    return kernel\n",
        "half": "KERNELS = ('a',)\ndef available(device, dtype, head_dim):\n    return [('a', None)]\n",
    }
    root = guarded_package(tmp_path, "kernpkg", entries, modules)
    monkeypatch.setenv(SOURCE_ENV, str(root))
    package = guarded.current()
    assert package.with_kernels() == ["fast", "half"] and package.sequence_parallel() == ["spread"]
    assert package.kernels("fast").KERNELS == ("a", "b")
    with pytest.raises(ConfigError, match=r"kernels = 'kernpkg.half': the module has no running"):
        cases.kernel_comparison()
    # the factory is given the declared keywords: `backend` with kernels, the sequence-parallel ones
    spread = package.get("spread")
    assert spread.build("cpu", spread=True, other=1).given == {"spread": True}  # `other`: not declared


def test_this_repositorys_kernel_comparison_and_distributed_suite_are_declared() -> None:
    """What perfguard once knew by name (``improved``; the rings) is now what the registry says."""
    from attention import backends
    from attention.registry import REGISTRY
    from perfguard.engine import guarded

    assert [n for n, e in REGISTRY.items() if getattr(e, "kernels", None)] == ["improved"]
    assert guarded.kernels_of(REGISTRY["improved"]) is backends
    assert [n for n, e in REGISTRY.items() if guarded.sequence_parallel(e)] == [
        "ring",
        "hilbert_ring",
        "multihead_ring",
    ]
    # the rings place each rank's positions as perfguard's distributed suite hands them their shard
    from attention._plan import split_lengths
    from perfguard.engine.sequence_group import shard_lengths

    assert all(shard_lengths(n, r) == split_lengths(n, r) for n in range(1, 70) for r in range(1, 9))
