"""streams: the priced parts of a request's usage (issue 30)

One nullable JSON column on streams (additive; rows written before keep null,
which says what they always meant: one part, priced at the record's model):
``usage_parts``, the parts the token figures are the sums of (Anthropic's
``usage.iterations``: compaction, advisor and fallback iterations), each with
its model, figures and cost.

Revision ID: 0009_usage_parts
Revises: 0007_websocket
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009_usage_parts"
down_revision: str | None = "0008_attribution"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    doc = sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
    )
    with op.batch_alter_table("streams") as batch:
        batch.add_column(sa.Column("usage_parts", doc, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.drop_column("usage_parts")
