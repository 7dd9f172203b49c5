"""A bench is immutable: what a check learns on the way gives a new bench (perfguard.measuring).

An untrusted HEAD is judged by its baseline's rules and suite (``Bench.with_rules``), a HEAD that is
not on the baseline branch stores its rounds untrusted (``Bench.distrusted``); neither changes the
bench the command opened, nor its round runner.  What measuring leaves behind (worktrees, the rounds
kept, the cleanup) belongs to the invocation and is shared by every derived bench.  Real repository,
real store; nothing is measured.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from perfguard.gitrepo import rev_parse
from perfguard.measuring import QuietReporter, open_bench
from tests.helpers.project import WORK_BENCH, project_repo


def test_what_a_check_learns_gives_a_new_bench_and_leaves_the_opened_one_as_it_was(tmp_path: Path) -> None:
    repo = project_repo(tmp_path / "project")
    reporter = QuietReporter()
    with open_bench(
        profile_name="quick",
        bench_regex=WORK_BENCH,
        db_url=f"sqlite:///{tmp_path / 'history.db'}",
        reporter=reporter,
        cwd=repo,
    ) as bench:
        with pytest.raises(FrozenInstanceError):
            bench.config = bench.config  # type: ignore[misc]
        with pytest.raises(ValueError, match="untrusted bench"):
            replace(bench, trusted=False)  # an untrusted bench never stores a trusted round

        untrusted = bench.distrusted("HEAD is not on main")
        assert (untrusted.rounds_trusted, untrusted.runner.trust) == (False, "untrusted")
        assert (bench.rounds_trusted, bench.runner.trust) == (True, "trusted")
        assert untrusted.distrusted("said twice") is untrusted
        assert reporter.messages.count("HEAD is not on main") == 1 and "said twice" not in reporter.messages
        assert untrusted.session is bench.session and untrusted.store is bench.store

        suite = tmp_path / "baseline_suite"
        suite.mkdir()
        judged = untrusted.with_rules(replace(bench.config, threshold=0.5), suite)
        assert (judged.config.threshold, judged.runner.benchmark_dir) == (0.5, suite)
        assert bench.config.threshold == 0.2 and bench.runner.benchmark_dir == repo / "asv_benchmarks"
        assert judged.runner.trust == "untrusted" and untrusted.runner.benchmark_dir != suite

        side = judged.commit_side(rev_parse(repo, "HEAD"), "baseline")
        assert bench.session.worktrees and side.target.source.is_dir()  # the invocation's, not judged's
    assert not side.target.source.exists()  # removed when the invocation ended
