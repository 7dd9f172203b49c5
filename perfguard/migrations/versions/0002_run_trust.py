"""Runs carry ``trusted``: only runs measured by a trusted context may serve as baselines.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25 10:00:00.000000

Rows written before this revision cannot be told apart by who wrote them, so they are classified
by what wrote them (docs/ci.md, "Trust model", "Stores from before the trust model"):

- ``run`` and ``calibrate`` runs were written by ``perfguard run`` / ``perfguard calibrate``, which
  CI runs only in the baseline workflow: trusted.
- ``baseline``, ``head`` and ``retry`` runs were written by ``perfguard check``, which in CI ran in
  pull-request jobs next to the PR's code: untrusted.  A baseline a check measured is measured
  again (trusted) the first time a trusted context needs it.

A store that PR jobs could write to may also hold forged ``run`` rows; docs/ci.md says how to
distrust everything before a date.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TRUSTED_PURPOSES = ("run", "calibrate")


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("trusted", sa.Boolean(), server_default=sa.false(), nullable=False))
    runs = sa.table("runs", sa.column("purpose", sa.String()), sa.column("trusted", sa.Boolean()))
    op.execute(runs.update().where(runs.c.purpose.in_(TRUSTED_PURPOSES)).values(trusted=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("trusted")
