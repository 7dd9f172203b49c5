"""How the reports reach the history store: read-only, through ``perfguard.store.Store``.

``open_store`` accepts what callers have at hand: an open ``Store``, or a URL (``None``: the
usual ``--db`` / ``PERFGUARD_DB`` / repository default).  A URL is opened with
``Store.open(url, migrate=False)``, which only reads the schema state, after checking that a
SQLite file exists (connecting would create an empty one): rendering a report never creates or
migrates a database.

One query is not in the store's API yet and is made here, read-only, with SQLAlchemy Core on the
store's engine: the check verdicts to draw on the history charts (every regression and
improvement item with its check's machine and commits).  It belongs in ``perfguard.store`` as
e.g. ``Store.check_verdicts(verdicts)``; when that lands, ``verdict_marks`` becomes a call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple

from sqlalchemy import Connection, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import aliased

from perfguard.errors import StoreError
from perfguard.store import Store, resolve
from perfguard.store.columns import StoredValueError
from perfguard.store.connection import damaged
from perfguard.store.models import Check, CheckItem, Commit, Machine

#: Run purposes that make up the history of the baseline branch.  ``head`` and ``retry`` runs
#: belong to a pull request's check, ``calibrate`` runs to calibration; none is a point of history.
HISTORY_PURPOSES: tuple[str, ...] = ("run", "baseline")

#: Check verdicts drawn on the history charts.
MARKED_VERDICTS: tuple[str, ...] = ("regression", "improvement")


class VerdictMark(NamedTuple):
    """A stored check verdict (regression / improvement) to draw at its head commit."""

    check_id: int
    machine_key: str
    head_sha: str
    base_sha: str
    benchmark: str
    params_key: str
    verdict: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None


@contextlib.contextmanager
def open_store(source: Store | str | None) -> Iterator[Store]:
    """``source`` itself when it is a ``Store``; else the store at that URL, opened read-only."""
    if isinstance(source, Store):
        yield source
        return
    if source is not None and not isinstance(source, str):
        raise TypeError(f"cannot read a history store from {type(source).__name__}; pass a Store or a URL")
    store_url = resolve(source)
    path = store_url.sqlite_path
    if store_url.dialect == "sqlite" and (path is None or not path.is_file()):
        where = path if path is not None else store_url.masked
        raise StoreError(
            f"no history store at {where}",
            hint="run `perfguard run` or `perfguard check` first, or pass --db / PERFGUARD_DB",
        )
    with Store.open(store_url.url, migrate=False) as store:
        state = store.schema_state
        if state.current is not None and state.current != state.head:
            raise StoreError(
                f"the history store at {store.url} has schema {state.current}; "
                f"this perfguard reads {state.head}",
                hint="run `perfguard db upgrade --db …` (reports never migrate a store themselves)",
            )
        yield store


def verdict_marks(store: Store) -> list[VerdictMark]:
    """Stored check verdicts worth drawing on a history chart (regressions and improvements)."""
    head, base = aliased(Commit), aliased(Commit)
    stmt = (
        select(
            Check.id,
            Machine.key,
            head.sha,
            base.sha,
            CheckItem.benchmark,
            CheckItem.params_key,
            CheckItem.verdict,
            CheckItem.ratio,
            CheckItem.ci_low,
            CheckItem.ci_high,
            CheckItem.p_value,
        )
        .join(CheckItem, CheckItem.check_id == Check.id)
        .join(Machine, Check.machine_id == Machine.id)
        .join(head, Check.head_commit_id == head.id)
        .join(base, Check.base_commit_id == base.id)
        .where(CheckItem.verdict.in_(MARKED_VERDICTS))
        .order_by(Check.created_at, Check.id)
    )
    with _checks_read(store) as connection:
        return [VerdictMark(*row) for row in connection.execute(stmt)]


@contextlib.contextmanager
def _checks_read(store: Store) -> Iterator[Connection]:
    """A connection to read checks with; a damaged or unreadable store is a clear error (exit 2)."""
    try:
        with store.engine.connect() as connection:
            yield connection
    except StoredValueError as exc:
        raise damaged(exc, store.url, "reading the checks from") from None
    except SQLAlchemyError as exc:
        raise StoreError(
            f"could not read the checks from {store.url}: {exc}",
            hint="check --db / PERFGUARD_DB; `perfguard db upgrade` if the schema is older than perfguard",
        ) from None


class CheckTally(NamedTuple):
    """A stored check as the Changes page lists it: its commits and its gated items per verdict."""

    check_id: int
    created_at: Any
    machine_label: str
    head_sha: str
    head_branch: str | None
    head_subject: str
    base_sha: str
    verdict: str
    gated: dict[str, int]  # verdict -> gated items (what a check report's headline counts)


def check_tallies(store: Store) -> list[CheckTally]:
    """Every stored check, newest first, with its gated items counted by verdict in the database.

    The gated items are the ones a check report's headline counts (:mod:`perfguard.report.tally`:
    an item's role is ``gated`` exactly when it is stored gated), so the site says what the report
    of each check says without reading every item.
    """
    from sqlalchemy import func

    head, base = aliased(Commit), aliased(Commit)
    counts = (
        select(CheckItem.check_id, CheckItem.verdict, func.count().label("n"))
        .where(CheckItem.gated.is_(True))
        .group_by(CheckItem.check_id, CheckItem.verdict)
    )
    checks = (
        select(Check.id, Check.created_at, Machine.label, head.sha, head.branch, head.subject, base.sha,
               Check.verdict)
        .join(Machine, Check.machine_id == Machine.id)
        .join(head, Check.head_commit_id == head.id)
        .join(base, Check.base_commit_id == base.id)
        .order_by(Check.created_at.desc(), Check.id.desc())
    )  # fmt: skip
    with _checks_read(store) as connection:
        per_check: dict[int, dict[str, int]] = {}
        for check_id, verdict, n in connection.execute(counts):
            per_check.setdefault(check_id, {})[verdict] = n
        return [CheckTally(*row, gated=per_check.get(row[0], {})) for row in connection.execute(checks)]


def load_check(store: Store, check_id: int) -> Any:
    """``Store.get_check``, with an error that says what to do when there is no such check."""
    check = store.get_check(check_id)
    if check is None:
        raise StoreError(
            f"no check with id {check_id} in {store.url}",
            hint="the id is printed by `perfguard check` and is the check_id field of its --json report",
        )
    return check
