"""The sans-IO core: SSE framing, protocol interpretation, metering.

Nothing here reads a clock, touches a socket or a database, or imports
mitmproxy, SQLAlchemy or prometheus_client (a ruff rule in this folder's
ruff.toml enforces it), so every stream can be metered offline and tested with
fixed timestamps.
"""

from recorder.core.framing import Comment, Event, FramingIssue
from recorder.core.meter import StreamMeter
from recorder.core.record import FIELDS, Gap, StreamRecord
from recorder.core.sse import SSEFramer

__all__ = [
    "FIELDS",
    "Comment",
    "Event",
    "FramingIssue",
    "Gap",
    "SSEFramer",
    "StreamMeter",
    "StreamRecord",
]
