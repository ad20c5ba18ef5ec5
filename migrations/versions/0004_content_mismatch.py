"""streams: a body whose declared Content-Type said otherwise; the transport

Two nullable columns on streams (additive): ``content_mismatch``, set when the
response's declared Content-Type disagreed with its body, which the recorder
metered as what it was (rows written before keep nulls); ``transport``, how the
response came (``sse``, ``json``, ``eventstream``, ``websocket``), filled for the
rows written before from ``streamed`` (they were all HTTP: ``sse`` or ``json``).

Revision ID: 0004_content_mismatch
Revises: 0003_prices
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_content_mismatch"
down_revision: str | None = "0003_prices"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.add_column(sa.Column("content_mismatch", sa.Text(), nullable=True))
        batch.add_column(sa.Column("transport", sa.String(length=16), nullable=True))
    op.execute("UPDATE streams SET transport = CASE WHEN streamed THEN 'sse' ELSE 'json' END")


def downgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.drop_column("transport")
        batch.drop_column("content_mismatch")
