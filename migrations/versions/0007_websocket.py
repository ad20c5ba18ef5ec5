"""streams: OpenAI over a WebSocket (issue 31)

Seven nullable columns on streams (additive; rows written before keep nulls):
``connection_id``, the WebSocket connection a response came on; the modality
parts of the token figures (``input_audio_tokens``, ``cache_read_audio_tokens``,
``input_image_tokens``, ``cache_read_image_tokens``, ``output_audio_tokens``);
``output_audio_ms``, the length of a Realtime response's output audio.

Revision ID: 0007_websocket
Revises: 0004_content_mismatch
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_websocket"
down_revision: str | None = "0004_content_mismatch"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TOKENS = (
    "input_audio_tokens",
    "cache_read_audio_tokens",
    "input_image_tokens",
    "cache_read_image_tokens",
    "output_audio_tokens",
)


def upgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.add_column(sa.Column("connection_id", sa.String(length=64), nullable=True))
        for name in _TOKENS:
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("output_audio_ms", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.drop_column("output_audio_ms")
        for name in reversed(_TOKENS):
            batch.drop_column(name)
        batch.drop_column("connection_id")
