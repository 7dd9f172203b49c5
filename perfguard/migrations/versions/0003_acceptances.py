"""Acceptances (intended regressions) and change points (steps on the baseline branch).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25 01:52:02.689037

Written at the same time as ``0002`` (runs carry ``trusted``, issue 13) and chained onto it when
the two met; they touch different tables.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "acceptances",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("commit_id", sa.Integer(), nullable=False),
        sa.Column("impl", sa.String(length=128), nullable=False),
        sa.Column("benchmark", sa.String(length=255), nullable=False),
        sa.Column("metric", sa.String(length=32), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("ceiling", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("author", sa.String(length=255), nullable=False),
        sa.Column("approved_by", sa.String(length=255), nullable=True),
        sa.Column("trusted", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["commit_id"], ["commits.id"], name=op.f("fk_acceptances_commit_id_commits")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_acceptances")),
    )
    with op.batch_alter_table("acceptances", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_acceptances_commit_id"), ["commit_id"], unique=False)

    op.create_table(
        "change_points",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("machine_id", sa.Integer(), nullable=False),
        sa.Column("commit_id", sa.Integer(), nullable=False),
        sa.Column("previous_commit_id", sa.Integer(), nullable=False),
        sa.Column("profile", sa.String(length=32), nullable=False),
        sa.Column("benchmark", sa.String(length=255), nullable=False),
        sa.Column("impl", sa.String(length=128), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("params_key", sa.String(length=512), nullable=False),
        sa.Column("metric", sa.String(length=32), nullable=False),
        sa.Column("unit", sa.String(length=32), nullable=False),
        sa.Column("direction", sa.String(length=8), nullable=False),
        sa.Column("before", sa.Float(), nullable=False),
        sa.Column("after", sa.Float(), nullable=False),
        sa.Column("ratio", sa.Float(), nullable=False),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("cause", sa.Text(), nullable=True),
        sa.Column("software_changes", sa.JSON(), nullable=False),
        sa.Column("acceptance_id", sa.Integer(), nullable=True),
        sa.Column("detected_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["acceptance_id"], ["acceptances.id"], name=op.f("fk_change_points_acceptance_id_acceptances")
        ),
        sa.ForeignKeyConstraint(
            ["commit_id"], ["commits.id"], name=op.f("fk_change_points_commit_id_commits")
        ),
        sa.ForeignKeyConstraint(
            ["machine_id"], ["machines.id"], name=op.f("fk_change_points_machine_id_machines")
        ),
        sa.ForeignKeyConstraint(
            ["previous_commit_id"], ["commits.id"], name=op.f("fk_change_points_previous_commit_id_commits")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_change_points")),
        sa.UniqueConstraint(
            "machine_id",
            "commit_id",
            "benchmark",
            "params_key",
            name=op.f("uq_change_points_machine_id_commit_id_benchmark_params_key"),
        ),
    )
    with op.batch_alter_table("change_points", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_change_points_commit_id"), ["commit_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_change_points_machine_id"), ["machine_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("change_points", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_change_points_machine_id"))
        batch_op.drop_index(batch_op.f("ix_change_points_commit_id"))

    op.drop_table("change_points")
    with op.batch_alter_table("acceptances", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_acceptances_commit_id"))

    op.drop_table("acceptances")
