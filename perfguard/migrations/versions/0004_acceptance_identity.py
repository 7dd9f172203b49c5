"""Acceptances get an identity, unique with their commit: the same acceptance is stored once.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 00:00:00

Recording acceptances looked for an identical row, then inserted: two writers at the same moment
both inserted (issue 27: 80 rows where 15 were recorded, on PostgreSQL).  ``identity`` is the
SHA-256 of the acceptance's fields (``perfguard.store.acceptances.acceptance_identity``, frozen
below as it was when this was written), and (commit, identity) is unique, so the writers'
``INSERT .. ON CONFLICT DO NOTHING`` store it once.  Rows stored twice before are merged into the
oldest (the change points they accepted point at it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FIELDS = ("impl", "benchmark", "metric", "params", "ceiling", "reason", "source", "author", "trusted",
           "approved_by")  # fmt: skip


def _identity(row: sa.Row) -> str:  # type: ignore[type-arg]
    values = {name: getattr(row, name) for name in _FIELDS}
    values["params"] = dict(
        values["params"] if isinstance(values["params"], dict) else json.loads(values["params"])
    )
    values["ceiling"] = float(values["ceiling"])
    values["trusted"] = bool(values["trusted"])
    text = json.dumps(values, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def upgrade() -> None:
    # Plain ALTERs, no batch rebuild on SQLite: a rebuilt table would be dropped under the change
    # points that reference it (foreign keys are on); both dialects add a column with a default.
    op.add_column(
        "acceptances", sa.Column("identity", sa.String(length=64), server_default="", nullable=False)
    )
    acceptances = sa.table(
        "acceptances", sa.column("id", sa.Integer), sa.column("commit_id", sa.Integer),
        sa.column("identity", sa.String), *(sa.column(name, sa.JSON if name == "params" else None)
                                            for name in _FIELDS),
    )  # fmt: skip
    change_points = sa.table("change_points", sa.column("acceptance_id", sa.Integer))
    bind = op.get_bind()
    kept: dict[tuple[int, str], int] = {}
    for row in bind.execute(sa.select(acceptances).order_by(acceptances.c.id)).all():
        identity = _identity(row)
        first = kept.setdefault((row.commit_id, identity), row.id)
        if first == row.id:
            bind.execute(acceptances.update().where(acceptances.c.id == row.id).values(identity=identity))
            continue
        bind.execute(
            change_points.update().where(change_points.c.acceptance_id == row.id).values(acceptance_id=first)
        )
        bind.execute(acceptances.delete().where(acceptances.c.id == row.id))
    op.create_index(
        "uq_acceptances_commit_id_identity", "acceptances", ["commit_id", "identity"], unique=True
    )


def downgrade() -> None:
    op.drop_index("uq_acceptances_commit_id_identity", table_name="acceptances")
    op.drop_column("acceptances", "identity")
