"""The event types the log holds, each with its schema version.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06

A release that cannot read every event of the log must not work on it: its folds would
stop at the first event it does not know, and its appends would follow events it never
saw. A new event type is no schema change, so the schema's revision cannot tell; this
table can, in one small read at start-up (`EventLog.check_readable`), where scanning
the events themselves would read the whole log. Each append adds the (type, version)
pairs it is the first to write; the upgrade fills the table from the events already
recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

__all__ = ["downgrade", "upgrade"]

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "event_types",
        sa.Column("type", sa.String(200), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("type", "schema_version", name="pk_event_types"),
    )
    op.execute(
        "INSERT INTO event_types (type, schema_version) "
        "SELECT DISTINCT type, schema_version FROM events"
    )


def downgrade() -> None:
    op.drop_table("event_types")
