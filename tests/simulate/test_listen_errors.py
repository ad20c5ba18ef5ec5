"""A simulator that cannot listen says why once, as the operating system words it."""

from __future__ import annotations

import errno
import os
import socket

from tests.kit.cli import Cli


def test_a_port_in_use_is_said_once(cli: Cli) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = cli("simulate", "--port", str(port), "--quiet")
    assert ran.code == 1
    why = os.strerror(errno.EADDRINUSE)
    assert ran.err == (
        f"recorder simulate: cannot listen on 127.0.0.1:{port}: [Errno {errno.EADDRINUSE}] {why}\n"
    ), ran.err
