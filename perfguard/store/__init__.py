"""The history store: runs, results and checks per machine key and commit (SQLite or PostgreSQL).

Everything the rest of perfguard needs is importable from here; nothing outside this package
touches SQLAlchemy sessions or ORM objects.

Opening::

    store = Store.open(url)   # url: any SQLAlchemy URL, or None for $PERFGUARD_DB, else
                              # sqlite:///<repo root>/.perfguard/history.db (directory created).
                              # postgresql:// means psycopg 3.  Migrates the schema to head.
                              # Every failure (bad URL, missing driver, unreachable server, wrong
                              # password, schema newer than this perfguard) is a StoreError (exit 2)
                              # naming the URL with its password masked.
    with Store.open(url) as store: ...   # closes the engine on exit
    Store.open(url, read_only=True)      # an untrusted check's baseline store: never created or
                                         # migrated; every write raises StoreError (exit 2), and the
                                         # database refuses writes itself (SQLite mode=ro + query_only,
                                         # PostgreSQL default_transaction_read_only)
    store.check_writable()               # before measuring: read-only store, directory or file
                                         # system, (nearly) full disk, read-only PostgreSQL session
                                         # or role without INSERT -> StoreError saying which
    store.files                          # SQLite: (db, -wal, -shm, -journal); for
                                         # gitrepo.work_tree(root, ignore=store.files)
    store.snapshot(path)                 # SQLite: a consistent read-only copy (what PR runners read)
    Store.open(resolve_results(url))     # an untrusted check's own store: url, $PERFGUARD_RESULTS_DB,
                                         # else sqlite:///<repo>/.perfguard/untrusted.db
    untrusted_from_env()                 # $PERFGUARD_UNTRUSTED is 1/true/yes/on

Trust (docs/ci.md, "Trust model"): every run is ``trusted`` or not.  Trusted: measured by the
baseline branch's workflow or a maintainer's own command; untrusted: by anything that ran
pull-request code.  ``RunRecord.trusted`` / ``record_run(trusted=)`` default to False (fail closed):
the writer says so.  Reads that build a baseline pass ``trusted_only=True``; an untrusted run can
then never become or change a baseline.

Writing (each call is one transaction, validated completely before it starts; a bad value raises
StoreError and nothing is written; an interrupted write leaves the store as it was)::

    store.get_or_create_machine(key, kind, label, attributes) -> StoredMachine
    store.get_or_create_commit(sha, base_sha, dirty, branch, parents, subject, author,
                               committed_at) -> StoredCommit
    store.record_run(machine: MachineRecord, commit: CommitRecord, *, profile, purpose="run",
                     round=0, software, fingerprint, settings, command="", started_at,
                     finished_at, results: Sequence[ResultRecord], trusted=False) -> StoredRun
    store.record_runs(machine, commit, runs: Sequence[RunRecord]) -> list[StoredRun]
        # the rounds of one measurement in one transaction (a run killed between rounds leaves nothing)
    store.record_check(machine, head: CommitRecord, base: CommitRecord, *, baseline_ref, profile,
                       threshold, verdict, exit_code, summary, environment, config, command="",
                       created_at=None, items: Sequence[CheckItemRecord]) -> int  (the check id)

``record_run`` and ``record_check`` create the machine and commits in the same transaction when
they are new, so calling ``get_or_create_*`` first is optional (their return values are records
too).  Machines and commits are matched by key / sha; an existing row is never changed.
Datetimes must be timezone-aware; they are stored in UTC and read back as UTC.

Reading for compare (one query each, no N+1; ``purposes`` defaults to MEASUREMENT_PURPOSES =
run, baseline, head; ask for ``("retry",)`` to get the interleaved re-measurements)::

    store.has_complete_run(machine_key, sha, profile, purposes=..., *, trusted_only=False) -> bool
    store.runs_for(machine_key, sha, profile, purposes=..., *, trusted_only=False) -> list[StoredRun]
    store.results_for(machine_key, sha, profile, purposes=..., *, trusted_only=False) -> ResultsByKey
        # {(benchmark, params_key): [StoredResult per run, oldest first]}; each StoredResult has
        # .samples (that round's samples), .value, .q25, .q75, .round, .run_id, .purpose,
        # .trusted, ...; StoredRun has .trusted too.  The baseline side passes trusted_only=True.
    store.get_check(check_id) -> StoredCheck | None                            # with .items

Reading history (the site and ``perfguard history``; never loads samples)::

    store.series(machine=None, benchmark=None, impl=None, params_key=None, profile=None,
                 branch=None, purposes=MEASUREMENT_PURPOSES, include_dirty=False, last=None,
                 match="exact" | "contains", trusted_only=False) -> list[StoredSeries]
        # one StoredSeries per (machine key, benchmark, params_key), points = one per commit, oldest
        # first by commit date; a commit measured several times is the median of its runs.
    store.latest(**same filters) -> list[StoredSeries]      # each cut to its newest commit
    store.machines() -> list[StoredMachine]
    store.distinct("impl" | "benchmark" | "machine") -> list[str]
    store.series_names() -> list[tuple[str, str]]  # stored (impl, benchmark) pairs

Acceptances and change points (``perfguard.accept``, ``perfguard.changepoints``;
docs/living-with-regressions.md)::

    store.record_acceptances(commit: CommitRecord, acceptances: Sequence[AcceptanceRecord],
                             created_at=None) -> list[StoredAcceptance]
        # one transaction; an identical stored acceptance is reused; a trusted one also accepts the
        # flagged change points of that commit it covers within its ceiling
    store.acceptances(shas=None, *, trusted_only=False) -> list[StoredAcceptance]  # oldest first
    store.revoke_acceptance(id, *, by, reason) -> StoredAcceptance  # it accepts nothing from then on
    store.record_change_points(machine, commit, previous: CommitRecord, *, profile,
                               points: Sequence[ChangePointRecord], detected_at=None)
        -> list[StoredChangePoint]     # one row per (machine, commit, benchmark, params_key), upserted
    store.change_points(machine_key=None, sha=None, benchmark=None, params_key=None,
                        flagged_only=False) -> list[StoredChangePoint]   # by commit date
        # .flagged (no trusted acceptance covers it), .acceptance, .cause ("torch 2.12.0 → 2.13.0")
    store.measured_shas(machine_key, profile, shas, purposes=...) -> set[str]

``params_key(params)`` builds the canonical ``k=v,k=v`` key; ``ResultRecord`` fills it in (and
``n_samples``, and the median / quartiles of ``samples`` when not given) by itself.  Samples
that are NaN or infinite are ignored (docs/verdicts.md): dropped and counted in
``info["ignored_samples"]``; a sample that is not a positive number (negative, zero, a bool, a
string, an integer too large for a float) and an empty list for an ``ok`` result are refused.
"""

# The names below are imported when first used (PEP 562): the records travel through the measuring
# engine's processes (round workers, verify), which must not pay for SQLAlchemy's import (~0.5 CPU s
# each) to build a ResultRecord; ``from perfguard.store import Store`` reads the same as before.

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfguard.store.acceptances import (
        ACCEPTANCE_SOURCES,
        AcceptanceRecord,
        StoredAcceptance,
        short_benchmark,
    )
    from perfguard.store.change_points import ChangePointRecord, StoredChangePoint
    from perfguard.store.history import SeriesPoint, StoredSeries
    from perfguard.store.records import (
        MEASUREMENT_PURPOSES,
        PURPOSES,
        RESULT_STATUSES,
        CheckItemRecord,
        CommitRecord,
        MachineRecord,
        ResultRecord,
        RunRecord,
        StoredCheck,
        StoredCheckItem,
        StoredCommit,
        StoredMachine,
        StoredResult,
        StoredRun,
        params_key,
    )
    from perfguard.store.schema import SchemaState
    from perfguard.store.store import ResultsByKey, Store
    from perfguard.store.url import (
        RESULTS_ENV_VAR,
        UNTRUSTED_ENV_VAR,
        StoreURL,
        default_url,
        mask,
        resolve,
        resolve_results,
        untrusted_from_env,
    )

#: name -> the module of this package that defines it
_MODULE_OF = {
    "ACCEPTANCE_SOURCES": "acceptances",
    "AcceptanceRecord": "acceptances",
    "StoredAcceptance": "acceptances",
    "short_benchmark": "acceptances",
    "ChangePointRecord": "change_points",
    "StoredChangePoint": "change_points",
    "SeriesPoint": "history",
    "StoredSeries": "history",
    "MEASUREMENT_PURPOSES": "records",
    "PURPOSES": "records",
    "RESULT_STATUSES": "records",
    "CheckItemRecord": "records",
    "CommitRecord": "records",
    "MachineRecord": "records",
    "ResultRecord": "records",
    "RunRecord": "records",
    "StoredCheck": "records",
    "StoredCheckItem": "records",
    "StoredCommit": "records",
    "StoredMachine": "records",
    "StoredResult": "records",
    "StoredRun": "records",
    "params_key": "records",
    "SchemaState": "schema",
    "ResultsByKey": "store",
    "Store": "store",
    "RESULTS_ENV_VAR": "url",
    "UNTRUSTED_ENV_VAR": "url",
    "StoreURL": "url",
    "default_url": "url",
    "mask": "url",
    "resolve": "url",
    "resolve_results": "url",
    "untrusted_from_env": "url",
}


def __getattr__(name: str) -> Any:
    """``perfguard.store.<name>``: imported from its module the first time it is asked for."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ACCEPTANCE_SOURCES",
    "MEASUREMENT_PURPOSES",
    "PURPOSES",
    "RESULTS_ENV_VAR",
    "RESULT_STATUSES",
    "UNTRUSTED_ENV_VAR",
    "AcceptanceRecord",
    "ChangePointRecord",
    "CheckItemRecord",
    "CommitRecord",
    "MachineRecord",
    "ResultRecord",
    "ResultsByKey",
    "RunRecord",
    "SchemaState",
    "SeriesPoint",
    "Store",
    "StoreURL",
    "StoredAcceptance",
    "StoredChangePoint",
    "StoredCheck",
    "StoredCheckItem",
    "StoredCommit",
    "StoredMachine",
    "StoredResult",
    "StoredRun",
    "StoredSeries",
    "default_url",
    "mask",
    "params_key",
    "resolve",
    "resolve_results",
    "short_benchmark",
    "untrusted_from_env",
]
