"""One simulated WebSocket connection: OpenAI's Responses API in WebSocket mode
(``/v1/responses``) and the Realtime API (``/v1/realtime``).

After the upgrade (``recorder.simulate.ws_frames``), a reader task takes the
client's messages; each ``response.create`` is answered in turn, one after the
other, with the events the SSE form would send (Responses: the same builder, so
the same events, one JSON text message each) or Realtime's
(``recorder.simulate.protocols.realtime``), laid out in time by the same
script as an SSE body: the faults of the connection (``x-sim-fault`` on the
upgrade, the model's ``+fault`` suffix in the URL's ``model``) and, for
Responses, of each ``response.create``'s model. A keepalive is a ping frame;
``rst=K`` resets the connection after K events of a response, ``fin=K`` closes
it without a close frame, ``ws_close=K`` sends a close frame (1011) after K
events; ``deflate`` compresses messages when the client offers it.

Every response is a request of its own in the ground truth (``Simulator.sent``,
its ``response_id`` the one it sent), ended with the connection if the
connection ends first (``client_gone``, or the cut that ended it).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import orjson

from recorder.simulate.content import Ids, choose
from recorder.simulate.faults import FaultError, Faults, parse_faults, split_model
from recorder.simulate.http1 import ClientGone, Conn, Request
from recorder.simulate.prompts import READERS, BadRequest
from recorder.simulate.protocols import plan
from recorder.simulate.protocols.base import openai_error
from recorder.simulate.script import script
from recorder.simulate.sent import SentRecord, account
from recorder.simulate.ws_frames import BadFrame, Message, WebSocket

# pcm16 at 24 kHz: a user's audio is one token per 100 ms of it
INPUT_AUDIO_BYTES_PER_TOKEN = 4800
DEFAULT_REALTIME_MODEL = "gpt-realtime"


def websocket_endpoint(path: str) -> str | None:
    """The WebSocket protocol a path speaks (``responses``, ``realtime``)."""
    path = path.rstrip("/")
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/realtime"):
        return "realtime"
    return None


class WebSocketSession:
    """The simulator's side of one WebSocket connection."""

    def __init__(
        self,
        conn: Conn,
        req: Request,
        endpoint: str,
        *,
        default_faults: str,
        new_id: Callable[[], str],
        register: Callable[[SentRecord], None],
        finish: Callable[[SentRecord], None],
    ) -> None:
        self.conn = conn
        self.req = req
        self.endpoint = endpoint
        self.default_faults = default_faults
        self.new_id = new_id
        self.register = register
        self.finish = finish
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(req.target).query)
        self.model = (query.get("model") or [DEFAULT_REALTIME_MODEL])[0]
        self.inbox: asyncio.Queue[Message | None] = asyncio.Queue()
        self.gone = asyncio.Event()  # the client closed or went away
        self.ws: WebSocket | None = None
        self.texts: list[str] = []  # the Realtime conversation's text items
        self.audio_bytes = 0  # the Realtime conversation's input audio
        self.session: dict[str, Any] = {}

    def _faults(self, model_faults: str = "") -> Faults:
        faults = parse_faults(self.default_faults)
        parse_faults(
            split_model(self.model)[1] if self.endpoint == "realtime" else "", sep="+", into=faults
        )
        parse_faults(model_faults, sep="+", into=faults)
        parse_faults(self.req.headers.get("x-sim-fault", ""), into=faults)
        return faults

    async def run(self) -> None:
        """Upgrade, then answer the client's messages until one side closes."""
        try:
            faults = self._faults()
        except FaultError:
            faults = Faults()
        self.ws = await WebSocket.upgrade(
            self.conn,
            self.req,
            [("x-request-id", "req_ws_" + self.new_id())],
            deflate=faults.deflate,
        )
        reader = asyncio.create_task(self._read())
        try:
            if self.endpoint == "realtime":
                self.session = {
                    "type": "realtime",
                    "object": "realtime.session",
                    "id": "sess_" + self.new_id(),
                    "model": split_model(self.model)[0],
                    "output_modalities": ["audio"],
                    "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}}},
                }
                await self.ws.send_text(self._server("session.created", session=self.session))
            while True:
                message = await self.inbox.get()
                if message is None:
                    break
                if not await self._answer(message):
                    break
        except (ClientGone, ConnectionError, OSError):
            pass
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            if not self.conn.writer.transport.is_closing():
                await self.ws.close(1000)

    async def _read(self) -> None:
        assert self.ws is not None
        try:
            while True:
                message = await self.ws.receive()
                if message is None:
                    break
                await self.inbox.put(message)
        except (ClientGone, BadFrame, ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self.gone.set()
            await self.inbox.put(None)

    def _server(self, typ: str, **fields: Any) -> bytes:
        return orjson.dumps({"type": typ, "event_id": "event_" + self.new_id(), **fields})

    async def _answer(self, message: Message) -> bool:
        """One client message; whether the connection goes on."""
        try:
            doc = orjson.loads(message.data)
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict):
            return True
        typ = doc.get("type")
        assert self.ws is not None
        if self.endpoint == "realtime":
            if typ == "session.update" and isinstance(doc.get("session"), dict):
                self.session.update({k: v for k, v in doc["session"].items() if k != "model"})
                await self.ws.send_text(self._server("session.updated", session=self.session))
            elif typ == "input_audio_buffer.append" and isinstance(doc.get("audio"), str):
                with contextlib.suppress(ValueError):
                    self.audio_bytes += len(base64.b64decode(doc["audio"]))
            elif typ == "conversation.item.create":
                item = doc.get("item")
                for part in item.get("content") or [] if isinstance(item, dict) else []:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        self.texts.append(part["text"])
            elif typ == "response.create":
                return await self._respond(doc)
            return True
        if typ == "response.create":
            return await self._respond(doc)
        return True

    def _prompt_doc(self, doc: dict[str, Any]) -> dict[str, Any]:
        if self.endpoint == "responses":
            body = {k: v for k, v in doc.items() if k != "type"}
            body["stream"] = True
            return body
        response = doc.get("response")
        if not isinstance(response, dict):
            response = {}
        modalities = response.get("output_modalities") or self.session.get("output_modalities")
        return {
            "model": self.model,
            "input": " ".join(self.texts) or "Hello",
            "stream": True,
            "output_modalities": modalities,
            "input_audio_tokens": self.audio_bytes // INPUT_AUDIO_BYTES_PER_TOKEN,
        }

    async def _respond(self, doc: dict[str, Any]) -> bool:
        """One response, streamed; whether the connection goes on."""
        assert self.ws is not None
        rid = self.new_id()
        rec = SentRecord(rid, self.endpoint, "WEBSOCKET", self.req.path, t0=time.monotonic())
        rec.http_status = 101
        rec.streamed = True
        rec.framing = "websocket"
        self.register(rec)
        body = self._prompt_doc(doc)
        model = body.get("model")
        rec.requested_model = model if isinstance(model, str) else None
        try:
            prompt = READERS["responses"](body)
            prompt.endpoint = self.endpoint
            faults = self._faults(prompt.model_faults if self.endpoint == "responses" else "")
        except (BadRequest, FaultError) as e:
            await self._refuse(rec, doc, str(e))
            return True
        rec.model = prompt.model
        rec.faults = faults.describe()
        ids = Ids(prompt.seed() + self.endpoint.encode() + rid.encode())
        content = choose(prompt, faults, ids)
        reply, events = plan(prompt, content, ids, faults)
        rec.response_id = reply.response_id
        rec.planned_finish_reason = reply.finish_reason
        rec.planned_usage = reply.usage.to_dict()
        rec.hidden = content.hidden
        rec.planned_events = len(events)
        steps, cut_index = script(events, faults, b"\n")
        close_at = None
        if faults.ws_close is not None:
            close_at = min(faults.ws_close, len(events))
        sent_events = 0
        for index, step in enumerate(steps):
            if step.delay and await self._wait(step.delay):
                rec.transport = "client_gone"
                self.finish(rec)
                return False
            if index == cut_index or (close_at is not None and sent_events == close_at):
                rec.transport = "ws_close" if index != cut_index else (faults.cut or "rst")
                self.finish(rec)
                if rec.transport == "ws_close":
                    await self.ws.close(1011, "simulated close")
                elif rec.transport == "rst":
                    await self.conn.reset()
                else:
                    await self.conn.close()
                return False
            if step.kind == "end":
                break
            if step.kind == "keepalive":
                await self.ws.ping(b"sim")
            elif step.event is not None:
                await self.ws.send_text(step.event.data())
                sent_events += 1
            account(rec, step)
            if self.gone.is_set():
                rec.transport = "client_gone"
                self.finish(rec)
                return False
        rec.transport = "complete"
        self.finish(rec)
        if self.endpoint == "realtime" and content.text:
            self.texts.append(content.answer)  # the answer joins the conversation
        return True

    async def _refuse(self, rec: SentRecord, doc: dict[str, Any], message: str) -> None:
        """The error event of a ``response.create`` that cannot be answered."""
        assert self.ws is not None
        err = openai_error("invalid_prompt", "invalid_request_error")
        err["message"] = message
        rec.error_type, rec.error_code, rec.error_message = (
            err["type"],
            err["code"],
            err["message"],
        )
        rec.terminal = "error"
        fields: dict[str, Any] = {"error": err}
        if self.endpoint == "realtime" and isinstance(doc.get("event_id"), str):
            err["event_id"] = doc["event_id"]
        else:
            fields["status"] = 400
        await self.ws.send_text(self._server("error", **fields))
        rec.events = 1
        rec.transport = "complete"
        self.finish(rec)

    async def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds``; True if the client went away meanwhile."""
        try:
            await asyncio.wait_for(self.gone.wait(), seconds)
        except TimeoutError:
            return False
        return True
