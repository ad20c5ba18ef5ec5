"""stream_bodies: captured SSE response bodies (--capture-bodies)

A new table only, so nothing is altered: SQLite needs no batch copy here (env.py
turns batch mode on for SQLite all the same, for later scripts that alter).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stream_bodies",
        sa.Column("stream_id", sa.String(length=36), nullable=False),
        sa.Column("encoding", sa.String(length=16), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("timings", sa.LargeBinary(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["stream_id"],
            ["streams.id"],
            name=op.f("fk_stream_bodies_stream_id_streams"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("stream_id", name=op.f("pk_stream_bodies")),
    )


def downgrade() -> None:
    op.drop_table("stream_bodies")
