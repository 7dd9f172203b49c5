"""``perfguard accept``: record an intended regression (a maintainer's acceptance) in the history store.

The grammar is the trailer's (:mod:`perfguard.accept`)::

    perfguard accept improved Forward.track_time --max 1.35 --reason "exact masking costs a pass"
    perfguard accept improved Forward.track_time '<=1.35' exact masking costs a pass
    perfguard accept --list
    perfguard accept --revoke 7 --reason "the extra pass was removed in #123"

Recorded acceptances are trusted: only trusted contexts can write the history store (an untrusted
check opens it read-only), and the command refuses to run in one (``PERFGUARD_UNTRUSTED``).  Exit 0
recorded (or listed, or revoked), 2 usage or environment error (also a scope that names no stored
series: the message lists the stored names and the closest ones).  Options and output only: the recording is
:func:`perfguard.api.accept`.
"""

from __future__ import annotations

from collections.abc import Sequence
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
@click.option(
    "--revoke",
    "revoke_id",
    type=int,
    default=None,
    metavar="ID",
    help="Revoke stored acceptance ID (see --list) with --reason: it accepts nothing from then on.",
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
    revoke_id: int | None,
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
    from perfguard import api
    from perfguard.cli.output import say
    from perfguard.errors import UsageError

    if revoke_id is not None:
        if spec or ceiling is not None or list_only:
            raise UsageError(
                "--revoke takes an id and a reason only",
                hint="run `perfguard accept --revoke ID --reason WHY` on its own",
            )
        revoked = api.revoke_acceptance(revoke_id, reason=reason, by=author, db=db_url)
        say(
            f"revoked acceptance #{revoked.id} ({revoked.scope()} up to ×{revoked.ceiling:g}): "
            + revoked.revocation
        )
        return
    if list_only:
        if spec or ceiling is not None or reason is not None:
            raise UsageError("--list takes no acceptance", hint="run `perfguard accept --list` on its own")
        given = ctx.get_parameter_source("rev") is click.core.ParameterSource.COMMANDLINE
        _print(api.acceptances(rev if given else None, db=db_url))
        return
    accepted = api.accept(spec, ceiling=ceiling, reason=reason, commit=rev, by=author, db=db_url)
    say(f"recorded acceptance #{accepted.acceptance.id}: {accepted.text} in {accepted.store}")
    if accepted.flagged_steps:
        say(f"it accepts {accepted.flagged_steps} flagged step(s) recorded at {accepted.acceptance.sha[:10]}")


def _print(acceptances: Sequence[StoredAcceptance]) -> None:
    from perfguard.cli.output import print_table

    columns = ("id", "commit", "scope", "ceiling", "reason", "by", "source", "counts")
    rows = (
        (
            str(a.id),
            a.sha[:10],
            a.scope(),
            f"{a.ceiling:g}",
            a.reason,
            a.author + (f" (approved by {a.approved_by})" if a.approved_by else ""),
            a.source,
            a.revocation or ("yes" if a.trusted else "no: not trusted"),
        )
        for a in acceptances
    )
    print_table("perfguard acceptances", columns, rows, empty="no acceptances stored", min_width=160,
                overflow="fold")  # fmt: skip
