"""Making an exchange's record: from what ``requestheaders`` read of the request
(:class:`~recorder.proxy.state.Pending`), its record (id, start time, upstream,
project, the API key's fingerprint), its meter and the mask of its credentials;
then what the hooks read meanwhile (the request body's facts, the response's
headers) is put on it.

A record that cannot be made drops the exchange (it is not recorded, as when
``requestheaders`` fails): a record without its key mask could store an echo of
a key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from mitmproxy import http
from mitmproxy.coretypes.multidict import MultiDict

from recorder.core.attribution import (
    SESSION_HEADERS,
    TAG_HEADER,
    bounded_tags,
    header_session,
    header_tags,
)
from recorder.core.captured import CapturedRecord
from recorder.core.endpoints import bedrock_model, model_in_path, provider_for
from recorder.core.keys import KeyMask, authenticating_key, fingerprint, request_keys
from recorder.core.meter import StreamMeter
from recorder.core.protocols import EVENTSTREAM_ENDPOINTS
from recorder.core.protocols.invoke_model import InvokeModelInterpreter
from recorder.core.record import StreamRecord
from recorder.proxy.config import RecorderConfig
from recorder.proxy.ids import new_record_start
from recorder.proxy.internal_errors import InternalErrors
from recorder.proxy.lifecycle import DROPPED
from recorder.proxy.state import (
    Answer,
    Caller,
    FlowState,
    Pending,
    apply_facts,
    read_request_facts,
)
from recorder.proxy.tap import Unmetered

REQUEST_HEADERS = frozenset(
    {
        b"authorization",
        b"x-api-key",
        b"api-key",
        b"x-goog-api-key",
        b"proxy-authorization",
        b"x-amz-security-token",
        b"openai-project",
        b"anthropic-workspace",
        b"openai-organization",
        b"accept-encoding",
        b"traceparent",
        b"tracestate",
        TAG_HEADER.encode(),
        *(name.encode() for name in SESSION_HEADERS),
    }
)
# Amazon Bedrock's metrics of a non-streamed InvokeModel answer
BEDROCK_METRIC_HEADERS = frozenset(
    {
        b"x-amzn-bedrock-input-token-count",
        b"x-amzn-bedrock-output-token-count",
        b"x-amzn-bedrock-invocation-latency",
        b"x-amzn-bedrock-cache-read-input-token-count",
        b"x-amzn-bedrock-cache-write-input-token-count",
    }
)
RESPONSE_HEADERS = frozenset(
    {b"x-request-id", b"request-id", b"x-amzn-requestid", b"content-type", b"content-encoding"}
    | BEDROCK_METRIC_HEADERS
)


def bedrock_metrics(headers: dict[str, str]) -> dict[str, str] | None:
    """The ``x-amzn-bedrock-*`` metrics among the picked response headers, if any."""
    found = {k: v for k, v in headers.items() if k.startswith("x-amzn-bedrock-")}
    return found or None


def pick_headers(headers: http.Headers, wanted: frozenset[bytes]) -> dict[str, str]:
    """The ``wanted`` headers (lower-case names) of ``headers``, read as
    ``headers.get`` reads them (repeated ones folded with ", ", values decoded as
    UTF-8 with surrogateescape), in one pass over the raw fields: an exchange needs
    a dozen lookups, and each ``get`` walks and converts every field again."""
    out: dict[str, str] = {}
    for name, value in headers.fields:
        low = name.lower()
        if low in wanted:
            key = low.decode("ascii")
            text = value.decode("utf-8", "surrogateescape")
            out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def header_text(value: str | None) -> str | None:
    """A header value as clean text: mitmproxy keeps undecodable bytes as lone
    surrogates, which no database or JSON encoder accepts; they become U+FFFD."""
    if not value:
        return None
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def wanted_headers(tag_headers: Iterable[str]) -> frozenset[bytes]:
    """The request headers an exchange reads: :data:`REQUEST_HEADERS` and the
    operator's tag headers (``--tag-header``)."""
    return REQUEST_HEADERS | {name.lower().encode() for name in tag_headers}


def query_of(request: http.Request) -> MultiDict[str, str] | None:
    """The URL's query, read now (None: the path has none). mitmproxy's
    ``request.query`` is a live view that parses the URL again at every lookup,
    and a record looks up several names in it (keys some gateways take there)."""
    if "?" not in request.path:
        return None
    return MultiDict(request.query.fields)


def pending_of(
    request: http.Request,
    headers: dict[str, str],
    query: MultiDict[str, str] | None = None,
) -> Pending:
    """What the record needs of ``request``, read now; ``query``: its
    :func:`query_of`, when read before (a WebSocket's, once per connection)."""
    return Pending(
        headers,
        query if query is not None else query_of(request),
        request.host,
        request.port,
        request.path,
        time.time_ns() // 1_000_000,
    )


def answer(state: FlowState, got: Answer) -> None:
    """The response's headers, on the record and its meter."""
    state.meter.headers(got.at, got.status)
    rec = state.record
    rec.request_id = got.request_id
    if got.provider_metrics and isinstance(state.meter.interpreter, InvokeModelInterpreter):
        state.meter.interpreter.read_headers(got.provider_metrics)
    if not got.sse:
        rec.streamed = False
    elif state.endpoint in EVENTSTREAM_ENDPOINTS:
        rec.transport = "eventstream"


class RecordMaker:
    """Makes the records of the recorder's exchanges (the :class:`Maker` of their
    :class:`FlowState`)."""

    def __init__(
        self,
        config: RecorderConfig,
        errors: InternalErrors,
        on_start: Callable[[StreamRecord], None],
        on_drop: Callable[[FlowState], None],
    ) -> None:
        self.config = config
        self._errors = errors
        self._on_start = on_start  # the observers' stream_started
        self._on_drop = on_drop  # the recorder lets go of a dropped exchange

    def make(self, state: FlowState) -> None:
        """Make ``state``'s record, meter and key mask; or drop it (never raises)."""
        try:
            self._make(state)
        except Exception:
            self._errors("requestheaders")
            if not state.made:
                if state.tap is not None:  # forwards, and meters nothing
                    state.tap.give_up(Unmetered.TAP_FAILED, "its record could not be made")
                state.move(DROPPED)
                self._on_drop(state)

    def caller_of(self, pending: Pending, endpoint: str) -> Caller:
        """Who ``pending``'s request to ``endpoint`` is from (its key fingerprinted,
        never kept)."""
        headers, query = pending.headers, pending.query
        key = header_text(
            authenticating_key(
                headers, query, endpoint=endpoint, host=pending.host, path=pending.path
            )
        )
        return Caller(
            upstream=f"{pending.host}:{pending.port}",
            api_key_id=fingerprint(key, self.config.key_secret) if key else None,
            project=header_text(
                headers.get("openai-project") or headers.get("anthropic-workspace")
            ),
            organization=header_text(headers.get("openai-organization")),
            session_id=header_text(header_session(headers)),
            tags=bounded_tags(header_tags(headers, self.config.tag_headers)),
            mask=KeyMask.of(request_keys(headers, query)),
            trace=(headers["traceparent"], headers.get("tracestate"))
            if "traceparent" in headers  # forwarded untouched; read for the span only
            else None,
        )

    def _make(self, state: FlowState) -> None:
        pending = state.pending
        if pending is None:
            raise RuntimeError("nothing was noted of this exchange")
        caller = pending.caller
        if caller is None:
            caller = pending.caller = self.caller_of(pending, state.endpoint)
        record_id, started_at = new_record_start(pending.wall_ms)
        rec = (CapturedRecord if self.config.capture_bodies else StreamRecord)(
            id=record_id,
            started_at=started_at,
            upstream=caller.upstream,
            project=caller.project,
            organization=caller.organization,
            api_key_id=caller.api_key_id,
            session_id=caller.session_id,
            tags=dict(caller.tags) if caller.tags is not None else None,
        )
        meter = StreamMeter(
            state.endpoint,
            start=state.t0,
            stall_after=self.config.stall_after,
            max_event_bytes=self.config.max_event_bytes,
            record=rec,
        )
        if state.endpoint in EVENTSTREAM_ENDPOINTS:
            rec.model = header_text(bedrock_model(pending.path))  # Bedrock: in the path
        else:
            # Google names the model in the path, and Vertex AI's paths say the provider
            provider = provider_for(state.endpoint, pending.path)
            if provider is not None:
                rec.provider = provider
            rec.model = header_text(model_in_path(pending.path))
        state.started(meter, rec, caller.mask)
        if caller.trace is not None:
            state.trace = caller.trace
        try:
            self._on_start(rec)  # after the meter, which sets endpoint and provider
        except Exception:
            self._errors("observer")
        if pending.body is not None:
            try:
                facts = read_request_facts(pending.body, state.endpoint, self.config.reading)
                apply_facts(state, *facts)
            except Exception:
                self._errors("request")
        if pending.answer is not None:
            answer(state, pending.answer)
