"""The repository the rest of perfguard uses: open a store, write runs and checks, read them back.

See the package docstring (``perfguard.store``) for the API in one place.  Every write is one
transaction that is validated completely before it starts; every read returns frozen dataclasses,
never ORM objects.  :class:`Store` is one method per write or read, each in one transaction; what
goes into each transaction is in the modules of one table family each: :mod:`~perfguard.store.runs`
(runs and results), :mod:`~perfguard.store.checks`, :mod:`~perfguard.store.acceptances`,
:mod:`~perfguard.store.change_points`, :mod:`~perfguard.store.history` (series for the site), with
machines and commits upserted and listed by :mod:`~perfguard.store.rows`.  What is about no table
(opening and closing, the engine, the transactions and their errors, the read-only guard, whether
a write would fail) is its base class, :class:`~perfguard.store.connection.StoreConnection`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from perfguard.store import acceptances as acceptances_table
from perfguard.store import change_points as change_points_table
from perfguard.store import checks, history, rows
from perfguard.store import runs as run_queries
from perfguard.store.acceptances import AcceptanceRecord, StoredAcceptance
from perfguard.store.change_points import ChangePointRecord, StoredChangePoint
from perfguard.store.connection import StoreConnection
from perfguard.store.models import Commit, Machine
from perfguard.store.record_checks import check_record, require_text
from perfguard.store.records import (
    MEASUREMENT_PURPOSES,
    CheckItemRecord,
    CommitRecord,
    MachineRecord,
    ResultRecord,
    RunRecord,
    StoredCheck,
    StoredCommit,
    StoredMachine,
    StoredRun,
)
from perfguard.store.rows import stored_commit, stored_machine, upsert_commit, upsert_machine
from perfguard.store.runs import ResultsByKey


class Store(StoreConnection):
    """A history store: one database, its schema at this perfguard's newest revision."""

    # --- machines and commits --------------------------------------------------------------------

    def get_or_create_machine(
        self, key: str, kind: str, label: str, attributes: Mapping[str, Any]
    ) -> StoredMachine:
        """The machine with this key, created if new (an existing row is returned unchanged)."""
        self._refuse_if_read_only("recording a machine in")
        record = MachineRecord(key=key, kind=kind, label=label, attributes=attributes)
        check_record("machine", record.validate)
        with self._writing("recording a machine in") as session:
            machine_id = upsert_machine(session, record, self.dialect)
            return stored_machine(session.get_one(Machine, machine_id))

    def get_or_create_commit(
        self,
        sha: str,
        base_sha: str,
        dirty: bool,
        branch: str | None,
        parents: Sequence[str],
        subject: str,
        author: str | None,
        committed_at: datetime,
    ) -> StoredCommit:
        """The commit with this sha, created if new (an existing row is returned unchanged)."""
        self._refuse_if_read_only("recording a commit in")
        record = CommitRecord(
            sha=sha,
            base_sha=base_sha,
            dirty=dirty,
            branch=branch,
            parents=parents,
            subject=subject,
            author=author,
            committed_at=committed_at,
        )
        check_record("commit", record.validate)
        with self._writing("recording a commit in") as session:
            commit_id = upsert_commit(session, record, self.dialect)
            return stored_commit(session.get_one(Commit, commit_id))

    def machines(self) -> list[StoredMachine]:
        """Every machine key in the store, by key."""
        with self._reading("listing the machines of") as session:
            return rows.machines(session)

    # --- runs --------------------------------------------------------------------------------------

    def record_run(
        self,
        machine: MachineRecord,
        commit: CommitRecord,
        *,
        profile: str,
        purpose: str = "run",
        round: int = 0,
        software: Mapping[str, Any],
        fingerprint: Mapping[str, Any],
        settings: Mapping[str, Any],
        command: str = "",
        started_at: datetime,
        finished_at: datetime,
        results: Sequence[ResultRecord],
        trusted: bool = False,
    ) -> StoredRun:
        """Store one run and all its results in one transaction: all of it, or (on any error) nothing.

        ``machine`` and ``commit`` may be records or the values ``get_or_create_*`` returned; they
        are created in the same transaction if new.  Every record is validated first; a bad one
        raises :class:`StoreError` naming it, before anything is written.
        """
        run = RunRecord(
            profile=profile,
            purpose=purpose,
            round=round,
            software=software,
            fingerprint=fingerprint,
            settings=settings,
            command=command,
            started_at=started_at,
            finished_at=finished_at,
            results=results,
            trusted=trusted,
        )
        return self.record_runs(machine, commit, [run])[0]

    def record_runs(
        self, machine: MachineRecord, commit: CommitRecord, runs: Sequence[RunRecord]
    ) -> list[StoredRun]:
        """Store several runs of one commit (the rounds of one measurement) in one transaction.

        A measurement killed between its rounds therefore leaves nothing behind, and a commit is
        never half measured in the store.  Each run keeps its ``trusted`` flag (False unless the
        writer says so); only trusted runs are baselines.
        """
        self._refuse_if_read_only("recording a run in")
        run_queries.validate_runs(machine, commit, runs)
        with self._writing("recording a run in") as session:
            return run_queries.insert_runs(
                session,
                upsert_machine(session, machine, self.dialect),
                upsert_commit(session, commit, self.dialect),
                machine_key=machine.key,
                sha=commit.sha,
                runs=runs,
            )

    def runs_for(
        self,
        machine_key: str,
        sha: str,
        profile: str,
        purposes: Sequence[str] = MEASUREMENT_PURPOSES,
        *,
        trusted_only: bool = False,
    ) -> list[StoredRun]:
        """The complete runs of one commit on one machine key and profile, oldest first.

        ``trusted_only``: only runs a trusted context measured (what a baseline may be made of).
        """
        with self._reading("reading runs from") as session:
            return run_queries.runs_for(session, machine_key, sha, profile, purposes, trusted_only)

    def results_for(
        self,
        machine_key: str,
        sha: str,
        profile: str,
        purposes: Sequence[str] = MEASUREMENT_PURPOSES,
        *,
        trusted_only: bool = False,
    ) -> ResultsByKey:
        """All results (with samples) of one commit on one machine key and profile, in one query.

        Grouped by ``(benchmark, params_key)``; each group has one :class:`StoredResult` per run
        (its ``round``, ``run_id``, ``purpose`` and ``trusted`` say which), oldest run first.
        ``trusted_only``: only results of trusted runs (the check's baseline side).
        """
        with self._reading("reading results from") as session:
            return run_queries.results_for(session, machine_key, sha, profile, purposes, trusted_only)

    def has_complete_run(
        self,
        machine_key: str,
        sha: str,
        profile: str,
        purposes: Sequence[str] = MEASUREMENT_PURPOSES,
        *,
        trusted_only: bool = False,
    ) -> bool:
        """Whether this commit has been measured on this machine key with this profile.

        ``trusted_only``: by a trusted context (an untrusted run never stands in for a baseline).
        """
        with self._reading("reading runs from") as session:
            return run_queries.has_complete_run(session, machine_key, sha, profile, purposes, trusted_only)

    # --- checks ------------------------------------------------------------------------------------

    def record_check(
        self,
        machine: MachineRecord,
        head: CommitRecord,
        base: CommitRecord,
        *,
        baseline_ref: str,
        profile: str,
        threshold: float,
        verdict: str,
        exit_code: int,
        summary: Mapping[str, Any],
        environment: Mapping[str, Any],
        config: Mapping[str, Any],
        command: str = "",
        created_at: datetime | None = None,
        items: Sequence[CheckItemRecord],
    ) -> int:
        """Store one check and its verdicts in one transaction; return its id."""
        self._refuse_if_read_only("recording a check in")
        created_at = datetime.now(timezone.utc) if created_at is None else created_at
        values = {
            "baseline_ref": baseline_ref,
            "profile": profile,
            "threshold": threshold,
            "verdict": verdict,
            "exit_code": exit_code,
            "summary": summary,
            "environment": environment,
            "config": config,
            "command": command,
            "created_at": created_at,
        }
        checks.validate_check(machine, head, base, values, items)
        with self._writing("recording a check in") as session:
            return checks.insert_check(
                session,
                machine_id=upsert_machine(session, machine, self.dialect),
                head_id=upsert_commit(session, head, self.dialect),
                base_id=upsert_commit(session, base, self.dialect),
                values=values,
                items=items,
            )

    def get_check(self, check_id: int) -> StoredCheck | None:
        """A stored check with its machine, both commits and all items; None if there is none."""
        with self._reading("reading a check from") as session:
            return checks.get_check(session, check_id)

    # --- acceptances and change points (perfguard.accept, perfguard.changepoints) -----------------

    def record_acceptances(
        self,
        commit: CommitRecord,
        acceptances: Sequence[AcceptanceRecord],
        *,
        created_at: datetime | None = None,
    ) -> list[StoredAcceptance]:
        """Store acceptances of one commit in one transaction (an identical stored one is reused).

        A trusted acceptance also accepts the flagged change points of that commit that it covers
        within its ceiling: a maintainer acknowledging a step on the baseline branch after the fact.
        """
        created_at = datetime.now(timezone.utc) if created_at is None else created_at
        acceptances_table.validate_acceptances(commit, acceptances, created_at)
        with self._writing("recording an acceptance in") as session:
            commit_id = upsert_commit(session, commit, self.dialect)
            ids = acceptances_table.insert_acceptances(
                session, commit_id, acceptances, created_at, self.dialect
            )
        with self._reading("reading acceptances from") as session:
            stored = {a.id: a for a in acceptances_table.acceptances(session, ids=ids, trusted_only=False)}
        return [stored[i] for i in ids]

    def acceptances(
        self, shas: Sequence[str] | None = None, *, trusted_only: bool = False
    ) -> list[StoredAcceptance]:
        """The acceptances of these commits (every commit when None), oldest first.

        A check reads the trusted ones of the commits between its baseline and HEAD; the site shows
        all of them at their commit (``trusted`` says which ones count).
        """
        with self._reading("reading acceptances from") as session:
            return acceptances_table.acceptances(session, shas=shas, trusted_only=trusted_only)

    def revoke_acceptance(
        self, acceptance_id: int, *, by: str, reason: str, revoked_at: datetime | None = None
    ) -> StoredAcceptance:
        """Revoke acceptance ``acceptance_id`` (who, why, when) in one transaction; the stored row.

        It accepts nothing from then on (checks and ``perfguard changes`` ignore it, saying so), the
        steps it accepted are flagged again unless another acceptance of their commit covers them,
        and the row stays, so what it once accepted keeps its name.  Unknown or already revoked:
        :class:`~perfguard.errors.UsageError` (exit 2), nothing written.
        """
        from perfguard.errors import UsageError

        revoked_at = datetime.now(timezone.utc) if revoked_at is None else revoked_at
        check_record("revocation", lambda: require_text("revoked by", by, 255))
        check_record("revocation", lambda: require_text("revocation reason", reason, 100_000))
        with self._writing("revoking an acceptance in") as session:
            row = acceptances_table.revoke_acceptance(
                session, acceptance_id, by=by, reason=reason, revoked_at=revoked_at
            )
            if row is None:
                raise UsageError(
                    f"no acceptance #{acceptance_id} in {self.url}",
                    hint="`perfguard accept --list` shows the stored ones with their ids",
                )
            if row.revoked_at != revoked_at:
                raise UsageError(
                    f"acceptance #{acceptance_id} is already revoked "
                    f"({row.revoked_by}: {row.revoked_reason!r})",
                    hint="a revoked acceptance accepts nothing; record a new one to accept again",
                )
        with self._reading("reading acceptances from") as session:
            [stored] = acceptances_table.acceptances(session, ids=[acceptance_id], trusted_only=False)
        return stored

    def record_change_points(
        self,
        machine: MachineRecord,
        commit: CommitRecord,
        previous: CommitRecord,
        *,
        profile: str,
        points: Sequence[ChangePointRecord],
        detected_at: datetime | None = None,
    ) -> list[StoredChangePoint]:
        """Store the steps found at ``commit`` (against ``previous``) in one transaction.

        Finding the same step again updates it (values, cause, acceptance), so running the
        detection twice for one commit leaves one row per series.
        """
        detected_at = datetime.now(timezone.utc) if detected_at is None else detected_at
        change_points_table.validate_change_points(machine, commit, previous, profile, points, detected_at)
        if not points:
            return []
        with self._writing("recording change points in") as session:
            ids = change_points_table.upsert_change_points(
                session,
                machine_id=upsert_machine(session, machine, self.dialect),
                commit_id=upsert_commit(session, commit, self.dialect),
                previous_commit_id=upsert_commit(session, previous, self.dialect),
                profile=profile,
                points=points,
                detected_at=detected_at,
                dialect=self.dialect,
            )
        with self._reading("reading change points from") as session:
            stored = {p.id: p for p in change_points_table.change_points(session, ids=ids)}
        return [stored[i] for i in ids]

    def change_points(
        self,
        *,
        machine_key: str | None = None,
        sha: str | None = None,
        benchmark: str | None = None,
        params_key: str | None = None,
        flagged_only: bool = False,
    ) -> list[StoredChangePoint]:
        """Stored steps of the baseline branch, oldest commit first (for the site and the job summary).

        ``flagged_only``: only the steps that no trusted acceptance covers.
        """
        with self._reading("reading change points from") as session:
            return change_points_table.change_points(
                session,
                machine_key=machine_key,
                sha=sha,
                benchmark=benchmark,
                params_key=params_key,
                flagged_only=flagged_only,
            )

    def measured_shas(
        self,
        machine_key: str,
        profile: str,
        shas: Sequence[str],
        purposes: Sequence[str] = MEASUREMENT_PURPOSES,
        *,
        trusted_only: bool = False,
    ) -> set[str]:
        """Which of ``shas`` have a complete run on this machine key and profile (one query)."""
        if not shas:
            return set()
        with self._reading("reading runs from") as session:
            return run_queries.measured_shas(session, machine_key, profile, shas, purposes, trusted_only)

    # --- history -----------------------------------------------------------------------------------

    def series(self, **filters: Any) -> list[history.StoredSeries]:
        """Series over commits per (machine, benchmark, params_key); see :func:`history.series`.

        ``trusted_only=True`` leaves out runs of untrusted contexts (the published history site).
        """
        with self._reading("reading history from") as session:
            return history.series(session, **filters)

    def latest(self, **filters: Any) -> list[history.StoredSeries]:
        """The newest point of every matching series; see :func:`history.latest`."""
        with self._reading("reading history from") as session:
            return history.latest(session, **filters)

    def distinct(self, column: str) -> list[str]:
        """Stored values of ``impl``, ``benchmark`` or ``machine`` (for 'did you mean' messages)."""
        with self._reading("reading history from") as session:
            return history.distinct(session, column)

    def series_names(self) -> list[tuple[str, str]]:
        """Every stored (implementation, benchmark) pair: what an acceptance may name."""
        with self._reading("reading history from") as session:
            return history.series_names(session)
