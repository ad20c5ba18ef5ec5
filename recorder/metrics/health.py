"""The recorder's own health: counters an operator can read (and, with the
metrics issue, scrape). Plain integers updated from one event loop."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(slots=True)
class Health:
    """Counters of what the recorder did and what went wrong inside it."""

    records: int = 0  # finished records handed to the sink
    internal_errors: int = 0  # exceptions caught in hooks and the stream tap
    parse_issues: int = 0  # malformed events (from finished records)
    decode_errors: int = 0  # compressed bodies that could not be decoded on the side
    in_flight: int = 0  # streams open right now
    # issue 31: WebSocket connections to a metered endpoint that ended, and those of
    # them that carried no response (no record was made of them)
    websocket_connections: int = 0
    websocket_connections_without_response: int = 0

    def snapshot(self) -> dict[str, Any]:
        """A copy of the counters."""
        return asdict(self)
