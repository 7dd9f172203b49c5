"""Alembic environment of the history store, shipped inside the package.

perfguard runs migrations itself (``perfguard.store.schema``): it builds the Alembic configuration
in code (no alembic.ini needed in an installed package), opens the connection, takes the migration
lock, and hands the connection over in ``config.attributes["connection"]``.  Migrations run inside
that connection's transaction, so a failed migration leaves the schema as it was.
"""

from __future__ import annotations

from typing import Any

from alembic import context

from perfguard.store.columns import Checked
from perfguard.store.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "perfguard's migrations run through perfguard itself: use `perfguard db upgrade` "
        "(or `perfguard db revision` to write a new migration)"
    )


def _render_item(type_: str, obj: Any, autogen_context: Any) -> str | bool:
    """Write plain SQLAlchemy types into new migrations, so that they never import the models."""
    if type_ == "type" and isinstance(obj, Checked):  # perfguard.store.columns: the plain type
        return f"sa.{obj.impl_instance!r}"
    return False


context.configure(
    connection=connection,
    render_item=_render_item,
    target_metadata=Base.metadata,
    compare_type=True,
    # SQLite cannot ALTER most things: later migrations rebuild tables in batch mode there.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
