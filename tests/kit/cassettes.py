"""Read the response bodies of others' recorded captures, and frame payload-only
Bedrock captures as the wire carries them.

The captures come in the forms their projects keep them in (see the
PROVENANCE.md next to each): VCR cassettes (``response.body.string`` as text or
as ``!!binary`` base64, or pydantic-ai's ``parsed_body``, the JSON body decoded
into YAML), bare base64 text, and one JSON event a line. This module knows
nothing about recorder: the event-stream framing below is written from AWS's
specification (a prelude of two big-endian lengths and its CRC32, the headers,
the payload, the message's CRC32) and checked against botocore's decoder by the
tests that use it.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML


def _cassette(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = YAML(typ="safe").load(path.read_text())
    return doc


def vcr_responses(path: Path) -> list[dict[str, Any]]:
    """Every recorded response of a VCR cassette, in order."""
    return [i["response"] for i in _cassette(path)["interactions"]]


def vcr_response(path: Path, n: int = -1) -> dict[str, Any]:
    """The ``n``-th recorded response of a VCR cassette (the last by default)."""
    response: dict[str, Any] = _cassette(path)["interactions"][n]["response"]
    return response


def vcr_body(path: Path, n: int = -1) -> bytes:
    """A recorded response's body as the wire carried it.

    A ``parsed_body`` (pydantic-ai keeps JSON bodies decoded) is written back as
    compact JSON: the same document, not the same bytes."""
    response = vcr_response(path, n)
    if "parsed_body" in response:
        return json.dumps(response["parsed_body"], separators=(",", ":")).encode()
    body = response["body"]["string"]
    return body if isinstance(body, bytes) else body.encode()


def base64_body(path: Path) -> bytes:
    """A body kept as base64 text (line breaks ignored)."""
    return base64.b64decode("".join(path.read_text().split()))


def json_lines(path: Path) -> list[bytes]:
    """One JSON document a non-blank line, as bytes."""
    return [line for line in path.read_bytes().splitlines() if line.strip()]


# -- AWS event stream ------------------------------------------------------------


def _header(name: str, value: str) -> bytes:
    key, val = name.encode(), value.encode()
    return bytes([len(key)]) + key + b"\x07" + struct.pack(">H", len(val)) + val


def event_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string-valued headers."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", zlib.crc32(body))


def converse_stream(events: list[bytes]) -> bytes:
    """ConverseStream's wire from payload-only events, each ``{"<eventType>": {...}}``
    (how the AWS SDKs print them): the event type as the ``:event-type`` header,
    the inner object as the payload."""
    out = []
    for line in events:
        ((kind, inner),) = json.loads(line).items()
        headers = {
            ":event-type": kind,
            ":content-type": "application/json",
            ":message-type": "event",
        }
        out.append(event_message(headers, json.dumps(inner, separators=(",", ":")).encode()))
    return b"".join(out)


def invoke_stream(chunks: list[bytes]) -> bytes:
    """InvokeModelWithResponseStream's wire from the model's own JSON chunks: each
    base64-encoded in a ``chunk`` event's ``bytes``."""
    headers = {
        ":event-type": "chunk",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return b"".join(
        event_message(headers, json.dumps({"bytes": base64.b64encode(c).decode()}).encode())
        for c in chunks
    )
