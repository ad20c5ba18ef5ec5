"""Security promises, each checked end to end through a real `recorder proxy`.

1. An API key never reaches the database (its file, WAL and captured bodies),
   the spool, the JSON lines, the proxy's output or /metrics, in any form it is
   sent in (Bearer sk-/sk-proj-, Anthropic x-api-key, Azure api-key, the query
   string; any header case), not even when the upstream echoes it back in an
   error body or an SSE error event; nor its last eight characters, its middle
   or its base64.
2. (tests/cli/test_proxy_security.py: listeners and the mitmproxy CA key.)
3. Prompt text is never stored; completion text only with --capture-bodies, and
   then only in ``stream_bodies`` (compressed) or a spooled record's ``body``.
5. SQL is built from bound parameters only (a scan of recorder/, and filters and
   records full of quotes and SQL that round-trip).

A tiny upstream (below) stands in for the providers: it streams a completion
text the test chooses, and echoes the key it received when asked to, as some
gateways do. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import ast
import base64
import http.client
import json
import logging
import os
import re
import secrets
import sqlite3
import string
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from recorder.core.captured import decompress
from tests.kit.ports import free_port
from tests.kit.processes import stop

RECORDER = str(Path(sys.executable).parent / "recorder")
ROOT = Path(__file__).resolve().parents[1]
_ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


# -- the upstream ---------------------------------------------------------------

ECHO_JSON = "echo-json"  # the model that gets a 401 JSON error holding the key
ECHO_SSE = "echo-sse"  # the model whose stream ends in an SSE error event holding the key


def _received_key(handler: BaseHTTPRequestHandler) -> str:
    h = handler.headers
    auth = h.get("authorization") or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    for name in ("x-api-key", "api-key"):
        if h.get(name):
            return str(h.get(name))
    query = parse_qs(urlsplit(handler.path).query)
    for name in ("api-key", "key"):
        if name in query:
            return query[name][0]
    return ""


def _received_keys(handler: BaseHTTPRequestHandler) -> list[str]:
    """Every credential the request carried: each header form (any Authorization
    scheme, Proxy-Authorization) and each query form."""
    h, found = handler.headers, []
    for name in ("authorization", "proxy-authorization"):
        value = h.get(name) or ""
        if value:
            found.append(value.split(" ", 1)[-1].strip())
    for name in ("x-api-key", "api-key", "x-goog-api-key"):
        if h.get(name):
            found.append(str(h.get(name)))
    query = parse_qs(urlsplit(handler.path).query)
    for name in ("api-key", "api_key", "key"):
        found += query.get(name, [])
    return found


def json_escaped(key: str) -> str:
    """``key`` as a JSON encoder may write it: ``-`` as ``\\u002d``, ``/`` as
    ``\\/``, and (as some do for any character) its fifth as ``\\u00XX`` in upper case."""
    out = key[:4] + f"\\u{ord(key[4]):04X}" + key[5:]
    return out.replace("-", "\\u002d").replace("/", "\\/")


def echo_body(keys: list[str], wrap: Any) -> tuple[bytes, list[tuple[int, int]]]:
    """``wrap(message)`` serialised, the message echoing every key raw and escaped;
    and where each escaped echo lies in the bytes."""
    marks = [f"@RAW{i}@" for i in range(len(keys))] + [f"@ESC{i}@" for i in range(len(keys))]
    data = wrap("Incorrect API key provided: " + " / ".join(marks) + ".")
    for i, key in enumerate(keys):
        data = data.replace(f"@RAW{i}@".encode(), key.encode())
    spans = []
    for i, key in enumerate(keys):
        at = data.index(f"@ESC{i}@".encode())
        data = data.replace(f"@ESC{i}@".encode(), json_escaped(key).encode())
        spans.append((at, at + len(json_escaped(key))))
    return data, spans


def _sse(event: str | None, doc: dict[str, Any]) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(doc) + b"\n\n"


def chat_stream(text: str, error: str | None) -> bytes:
    """A Chat Completions stream saying ``text``; with ``error`` it ends in an error
    event instead of usage and [DONE]."""
    base = {"id": "chatcmpl-sec1", "object": "chat.completion.chunk", "model": "gpt-4o"}
    out = _sse(None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    out += _sse(None, {**base, "choices": [{"index": 0, "delta": {"content": text}}]})
    if error is not None:
        return out + _sse(None, {"error": {"message": error, "type": "server_error"}})
    out += _sse(None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    out += _sse(None, {**base, "choices": [], "usage": usage})
    return out + b"data: [DONE]\n\n"


def messages_stream(text: str, error: str | None) -> bytes:
    """An Anthropic Messages stream saying ``text`` (or ending in an error event)."""
    message = {
        "id": "msg_sec1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "usage": {"input_tokens": 9, "output_tokens": 1},
    }
    out = _sse("message_start", {"type": "message_start", "message": message})
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
    out += _sse("content_block_start", start)
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}}
    delta["delta"]["text"] = text  # type: ignore[index]
    out += _sse("content_block_delta", delta)
    if error is not None:
        err = {"type": "error", "error": {"type": "overloaded_error", "message": error}}
        return out + _sse("error", err)
    out += _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    end = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
    out += _sse("message_delta", {**end, "usage": {"output_tokens": 3}})
    return out + _sse("message_stop", {"type": "message_stop"})


class Upstream:
    """Streams ``completion``; echoes the key for the ECHO_* models; keeps the keys
    it received (proof that the test's keys went through the proxy)."""

    def __init__(self, completion: str, *, echo_all: bool = False) -> None:
        self.completion = completion
        self.keys: list[str] = []
        self.all_keys: list[list[str]] = []  # with echo_all: every credential, per request
        up = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                key = _received_key(self)
                up.keys.append(key)
                model = str(orjson.loads(body).get("model", ""))
                anthropic = urlsplit(self.path).path.endswith("/v1/messages")
                if echo_all:
                    up.all_keys.append(_received_keys(self))
                    self.echo_all(model, anthropic, up.all_keys[-1])
                    return
                echo = f"Incorrect API key provided: {key}. Find yours at example.invalid."
                if model == ECHO_JSON:
                    data = orjson.dumps({"error": {"message": echo, "type": "invalid_api_key"}})
                    self.unauthorized(data)
                    return
                stream = messages_stream if anthropic else chat_stream
                data = stream(up.completion, echo if model == ECHO_SSE else None)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                if self.headers.get("x-echo-request-id"):
                    self.send_header("x-request-id", str(self.headers["x-echo-request-id"]))
                self.end_headers()
                self.wfile.write(data)

            def unauthorized(self, data: bytes) -> None:
                """A 401 with the JSON error body ``data``."""
                self.send_response(401)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def echo_all(self, model: str, anthropic: bool, keys: list[str]) -> None:
                """Echo every key, raw and JSON-escaped; for ``echo-split-N`` in two
                writes, parted inside the N-th escaped echo (N = 2: inside its first
                escape sequence), so the recorder gets the echo in two pieces."""
                if model == ECHO_JSON:
                    data, _ = echo_body(
                        keys, lambda m: orjson.dumps({"error": {"message": m, "type": "x"}})
                    )
                    self.unauthorized(data)
                    return
                stream = messages_stream if anthropic else chat_stream
                if model == "normal" or not model.startswith("echo"):
                    data, spans = stream(up.completion, None), []
                else:
                    marker = "@MESSAGE@"
                    data, spans = echo_body(
                        keys,
                        lambda m: stream(up.completion, marker).replace(
                            marker.encode(), m.encode()
                        ),
                    )
                cut = len(data)
                if model.startswith("echo-split-"):
                    n = int(model.rsplit("-", 1)[1])
                    s, e = spans[min(n, len(spans) - 1)]
                    cut = s + 6 if n == 2 else (s + e) // 2  # "\\u00|XX" or mid-key
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                self.wfile.write(data[:cut])
                self.wfile.flush()
                time.sleep(0.05)
                self.wfile.write(data[cut:])

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


# -- what is sent -----------------------------------------------------------------


@dataclass(frozen=True)
class KeyForm:
    """One way a request carries its key."""

    name: str
    key: str
    path: str  # may carry the key in its query string
    header: tuple[str, str] | None  # (name as sent, value)
    anthropic: bool = False
    fingerprinted: bool = True  # the recorder knows this form and fingerprints it
    # more credentials the same request carries (headers, and keys in them or in the path)
    more_headers: tuple[tuple[str, str], ...] = ()
    more_keys: tuple[str, ...] = ()

    def needles(self) -> dict[str, bytes]:
        """Every key and forms derived from it that must appear nowhere."""
        out: dict[str, bytes] = {}
        for i, key in enumerate((self.key, *self.more_keys)):
            k = key.encode()
            tag = f"key {i + 1} " if self.more_keys else ""
            out |= {
                f"{tag}key": k,
                f"{tag}last 8": k[-8:],
                f"{tag}middle": k[8:-5],
                f"{tag}utf-16": k.decode().encode("utf-16-le"),
                f"{tag}JSON-escaped": json_escaped(key).encode(),
                f"{tag}JSON-escaped, middle": json_escaped(key)[10:-5].encode(),
            }
            for pad in range(3):  # base64 at any alignment in a larger blob
                for enc in (base64.b64encode, base64.urlsafe_b64encode):
                    out[f"{tag}base64/{pad}/{enc.__name__}"] = enc(b"\0" * pad + k)[4:-4]
        return out


def key_forms() -> list[KeyForm]:
    sk, proj = "sk-" + rand(48), "sk-proj-" + rand(64)
    ant, azure = "sk-ant-api03-" + rand(80), rand(32, "0123456789abcdef")
    q1, q2 = rand(40), "AIza" + rand(35)
    chat = "/v1/chat/completions"
    return [
        KeyForm("bearer sk-", sk, chat, ("Authorization", f"Bearer {sk}")),
        KeyForm("bearer sk-proj- (lower case)", proj, chat, ("authorization", f"bearer {proj}")),
        KeyForm("x-api-key (upper case)", ant, "/v1/messages", ("X-API-KEY", ant), anthropic=True),
        KeyForm(
            "azure api-key",
            azure,
            "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
            ("Api-Key", azure),
        ),
        KeyForm("query ?api-key=", q1, f"{chat}?api-key={q1}", None, fingerprinted=False),
        KeyForm("query ?key=", q2, f"{chat}?alt=sse&key={q2}", None, fingerprinted=False),
    ]


@dataclass
class Texts:
    """Distinctive prompt and completion text."""

    prompt: str = field(default_factory=lambda: "PROMPTUSER" + rand(24))
    system: str = field(default_factory=lambda: "PROMPTSYSTEM" + rand(24))
    completion: str = field(default_factory=lambda: "COMPLETION" + rand(24))


MODELS = ("normal", ECHO_JSON, ECHO_SSE)


def send_all(
    port: int, forms: list[KeyForm], texts: Texts, models: tuple[str, ...] = MODELS
) -> int:
    """Every form, with a normal stream and both echoes; returns the request count."""
    n = 0
    for form in forms:
        for model in models:
            if form.anthropic:
                doc: dict[str, Any] = {
                    "model": "claude-sonnet-4-5" if model == "normal" else model,
                    "max_tokens": 64,
                    "stream": True,
                    "system": texts.system,
                    "messages": [{"role": "user", "content": texts.prompt}],
                }
            else:
                doc = {
                    "model": "gpt-4o" if model == "normal" else model,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    "messages": [
                        {"role": "system", "content": texts.system},
                        {"role": "user", "content": texts.prompt},
                    ],
                }
            headers = {"content-type": "application/json"}
            if form.header:
                headers[form.header[0]] = form.header[1]
            headers.update(form.more_headers)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
            try:
                conn.request("POST", form.path, orjson.dumps(doc), headers)
                resp = conn.getresponse()
                resp.read()
            finally:
                conn.close()
            n += 1
    return n


# -- the proxy ----------------------------------------------------------------------


@dataclass
class Run:
    """One `recorder proxy` run and everything it left behind."""

    dir: Path
    forms: list[KeyForm]
    texts: Texts
    output: str = ""
    metrics: str = ""
    wal_seen: bool = False
    # where -> bytes: raw files, and what is inside the compressed bodies
    raw: dict[str, bytes] = field(default_factory=dict)
    bodies: dict[str, bytes] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    spooled: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def proxy(
    home: Path, upstream: str, *extra: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], int, int, list[str]]]:
    """`recorder proxy` in reverse mode before ``upstream``; stopped with SIGINT on
    exit, its whole output (stdout and stderr) appended to the yielded list."""
    port, metrics_port = free_port(), free_port()
    environ = {**os.environ, "HOME": str(home), **(env or {})}
    if "RECORDER_KEY_SECRET" not in (env or {}):
        environ.pop("RECORDER_KEY_SECRET", None)
    proc = subprocess.Popen(
        [
            RECORDER,
            "proxy",
            "--mode",
            f"reverse:{upstream}",
            "--listen-port",
            str(port),
            "--metrics-port",
            str(metrics_port),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environ,
        cwd=home,
    )
    assert proc.stdout is not None
    out: list[str] = []
    deadline = time.monotonic() + 30
    while "metrics:" not in "".join(out):
        line = proc.stdout.readline()
        if not line or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"proxy did not start:\n{''.join(out)}{proc.stdout.read()}")
        out.append(line)
    try:
        yield proc, port, metrics_port, out
    finally:
        out.append(stop(proc))


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def _read_files(run: Run, tag: str) -> None:
    for p in sorted(run.dir.rglob("*")):
        if p.is_file():
            run.raw[f"{tag}:{p.relative_to(run.dir)}"] = p.read_bytes()
            if p.name.endswith("-wal") and p.stat().st_size:
                run.wal_seen = True


def _db_rows(db: Path) -> tuple[list[dict[str, Any]], list[tuple[str, str, bytes, bytes]]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM streams")]
        bodies = [
            (r["stream_id"], r["encoding"], r["body"], r["timings"])
            for r in conn.execute("SELECT * FROM stream_bodies")
        ]
    finally:
        conn.close()
    return rows, bodies


def _spooled(run: Run) -> None:
    """Every spooled record (spool files and the rejected file), bodies unpacked."""
    for p in sorted(run.dir.rglob("*.jsonl")):
        if p.name == "out.jsonl":
            continue
        for line in p.read_bytes().splitlines():
            doc = orjson.loads(line)
            if "recorder_spool" in doc:  # a spool file's header: the store it waits for
                continue
            run.spooled.append(doc)
            body = doc.get("body")
            if body:
                for part in ("data", "timings"):
                    raw = decompress(base64.b64decode(body[part]), body["encoding"])
                    run.bodies[f"spooled body {part} of {doc['id']}"] = raw


def record_run(
    root: Path,
    upstream: Upstream,
    texts: Texts,
    forms: list[KeyForm],
    name: str,
    *,
    db_up: bool,
    capture: bool,
    models: tuple[str, ...] = MODELS,
) -> Run:
    run = Run(root / name, forms, texts)
    run.dir.mkdir()
    db = run.dir / "db" / "recorder.db"
    db.parent.mkdir()
    env = {}
    if db_up:
        url = f"sqlite:///{db}"
    else:  # nothing listens on port 1
        url = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"
        env["RECORDER_KEY_SECRET"] = "security-test-secret"
    extra = [
        "--db",
        url,
        "--spool-dir",
        str(run.dir / "spool"),
        "--jsonl",
        str(run.dir / "out.jsonl"),
    ]
    if capture:
        extra.append("--capture-bodies")
    with proxy(run.dir, upstream.url, *extra, env=env) as (_, port, metrics_port, out):
        n = send_all(port, forms, texts, models)
        if db_up:  # wait for the rows, then look at the files while the WAL is live
            deadline = time.monotonic() + 15
            while True:
                try:
                    rows, _ = _db_rows(db)
                except sqlite3.Error:
                    rows = []
                if len(rows) == n or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            _read_files(run, "running")
        # records reach the metrics a moment after their streams end (the proxy
        # completes them in batches): wait until every one is counted
        deadline = time.monotonic() + 15
        while True:
            run.metrics = scrape(metrics_port)
            counted = sum(
                float(line.rsplit(" ", 1)[1])
                for line in run.metrics.splitlines()
                if line.startswith("llm_streams_total{")
            )
            if counted >= n or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    run.output = "".join(out)
    run.raw["proxy output"] = run.output.encode()
    run.raw["/metrics"] = run.metrics.encode()
    _read_files(run, "stopped")
    if db_up:
        run.rows, bodies = _db_rows(db)
        for stream_id, encoding, body, timings in bodies:
            run.bodies[f"stream_bodies.body of {stream_id}"] = decompress(body, encoding)
            run.bodies[f"stream_bodies.timings of {stream_id}"] = decompress(timings, encoding)
    _spooled(run)
    return run


@dataclass
class Runs:
    forms: list[KeyForm]
    texts: Texts
    upstream_keys: list[str]
    captured: Run  # database up, --capture-bodies, --jsonl
    spooled: Run  # database unreachable: everything spooled, with bodies
    plain: Run  # database up, no capture

    def all(self) -> list[Run]:
        return [self.captured, self.spooled, self.plain]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    root = tmp_path_factory.mktemp("security")
    forms, texts = key_forms(), Texts()
    upstream = Upstream(texts.completion)
    try:
        captured = record_run(root, upstream, texts, forms, "captured", db_up=True, capture=True)
        spooled = record_run(root, upstream, texts, forms, "spooled", db_up=False, capture=True)
        plain = record_run(root, upstream, texts, forms, "plain", db_up=True, capture=False)
    finally:
        upstream.close()
    yield Runs(forms, texts, list(upstream.keys), captured, spooled, plain)


def find(blobs: dict[str, bytes], needles: dict[str, bytes]) -> list[str]:
    return [
        f"{what} in {where}"
        for where, data in blobs.items()
        for what, n in needles.items()
        if n in data
    ]


def key_leaks(forms: list[KeyForm], blobs: dict[str, bytes]) -> list[str]:
    return [f"{f.name}: {hit}" for f in forms for hit in find(blobs, f.needles())]


def no_leaks(found: list[str]) -> None:
    """Fail with a readable list (ids folded) if anything was found."""
    folded = sorted({re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "<id>", f) for f in found})
    assert not folded, f"{len(found)} found:\n" + "\n".join(folded)


# -- 1. keys ------------------------------------------------------------------------


def test_the_runs_saw_what_they_are_checked_for(runs: Runs) -> None:
    """The scans below are meaningful: every key reached the upstream through the
    proxy, every record was kept (rows, spool, JSON lines), bodies were captured
    and decoded, echoed keys reached the recorder (and were masked), and the WAL
    and the metrics were read."""
    per_run = len(runs.forms) * len(MODELS)
    sent = [f.key for f in runs.forms for _ in MODELS]
    assert runs.upstream_keys == sent * 3
    for run in (runs.captured, runs.plain):
        assert len(run.rows) == per_run
        assert run.wal_seen
        assert run.spooled == []
    assert len(runs.spooled.spooled) == per_run
    assert runs.spooled.rows == []
    for run in runs.all():
        lines = (run.dir / "out.jsonl").read_bytes().splitlines()
        assert len(lines) == per_run
        assert "gpt-4o" in run.metrics and "recorder_" in run.metrics
        assert "records:" in run.output
    # bodies: one per stream (SSE), in the database and the spool; none without capture
    assert len([k for k in runs.captured.bodies if ".body of" in k]) == 2 * len(runs.forms)
    assert len([k for k in runs.spooled.bodies if "data of" in k]) == 2 * len(runs.forms)
    assert runs.plain.bodies == {}
    # fingerprints: the last four characters and the HMAC, nothing more
    by_model: dict[str, list[dict[str, Any]]] = {}
    for row in runs.plain.rows:
        by_model.setdefault(row["model"], []).append(row)
    fps = {row["api_key_id"] for row in runs.plain.rows}
    for form in runs.forms:
        if form.fingerprinted:
            assert any(fp and fp.startswith(f"…{form.key[-4:]}:") for fp in fps), form.name
    echoed = [r for r in runs.plain.rows if r["model"] in (ECHO_JSON, ECHO_SSE)]
    assert len(echoed) == 2 * len(runs.forms)
    assert all(
        r["error_message"] and "Incorrect API key provided" in r["error_message"] for r in echoed
    )


@pytest.mark.parametrize("where", ["database", "spool", "jsonl", "output", "metrics"])
def test_header_keys_never_kept(runs: Runs, where: str) -> None:
    """Keys in headers (every form, any case), echoed or not, appear nowhere."""
    forms = [f for f in runs.forms if f.fingerprinted]
    blobs = {k: v for run in runs.all() for k, v in _where(run, where).items()}
    assert blobs
    no_leaks(key_leaks(forms, blobs))


def _where(run: Run, where: str) -> dict[str, bytes]:
    """The raw blobs of one kind: database files, spool files, ..."""

    def kind(name: str) -> str:
        if name in ("proxy output", "/metrics"):
            return {"proxy output": "output", "/metrics": "metrics"}[name]
        rel = name.split(":", 1)[1]
        if rel.startswith("db/"):
            return "database"
        if rel.startswith("spool/"):
            return "spool"
        return "jsonl" if rel == "out.jsonl" else "other"

    return {f"{run.dir.name} {k}": v for k, v in run.raw.items() if kind(k) == where}


def test_query_string_keys_never_kept(runs: Runs) -> None:
    """A key in the query string (``?api-key=``, ``?key=``) appears nowhere, not
    even when the upstream echoes it in an error."""
    forms = [f for f in runs.forms if not f.fingerprinted]
    blobs = {f"{r.dir.name} {k}": v for r in runs.all() for k, v in r.raw.items()}
    no_leaks(key_leaks(forms, blobs))


def test_no_key_in_captured_bodies(runs: Runs) -> None:
    """A key the upstream echoes in an SSE error event is not kept in a captured
    body (database or spool)."""
    blobs = {**runs.captured.bodies, **runs.spooled.bodies}
    no_leaks(key_leaks(runs.forms, blobs))


def test_query_string_keys_not_kept_from_the_url(runs: Runs) -> None:
    """The URL (and so its query string) is not recorded: records of streams that
    did not echo the key, the output and the metrics hold no query-string key."""
    forms = [f for f in runs.forms if not f.fingerprinted]
    blobs = {
        "output and metrics": b"".join(
            r.raw["proxy output"] + r.raw["/metrics"] for r in runs.all()
        )
    }
    for run in runs.all():
        for doc in [*run.rows, *run.spooled]:
            if doc["model"] not in (ECHO_JSON, ECHO_SSE):
                blobs[f"{run.dir.name} record {doc['id']}"] = json.dumps(doc, default=str).encode()
        for i, line in enumerate((run.dir / "out.jsonl").read_bytes().splitlines()):
            if orjson.loads(line)["model"] not in (ECHO_JSON, ECHO_SSE):
                blobs[f"{run.dir.name} JSON line {i}"] = line
    assert len(blobs) > 3 * len(runs.forms)
    no_leaks(key_leaks(forms, blobs))


# -- 1b. two credentials at once, each echoed --------------------------------------

TWO_KEY_MODELS = ("normal", ECHO_JSON, ECHO_SSE, "echo-split-0", "echo-split-1", "echo-split-2")


def two_key_forms() -> list[KeyForm]:
    """Requests carrying two credentials; ``key`` is the one the provider
    authenticates with (fingerprinted), ``more_keys`` the other."""
    bearer, ant = "sk-proj-" + rand(64), "sk-ant-api03-" + rand(80)
    bearer2, ant2 = "sk-" + rand(48), "sk-ant-api03-" + rand(80)
    azure, query_key = rand(32, "0123456789abcdef"), "q-" + rand(40)
    goog, proxy_token = "AIza" + rand(35), rand(20) + "/" + rand(20) + "+" + rand(6)
    chat = "/v1/chat/completions"
    azure_path = "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
    return [
        KeyForm(
            "x-api-key + Authorization on /v1/messages",
            ant,
            "/v1/messages",
            ("x-api-key", ant),
            anthropic=True,
            more_headers=(("Authorization", f"Bearer {bearer}"),),
            more_keys=(bearer,),
        ),
        KeyForm(
            "Authorization + x-api-key on chat",
            bearer2,
            chat,
            ("Authorization", f"Bearer {bearer2}"),
            more_headers=(("X-Api-Key", ant2),),
            more_keys=(ant2,),
        ),
        KeyForm(
            "api-key header + ?api-key=",
            azure,
            f"{azure_path}&api-key={query_key}",
            ("api-key", azure),
            more_keys=(query_key,),
        ),
        KeyForm(
            "x-goog-api-key + Proxy-Authorization",
            goog,
            chat,
            ("x-goog-api-key", goog),
            more_headers=(("Proxy-Authorization", f"Basic {proxy_token}"),),
            more_keys=(proxy_token,),
        ),
    ]


@dataclass
class TwoKeyRuns:
    forms: list[KeyForm]
    received: list[list[str]]  # every credential the upstream received, per request
    captured: Run  # database up, --capture-bodies, --jsonl
    spooled: Run  # database unreachable: everything spooled, with bodies

    def all(self) -> list[Run]:
        return [self.captured, self.spooled]


@pytest.fixture(scope="module")
def two_key_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoKeyRuns]:
    root = tmp_path_factory.mktemp("two-keys")
    forms, texts = two_key_forms(), Texts()
    upstream = Upstream(texts.completion, echo_all=True)
    try:
        runs = [
            record_run(
                root, upstream, texts, forms, name, db_up=up, capture=True, models=TWO_KEY_MODELS
            )
            for name, up in (("captured", True), ("spooled", False))
        ]
    finally:
        upstream.close()
    yield TwoKeyRuns(forms, list(upstream.all_keys), *runs)


def _star_runs(body: bytes) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(rb"\*{8,}", body)]


def test_two_key_runs_saw_what_they_are_checked_for(two_key_runs: TwoKeyRuns) -> None:
    """Both credentials of every request reached the upstream (and so were echoed),
    every record was kept, every SSE body captured, the split echoes did reach the
    recorder in two pieces parted inside them, and the fingerprint is the provider's key."""
    runs, forms = two_key_runs, two_key_runs.forms
    per_run = len(forms) * len(TWO_KEY_MODELS)
    sent = [sorted((f.key, *f.more_keys)) for f in forms for _ in TWO_KEY_MODELS]
    assert [sorted(k) for k in runs.received] == sent * 2
    assert len(runs.captured.rows) == per_run and runs.captured.spooled == []
    assert len(runs.spooled.spooled) == per_run and runs.spooled.rows == []
    sse = len(forms) * (len(TWO_KEY_MODELS) - 1)
    assert len([k for k in runs.captured.bodies if ".body of" in k]) == sse
    assert len([k for k in runs.spooled.bodies if "data of" in k]) == sse
    # fingerprints: of the provider's key (x-api-key on /v1/messages), never the other
    fps = {row["api_key_id"][1:5] for row in runs.captured.rows}
    assert fps == {f.key[-4:] for f in forms}
    split = 0
    for run in runs.all():
        for doc in [*run.rows, *run.spooled]:
            if doc["model"] == ECHO_JSON or doc["model"].startswith("echo-"):
                # four echoes (two raw, two escaped) of the request's two keys
                assert doc["error_message"].count("[api key]") == 4, doc["error_message"]
            body = run.bodies.get(f"stream_bodies.body of {doc['id']}")
            if body is None or not doc["model"].startswith("echo-split-"):
                continue
            timings = orjson.loads(run.bodies[f"stream_bodies.timings of {doc['id']}"])
            cuts, pos = set(), 0
            for _, length in timings["chunks"]:
                pos += length
                cuts.add(pos)
            stars = _star_runs(body)
            assert len(stars) == 4, (doc["model"], body)
            if any(s < c < e for c in cuts for s, e in stars):
                split += 1
    assert split == len(forms) * 3  # every split echo arrived in two pieces


@pytest.mark.parametrize("where", ["database", "spool", "jsonl", "output", "metrics", "bodies"])
def test_every_credential_of_a_request_is_masked(two_key_runs: TwoKeyRuns, where: str) -> None:
    """Both keys of a request, echoed raw and JSON-escaped (also split across
    pieces) in an HTTP error body and an SSE error event, appear nowhere, in no
    form: database (file, WAL, captured bodies), spool, JSON lines, output, metrics."""
    runs = two_key_runs.all()
    if where == "bodies":
        blobs = {f"{r.dir.name} {k}": v for r in runs for k, v in r.bodies.items()}
    else:
        blobs = {k: v for run in runs for k, v in _where(run, where).items()}
    assert blobs
    no_leaks(key_leaks(two_key_runs.forms, blobs))


# -- 3. prompt and completion text -----------------------------------------------------


def test_prompt_text_is_never_kept(runs: Runs) -> None:
    needles = {
        "prompt": runs.texts.prompt.encode(),
        "system prompt": runs.texts.system.encode(),
        "prompt, middle": runs.texts.prompt[6:-4].encode(),
    }
    for run in runs.all():
        no_leaks(find(run.raw, needles))
        no_leaks(find(run.bodies, needles))


def test_completion_text_is_kept_only_in_captured_bodies(runs: Runs) -> None:
    text = runs.texts.completion
    needle = {"completion": text.encode(), "completion, middle": text[6:-4].encode()}
    # without --capture-bodies: nowhere at all
    assert find(runs.plain.raw, needle) == []
    assert runs.plain.bodies == {}
    # with it: in every SSE body (decompressed), and in no column of streams, no
    # spooled field but the packed body, no JSON line, no output, no metric
    for run in (runs.captured, runs.spooled):
        bodies = [v for k, v in run.bodies.items() if ".body of" in k or "data of" in k]
        assert bodies and all(text.encode() in b for b in bodies)
        assert text not in json.dumps(run.rows, default=str)
        assert text not in json.dumps(
            [{k: v for k, v in d.items() if k != "body"} for d in run.spooled]
        )
        others = {k: v for k, v in run.raw.items() if _kind_is_text(k)}
        assert find(others, needle) == []


def _kind_is_text(name: str) -> bool:
    """Blobs that are not compressed bodies: the JSON lines, output and metrics."""
    return name in ("proxy output", "/metrics") or name.endswith("out.jsonl")


@pytest.mark.parametrize("two_keys", [False, True], ids=["one key", "two keys"])
def test_no_key_or_prompt_in_debug_logs(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    two_keys: bool,
) -> None:
    """`recorder proxy` has no verbosity option (mitmproxy's log is at "warn"); run
    the same proxy in-process with every logger at DEBUG (mitmproxy's, the
    recorder's, SQLAlchemy's do not run here) and every key form and both echoes
    (with two keys: both echoed, raw, escaped and split): no key and no prompt in
    any log record or on stdout/stderr."""
    from tests.kit.proxy_thread import running_proxy

    caplog.set_level(logging.DEBUG)
    forms, texts = (two_key_forms() if two_keys else key_forms()), Texts()
    upstream = Upstream(texts.completion, echo_all=two_keys)
    try:
        with running_proxy(
            [f"reverse:{upstream.url}"],
            str(tmp_path / "confdir"),
            config={"capture_bodies": True},
        ) as running:
            n = send_all(running.port(), forms, texts, TWO_KEY_MODELS if two_keys else MODELS)
            running.sink.wait_for(n)
    finally:
        upstream.close()
    out, err = capfd.readouterr()
    logs = {"log records": caplog.text.encode(), "stdout": out.encode(), "stderr": err.encode()}
    assert len(caplog.records) > n  # the debug logs were really on
    assert "127.0.0.1" in caplog.text
    prompt = {"prompt": texts.prompt.encode(), "system prompt": texts.system.encode()}
    no_leaks(key_leaks(forms, logs) + find(logs, prompt))


# -- 5. SQL: bound parameters only ---------------------------------------------------

_SQL_CALLS = frozenset({"text", "exec_driver_sql", "execute", "executemany", "executescript"})
_SQL_WORDS = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|DROP|CREATE|ALTER|PRAGMA|BEGIN|WITH|VACUUM)\b|"
    r"\b(FROM|WHERE|VALUES|SET)\b.*",
)
# SQL built from strings on purpose, each for a reason that keeps values out of it.
# (file, the start of the flagged source line)
ALLOWED_SQL: dict[tuple[str, str], str] = {
    ("recorder/store/engine.py", 'cur.execute(f"PRAGMA busy_timeout = {int('): (
        "PRAGMA takes no bound parameters; the value is an int() of the settings"
    ),
    ("recorder/store/engine.py", 'conn.exec_driver_sql(f"BEGIN {mode}"'): (
        "BEGIN takes no parameters; mode is checked against _BEGIN_MODES just above"
    ),
    ("recorder/store/models.py", 'f"INSERT INTO streams ('): (
        "the writer's bulk INSERT: column names are constants, values are ? / %s"
    ),
    ("recorder/store/models.py", 'f"INSERT INTO stream_bodies ('): ("as above: constant columns"),
    ("recorder/store/models.py", 'f"INSERT INTO stream_gaps ('): ("as above: constant columns"),
}


def _is_built(node: ast.AST) -> bool:
    """A string built at run time: an f-string with a value in it, %-formatting,
    concatenation or ``.format()``."""
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    )


def _literal_text(node: ast.AST) -> str:
    return " ".join(
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )


def sql_built_from_strings(root: Path) -> list[tuple[str, int, str]]:
    """Every SQL call given a built string, and every built string that reads as SQL,
    in recorder/ and migrations/: (file, line number, line)."""
    found: set[tuple[str, int, str]] = set()
    paths = [*(root / "recorder").rglob("*.py"), *(root / "migrations").rglob("*.py")]
    for path in sorted(paths):
        source = path.read_text()
        lines = source.splitlines()
        rel = str(path.relative_to(root))
        for node in ast.walk(ast.parse(source, rel)):
            flagged = None
            if isinstance(node, ast.Call) and node.args:
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name in _SQL_CALLS and _is_built(node.args[0]):
                    flagged = node
            if flagged is None and _is_built(node) and _SQL_WORDS.search(_literal_text(node)):
                flagged = node
            if flagged is not None:
                found.add((rel, flagged.lineno, lines[flagged.lineno - 1].strip()))
    return sorted(found)


def test_sql_only_through_bound_parameters() -> None:
    """No SQL is built from strings (f-strings, %, +, .format) except the few
    allowed above, each of which keeps values out of the text."""
    found = sql_built_from_strings(ROOT)
    allowed = {
        (rel, line)
        for rel, _, line in found
        if any(rel == a and line.startswith(start) for a, start in ALLOWED_SQL)
    }
    assert [f for f in found if (f[0], f[2]) not in allowed] == []
    # the allow-list names only what is there: a removed use must leave it too
    for a, start in ALLOWED_SQL:
        assert any(rel == a and line.startswith(start) for rel, _, line in found), (a, start)


def test_the_sql_scan_flags_built_strings(tmp_path: Path) -> None:
    """The scan above can fail: each way of building SQL from a value is caught."""
    planted = tmp_path / "recorder" / "planted.py"
    planted.parent.mkdir()
    planted.write_text(
        "from sqlalchemy import text\n"
        "def f(conn, model, key):\n"
        "    conn.execute(text(f\"SELECT * FROM streams WHERE model = '{model}'\"))\n"
        "    conn.exec_driver_sql(\"DELETE FROM streams WHERE id = '%s'\" % key)\n"
        '    conn.execute(text("SELECT 1 FROM streams WHERE id = \'" + key + "\'"))\n'
        "    q = \"UPDATE streams SET model = '{}'\".format(model)\n"
        '    conn.execute(text("SELECT :m"), {"m": model})\n'
    )
    found = sql_built_from_strings(tmp_path)
    assert [line for _, line, _ in found] == [3, 4, 5, 6]


HOSTILE_MODEL = "gpt-4o'; DROP TABLE streams; --"
HOSTILE_PROJECT = "proj' OR '1'='1"
HOSTILE_REQUEST_ID = "req'\"); DELETE FROM streams WHERE ('1'='1"


def _sessions(capsys: pytest.CaptureFixture[str], db: str, *argv: str) -> list[dict[str, Any]]:
    from recorder.cli.main import main

    assert main(["sessions", "--db", db, "--format", "json", "--limit", "0", *argv]) == 0
    return list(json.loads(capsys.readouterr().out))


def test_hostile_values_round_trip_and_filters_are_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A request whose model, project and request id are quotes and SQL is
    recorded as sent; `recorder sessions` filters given SQL match literally and
    drop nothing."""
    from recorder.store.migrate import upgrade
    from recorder.store.writer import SqlSink
    from tests.kit.proxy_thread import running_proxy

    db = f"sqlite:///{tmp_path / 'recorder.db'}"
    upgrade(db)
    upstream = Upstream("fine")
    try:
        with running_proxy(
            [f"reverse:{upstream.url}"],
            str(tmp_path / "confdir"),
            also=SqlSink(db, tmp_path / "spool"),
        ) as running:
            for model, project in (("gpt-4o", "plain"), (HOSTILE_MODEL, HOSTILE_PROJECT)):
                conn = http.client.HTTPConnection("127.0.0.1", running.port(), timeout=15)
                doc = {"model": model, "stream": True, "messages": []}
                headers = {
                    "authorization": "Bearer sk-" + rand(40),
                    "openai-project": project,
                    "x-echo-request-id": HOSTILE_REQUEST_ID if project != "plain" else "req1",
                }
                conn.request("POST", "/v1/chat/completions", orjson.dumps(doc), headers)
                conn.getresponse().read()
                conn.close()
            running.sink.wait_for(2)
    finally:
        upstream.close()

    everything = _sessions(capsys, db)
    assert len(everything) == 2
    hostile = [r for r in everything if r["model"] == HOSTILE_MODEL]
    assert len(hostile) == 1
    assert hostile[0]["project"] == HOSTILE_PROJECT
    assert hostile[0]["request_id"] == HOSTILE_REQUEST_ID
    assert hostile[0]["outcome"] == "completed"

    # a filter is a value, never SQL: it matches literally
    assert [r["id"] for r in _sessions(capsys, db, "--model", HOSTILE_MODEL)] == [hostile[0]["id"]]
    assert _sessions(capsys, db, "--model", "x' OR '1'='1") == []
    assert _sessions(capsys, db, "--model", "*' OR '1'='1") == []
    assert len(_sessions(capsys, db, "--model", "gpt-4o'*")) == 1  # the wildcard still works
    assert _sessions(capsys, db, "--key", "'; DROP TABLE streams; --") == []
    assert _sessions(capsys, db, "--key", "…' OR '1'='1") == []
    assert _sessions(capsys, db, "--key", "x' OR '1'='1:abc") == []
    assert _sessions(capsys, db, "--since", "2000-01-01", "--model", "a\\' OR 1=1 --") == []
    with pytest.raises(SystemExit) as exc:  # --endpoint takes one of the endpoints' names
        _sessions(capsys, db, "--endpoint", "chat.completions' OR '1'='1")
    assert exc.value.code == 2
    capsys.readouterr()
    # nothing was dropped or deleted
    assert [r["id"] for r in _sessions(capsys, db)] == [r["id"] for r in everything]
    with sqlite3.connect(tmp_path / "recorder.db") as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"streams", "stream_gaps", "stream_bodies", "settings"} <= tables
