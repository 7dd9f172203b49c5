"""``python -m perfguard.github approval``: who approved a PR's acceptances, over real HTTP.

A local server speaks the three GitHub REST calls the subcommand makes (a commit's pull requests,
an issue's events page by page, a collaborator's permission); the subcommand runs as the workflow
runs it, in a fresh process, and writes ``approved_by`` to ``$GITHUB_OUTPUT``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from perfguard import github as gh

REPO = "octo/perfguard"
SHA = "0123456789abcdef0123456789abcdef01234567"
ROOT = Path(__file__).resolve().parents[1]


class FakeGitHub:
    """What the server holds: events per issue, permissions per login, pull requests per commit."""

    def __init__(self) -> None:
        self.events: dict[int, list[dict[str, Any]]] = {}
        self.permissions: dict[str, str] = {}
        self.pulls: dict[str, list[dict[str, Any]]] = {}
        self.calls: list[str] = []

    def label(self, number: int, action: str, login: str, name: str = "perfguard-accept") -> None:
        self.events.setdefault(number, []).append(
            {"event": action, "actor": {"login": login}, "label": {"name": name}}
        )


@pytest.fixture
def github() -> Iterator[tuple[FakeGitHub, str]]:
    state = FakeGitHub()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            url = urlparse(self.path)
            state.calls.append(url.path)
            if self.headers.get("Authorization") != "Bearer t0ken":
                return self.reply(401, {"message": "Bad credentials"})
            parts = url.path.strip("/").split("/")
            query = parse_qs(url.query)
            if parts[:3] == ["repos", *REPO.split("/")][:3] and len(parts) >= 5:
                kind = parts[3]
                if kind == "issues" and parts[5] == "events":
                    page = int(query.get("page", ["1"])[0])
                    events = state.events.get(int(parts[4]), [])
                    return self.reply(200, events[(page - 1) * 100 : page * 100])
                if kind == "collaborators" and parts[5] == "permission":
                    permission = state.permissions.get(parts[4], "read")
                    return self.reply(200, {"permission": permission, "role_name": permission})
                if kind == "commits" and parts[5] == "pulls":
                    return self.reply(200, state.pulls.get(parts[4], []))
            return self.reply(404, {"message": "Not Found"})

        def reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def approval(url: str, tmp_path: Path, *args: str, token: str | None = "t0ken") -> tuple[str, str]:
    """Run the subcommand; (approved_by from $GITHUB_OUTPUT, stdout)."""
    output = tmp_path / "output"
    output.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_TOKEN"}
    env.update({"GITHUB_API_URL": url, "GITHUB_OUTPUT": str(output), "PYTHONPATH": str(ROOT)})
    if token:
        env["GITHUB_TOKEN"] = token
    proc = subprocess.run([sys.executable, "-m", "perfguard.github", "approval", "--repo", REPO, *args],
                          capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = output.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("approved_by=")
    return lines[0].removeprefix("approved_by="), proc.stdout


def test_a_writer_who_applied_the_label_approves(github: tuple[FakeGitHub, str], tmp_path: Path) -> None:
    state, url = github
    state.label(7, "labeled", "maint")
    state.permissions["maint"] = "write"
    approved, out = approval(url, tmp_path, "--pr", "7")
    assert approved == "maint" and "maint (write) applied 'perfguard-accept' on PR #7" in out


def test_no_label_a_removed_label_or_a_triager_approves_nothing(
    github: tuple[FakeGitHub, str], tmp_path: Path
) -> None:
    state, url = github
    state.permissions.update({"maint": "admin", "helper": "triage"})
    assert approval(url, tmp_path, "--pr", "1")[0] == ""
    state.label(2, "labeled", "maint")
    state.label(2, "unlabeled", "maint")
    state.label(2, "labeled", "maint", name="safe-to-bench")  # another label
    approved, out = approval(url, tmp_path, "--pr", "2")
    assert approved == "" and "does not carry the 'perfguard-accept' label" in out
    state.label(3, "labeled", "maint")
    state.label(3, "labeled", "helper")  # the last one to apply it is who approves
    approved, out = approval(url, tmp_path, "--pr", "3")
    assert approved == "" and "helper applied 'perfguard-accept' on PR #3 but has 'triage' access" in out


def test_events_are_read_page_by_page(github: tuple[FakeGitHub, str], tmp_path: Path) -> None:
    state, url = github
    state.permissions["maint"] = "maintain"
    state.label(4, "labeled", "maint")
    for i in range(150):
        state.events[4].append({"event": "commented" if i % 2 else "referenced", "actor": {"login": "x"}})
    state.label(4, "unlabeled", "maint")
    state.label(4, "labeled", "maint")  # on page 2
    assert approval(url, tmp_path, "--pr", "4")[0] == "maint"
    assert state.calls.count(f"/repos/{REPO}/issues/4/events") == 2


def test_the_baseline_workflow_finds_the_pull_request_of_its_commit(
    github: tuple[FakeGitHub, str], tmp_path: Path
) -> None:
    state, url = github
    state.pulls[SHA] = [
        {"number": 9, "merged_at": None, "merge_commit_sha": None},
        {"number": 12, "merged_at": "2026-11-25T00:00:00Z", "merge_commit_sha": SHA},
    ]
    state.label(12, "labeled", "maint")
    state.permissions["maint"] = "write"
    approved, out = approval(url, tmp_path, "--sha", SHA)
    assert approved == "maint" and "PR #12" in out
    approved, out = approval(url, tmp_path, "--sha", "f" * 40)
    assert approved == "" and f"no pull request merged {'f' * 40}" in out


def test_without_a_token_or_with_a_failing_api_nothing_is_approved(
    github: tuple[FakeGitHub, str], tmp_path: Path
) -> None:
    state, url = github
    state.label(7, "labeled", "maint")
    state.permissions["maint"] = "write"
    approved, out = approval(url, tmp_path, "--pr", "7", token=None)
    assert approved == "" and "::warning title=perfguard approval::GITHUB_TOKEN is not set" in out
    approved, out = approval(url, tmp_path, "--pr", "7", token="wrong")
    assert approved == "" and "HTTP 401" in out and "acceptances stay unapproved" in out


def test_step_annotations_are_capped_and_escaped() -> None:
    steps = [
        {"benchmark": "bench_attention.Work.track_forward_ops", "impl": f"impl{i}",
         "params": {"seq_len": 512}, "ratio": 2.0, "reason": "aten ops 433 → 866", "flagged": True}
        for i in range(12)
    ]  # fmt: skip
    steps.append({**steps[0], "flagged": False})
    lines = gh.step_annotations(
        {"sha": SHA, "machine_key": "NVIDIA H100 x1", "cause": "driver 550 → 560", "steps": steps}
    )
    assert len(lines) == 11 and lines[-1].startswith("::warning title=perfguard%3A more steps::2 more")
    assert lines[0].startswith(
        "::warning title=perfguard%3A impl0 Work.track_forward_ops 2.00x worse at 0123456789::"
    )
    assert "%0Alikely cause: driver 550 → 560 between the two runs" in lines[0]


def test_changes_without_a_report_says_so_in_the_summary(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    assert gh.report_changes(tmp_path, step_summary=summary) == 0
    assert "wrote no report" in summary.read_text()
