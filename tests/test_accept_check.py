"""Accepting an intended regression, end to end: a real git repository, real rounds, the real store.

A pull request makes ``dilated`` do twice the work (its forward runs twice) and says so in a
trailer, ``Perfguard-Accept: dilated Work.* <=2.1 "..."``.  The checks measure the work metrics,
which repeat exactly on a busy CPU (a doubling reads 2.000), through the library the gate is built
from (:func:`perfguard.gate.run_check`), with the acceptances found and applied as the gate applies
them after stage 2 (:func:`perfguard.accept.find_acceptances` before the check runs, then
:func:`perfguard.accept.apply_acceptances`).  ``perfguard accept`` is run through the real CLI.

- an approved acceptance of a doubling (+100%, ceiling 2.1) passes, the items ``accepted`` with
  who, why and the ceiling;
- the same acceptance on a PR that quadruples the work (4.0 > 2.1) fails;
- the same trailer without a maintainer's approval is ignored: the doubling fails;
- a maintainer's ``perfguard accept`` in the history store passes the doubling without any trailer
  approval, ``PERFGUARD_UNTRUSTED`` cannot record one, and an acceptance written to an untrusted
  check's own results store does not count.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfguard.accept import Applied, Approval, apply_acceptances, find_acceptances
from perfguard.gate import run_check
from perfguard.gitrepo import merge_base, rev_parse
from perfguard.measuring import QuietReporter, commit_record, open_bench
from perfguard.store import Store
from tests.helpers.project import WORK_BENCH, append_commit, git, perfguard, planted, project_repo

TRAILER = 'Perfguard-Accept: dilated Work.* <=2.1 "the reference pass runs twice, on purpose"'
WORK = {"flops", "ops", "allocated"}


@dataclass
class Project:
    repo: Path
    db: str
    results_db: str
    double: str
    quadruple: str


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """main, and two pull requests with the same trailer: ``double`` (x2 work) and ``quadruple`` (x4)."""
    base = tmp_path_factory.mktemp("accept")
    repo = project_repo(base / "project")
    git(repo, "checkout", "-q", "-b", "double")
    double = append_commit(repo, "attention/registry.py", planted(2), f"exact reference pass\n\n{TRAILER}\n")
    git(repo, "checkout", "-q", "-b", "double-cli", "main")  # the same change, for the CLI test alone
    append_commit(repo, "attention/registry.py", planted(2), f"exact reference pass (CLI)\n\n{TRAILER}\n")
    git(repo, "checkout", "-q", "-b", "quadruple", "main")
    quadruple = append_commit(
        repo, "attention/registry.py", planted(4), f"exact reference pass\n\n{TRAILER}\n"
    )
    git(repo, "checkout", "-q", "main")
    db = f"sqlite:///{base / 'history.db'}"
    recorded = perfguard(repo, "run", "--bench", WORK_BENCH, "--rounds", "1", db=db)
    assert recorded.returncode == 0, recorded.stderr
    yield Project(repo, db, f"sqlite:///{base / 'untrusted.db'}", double, quadruple)


def check(project: Project, branch: str, *, approved_by: str | None = None, trusted: bool = True) -> Applied:
    """What the gate does: acceptances found before the check runs, applied to its comparison.

    ``run_check`` measures and stores both sides; the comparison is then made again from the stored
    rounds, as stage 1 made it (work metrics have no stage 2), so that this test does not depend on
    whether ``run_check`` applies acceptances itself (the lead wires that in; see the CLI test below).
    """
    from perfguard.compare import compare_suite, measurements_from_rounds

    git(project.repo, "checkout", "-q", branch)
    with open_bench(
        profile_name="quick",
        bench_regex=WORK_BENCH,
        db_url=project.db,
        reporter=QuietReporter(),
        trusted=trusted,
        results_db_url=project.results_db,
        cwd=project.repo,
    ) as bench:
        head = rev_parse(bench.root, "HEAD")
        base = merge_base(bench.root, rev_parse(bench.root, "main"), head)
        approval = Approval.of_pull_request(bench.root, approved_by, base, head)
        found = find_acceptances(bench.root, bench.baseline_store, base, head, approval=approval)
        run_check(bench, "main", rounds=1, verify=False)
        first = compare_suite(
            measurements_from_rounds(bench.stored_rounds(base)),
            measurements_from_rounds(bench.stored_rounds(head, store=bench.store)),
            bench.config,
        )
        assert first.exit_code == 1  # without acceptances, the doubled work fails
        return apply_acceptances(first, found)


def dilated_work(applied: Applied) -> list:  # type: ignore[type-arg]
    items = [i for i in applied.result.items if i.impl == "dilated" and i.metric in WORK]
    assert {i.metric for i in items} == WORK
    return items


def test_an_approved_acceptance_passes_the_intended_doubling(project: Project) -> None:
    applied = check(project, "double", approved_by="maint")
    assert applied.exit_code == 0
    for item in dilated_work(applied):
        assert str(item.verdict) == "accepted" and item.ratio == pytest.approx(2.0, rel=1e-9)
        assert item.reason.startswith(
            "accepted up to 2.1× by Pat Author <pat@example.invalid> (approved by maint): "
            "'the reference pass runs twice, on purpose' (Perfguard-Accept trailer in "
        )
    improved = [i for i in applied.result.items if i.impl == "improved"]
    assert improved and all(str(i.verdict) == "unchanged" and i.ratio == 1.0 for i in improved)
    [row] = applied.summary().to_json()["applied"]
    assert (row["sha"], row["ceiling"], row["approved_by"], row["source"]) == (
        project.double,
        2.1,
        "maint",
        "trailer",
    )
    assert len(row["accepted"]) == 3 and row["over_ceiling"] == []


def test_the_same_acceptance_over_its_ceiling_fails(project: Project) -> None:
    applied = check(project, "quadruple", approved_by="maint")
    assert applied.exit_code == 1
    for item in dilated_work(applied):
        assert str(item.verdict) == "regression" and item.ratio == pytest.approx(4.0, rel=1e-9)
        assert "over the accepted ceiling 2.1" in item.reason
    [row] = applied.summary().to_json()["applied"]
    assert row["accepted"] == [] and len(row["over_ceiling"]) == 3


def test_a_trailer_nobody_approved_is_ignored(project: Project) -> None:
    applied = check(project, "double", approved_by=None)
    assert applied.exit_code == 1
    assert all(str(i.verdict) == "regression" for i in dilated_work(applied))
    [ignored] = applied.ignored
    assert ignored.sha == project.double and "not approved by a maintainer" in ignored.why
    assert applied.summary().to_json()["applied"] == []


def accept(
    project: Project, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return perfguard(project.repo, "accept", "--commit", project.double, "dilated", "Work.*", "--max", "2.1",
                     *args, db=project.db, env=env)  # fmt: skip


def test_a_maintainers_perfguard_accept_counts_and_untrusted_contexts_cannot_accept(project: Project) -> None:
    # code under review cannot record an acceptance: refused, nothing written
    refused = accept(project, "--reason", "mine", env={"PERFGUARD_UNTRUSTED": "1"})
    assert refused.returncode == 2 and "does not run in an untrusted context" in refused.stderr
    with Store.open(project.db) as store:
        assert store.acceptances() == []

    recorded = accept(project, "--reason", "the reference pass runs twice", "--by", "Mae Maintainer")
    assert recorded.returncode == 0, recorded.stderr
    assert "recorded acceptance #" in recorded.stderr and "Mae Maintainer" in recorded.stderr
    listed = perfguard(project.repo, "accept", "--list", db=project.db)
    assert (
        listed.returncode == 0 and "Mae Maintainer" in listed.stdout and project.double[:10] in listed.stdout
    )

    applied = check(project, "double")  # no trailer approval: the stored acceptance decides
    assert applied.exit_code == 0
    for item in dilated_work(applied):
        assert str(item.verdict) == "accepted"
        assert "by Mae Maintainer: 'the reference pass runs twice'" in item.reason


def _has_read_only_stores() -> bool:
    import inspect

    return "read_only" in inspect.signature(Store.open).parameters


@pytest.mark.skipif(
    not _has_read_only_stores(), reason="untrusted checks need Store.open(read_only=), issue 13"
)
def test_an_untrusted_check_reads_acceptances_from_the_history_store_only(project: Project) -> None:
    """An acceptance the PR's code wrote into its own results store does not count; the same one in
    the history store (read-only for the untrusted check) does."""
    from perfguard.store import AcceptanceRecord

    wide = AcceptanceRecord(impl="dilated", benchmark="Work.*", ceiling=4.1, reason="four passes",
                            source="command", author="someone", trusted=True)  # fmt: skip
    at = commit_record(project.repo, project.quadruple)
    with Store.open(project.results_db) as results:
        results.record_acceptances(at, [wide])
    applied = check(project, "quadruple", trusted=False)
    assert applied.exit_code == 1 and applied.acceptances == ()
    with Store.open(project.db) as store:
        store.record_acceptances(at, [wide])
    applied = check(project, "quadruple", trusted=False)
    assert applied.exit_code == 0 and [a.reason for a in applied.acceptances] == ["four passes"]


def _check_takes_approvals() -> bool:
    from perfguard.cli.check import check as check_command

    return any(p.name == "accept_approved_by" for p in check_command.params)


@pytest.mark.skipif(
    not _check_takes_approvals(), reason="perfguard check --accept-approved-by is wired by the lead"
)
def test_perfguard_check_stores_and_reports_the_accepted_items(project: Project, tmp_path: Path) -> None:
    """The real ``perfguard check``: exit 0 with the approval, the stored check and its JSON report
    show ``accepted`` with who, why and the ceiling; exit 1 without it.  (How the Markdown and HTML
    reports render accepted items is the report's: docs/living-with-regressions.md.)"""
    import json

    git(project.repo, "checkout", "-q", "double-cli")
    args = ("check", "--baseline", "main", "--bench", WORK_BENCH, "--rounds", "1", "--no-verify")
    refused = perfguard(project.repo, *args, "--json", str(tmp_path / "no.json"), db=project.db)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "not approved by a maintainer" in refused.stderr
    reports = ("--json", str(tmp_path / "ok.json"))
    passed = perfguard(
        project.repo, *args, *reports, db=project.db, env={"PERFGUARD_ACCEPT_APPROVED_BY": "maint"}
    )
    assert passed.returncode == 0, passed.stdout + passed.stderr
    document = json.loads((tmp_path / "ok.json").read_text())
    accepted = [i for i in document["items"] if i["verdict"] == "accepted"]
    assert {i["impl"] for i in accepted} == {"dilated"} and len(accepted) == 3
    assert all("(approved by maint)" in i["reason"] and "2.1×" in i["reason"] for i in accepted)
    [row] = document["summary"]["acceptances"]["applied"]
    assert row["approved_by"] == "maint" and row["ceiling"] == 2.1 and len(row["accepted"]) == 3
