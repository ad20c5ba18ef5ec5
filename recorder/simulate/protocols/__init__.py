"""The three wire protocols: the chosen answer as SSE events or as a JSON body.

Shapes follow real captured streams (tests/fixtures/) and the official SDKs'
decoders: Chat chunks with a role chunk first, ``usage: null`` on every chunk
when ``stream_options.include_usage`` is set and a last ``choices: []`` chunk
with the usage, then ``data: [DONE]``; Responses events with ``event:`` lines
and ``sequence_number``; Anthropic ``message_start`` (exact input usage,
provisional ``output_tokens: 1``), content blocks, ``ping``, a cumulative
``message_delta`` and ``message_stop``.

Every event carries its own ground truth (output characters and tokens, tool
calls started, finish reason, usage, terminal kind) so the server can add up
what it really sent, whatever fault cut the stream short.
"""

from __future__ import annotations

from recorder.simulate.content import Content, Ids
from recorder.simulate.faults import Faults
from recorder.simulate.prompts import Prompt
from recorder.simulate.protocols.base import (
    INTERRUPTED_MESSAGE,
    Builder,
    Reply,
    SimEvent,
    SimUsage,
    http_error_body,
)
from recorder.simulate.protocols.bedrock import ConverseBuilder, InvokeModelBuilder
from recorder.simulate.protocols.chat import ChatBuilder
from recorder.simulate.protocols.gemini import GeminiBuilder
from recorder.simulate.protocols.interactions import InteractionsBuilder
from recorder.simulate.protocols.messages import MessagesBuilder
from recorder.simulate.protocols.realtime import RealtimeBuilder
from recorder.simulate.protocols.responses import ResponsesBuilder

__all__ = [
    "BEDROCK",
    "BUILDERS",
    "INTERRUPTED_MESSAGE",
    "Builder",
    "Reply",
    "SimEvent",
    "SimUsage",
    "http_error_body",
    "plan",
]


BUILDERS: dict[str, type[Builder]] = {
    "chat.completions": ChatBuilder,
    "responses": ResponsesBuilder,
    "messages": MessagesBuilder,
    "realtime": RealtimeBuilder,  # over a WebSocket only (recorder.simulate.ws_session)
    "converse": ConverseBuilder,  # Amazon Bedrock, an AWS event stream
    "invoke_model": InvokeModelBuilder,  # Amazon Bedrock, an AWS event stream
    "generate_content": GeminiBuilder,  # Gemini's API and Vertex AI's
    "interactions": InteractionsBuilder,  # Gemini's Interactions API
}
BEDROCK = frozenset({"converse", "invoke_model"})


def plan(p: Prompt, c: Content, ids: Ids, faults: Faults) -> tuple[Reply, list[SimEvent]]:
    """The reply, and the events to stream once error faults are applied."""
    builder = BUILDERS[p.endpoint](p, c, ids, faults)
    reply = builder.reply()
    events = list(reply.events)
    at: int | None = None
    interrupt = False
    if faults.interrupt_after is not None:
        at, interrupt = faults.interrupt_after, True
    elif faults.error_after is not None:
        at = faults.error_after
    if at is not None:
        at = min(at, len(events) - 1)
        events = events[:at] + builder.error_events(interrupt)
    builder.finalize(events)
    return reply, events
