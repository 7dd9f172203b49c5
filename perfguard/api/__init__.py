"""perfguard as a library: every command of the CLI is a function here.

DESIGN.md: "Everything a command does can be called from Python, so other CI systems and pytest can
use it."  Each function takes what its command's options give (same names, same defaults), checks
its input as the command does, does the work and returns what the command prints from; the command
(``perfguard/cli/``) only declares the options, calls the function and prints.  Nothing here
prints: messages of long operations go to ``reporter`` (:class:`perfguard.measuring.Reporter`;
default :class:`~perfguard.measuring.QuietReporter`, which keeps them in ``.messages``).  Bad input
and environment problems raise :class:`perfguard.errors.PerfguardError` (``exit_code`` 2, with a
hint), before anything is measured or written.  ``cwd``: the repository to work in (default: the
current directory's).

::

    import perfguard

    outcome = perfguard.check("main", bench=r"Work\\.track_forward_ops", cwd="path/to/repo")
    outcome.exit_code                       # 0, or 1 on a regression, broken or failed benchmark
    [(i.impl, i.benchmark, i.verdict) for i in outcome.result.items]

``perfguard.check``, ``perfguard.run``, ``perfguard.history`` and ``perfguard.changes`` are these
functions; ``verify``, ``report``, ``calibrate``, ``accept`` and ``bisect`` share their names with
perfguard's own modules, so they are called as ``perfguard.api.verify(...)`` and so on.

Heavy modules (torch, SQLAlchemy, asv) are imported inside the functions: importing this module is
instant, and so is ``perfguard --help``.

The functions live by job (:mod:`~perfguard.api.measure`: the commands that run code;
:mod:`~perfguard.api.reading`: report and history; :mod:`~perfguard.api.accepting`: acceptances;
:mod:`~perfguard.api.steps`: the baseline branch's steps; :mod:`~perfguard.api.scaffolding`:
``init``; :mod:`~perfguard.api.schema`: the
store's schema); every one is importable from here, the package's face.
"""

from perfguard.api.accepting import Accepted, accept, acceptances, revoke_acceptance
from perfguard.api.measure import DEFAULT_PLANTED, RunOutcome, bisect, calibrate, check, fidelity, run, verify
from perfguard.api.reading import History, Rendered, history, report
from perfguard.api.scaffolding import init
from perfguard.api.schema import Schema, db_current, db_revision, db_snapshot, db_upgrade
from perfguard.api.steps import change_points, changes

__all__ = [
    "DEFAULT_PLANTED",
    "Accepted",
    "History",
    "Rendered",
    "RunOutcome",
    "Schema",
    "accept",
    "acceptances",
    "bisect",
    "calibrate",
    "change_points",
    "changes",
    "check",
    "db_current",
    "db_revision",
    "db_snapshot",
    "db_upgrade",
    "fidelity",
    "history",
    "init",
    "report",
    "revoke_acceptance",
    "run",
    "verify",
]
