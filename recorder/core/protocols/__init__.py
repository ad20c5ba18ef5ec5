"""Protocol interpreters, one per endpoint, chosen from a table.

Each turns framed SSE events into facts (output deltas, tool calls, finish
reason, usage, errors, the terminal event) accumulated on an
:class:`~recorder.core.protocols.observations.Observations`.
"""

from recorder.core.protocols.base import Interpreter
from recorder.core.protocols.chat import ChatCompletionsInterpreter
from recorder.core.protocols.converse import ConverseInterpreter
from recorder.core.protocols.gemini import GeminiInterpreter
from recorder.core.protocols.interactions import InteractionsInterpreter
from recorder.core.protocols.invoke_model import InvokeModelInterpreter
from recorder.core.protocols.messages import AnthropicMessagesInterpreter
from recorder.core.protocols.observations import Observations
from recorder.core.protocols.realtime import RealtimeInterpreter
from recorder.core.protocols.responses import ResponsesInterpreter

INTERPRETERS: dict[str, type[Interpreter]] = {
    "chat.completions": ChatCompletionsInterpreter,
    "responses": ResponsesInterpreter,
    "messages": AnthropicMessagesInterpreter,
    "realtime": RealtimeInterpreter,  # over a WebSocket only (recorder.core.websocket)
    "converse": ConverseInterpreter,  # Amazon Bedrock
    "invoke_model": InvokeModelInterpreter,  # Amazon Bedrock
    "generate_content": GeminiInterpreter,  # Gemini's and Vertex AI's generateContent
    "interactions": InteractionsInterpreter,  # Google's Interactions API
}
# the endpoints whose streams are AWS's binary event stream (recorder.core.eventstream)
EVENTSTREAM_ENDPOINTS = frozenset({"converse", "invoke_model"})
ENDPOINTS = tuple(INTERPRETERS)
PROVIDERS = {name: cls.provider for name, cls in INTERPRETERS.items()}


def interpreter_for(endpoint: str) -> Interpreter:
    """A fresh interpreter for ``endpoint``; ``KeyError`` if there is none."""
    return INTERPRETERS[endpoint]()


__all__ = [
    "ENDPOINTS",
    "EVENTSTREAM_ENDPOINTS",
    "INTERPRETERS",
    "PROVIDERS",
    "Interpreter",
    "Observations",
    "interpreter_for",
]
