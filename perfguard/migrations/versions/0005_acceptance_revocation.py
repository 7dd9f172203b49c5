"""Acceptances can be revoked: when, by whom and why (``perfguard accept --revoke ID``, issue 30).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28 08:00:00

An acceptance that no longer holds (the trade-off was undone, it was recorded by mistake) must stop
counting without being deleted: the checks and steps it accepted keep naming it, and the history
says who took it back and why.  Three nullable columns; a row with ``revoked_at`` set accepts
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ALTERs, no batch rebuild on SQLite (0004 says why): nullable columns need no default.
    op.add_column("acceptances", sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("acceptances", sa.Column("revoked_by", sa.String(length=255), nullable=True))
    op.add_column("acceptances", sa.Column("revoked_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("acceptances", "revoked_reason")
    op.drop_column("acceptances", "revoked_by")
    op.drop_column("acceptances", "revoked_at")
