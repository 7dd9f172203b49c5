"""``python -m perfguard.github step|summary|comment|changes|approval``: the workflows' command line."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from perfguard.github.approval import APPROVAL_LABEL, approver, pull_for_commit
from perfguard.github.changes import report_changes
from perfguard.github.commands import run_step, workflow_command
from perfguard.github.comment import (
    DEFAULT_AUTHOR,
    GitHubError,
    github_transport,
    prepare_comment_body,
    upsert_comment,
)
from perfguard.github.summary import write_summary

DESCRIPTION = (
    "GitHub Actions glue for perfguard's workflows: annotations, the job summary, the sticky PR comment."
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m perfguard.github", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)

    step = sub.add_parser("step", help="run one perfguard command, record its exit code, annotate failures")
    step.add_argument("--name", required=True, help="step name: the log is <log-dir>/<name>.log")
    step.add_argument("--log-dir", required=True, type=Path)
    step.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the command to run")

    summary = sub.add_parser("summary", help="write comment.md and append to the job summary")
    summary.add_argument("--report-dir", required=True, type=Path)
    summary.add_argument("--head-sha", required=True)
    summary.add_argument("--base-ref", default=None)
    summary.add_argument("--run-url", default=None)

    comment = sub.add_parser("comment", help="create or update the one perfguard comment on a PR")
    comment.add_argument("--artifact-dir", required=True, type=Path)
    comment.add_argument("--repo", required=True, help="owner/name of the base repository")
    comment.add_argument("--pr-number", required=True, type=int, help="github.event.pull_request.number")
    comment.add_argument("--head-sha", required=True, help="the commit that was benchmarked (from the gate)")
    comment.add_argument("--conclusion", default=None, help="needs.benchmark.result, stated in the comment")
    comment.add_argument("--run-url", default=None)
    comment.add_argument("--author", default=DEFAULT_AUTHOR)
    comment.add_argument(
        "--dry-run",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the would-be comment (and the PR it targets) to FILE; call no API",
    )
    changes = sub.add_parser("changes", help="job summary and annotations of `perfguard changes`")
    changes.add_argument("--report-dir", required=True, type=Path, help="holds changes.json and changes.md")

    approval = sub.add_parser("approval", help="who approved a PR's Perfguard-Accept trailers (the label)")
    approval.add_argument("--repo", required=True, help="owner/name")
    which = approval.add_mutually_exclusive_group(required=True)
    which.add_argument("--pr", type=int, help="the pull request number")
    which.add_argument("--sha", help="a commit merged by a pull request (the baseline workflow's push)")
    approval.add_argument("--label", default=APPROVAL_LABEL)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "step":
        command = list(args.argv)
        if command[:1] == ["--"]:
            command = command[1:]
        if not command:
            print("perfguard.github step: give the command after --", file=sys.stderr)
            return 2
        return run_step(args.name, command, args.log_dir)

    if args.command == "summary":
        summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
        write_summary(
            args.report_dir,
            head_sha=args.head_sha,
            base_ref=args.base_ref,
            run_url=args.run_url,
            step_summary=Path(summary_path) if summary_path else None,
        )
        return 0

    if args.command == "changes":
        summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
        report_changes(args.report_dir, step_summary=Path(summary_path) if summary_path else None)
        return 0

    if args.command == "approval":
        return _approval(args)

    try:
        if args.pr_number <= 0 or not re.fullmatch(r"[0-9a-f]{40}", args.head_sha):
            raise GitHubError(f"implausible PR number {args.pr_number} or head SHA {args.head_sha!r}")
        body = prepare_comment_body(
            args.artifact_dir, repo=args.repo, run_url=args.run_url, conclusion=args.conclusion
        )
        if args.dry_run is not None:
            plan = {"repo": args.repo, "pr": args.pr_number, "head_sha": args.head_sha, "body": body}
            args.dry_run.write_text(json.dumps(plan, indent=2) + "\n")
            print(f"dry run: would create or update the perfguard comment on PR #{args.pr_number}")
            return 0
        token = os.environ.get("GITHUB_TOKEN")
        if not token:
            raise GitHubError("GITHUB_TOKEN is not set: pass ${{ github.token }} in the step's env")
        transport = github_transport(os.environ.get("GITHUB_API_URL", "https://api.github.com"), token)
        action, comment_id = upsert_comment(transport, args.repo, args.pr_number, body, args.author)
    except GitHubError as exc:
        print(workflow_command("error", str(exc), "perfguard PR comment"))
        return 1
    print(f"{action} comment {comment_id} on PR #{args.pr_number}")
    return 0


def _approval(args: argparse.Namespace) -> int:
    """``approval``: print and output ``approved_by`` (empty when nobody approved); 0 either way.

    An API failure is a warning and no approval (fail closed: the regression still fails).
    """
    token = os.environ.get("GITHUB_TOKEN")
    approved: str | None = None
    try:
        if not token:
            raise GitHubError("GITHUB_TOKEN is not set: pass ${{ github.token }} in the step's env")
        transport = github_transport(os.environ.get("GITHUB_API_URL", "https://api.github.com"), token)
        number = args.pr if args.pr is not None else pull_for_commit(transport, args.repo, args.sha)
        if number is None:
            why = f"no pull request merged {args.sha}"
        else:
            approved, why = approver(transport, args.repo, number, args.label)
    except GitHubError as exc:
        print(workflow_command("warning", f"{exc}; acceptances stay unapproved", "perfguard approval"))
        why = "the approval could not be checked"
    print(f"approval: {why}")
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        with open(output, "a", encoding="utf-8") as fh:
            fh.write(f"approved_by={approved or ''}\n")
    return 0
