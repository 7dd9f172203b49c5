"""The ``perfguard`` command line: options in, :mod:`perfguard.api` called, results printed.

Each subcommand lives in its own module and imports the heavy parts (torch, SQLAlchemy, asv)
inside its function body, so ``perfguard --help`` stays instant.  A :class:`PerfguardError` from
the library is printed as click prints its own errors (``Error: message`` and the hint, on stderr)
and ends the command with its exit code (2).  Any other exception is given its meaning by
:func:`perfguard.errors.error_for` (an OSError: exit 2; a bug: exit 70 and where its traceback
went), so a crash never exits 1, which CI reads as a regression.
"""

from __future__ import annotations

import click

from perfguard import __version__
from perfguard.cli.accept import accept
from perfguard.cli.bisect import bisect
from perfguard.cli.calibrate import calibrate
from perfguard.cli.changes import changes
from perfguard.cli.check import check
from perfguard.cli.db import db
from perfguard.cli.fidelity import fidelity
from perfguard.cli.history import history
from perfguard.cli.init import init
from perfguard.cli.report import report
from perfguard.cli.run import run
from perfguard.cli.verify import verify
from perfguard.errors import Interrupted, PerfguardError, error_for


class _Error(click.ClickException):
    """A :class:`PerfguardError` as click shows an error: its message, its hint, its exit code."""

    def __init__(self, error: PerfguardError) -> None:
        super().__init__(error.message)
        self.exit_code = error.exit_code
        self.error = error

    def format_message(self) -> str:
        return self.error.format_message()


class _Commands(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except PerfguardError as exc:
            raise _Error(exc) from exc
        except KeyboardInterrupt:  # outside a measurement (which says what it kept): 130, not click's 1
            raise _Error(Interrupted("interrupted (Ctrl-C)")) from None
        except click.ClickException as exc:
            if exc.exit_code == 1:  # click's default code: never let it read as a regression
                exc.exit_code = 2
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            raise _Error(error_for(exc)) from exc


@click.group(
    cls=_Commands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.version_option(__version__, prog_name="perfguard")
def main() -> None:
    """Keep attention implementations correct and fast.

    \b
    perfguard verify                    check every implementation against the float64 reference
    perfguard run                       benchmark a commit through asv and store the results
    perfguard check --baseline main     compare HEAD with the merge-base of main; exit 1 on regression
    perfguard report --out site         render the static history site
    perfguard history                   the stored series as a table
    perfguard accept IMPL BENCH --max R --reason WHY   accept an intended regression
    perfguard bisect --good A --bad B --bench RE       find the commit where a series moved
    perfguard changes --commit SHA      flag the steps of the baseline branch nobody accepted
    perfguard fidelity                  numbers of a full round against each case measured alone

    \b
    Exit codes: 0 ok, 1 regression or failed verification, 2 usage or environment error,
                70 internal error (a bug in perfguard; the message says where its traceback is),
                130 / 143 interrupted (Ctrl-C / SIGTERM)
    """


for _command in (init, verify, run, check, report, history, accept, bisect, changes, calibrate, fidelity, db):
    main.add_command(_command)
