"""perfguard/github.py: annotations, the summary, and the sticky PR comment over real HTTP.

The comment tests run the module against a local HTTP server that implements the four GitHub REST
calls it makes (read a PR, list comments page by page, create, update), keeping state like GitHub
does, so "updated in place, never a second comment" is checked on what the server holds.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from perfguard import github as gh

SHA = "5f1c0d2e3b4a59687766554433221100ffeeddcc"
REPO = "octo/perfguard"
TOKEN = "test-token"


def test_workflow_commands_escape_what_github_would_misread() -> None:
    line = gh.workflow_command("error", "50% slower\nhint: re-run", title="perfguard check: exit 1, sorry")
    assert line == "::error title=perfguard check%3A exit 1%2C sorry::50%25 slower%0Ahint: re-run"


def test_step_records_exit_code_and_annotates_perfguard_errors(tmp_path: Path, capfd: Any) -> None:
    # A real click usage error from the real CLI: exit 2 with "Error: No such option".
    code = gh.run_step("check", [sys.executable, "-m", "perfguard", "check", "--no-such-flag"], tmp_path)
    out = capfd.readouterr().out
    assert code == 2
    assert (tmp_path / "check.exit").read_text().strip() == "2"
    assert "No such option" in (tmp_path / "check.log").read_text()
    annotation = next(line for line in out.splitlines() if line.startswith("::error"))
    assert "usage or environment error (exit 2)" in annotation
    assert "No such option" in annotation and "--no-such-flag" in annotation


def test_step_explains_a_regression_exit_and_a_missing_command(tmp_path: Path, capfd: Any) -> None:
    assert gh.run_step("check", [sys.executable, "-c", "print('table'); raise SystemExit(1)"], tmp_path) == 1
    out = capfd.readouterr().out
    assert "table" in out
    assert "found a regression, a broken benchmark or a failed verification (exit 1)" in out
    code = "import sys; print('Error: reports need perfguard.report', file=sys.stderr); sys.exit(1)"
    assert gh.run_step("check", [sys.executable, "-c", code], tmp_path) == 1
    assert (
        "::error title=perfguard check failed (exit 1)::reports need perfguard.report"
        in capfd.readouterr().out
    )
    assert gh.run_step("verify", ["perfguard-does-not-exist"], tmp_path) == 127
    assert "could not start" in capfd.readouterr().out
    assert gh.run_step("run", [sys.executable, "-c", "import os; os.abort()"], tmp_path) == -6
    assert "crashed (exit -6)" in capfd.readouterr().out


def test_step_says_an_interrupted_check_was_interrupted_not_crashed(tmp_path: Path, capfd: Any) -> None:
    """Issue 27, item 8: 130 / 143 are interruptions (a cancelled job), with what was kept."""
    message = "Error: interrupted (SIGTERM): kept the finished rounds (HEAD 1a2b3c4d5e round(s) 1)"
    code = f"import sys; print({message!r}, file=sys.stderr); sys.exit(143)"
    assert gh.run_step("check", [sys.executable, "-c", code], tmp_path) == 143
    out = capfd.readouterr().out
    assert "::error title=perfguard check was stopped by SIGTERM (exit 143" in out
    assert "kept the finished rounds (HEAD 1a2b3c4d5e round(s) 1)" in out and "crashed" not in out


def test_summary_uses_the_report_and_adds_the_marker(tmp_path: Path) -> None:
    (tmp_path / "report.md").write_text("## perfguard: 1 regression\n| impl | ratio |\n")
    body = gh.compose_summary(tmp_path, head_sha=SHA, base_ref="main", run_url="https://x/runs/1")
    assert body.startswith(gh.MARKER + "\n## perfguard: 1 regression")
    assert "`5f1c0d2e3b4a`" in body and "baseline `main`" in body and "(https://x/runs/1)" in body
    (tmp_path / "report.md").write_text(gh.MARKER + "\n# already marked\n")
    assert gh.compose_summary(tmp_path, head_sha=SHA).count(gh.MARKER) == 1


def test_summary_without_report_names_the_first_failed_step(tmp_path: Path) -> None:
    (tmp_path / "baseline.exit").write_text("0\n")
    (tmp_path / "verify.exit").write_text("2\n")
    (tmp_path / "verify.log").write_text(
        "loading...\nError: CUDA was requested but is absent\n  hint: use --device cpu\n"
    )
    body = gh.compose_summary(tmp_path, head_sha=SHA)
    assert body.startswith(gh.MARKER)
    assert "`perfguard verify` stopped on a usage or environment error (exit 2)" in body
    assert "CUDA was requested but is absent\n  hint: use --device cpu" in body
    assert "loading..." not in body


def test_summary_of_a_successful_job_without_a_check_report(tmp_path: Path) -> None:
    for name, last in (("run", "stored 6 results for 5f1c0d2e3b4a"), ("report", "wrote site/index.html")):
        (tmp_path / f"{name}.exit").write_text("0\n")
        (tmp_path / f"{name}.log").write_text(f"progress...\n{last}\n")
    body = gh.compose_summary(tmp_path, head_sha=SHA)
    assert body.startswith(gh.MARKER + "\n## perfguard: `run`, `report` passed for `5f1c0d2e3b4a`")
    assert "stored 6 results" in body and "wrote site/index.html" in body
    (tmp_path / "report.exit").write_text("2\n")
    (tmp_path / "report.log").write_text("Error: the store is empty\n")
    body = gh.compose_summary(tmp_path, head_sha=SHA)
    assert "`perfguard report` stopped on a usage or environment error (exit 2); the history site" in body


def test_write_summary_appends_to_the_job_summary(tmp_path: Path) -> None:
    step_summary = tmp_path / "summary.md"
    step_summary.write_text("### earlier step\n")
    gh.write_summary(tmp_path / "r", head_sha=SHA, base_ref="main", run_url=None, step_summary=step_summary)
    assert step_summary.read_text().startswith("### earlier step\n" + gh.MARKER)
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["comment.md"]  # no metadata to trust


def test_a_message_cannot_close_the_code_block_it_is_quoted_in(tmp_path: Path) -> None:
    (tmp_path / "check.exit").write_text("2\n")
    (tmp_path / "check.log").write_text("Error: bad name ```\n# I am a heading now\n````` too\n")
    body = gh.compose_summary(tmp_path, head_sha=SHA)
    assert "``````text\nbad name ```\n# I am a heading now\n````` too\n``````" in body
    assert gh.code_fence("no backticks") == "```"


def test_truncation_keeps_the_limit_and_whole_lines() -> None:
    # GitHub counts UTF-16 units: an emoji outside the BMP costs two.
    body = gh.MARKER + "\n" + "\n".join(f"| row {i} 🐢 | {'x' * 50} |" for i in range(3000))
    cut = gh.truncate_body(body, "*cut*")
    assert gh.utf16_len(cut) <= gh.COMMENT_LIMIT < gh.utf16_len(body)
    assert cut.startswith(gh.MARKER) and cut.endswith("\n\n*cut*")
    assert cut[: -len("\n\n*cut*")].endswith("|")
    assert gh.truncate_body("short", "*cut*") == "short"


def test_per_machine_markers_are_kept() -> None:
    h100 = "<!-- perfguard-report h100 -->\n## ok\n"
    assert gh.marker_of(h100) == "<!-- perfguard-report h100 -->"
    assert gh.ensure_marker(h100) == h100
    assert gh.marker_of("## ok\n" + gh.MARKER) is None  # only the first line counts
    assert gh.ensure_marker("## ok\n").startswith(gh.MARKER + "\n")


# --------------------------------------------------------------------------------------------------
# A local stand-in for the GitHub REST API


class FakeGitHub:
    """State of one repository's PR comments, served over HTTP like api.github.com."""

    def __init__(self) -> None:
        self.pulls: dict[int, dict[str, Any]] = {}
        self.comments: dict[int, list[dict[str, Any]]] = {}
        self.next_id = 1000
        self.requests: list[tuple[str, str]] = []

    def add_comment(self, number: int, login: str, body: str) -> int:
        self.next_id += 1
        self.comments.setdefault(number, []).append(
            {"id": self.next_id, "user": {"login": login}, "body": body}
        )
        return self.next_id

    def handle(self, method: str, url: str, auth: str | None, body: Any) -> tuple[int, Any]:
        self.requests.append((method, url))
        if auth != f"Bearer {TOKEN}":
            return 401, {"message": "Bad credentials"}
        parsed = urlparse(url)
        parts = parsed.path.strip("/").split("/")
        if parts[:3] != ["repos", *REPO.split("/")]:
            return 404, {"message": "Not Found"}
        rest = parts[3:]
        if method == "GET" and rest[0] == "pulls":
            pull = self.pulls.get(int(rest[1]))
            return (200, pull) if pull else (404, {"message": "Not Found"})
        if rest[:1] == ["issues"] and rest[2:] == ["comments"]:
            number = int(rest[1])
            if method == "GET":
                query = parse_qs(parsed.query)
                per_page, page = int(query["per_page"][0]), int(query["page"][0])
                items = self.comments.get(number, [])
                return 200, items[(page - 1) * per_page : page * per_page]
            if method == "POST":
                return 201, {"id": self.add_comment(number, gh.DEFAULT_AUTHOR, body["body"])}
        if method == "PATCH" and rest[:2] == ["issues", "comments"]:
            for items in self.comments.values():
                for comment in items:
                    if comment["id"] == int(rest[2]):
                        comment["body"] = body["body"]
                        return 200, comment
        return 404, {"message": "Not Found"}


@pytest.fixture
def github() -> Iterator[tuple[FakeGitHub, str]]:
    state = FakeGitHub()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, payload = state.handle(self.command, self.path, self.headers.get("Authorization"), body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


RUN_URL = f"https://github.com/{REPO}/actions/runs/9"


def _artifact(tmp_path: Path, text: str = "## perfguard: ok\n") -> Path:
    artifact = tmp_path / "artifact"
    artifact.mkdir(exist_ok=True)
    (artifact / "comment.md").write_text(gh.MARKER + "\n" + text)
    return artifact


def _comment(artifact: Path, api: str, monkeypatch: pytest.MonkeyPatch, *extra: str) -> int:
    monkeypatch.setenv("GITHUB_API_URL", api)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    return gh.main(
        ["comment", "--artifact-dir", str(artifact), "--repo", REPO, "--pr-number", "12", "--head-sha", SHA,
         "--run-url", RUN_URL, *extra]
    )  # fmt: skip


def test_comment_is_created_once_then_updated_in_place(
    github: tuple[FakeGitHub, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, api = github
    for i in range(150):  # the bot's comment lands on the second page of 100
        state.add_comment(12, f"user{i}", "LGTM")
    human = state.add_comment(12, "reviewer", f"quoting {gh.MARKER} in a review")

    assert _comment(_artifact(tmp_path, text="first run\n"), api, monkeypatch) == 0
    ours = [c for c in state.comments[12] if c["user"]["login"] == gh.DEFAULT_AUTHOR]
    assert len(ours) == 1 and "first run" in ours[0]["body"]

    assert _comment(_artifact(tmp_path, text="second run\n"), api, monkeypatch) == 0
    ours = [c for c in state.comments[12] if c["user"]["login"] == gh.DEFAULT_AUTHOR]
    assert len(ours) == 1, "a second push must update the comment, not add one"
    assert "second run" in ours[0]["body"] and ours[0]["body"].startswith(gh.MARKER)
    assert (
        next(c for c in state.comments[12] if c["id"] == human)["body"] == f"quoting {gh.MARKER} in a review"
    )
    assert ("PATCH", f"/repos/{REPO}/issues/comments/{ours[0]['id']}") in state.requests

    # A second GPU class with its own marker gets its own comment, and keeps it.
    h100 = _artifact(tmp_path)
    (h100 / "comment.md").write_text("<!-- perfguard-report h100 -->\nh100 run\n")
    assert _comment(h100, api, monkeypatch) == 0
    assert _comment(h100, api, monkeypatch) == 0
    bodies = sorted(
        c["body"].split("\n")[1] for c in state.comments[12] if c["user"]["login"] == gh.DEFAULT_AUTHOR
    )
    assert bodies == ["h100 run", "second run"]
    assert ("GET", f"/repos/{REPO}/pulls/12") not in state.requests  # nothing read from the artifact


def test_comment_needs_a_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    code = gh.main(
        ["comment", "--artifact-dir", str(_artifact(tmp_path)), "--repo", REPO, "--pr-number", "12",
         "--head-sha", SHA]
    )  # fmt: skip
    assert code == 1 and "GITHUB_TOKEN is not set" in capsys.readouterr().out


def test_comment_dry_run_writes_the_body_and_calls_nothing(tmp_path: Path) -> None:
    plan_path = tmp_path / "plan.json"
    code = gh.main(
        ["comment", "--artifact-dir", str(_artifact(tmp_path)), "--repo", REPO, "--pr-number", "12",
         "--head-sha", SHA, "--conclusion", "success", "--dry-run", str(plan_path)]
    )  # fmt: skip
    plan = json.loads(plan_path.read_text())
    assert code == 0 and plan["pr"] == 12 and plan["body"].startswith(gh.MARKER)
    assert "GitHub reports the benchmark job as **success**" in plan["body"]


def test_implausible_workflow_values_are_refused(tmp_path: Path, capsys: Any) -> None:
    artifact = _artifact(tmp_path)
    for extra in (
        ["--pr-number", "0", "--head-sha", SHA],
        ["--pr-number", "12", "--head-sha", "main; rm -rf /"],
    ):
        assert gh.main(["comment", "--artifact-dir", str(artifact), "--repo", REPO, *extra]) == 1
    assert "implausible PR number" in capsys.readouterr().out
    with pytest.raises(gh.GitHubError, match="implausible job conclusion"):
        gh.prepare_comment_body(artifact, repo=REPO, run_url=None, conclusion="**ok** @you")


# --------------------------------------------------------------------------------------------------
# W5: what the PR controls is posted under the bot's name only after it is made inert

HOSTILE_REPORT = """\
## perfguard: 1 regression in `ring[fp8]` on `feature/@mallory-says-hi`

Commit subject: Fix #12, approved by @maintainer and @octo/core-team, see GH-7 & fixes #3
| impl | note |
| --- | --- |
| <img src=x onerror=alert(1)> | [click to approve](https://evil.example/phish) |
| ![green check](https://evil.example/ok.png) | ![ours too](https://github.com/octo/perfguard/x.png) |
| &#64;entity &#x40;hex &commat;named | &lbrack;sneaky&rbrack;&lpar;https://evil.example&rpar; |
| <a href="https://evil.example">html link</a> | <script>alert(1)</script> <!-- hidden --> |
| bare https://evil.example/path and www.evil.example | <https://evil.example/auto> |
| mail a@b.example stays | [run](https://github.com/octo/perfguard/actions/runs/9) |

[ref link][r] and `@in-code` and <details><summary>log</summary>

```text
@code-mention <b>in a block</b>
```

</details>

[r]: https://evil.example/ref
"""


def test_a_hostile_report_is_posted_inert_with_githubs_conclusion(
    github: tuple[FakeGitHub, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, api = github
    artifact = _artifact(tmp_path, text=HOSTILE_REPORT)
    assert _comment(artifact, api, monkeypatch, "--conclusion", "failure") == 0
    (posted,) = [c["body"] for c in state.comments[12]]
    marker, ours, blank, report = posted.split("\n", 3)
    assert marker == gh.MARKER and blank == ""
    assert ours.startswith("<sub>GitHub reports the benchmark job as **failure** ([workflow run](")
    assert report.replace(gh.WORD_JOINER, "") != report  # neutralized
    assert "@maintainer" not in posted and "](https://evil" not in posted
