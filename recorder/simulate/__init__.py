"""`recorder simulate`: a local upstream speaking the LLM streaming protocols.

OpenAI Chat Completions, OpenAI Responses and Anthropic Messages (and Amazon
Bedrock's, Gemini's generateContent and Google's Interactions API), streamed
(SSE) or not, with faults chosen per request (the ``x-sim-fault`` header or a
``+fault`` suffix on the model name): keepalive comments, stalls, resets,
unfinished bodies, error events after status 200, HTTP error statuses,
compression, odd line ends, one byte per write. Content is deterministic (the
same request gives the same bytes) and every request's ground truth is kept in
:attr:`Simulator.sent`, so end-to-end tests can check what the recorder saw
against what was really sent. See docs/simulator.md.
"""

from recorder.simulate.faults import FAULT_HELP, FaultError, Faults, parse_faults
from recorder.simulate.in_thread import run_in_thread
from recorder.simulate.server import SentRecord, Simulator
from recorder.simulate.tls import server_context

__all__ = [
    "FAULT_HELP",
    "FaultError",
    "Faults",
    "SentRecord",
    "Simulator",
    "parse_faults",
    "run_in_thread",
    "server_context",
]
