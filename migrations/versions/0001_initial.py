"""streams, stream_gaps, settings

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The column types as the database sees them (recorder.store.models wraps them:
# UTCDateTime, Money). Spelled out here so this script never changes with the code.
UTC_DATETIME = sa.DateTime(timezone=True)
MONEY = sa.Numeric(24, 12).with_variant(sa.String(40), "sqlite")
JSON_DOC = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
)


def upgrade() -> None:
    op.create_table(
        "settings",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_settings")),
    )
    op.create_table(
        "streams",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("started_at", UTC_DATETIME, nullable=False),
        sa.Column("endpoint", sa.String(length=32), nullable=True),
        sa.Column("provider", sa.String(length=32), nullable=True),
        sa.Column("upstream", sa.String(length=255), nullable=True),
        sa.Column("model", sa.String(length=255), nullable=True),
        sa.Column("response_model", sa.String(length=255), nullable=True),
        sa.Column("request_id", sa.String(length=255), nullable=True),
        sa.Column("response_id", sa.String(length=255), nullable=True),
        sa.Column("project", sa.String(length=255), nullable=True),
        sa.Column("streamed", sa.Boolean(), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("interrupted", sa.Boolean(), nullable=False),
        sa.Column("finish_reason", sa.String(length=64), nullable=True),
        sa.Column("error_type", sa.String(length=255), nullable=True),
        sa.Column("error_code", sa.String(length=255), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("ttfb_ms", sa.Double(), nullable=True),
        sa.Column("first_event_ms", sa.Double(), nullable=True),
        sa.Column("ttft_ms", sa.Double(), nullable=True),
        sa.Column("duration_ms", sa.Double(), nullable=True),
        sa.Column("events", sa.Integer(), nullable=True),
        sa.Column("keepalives", sa.Integer(), nullable=True),
        sa.Column("max_keepalive_gap_ms", sa.Double(), nullable=True),
        sa.Column("max_silence_ms", sa.Double(), nullable=True),
        sa.Column("max_output_gap_ms", sa.Double(), nullable=True),
        sa.Column("stalls", sa.Integer(), nullable=True),
        sa.Column("stall_ms", sa.Double(), nullable=True),
        sa.Column("output_chars", sa.BigInteger(), nullable=False),
        sa.Column("tool_calls", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=True),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=True),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=True),
        sa.Column("output_tokens", sa.BigInteger(), nullable=True),
        sa.Column("reasoning_tokens", sa.BigInteger(), nullable=True),
        sa.Column("input_source", sa.String(length=16), nullable=False),
        sa.Column("output_source", sa.String(length=16), nullable=False),
        sa.Column("usage_source", sa.String(length=16), nullable=False),
        sa.Column("estimate_method", sa.String(length=64), nullable=True),
        sa.Column("cost_usd", MONEY, nullable=True),
        sa.Column("price_version", sa.String(length=255), nullable=True),
        sa.Column("api_key_id", sa.String(length=64), nullable=True),
        sa.Column("organization", sa.String(length=255), nullable=True),
        sa.Column("include_usage", sa.Boolean(), nullable=True),
        sa.Column("max_output_tokens", sa.BigInteger(), nullable=True),
        sa.Column("parse_issues", sa.Integer(), nullable=False),
        sa.Column("oversized_events", sa.Integer(), nullable=False),
        sa.Column("partial_event_at_end", sa.Boolean(), nullable=False),
        sa.Column("transport_error", sa.Text(), nullable=True),
        sa.Column("recorder_error", sa.Text(), nullable=True),
        sa.Column("raw_usage", JSON_DOC, nullable=True),
        sa.Column("service_tier", sa.String(length=32), nullable=True),
        sa.Column("cache_write_5m_tokens", sa.BigInteger(), nullable=True),
        sa.Column("cache_write_1h_tokens", sa.BigInteger(), nullable=True),
        sa.Column("server_tool_requests", JSON_DOC, nullable=True),
        sa.Column("output_breakdown", JSON_DOC, nullable=True),
        sa.Column("input_breakdown", JSON_DOC, nullable=True),
        sa.Column("ended_at", UTC_DATETIME, nullable=True),
        sa.Column("recorded_at", UTC_DATETIME, nullable=False),
        sa.Column("recorder_version", sa.String(length=32), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_streams")),
    )
    op.create_index("ix_streams_started_at", "streams", ["started_at"])
    op.create_index("ix_streams_model_started_at", "streams", ["model", "started_at"])
    op.create_index("ix_streams_api_key_id_started_at", "streams", ["api_key_id", "started_at"])
    op.create_index("ix_streams_outcome_started_at", "streams", ["outcome", "started_at"])
    op.create_index("ix_streams_endpoint_started_at", "streams", ["endpoint", "started_at"])
    op.create_table(
        "stream_gaps",
        sa.Column("stream_id", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("start_ms", sa.Double(), nullable=False),
        sa.Column("length_ms", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["stream_id"],
            ["streams.id"],
            name=op.f("fk_stream_gaps_stream_id_streams"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("stream_id", "seq", name=op.f("pk_stream_gaps")),
    )


def downgrade() -> None:
    op.drop_table("stream_gaps")
    op.drop_index("ix_streams_endpoint_started_at", table_name="streams")
    op.drop_index("ix_streams_outcome_started_at", table_name="streams")
    op.drop_index("ix_streams_api_key_id_started_at", table_name="streams")
    op.drop_index("ix_streams_model_started_at", table_name="streams")
    op.drop_index("ix_streams_started_at", table_name="streams")
    op.drop_table("streams")
    op.drop_table("settings")
