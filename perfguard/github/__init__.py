"""GitHub Actions glue for perfguard's workflows: annotations, the job summary, the sticky PR comment.

The workflows in ``.github/workflows/`` call this module as ``python -m perfguard.github ...``:

``step``
    Run one perfguard command, mirror its output to the log and to a file, record its exit code,
    and turn a failure into an ``::error::`` annotation that says *why* (exit 1 = regression or
    failed verification; exit 2 = usage/environment error, with perfguard's own message and hint).
    Shell can do this too, but ``PIPESTATUS`` juggling and annotation escaping in three workflows
    is where CI scripts rot (asv #884 and dedupe #1019 in the research notes: exit codes that
    broke or hid the comment step).
``summary``
    Compose the Markdown that goes to the job summary and to the PR comment: the report perfguard
    wrote, or, when no report exists (verify failed, the baseline could not be resolved, perfguard
    crashed), a short account of which step failed and its message.
``comment``
    Create or update the *one* perfguard comment on a pull request, found by the hidden marker
    ``<!-- perfguard-report -->`` and by its author, never a new comment per push.
``changes``
    After ``perfguard changes --json changes.json --markdown changes.md`` on the baseline branch:
    append its section to the job summary and turn every flagged step (a regression on the
    baseline branch that no acceptance covers) into a ``::warning::`` annotation naming the
    benchmark, the ratio and the likely cause (a software change).
``approval``
    Who approved a pull request's ``Perfguard-Accept`` trailers: the last actor who applied the
    approval label (default ``perfguard-accept``) and still has it applied, if that actor has write
    access to the repository.  Prints the login to ``$GITHUB_OUTPUT`` as ``approved_by``; the
    workflow passes it to ``perfguard check`` / ``perfguard changes --accept-approved-by``.  Finds
    the pull request from ``--pr`` or from a merged commit (``--sha``).

Modules: :mod:`~perfguard.github.commands` (workflow commands, ``step``),
:mod:`~perfguard.github.summary`, :mod:`~perfguard.github.comment` (posting),
:mod:`~perfguard.github.sanitize` (the report made inert), :mod:`~perfguard.github.changes`,
:mod:`~perfguard.github.approval`, :mod:`~perfguard.github.cli` (the argument parser).

Why the standard library only (but one pinned parser): ``comment`` runs in the ``comment`` job of
``perfguard-pr.yml``, which holds a token with ``pull-requests: write``. It must never run code
from the pull request, so it checks out the base branch and runs this package with the runner's
bare ``python3``; the one package it installs is markdown-it-py (and its mdurl), pinned by hash in
``perfguard/github/requirements.txt``, to parse the report.  The other subcommands need nothing
but the standard library (the parser is imported only when a comment is sanitized). The PR number,
head commit and the benchmark job's conclusion come from the workflow (GitHub's event and job
results), never from the artifact. The artifact's Markdown was written by a job that ran the PR's
code, so it is data that the PR controls: before it is posted under the bot's name,
:func:`sanitize_markdown` rebuilds it from its CommonMark parse with no @mention, issue reference,
image, foreign link or HTML but the plain tags reports use (docs/ci.md, "Trust model"), and a line
written here, not by the PR, states the job's conclusion.
"""

from __future__ import annotations

from perfguard.github.approval import (
    APPROVAL_LABEL,
    WRITE_PERMISSIONS,
    approver,
    label_applier,
    pull_for_commit,
)
from perfguard.github.changes import MAX_STEP_ANNOTATIONS, report_changes, step_annotations
from perfguard.github.cli import _parser, main
from perfguard.github.commands import (
    describe_exit,
    error_message_from_log,
    escape_data,
    escape_property,
    run_step,
    workflow_command,
)
from perfguard.github.comment import (
    DEFAULT_AUTHOR,
    GitHubError,
    Transport,
    find_comment,
    github_transport,
    prepare_comment_body,
    upsert_comment,
)
from perfguard.github.sanitize import WORD_JOINER, RepositoryLinks, sanitize_markdown
from perfguard.github.summary import (
    COMMENT_LIMIT,
    MARKER,
    MARKER_PREFIX,
    STEP_ORDER,
    StepRecord,
    code_fence,
    compose_summary,
    ensure_marker,
    marker_of,
    read_steps,
    truncate_body,
    utf16_len,
    write_summary,
)

__all__ = [
    "APPROVAL_LABEL",
    "COMMENT_LIMIT",
    "DEFAULT_AUTHOR",
    "MARKER",
    "MARKER_PREFIX",
    "MAX_STEP_ANNOTATIONS",
    "STEP_ORDER",
    "WORD_JOINER",
    "WRITE_PERMISSIONS",
    "GitHubError",
    "RepositoryLinks",
    "StepRecord",
    "Transport",
    "_parser",
    "approver",
    "code_fence",
    "compose_summary",
    "describe_exit",
    "ensure_marker",
    "error_message_from_log",
    "escape_data",
    "escape_property",
    "find_comment",
    "github_transport",
    "label_applier",
    "main",
    "marker_of",
    "prepare_comment_body",
    "pull_for_commit",
    "read_steps",
    "report_changes",
    "run_step",
    "sanitize_markdown",
    "step_annotations",
    "truncate_body",
    "upsert_comment",
    "utf16_len",
    "workflow_command",
    "write_summary",
]
