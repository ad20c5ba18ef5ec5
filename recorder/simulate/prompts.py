"""Reading requests: the body of each protocol's request as one :class:`Prompt`.

What the simulator needs from a request, whatever the protocol: the model (and
its fault suffix), streaming and ``include_usage``, the conversation as text,
the tools offered and ``tool_choice``, reasoning, the output cap, and the
prompt's characters that the input token rule counts (docs/simulator.md). A
body it cannot answer raises :class:`BadRequest` (the client gets a 400).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import orjson

from recorder.simulate.faults import split_model


class BadRequest(ValueError):
    """A request body the simulator cannot answer (the client gets a 400)."""


@dataclass(slots=True)
class ToolSpec:
    """A function tool offered by the request."""

    name: str
    schema: dict[str, Any]


@dataclass(slots=True)
class Prompt:
    """What the simulator needs from a request body, whatever the protocol."""

    endpoint: str
    requested_model: str
    model: str
    model_faults: str
    stream: bool
    include_usage: bool = False
    messages: list[tuple[str, str]] = field(default_factory=list)
    last_user: str = ""
    after_tool_result: bool = False
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: str | None = None  # None/"auto", "none", "required", or a tool name
    reasoning: bool = False
    max_tokens: int | None = None
    prompt_chars: int = 0
    body: dict[str, Any] = field(default_factory=dict)

    def seed(self) -> bytes:
        """The content seed: model and conversation, nothing about streaming or faults."""
        doc = [self.model, self.messages, [t.name for t in self.tools]]
        return hashlib.sha256(orjson.dumps(doc)).digest()


def _text_of(content: Any) -> str:
    """The text of a message content: a string, or a list of parts/blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                for key in ("text", "output", "content", "thinking"):
                    value = part.get(key)
                    if isinstance(value, str):
                        out.append(value)
                        break
                    if key == "content" and isinstance(value, list):
                        out.append(_text_of(value))
                        break
        return "\n".join(out)
    return ""


def _prompt(endpoint: str, body: dict[str, Any]) -> Prompt:
    """The prompt of a request to ``endpoint``, with its model (and the faults the
    model's name asks for) and whether it streams; the caller reads the rest."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("you must provide a model parameter")
    base, suffix = split_model(model)
    return Prompt(
        endpoint=endpoint,
        requested_model=model,
        model=base,
        model_faults=suffix,
        stream=body.get("stream") is True,
        body=body,
    )


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _finish_prompt(p: Prompt, extra_chars: int) -> Prompt:
    p.prompt_chars = extra_chars + sum(len(text) for _, text in p.messages)
    p.prompt_chars += sum(len(orjson.dumps(t.schema)) + len(t.name) for t in p.tools)
    users = [text for role, text in p.messages if role == "user"]
    p.last_user = users[-1] if users else ""
    return p


def prompt_from_chat(body: dict[str, Any]) -> Prompt:
    """Read a Chat Completions request."""
    p = _prompt("chat.completions", body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array")
    options = body.get("stream_options")
    p.include_usage = isinstance(options, dict) and options.get("include_usage") is True
    for m in messages:
        if not isinstance(m, dict):
            raise BadRequest("each message must be an object")
        role = str(m.get("role", "user"))
        text = _text_of(m.get("content"))
        if role == "assistant" and isinstance(m.get("tool_calls"), list):
            text += orjson.dumps(m["tool_calls"]).decode()
        p.messages.append((role, text))
    last = messages[-1]
    p.after_tool_result = isinstance(last, dict) and last.get("role") in ("tool", "function")
    for t in body.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            p.tools.append(ToolSpec(fn["name"], params if isinstance(params, dict) else {}))
    choice = body.get("tool_choice")
    if isinstance(choice, str):
        p.tool_choice = choice
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        p.tool_choice = str(choice["function"].get("name"))
    p.reasoning = "reasoner" in p.model or "-r1" in p.model
    p.max_tokens = _int_or_none(body.get("max_completion_tokens")) or _int_or_none(
        body.get("max_tokens")
    )
    return _finish_prompt(p, 0)


def prompt_from_responses(body: dict[str, Any]) -> Prompt:
    """Read a Responses request."""
    p = _prompt("responses", body)
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise BadRequest("'input' must be a string or a non-empty array")
    for item in items:
        if isinstance(item, str):
            p.messages.append(("user", item))
            continue
        if not isinstance(item, dict):
            raise BadRequest("each input item must be an object")
        kind = item.get("type", "message")
        if kind == "message" or "role" in item:
            p.messages.append((str(item.get("role", "user")), _text_of(item.get("content"))))
        elif kind == "function_call_output":
            output = item.get("output")
            p.messages.append(("tool", output if isinstance(output, str) else _text_of(output)))
        else:
            p.messages.append((str(kind), orjson.dumps(item).decode()))
    last = items[-1]
    p.after_tool_result = isinstance(last, dict) and last.get("type") == "function_call_output"
    for t in body.get("tools") or []:
        if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("name"), str):
            params = t.get("parameters")
            p.tools.append(ToolSpec(t["name"], params if isinstance(params, dict) else {}))
    choice = body.get("tool_choice")
    if isinstance(choice, str):
        p.tool_choice = choice
    elif isinstance(choice, dict) and isinstance(choice.get("name"), str):
        p.tool_choice = choice["name"]
    reasoning = body.get("reasoning")
    p.reasoning = isinstance(reasoning, dict) and reasoning.get("summary") is not None
    p.max_tokens = _int_or_none(body.get("max_output_tokens"))
    instructions = body.get("instructions")
    return _finish_prompt(p, len(instructions) if isinstance(instructions, str) else 0)


def prompt_from_messages(body: dict[str, Any]) -> Prompt:
    """Read an Anthropic Messages request."""
    p = _prompt("messages", body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: field required")
    for m in messages:
        if not isinstance(m, dict):
            raise BadRequest("messages: each message must be an object")
        p.messages.append((str(m.get("role", "user")), _text_of(m.get("content"))))
    last = messages[-1]
    content = last.get("content") if isinstance(last, dict) else None
    p.after_tool_result = isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )
    for t in body.get("tools") or []:
        if isinstance(t, dict) and isinstance(t.get("name"), str) and "input_schema" in t:
            schema = t.get("input_schema")
            p.tools.append(ToolSpec(t["name"], schema if isinstance(schema, dict) else {}))
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "tool" and isinstance(choice.get("name"), str):
            p.tool_choice = choice["name"]
        elif kind == "any":
            p.tool_choice = "required"
        elif kind in ("none", "auto"):
            p.tool_choice = str(kind)
    thinking = body.get("thinking")
    p.reasoning = isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
    p.max_tokens = _int_or_none(body.get("max_tokens"))
    system = _text_of(body.get("system"))
    return _finish_prompt(p, len(system))


def prompt_from_gemini(body: dict[str, Any]) -> Prompt:
    """Read a generateContent request (its model, stream and ``alt`` put in the
    body from the path by :func:`gemini_request`)."""
    p = _prompt("generate_content", body)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise BadRequest("* GenerateContentRequest.contents: contents is not specified")
    for m in contents:
        if not isinstance(m, dict):
            raise BadRequest("contents: each content must be an object")
        parts = m.get("parts")
        text = _text_of(parts) if isinstance(parts, list) else ""
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, dict) and isinstance(part.get("functionCall"), dict):
                    text += orjson.dumps(part["functionCall"]).decode()
        p.messages.append((str(m.get("role", "user")), text))
    last = contents[-1]
    last_parts = last.get("parts") if isinstance(last, dict) else None
    p.after_tool_result = isinstance(last_parts, list) and any(
        isinstance(part, dict) and "functionResponse" in part for part in last_parts
    )
    for tool in body.get("tools") or []:
        for fn in (tool.get("functionDeclarations") or []) if isinstance(tool, dict) else []:
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                schema = fn.get("parameters") or fn.get("parametersJsonSchema")
                p.tools.append(ToolSpec(fn["name"], schema if isinstance(schema, dict) else {}))
    config = body.get("generationConfig")
    config = config if isinstance(config, dict) else {}
    thinking = config.get("thinkingConfig")
    p.reasoning = isinstance(thinking, dict) and bool(
        thinking.get("includeThoughts") or thinking.get("include_thoughts")
    )
    p.max_tokens = _int_or_none(config.get("maxOutputTokens"))
    system = body.get("systemInstruction")
    parts = system.get("parts") if isinstance(system, dict) else None
    return _finish_prompt(p, len(_text_of(parts)) if isinstance(parts, list) else 0)


def prompt_from_interactions(body: dict[str, Any]) -> Prompt:
    """Read an Interactions request (``POST /v1beta/interactions``): ``input`` a
    string, a list of content blocks, or a list of steps (``user_input`` with its
    content, ``function_call``, ``function_result``); ``system_instruction`` a
    string; function tools ``{"type": "function", "name", "parameters"}``."""
    p = _prompt("interactions", body)
    items = body.get("input")
    if isinstance(items, (str, dict)):
        items = [items]
    if not isinstance(items, list) or not items:
        raise BadRequest("input: must be a string, a content or a non-empty list")
    blocks: list[str] = []
    for item in items:
        if isinstance(item, str):
            blocks.append(item)
        elif not isinstance(item, dict):
            raise BadRequest("input: each item must be an object or a string")
        elif item.get("type") in ("text", None) and isinstance(item.get("text"), str):
            blocks.append(item["text"])  # a content block of the one user turn
        else:
            if blocks:
                p.messages.append(("user", "\n".join(blocks)))
                blocks = []
            kind = str(item.get("type", "user_input"))
            text = _text_of(item.get("content"))
            if kind != "user_input":
                text = orjson.dumps(item).decode()
            p.messages.append(("user" if kind == "user_input" else kind, text))
    if blocks:
        p.messages.append(("user", "\n".join(blocks)))
    last = items[-1]
    p.after_tool_result = isinstance(last, dict) and last.get("type") == "function_result"
    for t in body.get("tools") or []:
        if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("name"), str):
            params = t.get("parameters")
            p.tools.append(ToolSpec(t["name"], params if isinstance(params, dict) else {}))
    config = body.get("generation_config")
    config = config if isinstance(config, dict) else {}
    choice = config.get("tool_choice")
    if isinstance(choice, str):
        p.tool_choice = {"any": "required", "validated": "required"}.get(choice, choice)
    p.reasoning = config.get("thinking_summaries") == "auto"
    p.max_tokens = _int_or_none(config.get("max_output_tokens"))
    system = body.get("system_instruction")
    return _finish_prompt(p, len(system) if isinstance(system, str) else 0)


def request_document(endpoint: str, body: bytes, path: str, target: str) -> dict[str, Any] | None:
    """The request's JSON object as the endpoint's reader takes it (Bedrock and Google
    name the model and the stream in the path: ``path`` without its query, ``target``
    with it); None when the body is not a JSON object."""
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    if endpoint in ("converse", "invoke_model"):
        return bedrock_request(path, doc)
    if endpoint == "generate_content":
        return gemini_request(target, doc)
    return doc


def gemini_request(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A generateContent body with what its path says: the model, whether it
    streams, and ``alt`` (``sse``, or none: a JSON array)."""
    bare, _, query = path.partition("?")
    name, _, verb = bare.rstrip("/").rpartition(":")
    model = unquote(name.rsplit("/", 1)[-1])
    alt = next((v for k, _, v in (q.partition("=") for q in query.split("&")) if k == "alt"), None)
    return {**body, "model": model, "stream": verb == "streamGenerateContent", "alt": alt}


ENDPOINTS = ("chat.completions", "responses", "messages", "generate_content", "interactions")
_GOOGLE_VERBS = (":streamGenerateContent", ":generateContent")
_INTERACTIONS = ("/v1beta/interactions", "/v1/interactions")


# Amazon Bedrock's runtime actions: /model/{modelId}/<action>
BEDROCK_ACTIONS = {
    "converse-stream": ("converse", True),
    "converse": ("converse", False),
    "invoke-with-response-stream": ("invoke_model", True),
    "invoke": ("invoke_model", False),
}


def bedrock_request(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A Bedrock request body with what its path says: the model (URL-decoded) and
    whether it streams, as the other protocols' bodies say them."""
    from urllib.parse import unquote

    head, _, action = path.split("?", 1)[0].rstrip("/").rpartition("/")
    model = unquote(head.partition("/model/")[2])
    return {**body, "model": model, "stream": BEDROCK_ACTIONS[action][1]}


def prompt_from_converse(body: dict[str, Any]) -> Prompt:
    """Read a Bedrock Converse request (its model and stream flag from the path)."""
    p = _prompt("converse", body)
    p.stream = body.get("stream") is True
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: field required")
    for m in messages:
        if not isinstance(m, dict):
            raise BadRequest("each message must be an object")
        p.messages.append((str(m.get("role", "user")), _text_of(m.get("content"))))
    config = body.get("toolConfig")
    for t in (config.get("tools") if isinstance(config, dict) else None) or []:
        spec = t.get("toolSpec") if isinstance(t, dict) else None
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            schema = spec.get("inputSchema")
            schema = schema.get("json") if isinstance(schema, dict) else None
            p.tools.append(ToolSpec(spec["name"], schema if isinstance(schema, dict) else {}))
    inference = body.get("inferenceConfig")
    if isinstance(inference, dict):
        p.max_tokens = _int_or_none(inference.get("maxTokens"))
    return _finish_prompt(p, len(_text_of(body.get("system"))))


def prompt_from_invoke(body: dict[str, Any]) -> Prompt:
    """Read a Bedrock InvokeModel request for an Anthropic model (a Messages body)."""
    p = prompt_from_messages(body)
    p.endpoint = "invoke_model"
    return p


def endpoint_of(path: str) -> str | None:
    """The protocol a request path speaks, by its ending (any prefix is fine)."""
    path = path.split("?", 1)[0].rstrip("/")
    head, _, action = path.rpartition("/")
    if action in BEDROCK_ACTIONS and "/model/" in head:
        return BEDROCK_ACTIONS[action][0]
    if path.endswith(_GOOGLE_VERBS) and "/models/" in path:
        return "generate_content"
    if path.endswith(_INTERACTIONS):
        return "interactions"
    if path.endswith("/chat/completions"):
        return "chat.completions"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "messages"
    return None


READERS = {
    "chat.completions": prompt_from_chat,
    "responses": prompt_from_responses,
    "messages": prompt_from_messages,
    "converse": prompt_from_converse,
    "invoke_model": prompt_from_invoke,
    "generate_content": prompt_from_gemini,
    "interactions": prompt_from_interactions,
}
