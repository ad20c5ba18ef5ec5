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
