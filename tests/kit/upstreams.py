"""Test kit for what sits between the recorder and a provider: a private certificate
authority with a server certificate for 127.0.0.1/localhost (made with `cryptography`),
and a real HTTP/1.1 forward proxy (CONNECT and absolute-form requests) that counts
what went through it, so a test can tell that the traffic really passed it.

Both are loopback only. Other tests use them directly or through the fixtures in
tests/proxy/conftest.py (``private_tls``, ``upstream_proxy``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_NAMES = ("localhost",)
LOOPBACK_IPS = ("127.0.0.1",)


@dataclass(frozen=True)
class PrivateTLS:
    """PEM files of a private CA and of a server certificate it signed."""

    ca_cert: Path  # what a client must trust (mitmproxy: ssl_verify_upstream_trusted_ca)
    server_cert: Path  # the server's certificate followed by the CA's (the chain)
    server_key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def make_private_tls(folder: Path, *, days: int = 2) -> PrivateTLS:
    """A fresh CA (``ca.pem``) and a server certificate for localhost and 127.0.0.1
    signed by it (``server.pem`` with the chain, ``server-key.pem``) in ``folder``.

    The CA is a real issuer (basic constraints CA, keyCertSign), the leaf a real
    server certificate (not a CA, serverAuth, subject alternative names): a
    verifying client (OpenSSL through mitmproxy or Python) accepts it only for
    those names and only when it trusts the CA.
    """
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "recorder test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in LOOPBACK_NAMES]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in LOOPBACK_IPS]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )

    pem = serialization.Encoding.PEM
    tls = PrivateTLS(folder / "ca.pem", folder / "server.pem", folder / "server-key.pem")
    tls.ca_cert.write_bytes(ca.public_bytes(pem))
    tls.server_cert.write_bytes(leaf.public_bytes(pem) + ca.public_bytes(pem))
    _write_key(tls.server_key, key)
    return tls


@dataclass
class ProxyTraffic:
    """What went through an :class:`UpstreamProxy`."""

    connects: list[str] = field(default_factory=list)  # CONNECT targets, host:port
    requests: list[tuple[str, str]] = field(default_factory=list)  # absolute-form: method, URL
    bytes_up: int = 0  # client to target, after the proxy's own request line
    bytes_down: int = 0  # target to client


class UpstreamProxy:
    """A small HTTP/1.1 forward proxy on 127.0.0.1: a corporate proxy for tests.

    ``CONNECT host:port`` opens a tunnel; an absolute-form request
    (``POST http://host:port/path HTTP/1.1``) is forwarded in origin form with
    ``Connection: close`` (one request per connection to the target, so the
    proxy never parses a response: it relays bytes until the target closes).
    Only loopback targets are allowed. :attr:`traffic` counts what passed.
    """

    def __init__(self) -> None:
        self.traffic = ProxyTraffic()
        self.port = 0
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``, what ``--mode upstream:`` takes."""
        return f"http://127.0.0.1:{self.port}"

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
        try:
            while data := await src.read(65536):
                with self._lock:
                    if up:
                        self.traffic.bytes_up += len(data)
                    else:
                        self.traffic.bytes_down += len(data)
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                if dst.can_write_eof():
                    dst.write_eof()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        target: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            first, *lines = head.decode("latin-1").split("\r\n")
            method, where, _version = first.split(" ")
            if method == "CONNECT":
                host, _, port = where.rpartition(":")
                authority, rest = where, b""
            else:
                scheme, _, after = where.partition("://")
                authority, slash, path = after.partition("/")
                if scheme != "http" or not authority:
                    raise ValueError(f"not an absolute http URL: {where!r}")
                host, _, port = authority.rpartition(":")
                if not host:  # no port in the URL
                    host, port = authority, "80"
                kept = [
                    line
                    for line in lines
                    if line and not line.lower().startswith(("proxy-", "connection:"))
                ]
                rest = "\r\n".join(
                    [f"{method} {slash}{path} HTTP/1.1", *kept, "Connection: close", "", ""]
                ).encode("latin-1")
            if host.strip("[]") not in LOOPBACK_NAMES + LOOPBACK_IPS:
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            t_reader, target = await asyncio.open_connection(host.strip("[]"), int(port))
            with self._lock:
                if method == "CONNECT":
                    self.traffic.connects.append(authority)
                else:
                    self.traffic.requests.append((method, where))
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                target.write(rest)
            await asyncio.gather(
                self._pipe(reader, target, True), self._pipe(t_reader, writer, False)
            )
        except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        except (ConnectionError, OSError):
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
        except asyncio.CancelledError:
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            for w in (target, writer):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[UpstreamProxy]:
        """Listen on a free loopback port, on its own thread, inside the block."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        stop = asyncio.Event()

        async def main() -> None:
            server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = int(server.sockets[0].getsockname()[1])
            ready.set()
            await stop.wait()
            server.close()
            # the clients' connections (kept alive by mitmproxy) end with the proxy
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        thread = threading.Thread(
            target=loop.run_until_complete, args=(main(),), name="upstream-proxy", daemon=True
        )
        thread.start()
        if not ready.wait(10):
            raise TimeoutError("the upstream proxy did not start")
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(stop.set)
            thread.join(10)
            if not thread.is_alive():
                loop.close()
