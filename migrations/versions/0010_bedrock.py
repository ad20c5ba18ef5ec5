"""streams: Amazon Bedrock's own timing (issue 31)

Two nullable columns on streams (additive; rows written before keep nulls):
``provider_latency_ms``, the provider's own measure of the request (Converse's
``metrics.latencyMs``, InvokeModel's ``invocationLatency``), and
``provider_first_byte_ms`` (InvokeModel's ``firstByteLatency``), beside the
measured ``duration_ms`` and ``ttft_ms``.

Revision ID: 0010_bedrock
Revises: 0007_websocket
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_bedrock"
down_revision: str | None = "0009_usage_parts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.add_column(sa.Column("provider_latency_ms", sa.Double(), nullable=True))
        batch.add_column(sa.Column("provider_first_byte_ms", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.drop_column("provider_first_byte_ms")
        batch.drop_column("provider_latency_ms")
