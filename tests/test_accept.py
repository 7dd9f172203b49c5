"""Acceptances without measuring: the grammar, trailers, trust, and what they do to a comparison.

The comparisons are real ``compare_suite`` results of constructed measurements (deterministic
samples), so the ceiling rule is checked against the gate's own items: exact for work counts, with
the interval's margin for timings.  The end-to-end tests on a real repository and real measurements
are in ``tests/test_accept_check.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.series import store_series

from perfguard.accept import (
    Acceptance,
    AcceptError,
    Approval,
    Found,
    IgnoredAcceptance,
    apply_acceptances,
    beyond_ceiling,
    commit_messages,
    find_acceptances,
    parse_line,
    trailer_acceptances,
    trailer_values,
)
from perfguard.compare import Measurement, SuiteComparison, Verdict, compare_suite
from perfguard.config import Config
from perfguard.store import Store

FWD = "bench_attention.Forward.track_time"
OPS = "bench_attention.Work.track_forward_ops"
FLOPS = "bench_attention.Work.track_forward_flops"


# --------------------------------------------------------------------------------------------------
# the grammar


def test_the_issue_example_parses() -> None:
    spec = parse_line('improved Forward.track_time <=1.35 "exact masking costs a pass"')
    assert (spec.impl, spec.benchmark, spec.ceiling, spec.reason) == (
        "improved",
        "Forward.track_time",
        1.35,
        "exact masking costs a pass",
    )
    assert spec.metric is None and dict(spec.params) == {}


def test_params_metric_unquoted_reason_and_spaced_ceiling() -> None:
    spec = parse_line(
        "'multihead_*' 'Work.track_forward_*' seq_len=4096 dtype=*16 metric=ops <= 2 two passes now"
    )
    assert spec.impl == "multihead_*" and spec.benchmark == "Work.track_forward_*"
    assert dict(spec.params) == {"seq_len": "4096", "dtype": "*16"} and spec.metric == "ops"
    assert spec.ceiling == 2.0 and spec.reason == "two passes now"
    # words with '=' after the ceiling belong to the reason
    assert parse_line("* * <=1.5 keeps x=y semantics").reason == "keeps x=y semantics"
    assert parse_line("* * ≤1.5 unicode ceiling").ceiling == 1.5


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", "names no implementation and benchmark"),
        ("improved", "names no implementation and benchmark"),
        ("improved Forward.track_time", "has no ceiling"),
        ("improved Forward.track_time <=1.35", "gives no reason"),
        ("improved Forward.track_time <=abc why", "is not a number"),
        ("improved Forward.track_time <=1.0 why", "accepts nothing"),
        ("improved Forward.track_time <=0.8 why", "accepts nothing"),
        ("improved Forward.track_time <=inf why", "accepts nothing"),
        ("improved Forward.track_time metric=speed <=1.3 why", "is not one of"),
        ("improved Forward.track_time stray <=1.3 why", "neither NAME=GLOB nor the ceiling"),
        ("improved seq_len=1 <=1.3 why", "is not a benchmark glob"),
        ('improved Forward.track_time <=1.3 "unclosed', "No closing quotation"),
    ],
)
def test_bad_acceptances_say_what_is_wrong_and_how_to_write_it(line: str, message: str) -> None:
    with pytest.raises(AcceptError) as caught:
        parse_line(line, where="trailer")
    assert message in caught.value.message
    assert "improved Forward.track_time <=1.35" in (caught.value.hint or "")
    assert caught.value.exit_code == 2


def test_trailer_lines_anywhere_in_the_message_case_insensitive() -> None:
    message = (
        "Squashed: exact masking\n\n* first commit\n  perfguard-accept: a * <=1.2 one\n"
        'Perfguard-Accept:   b Forward* <=1.3 "two"  \nSigned-off-by: x\nNot-Perfguard-Accept: c * <=9 no\n'
    )
    assert trailer_values(message) == ["a * <=1.2 one", 'b Forward* <=1.3 "two"']


# --------------------------------------------------------------------------------------------------
# scope and ceiling against real compare_suite items


def work(impl: str, benchmark: str, value: float, seq_len: int = 512) -> Measurement:
    unit = "FLOP" if benchmark == FLOPS else "aten ops"
    metric = "flops" if benchmark == FLOPS else "ops"
    return Measurement(benchmark, {"impl": impl, "seq_len": seq_len, "dtype": "float32"}, rounds=[[value]],
                       metric=metric, unit=unit)  # fmt: skip


def timing(impl: str, factor: float, seed: int) -> Measurement:
    rng = np.random.default_rng(seed)
    rounds = [list(0.010 * factor * np.exp(rng.normal(0, 0.01, 60))) for _ in range(3)]
    return Measurement(FWD, {"impl": impl, "seq_len": 512, "dtype": "float32"}, rounds=rounds)


def comparison(factor: float) -> SuiteComparison:
    """dilated does `factor` times the work (counts exact, time with 1% noise); improved is unchanged."""
    base = [
        work("dilated", OPS, 1000),
        work("dilated", FLOPS, 5e9),
        work("improved", OPS, 800),
        timing("dilated", 1, 1),
    ]
    head = [
        work("dilated", OPS, 1000 * factor),
        work("dilated", FLOPS, 5e9 * factor),
        work("improved", OPS, 800),
        timing("dilated", factor, 2),
    ]
    return compare_suite(base, head, Config())


def accepted(line: str, *, by: str = "maint", sha: str = "a" * 40, trusted: bool = True) -> Acceptance:
    spec = parse_line(line)
    record = spec.record(source="command", author=by, trusted=trusted)
    return Acceptance.of(record, sha, 7)


def verdicts(result: SuiteComparison) -> dict[tuple[str, str], str]:
    return {(i.impl, i.benchmark.split(".", 1)[-1]): str(i.verdict) for i in result.items}


def test_a_doubling_within_the_ceiling_is_accepted_and_says_who_why_and_up_to_what() -> None:
    first = comparison(2.0)
    assert first.exit_code == 1
    applied = apply_acceptances(first, [accepted('dilated * <=2.1 "the reference pass runs twice"')])
    assert applied.exit_code == 0
    assert verdicts(applied.result) == {
        ("dilated", "Work.track_forward_ops"): "accepted",
        ("dilated", "Work.track_forward_flops"): "accepted",
        ("improved", "Work.track_forward_ops"): "unchanged",
        ("dilated", "Forward.track_time"): "accepted",
    }
    ops = next(i for i in applied.result.items if i.impl == "dilated" and i.benchmark == OPS)
    assert ops.reason.startswith(
        "accepted up to 2.1× by maint: 'the reference pass runs twice' (perfguard accept #7"
    )
    assert "2.000×" in ops.reason  # the measured change is still in the reason
    assert not ops.fails and ops.ratio == pytest.approx(2.0)
    summary = applied.summary().to_json()
    [row] = summary["applied"]
    assert (
        row["ceiling"] == 2.1
        and row["author"] == "maint"
        and row["reason"] == "the reference pass runs twice"
    )
    assert sorted(row["accepted"]) == [
        "Forward.track_time(dtype=float32,impl=dilated,seq_len=512)",
        "Work.track_forward_flops(dtype=float32,impl=dilated,seq_len=512)",
        "Work.track_forward_ops(dtype=float32,impl=dilated,seq_len=512)",
    ]
    assert row["over_ceiling"] == [] and summary["ignored"] == []


def test_beyond_the_ceiling_still_fails_and_names_the_ceiling() -> None:
    applied = apply_acceptances(comparison(2.0), [accepted('dilated * <=1.5 "one extra pass at most"')])
    assert applied.exit_code == 1
    assert set(verdicts(applied.result).values()) == {"regression", "unchanged"}
    ops = next(i for i in applied.result.items if i.benchmark == OPS and i.impl == "dilated")
    assert "over the accepted ceiling 1.5 (maint: 'one extra pass at most'" in ops.reason
    assert len(applied.over_ceiling) == 3 and not applied.accepted


def test_outside_the_scope_still_fails() -> None:
    for line in (
        'improved * <=3 "wrong implementation"',
        'dilated Forward.track_time <=3 "time only"',  # the work counts are not in its scope
        'dilated * seq_len=4096 <=3 "another size"',
        'dilated * metric=flops <=3 "flops only"',
    ):
        applied = apply_acceptances(comparison(2.0), [accepted(line)])
        assert applied.exit_code == 1, line
    only_time = apply_acceptances(comparison(2.0), [accepted('dilated Forward.track_time <=3 "time only"')])
    assert verdicts(only_time.result)[("dilated", "Forward.track_time")] == "accepted"
    assert verdicts(only_time.result)[("dilated", "Work.track_forward_ops")] == "regression"
    assert (
        "no regression in its scope"
        in apply_acceptances(comparison(2.0), [accepted('improved * <=3 "x"')]).lines()[0]
    )


def test_an_untrusted_acceptance_is_ignored_with_why() -> None:
    applied = apply_acceptances(comparison(2.0), [accepted('dilated * <=2.1 "mine"', trusted=False)])
    assert applied.exit_code == 1
    assert [i.why for i in applied.ignored] == ["not trusted"]
    assert applied.summary().to_json()["applied"] == []


def test_the_most_permissive_covering_acceptance_decides() -> None:
    applied = apply_acceptances(
        comparison(2.0), [accepted('dilated * <=1.5 "narrow"'), accepted('* Work.* <=2.5 "wide"', by="lead")]
    )
    v = verdicts(applied.result)
    assert v[("dilated", "Work.track_forward_ops")] == "accepted"  # 2.5 covers it
    assert v[("dilated", "Forward.track_time")] == "regression"  # only the 1.5 covers time
    ops = next(i for i in applied.result.items if i.benchmark == OPS and i.impl == "dilated")
    assert "by lead: 'wide'" in ops.reason


def test_non_regressions_are_left_alone() -> None:
    first = comparison(1.0)
    applied = apply_acceptances(first, [accepted('* * <=5 "anything"')])
    assert applied.result.items == first.items and not applied.decisions


def test_a_timing_just_over_the_ceiling_within_its_noise_stays_accepted() -> None:
    """The gate's own margin: a timing is beyond the ceiling when R > c and its CI's low end is
    above 1 + (c - 1)/2.  A count has no noise: R > c is enough."""
    item = next(i for i in comparison(2.0).items if i.benchmark == FWD)
    assert item.ci_low is not None and item.ci_low > 1.6
    assert beyond_ceiling(item, 1.5)
    from dataclasses import replace

    noisy = replace(item, ratio=1.56, ci_low=1.2)  # over 1.5, but its interval reaches 1.2 < 1.25
    assert not beyond_ceiling(noisy, 1.5)
    assert beyond_ceiling(replace(item, ratio=1.56, ci_low=1.3), 1.5)
    count = next(i for i in comparison(2.0).items if i.benchmark == OPS and i.impl == "dilated")
    assert beyond_ceiling(count, 1.999) and not beyond_ceiling(count, 2.0)
    assert beyond_ceiling(replace(count, ratio=None), 100.0)  # from zero


# --------------------------------------------------------------------------------------------------
# trailers in a real git repository, and stored acceptances


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "Pat Author", "GIT_AUTHOR_EMAIL": "pat@example.invalid",
           "GIT_COMMITTER_NAME": "Pat Author", "GIT_COMMITTER_EMAIL": "pat@example.invalid",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "a.txt").write_text("0\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-qm", "base")
    return path


def commit(repo: Path, message: str) -> str:
    with (repo / "a.txt").open("a") as fh:
        fh.write("x\n")
    git(repo, "commit", "-qam", message)
    return git(repo, "rev-parse", "HEAD")


def test_trailers_of_a_range_are_trusted_only_when_a_maintainer_approved_them(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    first = commit(
        repo,
        'exact masking\n\nPerfguard-Accept: improved Forward.track_time <=1.35 "exact masking costs a pass"',
    )
    commit(repo, "unrelated")
    third = commit(repo, "typo\n\nPerfguard-Accept: improved Forward.track_time 1.35 why")
    messages = commit_messages(repo, base, third)
    assert messages[0].sha == first and len(messages) == 3

    trusted, ignored = trailer_acceptances(messages, approval=None)
    assert trusted == []
    assert [i.sha for i in ignored] == [first, third]
    assert "not approved by a maintainer" in ignored[0].why
    assert "neither NAME=GLOB nor the ceiling" in ignored[1].why  # a typo is ignored, with why

    approval = Approval.of_pull_request(repo, "maint", base, third)
    trusted, ignored = trailer_acceptances(messages, approval=approval)
    [acceptance] = trusted
    assert acceptance.trusted and acceptance.approved_by == "maint" and acceptance.source == "trailer"
    assert acceptance.author == "Pat Author <pat@example.invalid>" and acceptance.sha == first
    assert acceptance.signed == "Pat Author <pat@example.invalid> (approved by maint)"
    assert [i.sha for i in ignored] == [third]

    # An approval of other commits approves none of these (issue 27).
    trusted, ignored = trailer_acceptances(messages, approval=Approval("maint", frozenset([third])))
    assert trusted == [] and [i.sha for i in ignored] == [first, third]
    assert "maint's approval covers the commits of the pull request they approved" in ignored[0].why


def test_find_acceptances_reads_the_range_from_the_trusted_store(repo: Path, tmp_path: Path) -> None:
    from perfguard.measuring import commit_record

    base = git(repo, "rev-parse", "HEAD")
    inside = commit(repo, "inside")
    head = commit(repo, "head")
    outside = git(repo, "rev-parse", "HEAD~2")  # = base: not in base..head
    with Store.open(f"sqlite:///{tmp_path / 'h.db'}") as store:

        def record(sha: str, line: str, trusted: bool) -> None:
            spec = parse_line(line)
            store.record_acceptances(
                commit_record(repo, sha), [spec.record(source="command", author="m", trusted=trusted)]
            )

        record(inside, 'dilated * <=2.1 "in range"', True)
        record(outside, 'dilated * <=9 "before the range"', True)
        record(head, 'dilated * <=3 "stored untrusted"', False)
        found = find_acceptances(repo, store, base, head)
        assert [a.reason for a in found.trusted] == ["in range"]
        assert found.trusted[0].id is not None and found.trusted[0].sha == inside
        assert [(i.sha, i.why) for i in found.ignored] == [(head, "stored as untrusted")]
        # a dirty work tree on top of head reads the same range
        dirty = find_acceptances(repo, store, base, f"{head}+dirty.0123456789ab")
        assert [a.reason for a in dirty.trusted] == ["in range"]
        applied = apply_acceptances(comparison(2.0), found)
        assert applied.exit_code == 0
        assert applied.ignored == found.ignored


def test_found_and_ignored_are_plain_data() -> None:
    found = Found((accepted('* * <=2 "x"'),), (IgnoredAcceptance("c" * 40, "t", "why"),))
    assert found.trusted[0].as_json()["scope"] == "* *"
    assert found.ignored[0].to_json() == {"sha": "c" * 40, "text": "t", "why": "why"}
    assert Verdict.ACCEPTED == "accepted"


# --------------------------------------------------------------------------------------------------
# perfguard accept: the command line's own errors (nothing measured)


def run_accept(
    repo: Path, db: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    import os
    import sys

    root = Path(__file__).resolve().parents[1]
    environment = {k: v for k, v in os.environ.items() if k not in ("PERFGUARD_DB", "PERFGUARD_UNTRUSTED")}
    environment.update({"PERFGUARD_DB": db, "PYTHONPATH": str(root), **(env or {})})
    return subprocess.run([sys.executable, "-m", "perfguard", "accept", *args], cwd=repo, env=environment,
                          capture_output=True, text=True, check=False)  # fmt: skip


def test_perfguard_accept_records_lists_and_refuses_with_exit_2(repo: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'h.db'}"
    for args, message in (
        (("improved", "Forward.track_time", "--reason", "why"), "--reason needs --max"),
        (("improved", "Forward.track_time", "--max", "1.35"), "gives no reason"),
        (("improved", "Forward.track_time", "--max", "0.9", "--reason", "why"), "accepts nothing"),
        (("improved", "--max", "1.3", "--reason", "why"), "is not a benchmark glob"),
        (("--list", "improved"), "--list takes no acceptance"),
        (
            ("improved", "Forward.track_time", "--max", "1.3", "--reason", "x", "--commit", "nope"),
            "unknown revision",
        ),
    ):
        result = run_accept(repo, db, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)
    refused = run_accept(repo, db, "*", "*", "--max", "2", "--reason", "x", env={"PERFGUARD_UNTRUSTED": "1"})
    assert refused.returncode == 2 and "untrusted context" in refused.stderr
    with Store.open(db) as store:
        assert store.acceptances() == []
    # the trailer's form works on the command line too; the author defaults to git's user
    store_series(db, git(repo, "rev-parse", "HEAD"), [("improved", "bench_attention.Forward.track_time")])
    git(repo, "config", "user.name", "Mae Maintainer")
    git(repo, "config", "user.email", "mae@example.invalid")
    done = run_accept(
        repo, db, "improved", "Forward.track_time", "seq_len=4096", "<=1.35", "exact", "masking"
    )
    assert done.returncode == 0, done.stderr
    written = 'improved Forward.track_time seq_len=4096 <=1.35 "exact masking"'
    assert f"{written} by Mae Maintainer <mae@example.invalid>" in done.stderr
    listed = run_accept(repo, db, "--list", "--commit", "HEAD")
    assert listed.returncode == 0 and "exact masking" in listed.stdout and "Mae Maintainer" in listed.stdout
    with Store.open(db) as store:
        [stored] = store.acceptances()
    assert stored.trusted and stored.source == "command" and dict(stored.params) == {"seq_len": "4096"}


@pytest.mark.skipif(
    not hasattr(__import__("perfguard.compare").compare, "derived_source"),
    reason="derived items carry their timing's verdict since issue 14's compare",
)
def test_tokens_per_second_follow_their_accepted_forward_time() -> None:
    """One measurement, one verdict: the throughput derived from an accepted forward time is
    accepted with it, never judged on its own (its scope, its ceiling)."""
    tokens = "bench_attention.Throughput.track_tokens_per_second"

    def throughput(factor: float, seed: int) -> Measurement:
        rng = np.random.default_rng(seed)
        rounds = [list(51200 / factor * np.exp(rng.normal(0, 0.01, 60))) for _ in range(3)]
        return Measurement(tokens, {"impl": "dilated", "seq_len": 512, "dtype": "float32"}, rounds=rounds,
                           metric="throughput", unit="tokens/s", direction="higher", gated=False)  # fmt: skip

    base, head = [timing("dilated", 1, 1), throughput(1, 3)], [timing("dilated", 2, 2), throughput(2, 4)]
    first = compare_suite(base, head, Config())
    assert verdicts(first)[("dilated", "Throughput.track_tokens_per_second")] == "regression"
    applied = apply_acceptances(first, [accepted('dilated Forward.track_time <=2.1 "exact pass"')])
    derived = next(i for i in applied.result.items if i.benchmark == tokens)
    assert str(derived.verdict) == "accepted" and derived.reason.endswith("verdict of forward time: accepted")
    over = apply_acceptances(first, [accepted('dilated * <=1.5 "too low"')])
    assert verdicts(over.result)[("dilated", "Throughput.track_tokens_per_second")] == "regression"
    assert [d.key[0] for d in over.decisions] == ["bench_attention.Forward.track_time"]  # decided once
