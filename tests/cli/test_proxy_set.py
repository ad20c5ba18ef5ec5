"""`recorder proxy --set NAME=VALUE` and `--mode upstream:…`: parsing, the one-line
errors, and a real run where a `--set` mitmproxy option decides what happens."""

from __future__ import annotations

import argparse
import os
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from recorder.cli import proxy
from recorder.proxy.checks import OptionError, parse_modes
from recorder.proxy.option_table import parse_sets
from recorder.proxy.options import AppConfig
from recorder.proxy.runner import SetError, check_sets
from recorder.simulate import run_in_thread
from tests.kit.processes import RECORDER, start_proxy
from tests.kit.tls import self_signed
from tests.kit.traffic import post_stream


def proxy_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    proxy.add_parser(sub)
    return parser.parse_args(["proxy", *argv])


def test_set_specs_are_name_value_pairs() -> None:
    assert parse_sets(["ssl_insecure=true", "upstream_cert", "a=b=c"]) == [
        ("ssl_insecure", "true"),
        ("upstream_cert", "true"),  # a bare name switches a boolean on, as mitmproxy reads it
        ("a", "b=c"),
    ]
    with pytest.raises(OptionError, match="NAME=VALUE"):
        parse_sets(["=1"])
    # the recorder's own options are not mitmproxy's: they are read as their flags
    assert AppConfig.mitmproxy_sets(["ssl_insecure=true", "recorder_stall_after=2"]) == [
        "ssl_insecure=true"
    ]


def test_a_recorder_option_through_set_is_its_flag() -> None:
    args = proxy_args("--set", "recorder_stall_after=2", "--set", "recorder_capture_bodies")
    config = AppConfig.resolve(AppConfig.from_args(args, environ={}))
    assert config.stall_after == 2.0 and config.capture_bodies is True
    # the flag wins over --set, which wins over the variable
    args = proxy_args("--stall-after", "5", "--set", "recorder_stall_after=2")
    assert AppConfig.resolve(AppConfig.from_args(args, environ={})).stall_after == 5.0
    args = proxy_args("--set", "recorder_stall_after=2")
    assert (
        AppConfig.resolve(
            AppConfig.from_args(args, environ={"RECORDER_STALL_AFTER": "7"})
        ).stall_after
        == 2.0
    )
    # and its errors name the --set
    with pytest.raises(OptionError, match=r"^--set recorder_stall_after must be positive"):
        AppConfig.resolve(
            AppConfig.from_args(proxy_args("--set", "recorder_stall_after=-1"), environ={})
        )
    with pytest.raises(OptionError, match="no such recorder option"):
        AppConfig.from_args(proxy_args("--set", "recorder_nosuch=1"), environ={})


def test_mitmproxy_checks_the_names_and_values_of_set() -> None:
    check_sets(["ssl_insecure=true", "upstream_cert=false", "connection_strategy=lazy"])
    with pytest.raises(SetError, match=r"^--set no_such_option: no such mitmproxy option"):
        check_sets(["ssl_insecure=true", "no_such_option=1"])
    with pytest.raises(SetError, match=r"^--set ssl_insecure: .*boolean"):
        check_sets(["ssl_insecure=maybe"])
    # mitmweb's own options exist with --web only
    check_sets(["web_columns=path"], web=True)
    with pytest.raises(SetError):
        check_sets(["web_columns=path"])


def test_upstream_mode_is_a_mode() -> None:
    assert parse_modes(["upstream:http://127.0.0.1:3128"], "--mode") == [
        "upstream:http://127.0.0.1:3128"
    ]
    config = AppConfig.resolve(
        AppConfig.from_args(proxy_args("--mode", "upstream:http://corp-proxy:3128"), {})
    )
    assert config.modes == ["upstream:http://corp-proxy:3128"]
    with pytest.raises(OptionError, match=r"^invalid --mode 'upstream:'"):
        parse_modes(["upstream:"], "--mode")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--set", "no_such_option=1"],
            "recorder proxy: --set no_such_option: no such mitmproxy option",
        ),
        (["--set", "ssl_insecure=maybe"], "recorder proxy: --set ssl_insecure: "),
        (["--set", "recorder_nosuch=1"], "recorder proxy: --set recorder_nosuch: no such"),
        (["--mode", "upstream:"], "recorder proxy: invalid --mode 'upstream:'"),
        (
            ["--mode", "reverse:127.0.0.1:9000"],
            "recorder proxy: --mode reverse:127.0.0.1:9000: the reverse target needs its scheme",
        ),
        (
            ["--set", "mode=reverse:127.0.0.1:9000"],
            "recorder proxy: --set mode reverse:127.0.0.1:9000: the reverse target needs",
        ),
    ],
)
def test_a_bad_set_or_mode_is_one_line_and_creates_nothing(
    tmp_path: Path, argv: list[str], line: str
) -> None:
    res = subprocess.run(
        [RECORDER, "proxy", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), res.stderr
    assert list(tmp_path.iterdir()) == [], "a refused start left files"


@pytest.fixture
def tls_sim(tmp_path: Path) -> Iterator[object]:
    """The simulator over TLS, with a self-signed certificate no one trusts."""
    certs = tmp_path / "certs"
    certs.mkdir()
    cert, key = self_signed(certs)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    with run_in_thread(tls=ctx) as sim:
        yield sim


def _outcomes(tmp_path: Path) -> list[tuple[str, int | None]]:
    with sa.create_engine(f"sqlite:///{tmp_path / 'recorder.db'}").connect() as conn:
        rows = conn.execute(sa.text("SELECT outcome, http_status FROM streams")).all()
    return [(r[0], r[1]) for r in rows]


@pytest.mark.slow
def test_set_ssl_insecure_reaches_an_upstream_no_one_trusts(
    tmp_path: Path, tls_sim: object
) -> None:
    """Through `recorder proxy` in reverse mode to the simulator over TLS with a
    self-signed certificate: mitmproxy refuses that upstream by default, and
    `--set ssl_insecure=true` lets the stream through and metered."""
    sim = tls_sim
    assert sim.url.startswith("https://")  # type: ignore[attr-defined]
    for insecure in (False, True):
        run = tmp_path / ("insecure" if insecure else "default")
        run.mkdir()
        extra = ["--set", "ssl_insecure=true"] if insecure else []
        proc, port, _, _ = start_proxy(run, sim, *extra)  # type: ignore[arg-type]
        try:
            if insecure:
                body = post_stream(port, "gpt-4o")
                assert b"data: [DONE]" in body
            else:
                with pytest.raises(Exception, match="502"):
                    post_stream(port, "gpt-4o")
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        rows = _outcomes(run)
        if insecure:
            assert rows == [("completed", 200)], out
        else:
            # the upstream was never reached: no stream to record, or a failed one
            assert all(outcome != "completed" for outcome, _ in rows), rows
