"""The estimator's calibration, kept by the store's own completed streams.

Every stored stream whose usage was reported keeps what calibration learns
from: its token counts, its output and input breakdowns (counts, never text)
and its timings. So the calibration needs no state of its own: a proxy that
starts warms its estimator by replaying the most recent such streams through
``Estimator.observe``, exactly as it would have learned them live. A restart
(even after ``kill -9``) keeps everything that was written, and every proxy
sharing one database learns from all of their streams.
"""

from __future__ import annotations

from sqlalchemy import Engine, select
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from recorder.core.estimate import Estimator
from recorder.core.record import StreamRecord
from recorder.store.engine import make_engine
from recorder.store.models import STREAMS

# what Estimator.observe reads of a record
_COLUMNS = (
    "model",
    "response_model",
    "endpoint",
    "output_source",
    "input_source",
    "output_tokens",
    "input_tokens",
    "reasoning_tokens",
    "tool_calls",
    "output_breakdown",
    "input_breakdown",
    "first_event_ms",
    "ttft_ms",
    "duration_ms",
    "usage_parts",
)

# The newest streams taught: enough to fill every window of a few dozen models
# and kinds, read in one indexed query at start-up.
WARM_LIMIT = 5000


def warm_estimator(engine: Engine, estimator: Estimator, *, limit: int = WARM_LIMIT) -> int:
    """Teach ``estimator`` the newest ``limit`` stored streams whose usage was
    reported, oldest first; return how many were read (a malformed row is skipped)."""
    stmt = (
        select(*(STREAMS.c[name] for name in _COLUMNS))
        .where(STREAMS.c.usage_source.in_(("reported", "mixed")))
        .order_by(STREAMS.c.started_at.desc())
        .limit(limit)
    )
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    taught = 0
    for row in reversed(rows):
        values = dict(zip(_COLUMNS, row, strict=True))
        values["tool_calls"] = values["tool_calls"] or 0
        try:
            estimator.observe(StreamRecord(**values))
        except (TypeError, ValueError, AttributeError):
            continue  # a row edited by hand into something else: it teaches nothing
        taught += 1
    return taught


def warm_from(url: str | URL, estimator: Estimator, *, limit: int = WARM_LIMIT) -> int | None:
    """:func:`warm_estimator` on the database at ``url``; None when it cannot be read
    (unreachable, or no schema yet): the estimator then starts from its defaults."""
    try:
        engine = make_engine(url)
    except SQLAlchemyError:
        return None
    try:
        return warm_estimator(engine, estimator, limit=limit)
    except SQLAlchemyError:
        return None
    finally:
        engine.dispose()
