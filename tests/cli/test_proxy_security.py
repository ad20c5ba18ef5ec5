"""`recorder proxy` security, as users run it: listeners and the mitmproxy CA key.

- The proxy's listeners and /metrics are bound to 127.0.0.1 by default (read
  from the kernel's table of listening sockets, and refused on this host's other
  addresses); listening beyond loopback gets a warning in the banner.
- mitmproxy's CA private key (``~/.mitmproxy/mitmproxy-ca.pem``) is never printed
  nor copied anywhere the recorder writes; the banner names only the certificate.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from recorder.proxy.exposure import exposure_warnings, is_loopback
from tests.kit.ports import free_port
from tests.kit.processes import start_proxy, stop

RECORDER = str(Path(sys.executable).parent / "recorder")


class _Upstream:
    url = "http://127.0.0.1:9"  # never contacted


def listening(port: int) -> list[str]:
    """The local addresses with a TCP socket listening on ``port`` (IPv4 and IPv6)."""
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, _, hexport = local.partition(":")
            if state != "0A" or int(hexport, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(addr)
            # each 32-bit word is in host byte order
            words = [
                raw[i : i + 4][::-1] if sys.byteorder == "little" else raw[i : i + 4]
                for i in range(0, len(raw), 4)
            ]
            packed = b"".join(words)
            assert len(addr) == width
            family = socket.AF_INET if width == 8 else socket.AF_INET6
            found.append(socket.inet_ntop(family, packed))
    return found


def other_address() -> str | None:
    """An address of this host that is not a loopback one (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the outgoing interface
        except OSError:
            return None
        addr = str(s.getsockname()[0])
    return None if is_loopback(addr) else addr


def test_listening_reads_the_kernels_table() -> None:
    """The check below can fail: a socket on another loopback address is seen as such."""
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        s.listen()
        assert listening(s.getsockname()[1]) == ["127.0.0.2"]
    with socket.socket(socket.AF_INET6) as s6:
        s6.bind(("::1", 0))
        s6.listen()
        assert listening(s6.getsockname()[1]) == ["::1"]


def test_loopback_by_default_and_no_ca_key_printed_or_copied(tmp_path: Path) -> None:
    regular_port = free_port()
    proc, port, metrics_port, banner = start_proxy(
        tmp_path,
        _Upstream(),
        "--mode",
        f"regular@{regular_port}",  # type: ignore[arg-type]
    )
    try:
        for p in (port, regular_port, metrics_port):
            assert listening(p) == ["127.0.0.1"], p
        other = other_address()
        if other is not None:  # this host's other address refuses the connection
            for p in (port, regular_port, metrics_port):
                with pytest.raises(OSError), socket.create_connection((other, p), timeout=2):
                    pass
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # while loopback accepts it
    finally:
        rest = stop(proc)
    output = banner + rest
    assert "WARNING" not in output
    # the banner names the CA certificate, never the key
    assert f"{tmp_path}/.mitmproxy/mitmproxy-ca-cert.pem" in banner
    assert set(re.findall(r"[\w.-]+\.(?:pem|p12|cer)\b", output)) == {"mitmproxy-ca-cert.pem"}
    assert_ca_key_kept_in_confdir(tmp_path, output)


def assert_ca_key_kept_in_confdir(home: Path, output: str) -> None:
    """The CA key is in the confdir, private, and nowhere else under ``home`` (the
    cwd, the database's and the spool's directory) nor in the output."""
    confdir = home / ".mitmproxy"
    key = confdir / "mitmproxy-ca.pem"
    assert b"PRIVATE KEY" in key.read_bytes()  # the check below can fail
    for private in (key, confdir / "mitmproxy-ca.p12"):
        assert private.stat().st_mode & 0o077 == 0, private  # readable by its owner only
    assert "PRIVATE KEY" not in output
    body = key.read_bytes().split(b"PRIVATE KEY-----")[1][:64].strip()  # a piece of the key
    outside = [
        p
        for p in home.rglob("*")
        if p.is_file() and confdir not in p.parents
        if b"PRIVATE KEY" in p.read_bytes() or body in p.read_bytes()
    ]
    assert outside == []
    assert body.decode() not in output


def test_demo_neither_prints_nor_copies_the_ca_key(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("RECORDER_KEY_SECRET", None)
    done = subprocess.run(
        [RECORDER, "demo", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "recorder-demo.db").exists()
    assert_ca_key_kept_in_confdir(tmp_path, done.stdout + done.stderr)


def test_listening_beyond_loopback_is_warned_of() -> None:
    """The banner's warning, for each kind of listener (no socket is opened here)."""
    assert (
        exposure_warnings(
            [("regular", "127.0.0.1", 8080), ("regular", "::1", 8081)], ("localhost", 9464)
        )
        == []
    )
    lines = exposure_warnings(
        [
            ("regular", "0.0.0.0", 8080),
            ("reverse:https://api.openai.com", "::", 8081),
            ("regular", "127.0.0.1", 8082),
        ],
        ("192.0.2.2", 9464),
    )
    text = " ".join(line.strip() for line in lines)
    assert sum(line.startswith("  WARNING:") for line in lines) == 3
    assert "0.0.0.0:8080" in text and "open proxy" in text
    assert "[::]:8081" in text and "https://api.openai.com" in text
    assert "8082" not in text
    assert "192.0.2.2:9464" in text and "costs" in text
    for host in ("", "0.0.0.0", "::", "192.0.2.2"):
        assert not is_loopback(host), host
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert is_loopback(host), host


def test_the_banner_carries_the_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`recorder proxy --listen-host 0.0.0.0 --metrics-host ::` says so in its banner
    (the banner is printed from the listeners mitmproxy reports; none is opened here)."""
    from recorder.cli.main import build_parser
    from recorder.cli.proxy import Settings, _banner
    from recorder.proxy.runner import Listener

    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("RECORDER_"):
            monkeypatch.delenv(name)
    args = build_parser().parse_args(["proxy", "--listen-host", "0.0.0.0", "--metrics-host", "::"])
    settings = Settings(args)
    settings.metrics_url = "http://[::]:9464/metrics"
    show = _banner(settings, str(tmp_path / ".mitmproxy"))
    show([Listener("regular", "0.0.0.0", 8080)])  # type: ignore[operator]
    out = capsys.readouterr().out
    assert "WARNING: the proxy listens on 0.0.0.0:8080" in out
    assert "WARNING: /metrics is served on [::]:9464" in out
    show([Listener("regular", "127.0.0.1", 8080)])  # type: ignore[operator]
    assert "WARNING" in capsys.readouterr().out  # /metrics is still open
