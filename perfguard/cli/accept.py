"""``perfguard accept``: record an intended regression (a maintainer's acceptance) in the history store.

The grammar is the trailer's (:mod:`perfguard.accept`)::

    perfguard accept improved Forward.track_time --max 1.35 --reason "exact masking costs a pass"
    perfguard accept improved Forward.track_time '<=1.35' exact masking costs a pass
    perfguard accept --list

Recorded acceptances are trusted: only trusted contexts can write the history store (an untrusted
check opens it read-only), and the command refuses to run in one (``PERFGUARD_UNTRUSTED``).  Exit 0
recorded (or listed), 2 usage or environment error.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from perfguard.cli.options import db_option

if TYPE_CHECKING:
    from perfguard.store import StoredAcceptance


@click.command()
@click.argument("spec", nargs=-1, metavar="IMPL BENCHMARK [NAME=GLOB]... [<=CEILING REASON...]")
@click.option("--max", "ceiling", type=float, default=None, help="Largest accepted ratio (1.35 = 35% worse).")
@click.option(
    "--reason", default=None, help="Why the regression is intended (shown wherever it is accepted)."
)
@click.option(
    "--commit",
    "rev",
    default="HEAD",
    show_default=True,
    help="The commit it belongs to: checks whose range contains it accept within the scope "
    "(a pull request's head), or a flagged step of the baseline branch.",
)
@click.option(
    "--by", "author", default=None, help="Who accepts (default: git config user.name <user.email>)."
)
@click.option(
    "--list", "list_only", is_flag=True, help="List the stored acceptances instead (of --commit if given)."
)
@db_option
@click.pass_context
def accept(
    ctx: click.Context,
    spec: tuple[str, ...],
    ceiling: float | None,
    reason: str | None,
    rev: str,
    author: str | None,
    list_only: bool,
    db_url: str | None,
) -> None:
    """Accept an intended regression within a scope and up to a ratio ceiling, with a reason.

    \b
    IMPL and BENCHMARK are shell globs ('*' for all; 'Forward.track_time', 'Work.track_forward_*');
    NAME=GLOB narrows to parameters (seq_len=4096, dtype='*16'); metric=M to one metric.
    A later `perfguard check` whose commits include --commit shows those items as 'accepted'
    (who, why, the ceiling); beyond the ceiling or outside the scope they still fail.
    The same line in a commit message, 'Perfguard-Accept: IMPL BENCHMARK <=1.35 "why"', counts
    once a maintainer approves it (docs/living-with-regressions.md).
    """
    from perfguard.accept import Acceptance, AcceptError, parse_tokens
    from perfguard.cli.measure import say
    from perfguard.errors import UsageError
    from perfguard.gitrepo import repo_root, rev_parse
    from perfguard.measuring import commit_record
    from perfguard.store import Store

    root = repo_root()
    if list_only:
        if spec or ceiling is not None or reason is not None:
            raise UsageError("--list takes no acceptance", hint="run `perfguard accept --list` on its own")
        sha = (
            rev_parse(root, rev)
            if ctx.get_parameter_source("rev") is click.core.ParameterSource.COMMANDLINE
            else None
        )
        with Store.open(db_url, cwd=root) as store:
            _print(store.acceptances([sha] if sha else None))
        return
    if os.environ.get("PERFGUARD_UNTRUSTED", "").strip().lower() not in ("", "0", "false", "no"):
        raise UsageError(
            "perfguard accept does not run in an untrusted context (PERFGUARD_UNTRUSTED is set): "
            "code under review cannot accept its own regressions",
            hint="a maintainer runs it with write access to the history store, or approves the "
            "Perfguard-Accept trailer with the approval label",
        )
    tokens = list(spec)
    if ceiling is not None:
        tokens.append(f"<={ceiling!r}")
    elif reason is not None and not any(t.startswith(("<=", "≤")) for t in tokens):
        raise AcceptError("--reason needs --max (the largest accepted ratio)", hint="add --max 1.35")
    if reason is not None:
        tokens.append(reason)
    parsed = parse_tokens(tokens, where="perfguard accept")
    sha = rev_parse(root, rev)
    who = author or _git_user(root)
    with Store.open(db_url, cwd=root) as store:
        [stored] = store.record_acceptances(
            commit_record(root, sha), [parsed.record(source="command", author=who, trusted=True)]
        )
        flags = [p for p in store.change_points(sha=sha) if p.acceptance and p.acceptance.id == stored.id]
        where = store.url
    text = Acceptance.of(stored, stored.sha, stored.id).describe()
    say(f"recorded acceptance #{stored.id}: {text} in {where}")
    if flags:
        say(f"it accepts {len(flags)} flagged step(s) recorded at {sha[:10]}")


def _git_user(root: Path) -> str:
    from perfguard.errors import UsageError
    from perfguard.gitrepo import git

    name = str(git(root, "config", "user.name", check=False))
    email = str(git(root, "config", "user.email", check=False))
    if not name and not email:
        raise UsageError(
            "who accepts? git has no user.name here", hint="pass --by NAME, or set git config user.name"
        )
    return f"{name} <{email}>" if name and email else (name or email)


def _print(acceptances: Sequence[StoredAcceptance]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)
    if not acceptances:
        console.print(Text("no acceptances stored"))
        return
    table = Table(title="perfguard acceptances", title_justify="left")
    for column in ("id", "commit", "scope", "ceiling", "reason", "by", "source", "trusted"):
        table.add_column(column, overflow="fold")
    for a in acceptances:
        by = a.author + (f" (approved by {a.approved_by})" if a.approved_by else "")
        cells = (
            str(a.id),
            a.sha[:10],
            a.scope(),
            f"{a.ceiling:g}",
            a.reason,
            by,
            a.source,
            "yes" if a.trusted else "no",
        )
        table.add_row(*(Text(c) for c in cells))
    console.print(table)
