"""`recorder proxy` as users run it: a subprocess, SQLite, metrics, SIGTERM/SIGINT.

After a run, every request is a row, and the Prometheus counters agree with the
rows the process wrote (streams, tokens and cost by source).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import openai
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from recorder.simulate import Simulator, run_in_thread
from tests.kit.processes import RECORDER, start_proxy

MESSAGES = [{"role": "user", "content": "Tell me about harmony."}]


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as simulator:
        yield simulator


def drive(port: int) -> int:
    """A mix of traffic; returns the number of requests sent."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-cli-test-9876")
    client = client.with_options(max_retries=0)
    models = [
        "gpt-4o",
        "gpt-4o-mini",  # no include_usage: estimated
        "gpt-4o+rst=5",  # cut: estimated output
        "gpt-4o+keepalive=0.2+stall=1.2",
        "gpt-4o+error=4",
        "gpt-4o+status=429",
    ]
    for model in models:
        try:
            options = {"include_usage": True} if model != "gpt-4o-mini" else None
            stream = client.chat.completions.create(
                model=model,
                messages=MESSAGES,  # type: ignore[arg-type]
                stream=True,
                **({"stream_options": options} if options else {}),  # type: ignore[arg-type]
            )
            for _ in stream:
                pass
        except (openai.APIError, openai.APIConnectionError):
            pass
    client.chat.completions.create(model="gpt-4o", messages=MESSAGES)  # type: ignore[arg-type]
    return len(models) + 1


def scrape(metrics_port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def total(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return sum(
        v
        for (n, lbls), v in samples.items()
        if n == name and all(dict(lbls).get(k) == want for k, want in labels.items())
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_records_flushed_on_signal_and_metrics_agree_with_the_db(
    tmp_path: Path, sim: Simulator, sig: signal.Signals
) -> None:
    proc, port, metrics_port, banner = start_proxy(tmp_path, sim)
    try:
        assert f"OPENAI_BASE_URL=http://127.0.0.1:{port}/v1" in banner
        assert f"http://127.0.0.1:{metrics_port}/metrics" in banner
        sent = drive(port)
        deadline = time.monotonic() + 10
        while True:  # records reach the counters when each stream ends
            samples = scrape(metrics_port)
            if total(samples, "llm_streams_total") >= sent or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert f"{sent} records: {sent} written to the database" in out
    assert "; 0 streams were still open and cut by the shutdown" in out

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'recorder.db'}")
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM streams")).mappings().all()
    assert len(rows) == sent == total(samples, "llm_streams_total")
    outcomes = sorted(r["outcome"] for r in rows)
    assert outcomes == sorted(["completed"] * 4 + ["upstream_disconnect", "error", "http_error"])
    for outcome in set(outcomes):
        assert total(samples, "llm_streams_total", outcome=outcome) == outcomes.count(outcome)
    # tokens by type and source, and cost by source, equal the database's sums
    for token_type, column, source_col in [
        ("input", "input_tokens", "input_source"),
        ("output", "output_tokens", "output_source"),
    ]:
        for source in ("reported", "estimated"):
            db_sum = sum(r[column] or 0 for r in rows if r[source_col] == source)
            assert (
                total(samples, "llm_tokens_total", token_type=token_type, source=source) == db_sum
            )
    estimated = [r for r in rows if r["output_source"] == "estimated"]
    assert len(estimated) >= 2  # no include_usage, and the cut stream
    for source in ("reported", "estimated"):
        want = sum(
            (
                Decimal(str(r["cost_usd"]))
                for r in rows
                if r["cost_usd"] is not None
                and ((r["usage_source"] == "reported") == (source == "reported"))
            ),
            Decimal(0),
        )
        got = total(samples, "llm_cost_usd_total", source=source)
        assert abs(Decimal(str(got)) - want) < Decimal("1e-9")
    assert b"sk-cli-test-9876" not in (tmp_path / "recorder.db").read_bytes()


def test_bad_options_give_one_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    for args in (
        ["--listen-port", "70000"],
        ["--mode", "bogus:thing"],
        ["--mode", "reverse:127.0.0.1:9000"],  # no scheme: it would be taken as HTTPS
        ["--stall-after", "-3"],
        ["--prices", str(tmp_path / "missing.json")],
        ["--db", "nosuchdriver://x"],
        ["--otlp-endpoint", "collector:4318"],
    ):
        res = subprocess.run(
            [RECORDER, "proxy", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        assert res.returncode != 0, args
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("recorder proxy:"), (args, res.stderr)


def test_options_from_environment(tmp_path: Path) -> None:
    env = {**os.environ, "RECORDER_LISTEN_PORT": "notaport"}
    res = subprocess.run(
        [RECORDER, "proxy"], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert res.returncode == 2, res.stderr
    # the message names where the value came from: the variable, not the flag
    assert (
        res.stderr == "recorder proxy: RECORDER_LISTEN_PORT must be a port number, not 'notaport'\n"
    )


def run_proxy(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`recorder proxy` that is expected to stop at once."""
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(
        [RECORDER, "proxy", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )


@pytest.mark.parametrize("which", ["proxy", "reverse", "metrics"])
def test_a_port_in_use_is_one_line_and_creates_nothing(tmp_path: Path, which: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        args = {
            "proxy": ["--listen-port", str(port), "--metrics-port", "0"],
            "reverse": ["--mode", f"reverse:http://127.0.0.1:9@{port}", "--metrics-port", "0"],
            "metrics": ["--listen-port", "0", "--metrics-port", str(port)],
        }[which]
        res = run_proxy(tmp_path, *args)
    hint = {"proxy": "--listen-port", "reverse": "change the port in --mode"}.get(
        which, "--metrics-port"
    )
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines() == [
        f"recorder: cannot listen on 127.0.0.1:{port}: address already in use ("
        + ("use " if which != "reverse" else "")
        + f"{hint})"
    ], res.stderr
    assert res.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "the failed start left files"


def test_database_url_mistakes_are_one_line(tmp_path: Path) -> None:
    # (--db, the line's start, the exit code: 2 for a value that is no URL at all,
    # as for any bad option; 1 for a store that cannot be created)
    cases = [
        ("sqlite:////proc/x.db", "cannot create the SQLite database /proc/x.db: ", 1),
        (
            f"sqlite:///{tmp_path}/no/dir/x.db",
            f"cannot create the SQLite database {tmp_path}/no/dir/x.db: {tmp_path}/no/dir"
            " does not exist",
            1,
        ),
        (
            "/tmp/rev",
            "--db not a database URL: '/tmp/rev' (for a SQLite file, write sqlite:////tmp/rev)",
            2,
        ),
    ]
    for db, want, code in cases:
        res = run_proxy(tmp_path, "--db", db, "--listen-port", "0", "--metrics-port", "0")
        assert res.returncode == code, (db, res.stderr)
        lines = res.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"recorder proxy: {want}"), (db, lines)
    assert not (tmp_path / "no").exists()  # no directory made up


def test_a_sqlite_file_given_as_db_is_that_file(tmp_path: Path, sim: Simulator) -> None:
    """`--db r.db` (no URL): recorded in that SQLite file, and said so once."""
    proc, port, _, banner = start_proxy(tmp_path, sim, "--db", "r.db")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-path-1234")
        client.with_options(max_retries=0).chat.completions.create(
            model="gpt-4o",
            messages=MESSAGES,  # type: ignore[arg-type]
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    said = "recorder proxy: --db r.db: read as sqlite:///r.db (a SQLite file)"
    assert (banner + out).count(said) == 1, banner + out
    assert "records:  sqlite:///r.db" in banner
    assert "1 record: 1 written to the database" in out
    with sa.create_engine(f"sqlite:///{tmp_path / 'r.db'}").connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM streams")).scalar_one() == 1
    assert not (tmp_path / "recorder.db").exists()


def test_the_files_holding_records_are_private(tmp_path: Path, sim: Simulator) -> None:
    """The database, its -wal and -shm, and the --jsonl file: 0600 under umask 022."""
    old = os.umask(0o022)
    try:
        proc, port, _, _ = start_proxy(tmp_path, sim, "--jsonl", str(tmp_path / "out.jsonl"))
    finally:
        os.umask(old)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-modes-1234")
        client.with_options(max_retries=0).chat.completions.create(
            model="gpt-4o",
            messages=MESSAGES,  # type: ignore[arg-type]
        )
        files = ["recorder.db", "recorder.db-wal", "recorder.db-shm", "out.jsonl"]
        deadline = time.monotonic() + 20  # until the record is written to both
        while time.monotonic() < deadline and not (
            all((tmp_path / name).exists() for name in files)
            and (tmp_path / "out.jsonl").stat().st_size
        ):
            time.sleep(0.1)
        modes = {name: oct((tmp_path / name).stat().st_mode & 0o777) for name in files}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert modes == dict.fromkeys(files, "0o600"), modes
