"""prices: the tier a request asked for, and why a cost is unknown

Two nullable columns on streams (additive): ``requested_tier`` (the request's
``service_tier``, Anthropic's ``speed: "fast"`` as ``fast``) and
``unpriced_reason`` (why ``cost_usd`` is null although usage is known). Rows
written before keep nulls: ``recorder reprice`` fills ``unpriced_reason``.

Revision ID: 0003_prices
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_prices"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.add_column(sa.Column("requested_tier", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("unpriced_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.drop_column("unpriced_reason")
        batch.drop_column("requested_tier")
