"""streams: attribution and retry chains (issue 32, sections 1 and 2)

Seven nullable columns on streams (additive; rows written before keep nulls:
no attribution, no fingerprint, no chain): ``user_id`` (an HMAC fingerprint of
the end user, unless the proxy kept ids), ``session_id``, ``prompt_cache_key``,
``tags`` (a JSON object), ``request_fingerprint``, ``retry_of`` (the record id
of the attempt retried; indexed, `recorder show` follows chains by it) and
``attempt``.

Revision ID: 0008_attribution
Revises: 0007_websocket
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008_attribution"
down_revision: str | None = "0007_websocket"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.add_column(sa.Column("user_id", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("session_id", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("prompt_cache_key", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("tags", _JSON, nullable=True))
        batch.add_column(sa.Column("request_fingerprint", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("retry_of", sa.String(length=36), nullable=True))
        batch.add_column(sa.Column("attempt", sa.Integer(), nullable=True))
        batch.create_index("ix_streams_retry_of", ["retry_of"])


def downgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.drop_index("ix_streams_retry_of")
        for name in (
            "attempt",
            "retry_of",
            "request_fingerprint",
            "tags",
            "prompt_cache_key",
            "session_id",
            "user_id",
        ):
            batch.drop_column(name)
