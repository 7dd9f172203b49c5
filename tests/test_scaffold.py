"""``perfguard init`` (perfguard.scaffold): what it writes, and that it never overwrites a file.

The whole walk (init, verify, check, report, plain asv) on a package we did not write is
tests/test_guarding_external_package.py; these are the cases it does not reach, in-process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfguard.declaration import read_declaration
from perfguard.errors import UsageError
from perfguard.scaffold import init_repository


def package(root: Path, name: str, under: str = ".") -> None:
    (root / under / name).mkdir(parents=True)
    (root / under / name / "__init__.py").write_text("")


def test_a_src_layout_is_found_and_declared_with_its_source(tmp_path: Path) -> None:
    package(tmp_path, "flashdil", "src")
    package(tmp_path, "tests")  # never the guarded package
    outcome = init_repository(tmp_path)
    assert (outcome.package, outcome.source) == ("flashdil", "src")
    declared = read_declaration(tmp_path)
    assert declared.package_dir == (tmp_path / "src" / "flashdil").resolve()
    assert (tmp_path / "src" / "flashdil" / "perfguard_registry.py").is_file()
    assert not outcome.skipped


def test_two_packages_need_package(tmp_path: Path) -> None:
    package(tmp_path, "one")
    package(tmp_path, "two")
    with pytest.raises(UsageError, match=r"packages found: one, two"):
        init_repository(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]  # nothing written


def test_existing_files_are_skipped_and_a_table_is_never_rewritten(tmp_path: Path) -> None:
    package(tmp_path, "flashdil")
    pyproject = '[project]\nname = "flashdil"\n\n[tool.perfguard]\nthreshold = 0.1\n'
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "asv.conf.json").write_text("{}")
    outcome = init_repository(tmp_path, "flashdil")
    assert (tmp_path / "pyproject.toml").read_text() == pyproject
    assert (tmp_path / "asv.conf.json").read_text() == "{}"
    skipped = {p.name: why for p, why in outcome.skipped}
    assert skipped["asv.conf.json"] == "exists"
    assert skipped["pyproject.toml"].startswith("has a [tool.perfguard] table: add package and registry")


def test_a_pyproject_without_the_table_gets_it_appended(tmp_path: Path) -> None:
    package(tmp_path, "flashdil")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "flashdil"\n')
    init_repository(tmp_path, "flashdil")
    text = (tmp_path / "pyproject.toml").read_text()
    assert text.startswith('[project]\nname = "flashdil"\n\n[tool.perfguard]\n')
    assert read_declaration(tmp_path).registry == "flashdil.perfguard_registry:IMPLEMENTATIONS"


def test_a_package_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="perfguard guards an existing package"):
        init_repository(tmp_path, "ghost")
    assert list(tmp_path.iterdir()) == []


def test_a_dense_entry_without_a_pattern_gets_its_accuracy_measured_against_the_declared_function(
    tmp_path: Path,
) -> None:
    """The worked entry ``init`` writes has no ``attention_pattern``: its errors are measured against
    what it declares it computes (``dense``: every key), the function verify's reference holds it
    to, instead of being skipped (a guarded package need not expose patterns)."""
    from sqlalchemy import create_engine, text

    from tests.helpers.project import git, perfguard

    repo = tmp_path / "mykern"
    package(repo, "mykern")
    init_repository(repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "perfguard init")
    db = f"sqlite:///{tmp_path / 'history.db'}"
    bench = r"Accuracy\.track_(output|q)_error(_causal)?\('example_dense', 512,"
    result = perfguard(repo, "run", "--rounds", "1", "--bench", bench, db=db)
    assert result.returncode == 0, result.stdout + result.stderr
    engine = create_engine(db)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT benchmark, status, value, error FROM results")).all()
    engine.dispose()
    measured = {b.rsplit(".", 1)[-1]: (s, v, e) for b, s, v, e in rows}
    assert set(measured) == {"track_output_error", "track_q_error", "track_output_error_causal",
                             "track_q_error_causal"}, measured  # fmt: skip
    for name, (status, value, error) in measured.items():
        assert status == "ok", (name, error)
        assert 0 < value < 1e-5, (name, value)  # float32 SDPA against the float64 reference
