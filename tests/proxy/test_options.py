"""The option table is the only place an option is declared: one attribute of the
table is a flag, a variable, a mitmproxy option, an attribute of the checked
configuration (and a field of the addon's when it is named like one), and a row
of the README's table."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from mitmproxy import exceptions, options
from mitmproxy.test import taddons

from recorder.app.script import ScriptRecorder
from recorder.app.settings import checked, spool_dir_of
from recorder.proxy.checks import OptionError, parse_count, parse_size
from recorder.proxy.config import RecorderConfig
from recorder.proxy.option_table import Option
from recorder.proxy.options import AppConfig

README = Path(__file__).parents[2] / "README.md"


class WithExtra(AppConfig):
    """The recorder's table and two options more, declared here and nowhere else:
    one the addon does not know, one named like a field of its configuration."""

    frobs = Option(3, "frobs per stream", parse_count, metavar="N")
    max_event_bytes = Option(
        "4MiB", "largest SSE event metered", parse_size, metavar="SIZE", runtime=True
    )


def parse(*argv: str, env: dict[str, str] | None = None) -> WithExtra:
    """What `recorder proxy` would make of ``argv`` and ``env`` with that table."""
    parser = argparse.ArgumentParser()
    WithExtra.add_flags(parser)
    args = parser.parse_args(list(argv))
    return WithExtra.resolve(WithExtra.from_args(args, environ=env or {}))


def test_an_added_option_is_a_flag_a_variable_a_set_and_a_field() -> None:
    assert parse().frobs == 3  # the default, checked
    assert parse("--frobs", "7").frobs == 7
    assert parse(env={"RECORDER_FROBS": "9"}).frobs == 9
    assert parse("--set", "recorder_frobs=11").frobs == 11
    assert parse("--frobs", "7", env={"RECORDER_FROBS": "9"}).frobs == 7  # the flag wins
    # its check, and messages that name where the value came from
    with pytest.raises(OptionError, match=r"^RECORDER_FROBS must be an integer, not 'many'"):
        parse(env={"RECORDER_FROBS": "many"})
    with pytest.raises(OptionError, match=r"^--frobs must be at least 1"):
        parse("--frobs", "0")
    # named like a field of the addon's configuration, it is that field
    config = parse("--max-event-bytes", "1M")
    assert config.max_event_bytes == 1 << 20
    assert RecorderConfig.of(config, key_secret=b"k").max_event_bytes == 1 << 20
    assert RecorderConfig.of(AppConfig(), key_secret=b"k").max_event_bytes == (
        RecorderConfig(key_secret=b"k").max_event_bytes
    )
    # the recorder's own table is untouched
    assert "frobs" not in {opt.name for opt in AppConfig.options()}


def test_an_added_option_is_a_mitmproxy_option_of_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Declared by the script's ``load`` on a real mitmproxy ``Options``, set as
    ``mitmdump --set`` sets it, checked by ``configure``, in the configuration the
    recorder is built from; changed while the proxy runs when the table says it
    may, refused otherwise."""
    monkeypatch.chdir(tmp_path)
    opts = options.Options()
    opts.set(
        "recorder_frobs=5",
        "recorder_max_event_bytes=2M",
        f"recorder_db=sqlite:///{tmp_path}/r.db",
        "recorder_metrics_port=0",
        "recorder_no_live=true",
        defer=True,  # as mitmdump holds --set of a script's options until it loads
    )
    addon = ScriptRecorder(WithExtra)
    with taddons.context(addon, options=opts) as tctx:
        try:
            tctx.configure(addon)  # mitmproxy's first configure: the recorder is built
            assert tctx.options.default("recorder_frobs") == 3
            assert tctx.options.default("recorder_max_event_bytes") == "4MiB"
            assert isinstance(addon.config, WithExtra) and addon.config.frobs == 5
            assert addon.app is not None
            assert addon.app.recorder.config.max_event_bytes == 2 << 20
            tctx.configure(addon, recorder_max_event_bytes="3M")
            assert addon.app.recorder.config.max_event_bytes == 3 << 20
            with pytest.raises(exceptions.OptionsError, match="recorder_frobs must be at least 1"):
                tctx.configure(addon, recorder_frobs=0)
            with pytest.raises(exceptions.OptionsError, match="recorder_frobs cannot change"):
                tctx.configure(addon, recorder_frobs=6)
            assert addon.config.frobs == 5 and tctx.options.recorder_frobs == 5
        finally:
            addon.close()
    assert (tmp_path / "r.db").exists() and not (tmp_path / "recorder.db").exists()


def _readme_row(opt: Option[object]) -> str:
    flag = opt.flag
    if opt.choices:
        flag += " " + "\\|".join(opt.choices)
    elif opt.metavar:
        flag += " " + opt.metavar
    flag = f"`{flag}`" + (" (repeatable)" if opt.repeat else "")
    if opt.declared:
        mitm = f"`{opt.declared}`"
    elif isinstance(opt.mitmproxy, str):
        mitm = f"mitmproxy's `--{opt.mitmproxy.replace('_', '-')}`"
    else:
        mitm = "none"
    default = opt.shown or (
        "off" if opt.default is False else "none" if opt.default == "" else f"`{opt.default}`"
    )
    return f"| {flag} | `{opt.env}` | {mitm} | {default} | {opt.doc} |"


def test_the_readme_has_one_row_per_option_made_from_the_table() -> None:
    want = [
        "| flag | variable | mitmproxy option | default | |",
        "|---|---|---|---|---|",
        *(_readme_row(opt) for opt in AppConfig.options()),
    ]
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(want[0])
    end = lines.index("", start)
    assert lines[start:end] == want, "the README's option table should be:\n" + "\n".join(want)


# -- two values that were taken for what they were not ------------------------------------


def proxy_config(*argv: str, env: dict[str, str] | None = None) -> AppConfig:
    """What `recorder proxy` makes of ``argv`` and ``env``, the store's checks too."""
    parser = argparse.ArgumentParser()
    AppConfig.add_flags(parser)
    return checked(AppConfig.from_args(parser.parse_args(list(argv)), environ=env or {}))


@pytest.mark.parametrize(
    ("argv", "env", "where"),
    [
        (["--mode", "reverse:127.0.0.1:9000"], {}, "--mode"),
        ([], {"RECORDER_MODE": "regular, reverse:127.0.0.1:9000"}, "RECORDER_MODE"),
        (["--set", "mode=reverse:127.0.0.1:9000"], {}, "--set mode"),
    ],
)
def test_a_reverse_target_without_its_scheme_is_refused(
    argv: list[str], env: dict[str, str], where: str
) -> None:
    """mitmproxy takes ``reverse:127.0.0.1:9000`` as HTTPS: every request to a
    plain-HTTP upstream would fail its TLS handshake. Refused at start instead,
    in one line naming the spec."""
    with pytest.raises(OptionError) as refused:
        proxy_config(*argv, env=env)
    assert str(refused.value) == (
        f"{where} reverse:127.0.0.1:9000: the reverse target needs its scheme:"
        " reverse:http://127.0.0.1:9000 or reverse:https://127.0.0.1:9000"
    )
    for spec in ("reverse:http://127.0.0.1:9000@8081", "reverse:https://api.openai.com"):
        assert proxy_config("--mode", spec).modes == [spec]
        assert proxy_config("--set", f"mode={spec}").modes == [spec]


def test_a_reverse_target_without_its_scheme_is_refused_under_mitmproxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    addon = ScriptRecorder()
    with taddons.context(addon) as tctx:
        try:
            with pytest.raises(
                exceptions.OptionsError,
                match=r"^recorder: --mode reverse:127\.0\.0\.1:9000: the reverse target needs"
                r" its scheme: reverse:http://127\.0\.0\.1:9000 or",
            ):
                tctx.configure(addon, mode=["reverse:127.0.0.1:9000"])
            assert tctx.options.mode == ["regular"]  # mitmproxy kept the old value
            tctx.configure(addon, mode=["reverse:http://127.0.0.1:9000"])
            assert tctx.options.mode == ["reverse:http://127.0.0.1:9000"]
        finally:
            addon.close()


@pytest.mark.parametrize(
    ("argv", "env", "where", "path"),
    [
        (["--db", "r.db"], {}, "--db", "r.db"),
        ([], {"RECORDER_DB": "data/r.sqlite"}, "RECORDER_DB", "data/r.sqlite"),
        (["--set", "recorder_db=r.sqlite3"], {}, "--set recorder_db", "r.sqlite3"),
    ],
)
def test_a_sqlite_file_given_as_the_store_is_that_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    where: str,
    path: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    config = proxy_config(*argv, env=env)
    assert config.db == f"sqlite:///{path}"
    assert config.notes == [f"{where} {path}: read as sqlite:///{path} (a SQLite file)"]
    assert spool_dir_of(config) == tmp_path / f"{path}.spool"


def test_a_url_is_said_nothing_of_and_other_paths_are_still_no_url() -> None:
    assert proxy_config("--db", "sqlite:///r.db").notes == []
    assert proxy_config().notes == []
    with pytest.raises(OptionError, match=r"^--db not a database URL: '/tmp/r' \(for a SQLite"):
        proxy_config("--db", "/tmp/r")


def test_a_sqlite_file_given_to_the_script_is_that_file_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    caplog.set_level("INFO", logger="recorder")
    addon = ScriptRecorder()
    with taddons.context(addon) as tctx:
        try:
            tctx.configure(
                addon, recorder_db="r.db", recorder_metrics_port=0, recorder_no_live=True
            )
            assert addon.config is not None and addon.config.db == "sqlite:///r.db"
            tctx.configure(addon, recorder_stall_after="5")  # configured again: not said again
        finally:
            addon.close()
    said = [r.getMessage() for r in caplog.records if "read as" in r.getMessage()]
    assert said == ["recorder: recorder_db r.db: read as sqlite:///r.db (a SQLite file)"]
    assert (tmp_path / "r.db").is_file()


def test_tag_headers_metrics_tag_and_the_retry_window_come_every_way() -> None:
    """Issue 32's options: repeatable tag headers (a flag each, or several in the
    variable or a --set), renamed with HEADER=TAG; the tag exported as a label;
    the retry window; each reaching the addon's configuration by name."""
    by_flags = parse("--tag-header", "X-Team", "--tag-header", "Helicone-Property-Feature=feature")
    assert by_flags.tag_headers == {"x-team": "x-team", "helicone-property-feature": "feature"}
    by_env = parse(env={"RECORDER_TAG_HEADER": "x-team, x-cost=cc"})
    assert by_env.tag_headers == {"x-team": "x-team", "x-cost": "cc"}
    assert parse("--set", "recorder_tag_header=x-a x-b").tag_headers == {"x-a": "x-a", "x-b": "x-b"}
    assert parse().tag_headers == {}
    with pytest.raises(OptionError, match=r"^--tag-header 'x-a=no/such'"):
        parse("--tag-header", "x-a=no/such")
    assert parse("--metrics-tag", "team").metrics_tag == "team"
    assert parse().metrics_tag is None
    for bad in ("model", "outcome", "not-a-label", "__x"):
        with pytest.raises(OptionError, match="--metrics-tag"):
            parse("--metrics-tag", bad)
    assert parse().retry_window == 600.0
    config = RecorderConfig.of(
        parse(
            "--retry-window", "30", "--keep-user-ids", "--strip-tag-headers", "--tag-header", "x-t"
        ),
        key_secret=b"s",
    )
    assert (config.retry_window, config.keep_user_ids, config.strip_tag_headers) == (
        30.0,
        True,
        True,
    )
    assert config.tag_headers == {"x-t": "x-t"}
