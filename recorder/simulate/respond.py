"""Writing one response: its headers, its scripted body (compressed and framed),
the cuts that faults ask for, and an HTTP error status with the provider's body.

Every function here takes ``finish``, the server's way to settle the request's
:class:`~recorder.simulate.sent.SentRecord` (outcome, duration, the log line) at
the moment the response is over, before the connection is closed or reset, so a
client never sees the end of a response whose record is still open.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from recorder.simulate import wire
from recorder.simulate.faults import Faults
from recorder.simulate.http1 import Conn, Request, status_head
from recorder.simulate.protocols import BEDROCK, http_error_body
from recorder.simulate.protocols.bedrock import CONTENT_TYPE as BEDROCK_CONTENT_TYPE
from recorder.simulate.script import Step
from recorder.simulate.sent import SentRecord, account

Finish = Callable[[SentRecord], None]


def negotiated_coding(faults: Faults, req: Request) -> str:
    """The content coding the faults ask for (``compress``: what the client accepts)."""
    if faults.compress == "auto":
        return wire.negotiate(req.headers.get("accept-encoding"))
    return faults.compress or "identity"


def provider_headers(rec: SentRecord) -> list[tuple[str, str]]:
    """The provider's request id headers, and the simulator's own."""
    if rec.endpoint == "messages":
        headers = [("request-id", rec.request_id)]
    elif rec.endpoint in BEDROCK:
        headers = [("x-amzn-requestid", rec.request_id)]
    else:
        headers = [("x-request-id", rec.request_id), ("openai-version", "2020-10-01")]
    return [*headers, ("x-sim-request", rec.request_id)]


def invocation_headers(rec: SentRecord) -> list[tuple[str, str]]:
    """Bedrock's metrics of a non-streamed InvokeModel answer, as its headers carry
    them (the input count without the cache reads and writes)."""
    usage = rec.planned_usage
    if not usage or usage.get("input_tokens") is None:
        return []
    total_in = usage["input_tokens"] or 0
    read = usage.get("cache_read_tokens") or 0
    write = usage.get("cache_write_tokens") or 0
    headers = [
        ("x-amzn-bedrock-input-token-count", str(total_in - read - write)),
        ("x-amzn-bedrock-invocation-latency", str(INVOCATION_LATENCY_MS)),
    ]
    if usage.get("output_tokens") is not None:
        headers.append(("x-amzn-bedrock-output-token-count", str(usage["output_tokens"])))
    return headers


INVOCATION_LATENCY_MS = 120  # what the simulated Bedrock says a non-streamed answer took


@dataclass(slots=True)
class Body:
    """How a response body goes on the wire."""

    steps: list[Step]
    cut_index: int | None  # the step where a cut falls
    coding: str
    framing: str  # chunked | length | eof
    stream: bool
    keep: bool  # the connection stays open after it
    array: bool = False  # a stream written as one JSON array (Google's, without alt=sse)

    def headers(self, rec: SentRecord) -> list[tuple[str, str]]:
        """The response headers for this body."""
        ctype = "text/event-stream; charset=utf-8" if self.stream else "application/json"
        if self.stream and rec.endpoint in BEDROCK:
            ctype = BEDROCK_CONTENT_TYPE
        elif self.array:
            ctype = "application/json; charset=UTF-8"
        headers = [("content-type", ctype)]
        if self.stream:
            headers.append(("cache-control", "no-cache"))
        headers += provider_headers(rec)
        if not self.stream and rec.endpoint == "invoke_model":
            headers += invocation_headers(rec)
        if self.coding != "identity":
            headers.append(("content-encoding", self.coding))
        if self.framing == "chunked":
            headers.append(("transfer-encoding", "chunked"))
        elif self.framing == "length":
            probe = wire.Encoder(self.coding)
            total = sum(len(probe.piece(s.raw)) for s in self.steps if s.kind != "end")
            headers.append(("content-length", str(total + len(probe.finish()))))
        headers.append(("connection", "keep-alive" if self.keep else "close"))
        headers.append(("server", "recorder-simulate"))
        return headers


async def write_response(
    conn: Conn, rec: SentRecord, body: Body, faults: Faults, head_wait: float, finish: Finish
) -> bool:
    """Status 200 after ``head_wait`` seconds, then the body step by step, cut where the
    faults say; return whether the connection stays open."""
    headers = body.headers(rec)
    await conn.sleep(head_wait)
    await conn.send(status_head(200, headers))
    rec.http_status = 200
    rec.headers_ms = rec.elapsed_ms()
    head_bytes = conn.written
    encoder = wire.Encoder(body.coding)
    framing = body.framing
    kept = rec.body

    async def write(data: bytes) -> None:
        if not data:
            return
        if kept is not None:
            # before the write: a client may have read it before send() returns
            kept.extend(data)
        if framing != "chunked":
            await conn.send(data)
        elif conn.bytewise is None:
            await conn.send(wire.chunk(data))
        else:
            for i in range(len(data)):
                await conn.send(wire.chunk(data[i : i + 1]))

    for index, step in enumerate(body.steps):
        if step.delay:
            await conn.sleep(step.delay)
        if index == body.cut_index:
            partial = b""
            if step.kind == "body" or (faults.midevent and step.kind == "event"):
                partial = step.raw[: len(step.raw) // 2]
            if partial:
                await write(encoder.piece(partial))
            rec.body_bytes = conn.written - head_bytes
            rec.transport = faults.cut or "rst"
            finish(rec)
            if faults.cut == "rst":
                await conn.reset()
            else:
                await conn.close()
            return False
        if step.kind == "end":
            break
        if step.pause:
            half = len(step.raw) // 2
            await write(encoder.piece(step.raw[:half]))
            await conn.sleep(step.pause)
            await write(encoder.piece(step.raw[half:]))
        else:
            await write(encoder.piece(step.raw))
        account(rec, step)
    await write(encoder.finish())
    if framing == "chunked":
        await conn.send(wire.LAST_CHUNK)
    rec.body_bytes = conn.written - head_bytes
    rec.transport = "complete"
    finish(rec)
    if not body.keep:
        await conn.close()
    return body.keep


async def write_error_status(
    conn: Conn,
    req: Request,
    rec: SentRecord,
    faults: Faults,
    status: int,
    code: str | None,
    message: str | None,
    finish: Finish,
) -> bool:
    """An HTTP error status with the provider's JSON error body (``message``, when
    given, replaces the provider's); return whether the connection stays open."""
    doc, error_fields = http_error_body(rec.endpoint, status, code, rec.request_id)
    if message is not None:
        doc.get("error", doc)["message"] = message
        error_fields = (error_fields[0], error_fields[1], message)
    indent = rec.endpoint != "messages"
    raw = orjson.dumps(doc, option=orjson.OPT_INDENT_2 if indent else 0) + b"\n"
    coding = negotiated_coding(faults, req)
    if coding not in wire.available():
        coding = "identity"
    encoder = wire.Encoder(coding)
    payload = encoder.piece(raw) + encoder.finish()
    keep = req.keep_alive() and not faults.close
    headers = [("content-type", "application/json")]
    headers += [h for h in provider_headers(rec) if h[0] != "openai-version"]
    retry_after = faults.retry_after
    if retry_after is not None or status == 429:
        headers.append(("retry-after", f"{retry_after if retry_after is not None else 1:g}"))
    if coding != "identity":
        headers.append(("content-encoding", coding))
    headers.append(("content-length", str(len(payload))))
    headers.append(("connection", "keep-alive" if keep else "close"))
    headers.append(("server", "recorder-simulate"))
    await conn.send(status_head(status, headers))
    rec.http_status = status
    rec.headers_ms = rec.elapsed_ms()
    rec.content_encoding = coding
    rec.framing = "length"
    rec.error_type, rec.error_code, rec.error_message = error_fields
    if rec.body is not None:
        rec.body.extend(payload)
    await conn.send(payload)
    rec.body_bytes = len(payload)
    rec.transport = "complete"
    finish(rec)
    if not keep:
        await conn.close()
    return keep
