"""streams: a body whose declared Content-Type said otherwise

One nullable column on streams (additive): ``content_mismatch``, set when the
response's declared Content-Type disagreed with its body, which the recorder
metered as what it was. Rows written before keep nulls.

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


def downgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.drop_column("content_mismatch")
