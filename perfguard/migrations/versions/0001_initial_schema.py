"""Initial schema: machines, commits, runs, results, result_data, checks, check_items.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 01:52:50.631232
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "commits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sha", sa.String(length=96), nullable=False),
        sa.Column("base_sha", sa.String(length=40), nullable=False),
        sa.Column("dirty", sa.Boolean(), nullable=False),
        sa.Column("branch", sa.String(length=255), nullable=True),
        sa.Column("parents", sa.JSON(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("author", sa.String(length=255), nullable=True),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_commits")),
        sa.UniqueConstraint("sha", name=op.f("uq_commits_sha")),
    )
    with op.batch_alter_table("commits", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_commits_base_sha"), ["base_sha"], unique=False)

    op.create_table(
        "machines",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("label", sa.String(length=255), nullable=False),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_machines")),
        sa.UniqueConstraint("key", name=op.f("uq_machines_key")),
    )
    op.create_table(
        "checks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("machine_id", sa.Integer(), nullable=False),
        sa.Column("head_commit_id", sa.Integer(), nullable=False),
        sa.Column("base_commit_id", sa.Integer(), nullable=False),
        sa.Column("baseline_ref", sa.String(length=255), nullable=False),
        sa.Column("profile", sa.String(length=32), nullable=False),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("environment", sa.JSON(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["base_commit_id"], ["commits.id"], name=op.f("fk_checks_base_commit_id_commits")
        ),
        sa.ForeignKeyConstraint(
            ["head_commit_id"], ["commits.id"], name=op.f("fk_checks_head_commit_id_commits")
        ),
        sa.ForeignKeyConstraint(["machine_id"], ["machines.id"], name=op.f("fk_checks_machine_id_machines")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checks")),
    )
    with op.batch_alter_table("checks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_checks_machine_id"), ["machine_id"], unique=False)

    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("machine_id", sa.Integer(), nullable=False),
        sa.Column("commit_id", sa.Integer(), nullable=False),
        sa.Column("profile", sa.String(length=32), nullable=False),
        sa.Column("purpose", sa.String(length=16), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("software", sa.JSON(), nullable=False),
        sa.Column("fingerprint", sa.JSON(), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(["commit_id"], ["commits.id"], name=op.f("fk_runs_commit_id_commits")),
        sa.ForeignKeyConstraint(["machine_id"], ["machines.id"], name=op.f("fk_runs_machine_id_machines")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_commit_id"), ["commit_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_runs_machine_id_commit_id_profile"),
            ["machine_id", "commit_id", "profile"],
            unique=False,
        )

    op.create_table(
        "check_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("check_id", sa.Integer(), nullable=False),
        sa.Column("benchmark", sa.String(length=255), nullable=False),
        sa.Column("impl", sa.String(length=128), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("params_key", sa.String(length=512), nullable=False),
        sa.Column("metric", sa.String(length=32), nullable=False),
        sa.Column("unit", sa.String(length=32), nullable=False),
        sa.Column("direction", sa.String(length=8), nullable=False),
        sa.Column("gated", sa.Boolean(), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("base_value", sa.Float(), nullable=True),
        sa.Column("head_value", sa.Float(), nullable=True),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("ci_low", sa.Float(), nullable=True),
        sa.Column("ci_high", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("noise", sa.Float(), nullable=True),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("method", sa.String(length=32), nullable=True),
        sa.Column("retried", sa.Boolean(), nullable=False),
        sa.Column("base_n", sa.Integer(), nullable=False),
        sa.Column("head_n", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["check_id"], ["checks.id"], name=op.f("fk_check_items_check_id_checks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_check_items")),
    )
    with op.batch_alter_table("check_items", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_check_items_check_id"), ["check_id"], unique=False)

    op.create_table(
        "results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("benchmark", sa.String(length=255), nullable=False),
        sa.Column("impl", sa.String(length=128), nullable=False),
        sa.Column("params_key", sa.String(length=512), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("metric", sa.String(length=32), nullable=False),
        sa.Column("unit", sa.String(length=32), nullable=False),
        sa.Column("direction", sa.String(length=8), nullable=False),
        sa.Column("gated", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("n_samples", sa.Integer(), nullable=False),
        sa.Column("q25", sa.Float(), nullable=True),
        sa.Column("q75", sa.Float(), nullable=True),
        sa.Column("method", sa.String(length=32), nullable=True),
        sa.Column("benchmark_version", sa.String(length=128), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_results_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_results")),
        sa.UniqueConstraint(
            "run_id", "benchmark", "params_key", name=op.f("uq_results_run_id_benchmark_params_key")
        ),
    )
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_results_benchmark_params_key"), ["benchmark", "params_key"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_results_impl"), ["impl"], unique=False)

    op.create_table(
        "result_data",
        sa.Column("result_id", sa.Integer(), nullable=False),
        sa.Column("samples", sa.JSON(), nullable=True),
        sa.Column("info", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["result_id"], ["results.id"], name=op.f("fk_result_data_result_id_results"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("result_id", name=op.f("pk_result_data")),
    )


def downgrade() -> None:
    op.drop_table("result_data")
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_results_impl"))
        batch_op.drop_index(batch_op.f("ix_results_benchmark_params_key"))

    op.drop_table("results")
    with op.batch_alter_table("check_items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_check_items_check_id"))

    op.drop_table("check_items")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_machine_id_commit_id_profile"))
        batch_op.drop_index(batch_op.f("ix_runs_commit_id"))

    op.drop_table("runs")
    with op.batch_alter_table("checks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_checks_machine_id"))

    op.drop_table("checks")
    op.drop_table("machines")
    with op.batch_alter_table("commits", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_commits_base_sha"))

    op.drop_table("commits")
