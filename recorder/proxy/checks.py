"""The checks of option values: each takes the value as given (text from a flag
or a variable, or a mitmproxy option's own type) and where it came from (the flag,
the variable, the option), and returns the value or raises OptionError naming
that place. The option table (``recorder.proxy.options``) names one per option;
the type a check returns is the type of the option's value."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recorder.core.errors import UsageError
from recorder.core.price_files import load_price_file
from recorder.core.pricing import PriceTable, PriceTableError


class OptionError(UsageError):
    """A bad option value; printed as one line, exit code 2 (under mitmproxy an
    ``OptionsError``)."""


# -- checks: (value as given, where it came from) -> value --------------------------


def text(value: Any, what: str) -> str:
    """Any text, as given."""
    return str(value)


def optional_text(value: Any, what: str) -> str | None:
    """Any text; none when empty."""
    return str(value) or None


def optional_path(value: Any, what: str) -> Path | None:
    """A file or directory (``~`` is the home directory); none when empty."""
    return Path(str(value)).expanduser() if value else None


def parse_prices(value: Any, what: str) -> PriceTable:
    """A price file overlaid on the shipped table (the shipped one alone when empty)."""
    try:
        return load_price_file(str(value) if value else None)
    except PriceTableError as e:
        raise OptionError(f"{what} {e}") from None


# What a file that is a SQLite database is called, given where a database URL is due.
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def parse_db(value: Any, what: str) -> str:
    """A database URL (checked by the store when it opens it), or the path of a
    SQLite file (``recorder.db``, ``~/data/llm.sqlite``), read as its URL."""
    given = str(value).strip()
    if "://" not in given and given.lower().endswith(SQLITE_SUFFIXES):
        return "sqlite:///" + os.path.expanduser(given)
    return given


def db_note(value: Any, url: str) -> str | None:
    """What to say once when a path was read as a SQLite URL."""
    return None if str(value).strip() == url else f"read as {url} (a SQLite file)"


def parse_port(value: Any, what: str) -> int:
    """A TCP port, 0-65535."""
    try:
        port = value if isinstance(value, int) and not isinstance(value, bool) else int(value)
    except ValueError:
        raise OptionError(f"{what} must be a port number, not {value!r}") from None
    if not 0 <= port <= 65535:
        raise OptionError(f"{what} must be between 0 and 65535, not {port}")
    return port


def parse_seconds(value: Any, what: str) -> float:
    """A positive number of seconds."""
    try:
        seconds = float(value)
    except ValueError:
        raise OptionError(f"{what} must be a number of seconds, not {value!r}") from None
    if not seconds > 0:
        raise OptionError(f"{what} must be positive, not {value}")
    return seconds


def parse_count(value: Any, what: str) -> int:
    """A whole number, at least 1."""
    try:
        n = value if isinstance(value, int) else int(value)
    except ValueError:
        raise OptionError(f"{what} must be an integer, not {value!r}") from None
    if n < 1:
        raise OptionError(f"{what} must be at least 1")
    return n


_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(value: Any, what: str) -> int:
    """A byte count: ``8388608``, ``512K``, ``8M``, ``8MiB``, ``1G`` (powers of 1024)."""
    raw = str(value if value is not None else "").strip().lower()
    raw = raw.removesuffix("ib").removesuffix("b")
    unit = raw[-1:] if raw[-1:] in ("k", "m", "g") else ""
    try:
        size = float(raw[: len(raw) - len(unit)]) * _SIZE_UNITS[unit]
    except ValueError:
        raise OptionError(f"{what} must be a size such as 8MiB or 65536, not {value!r}") from None
    if not 1 <= size < 2**63:
        raise OptionError(f"{what} must be at least 1 byte, not {value}")
    return int(size)


def parse_switch(value: Any, what: str) -> bool:
    """On or off: a flag given, ``--set name[=true|false]``, or a variable that is
    ``1``, ``true``, ``yes`` or ``on`` (anything else is off, as before)."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


class Choice:
    """One of ``choices``; when empty, what ``unset`` says (if it is given)."""

    def __init__(self, *choices: str, unset: Callable[[], str] | None = None) -> None:
        self.choices = choices
        self.unset = unset

    def __call__(self, value: Any, what: str) -> str:
        if value == "" and self.unset is not None:
            return self.unset()
        if value not in self.choices:
            raise OptionError(f"{what} must be {' or '.join(self.choices)}, not {value!r}")
        return str(value)


def parse_modes(value: Any, what: str) -> list[str]:
    """mitmproxy mode specs (a list, or text with several separated by spaces or
    commas), each checked by mitmproxy's own parser; a reverse target needs its
    scheme (mitmproxy would take ``reverse:127.0.0.1:9000`` as HTTPS, and every
    request to a plain-HTTP upstream would fail its TLS handshake)."""
    from mitmproxy.proxy.mode_specs import ProxyMode, ReverseMode

    specs = list(value) if isinstance(value, list | tuple) else str(value).replace(",", " ").split()
    for spec in specs:
        try:
            mode = ProxyMode.parse(spec)
        except ValueError as e:
            raise OptionError(f"invalid {what} {spec!r}: {e}") from None
        if isinstance(mode, ReverseMode) and "://" not in mode.data:
            raise OptionError(
                f"{what} {spec}: the reverse target needs its scheme:"
                f" reverse:http://{mode.data} or reverse:https://{mode.data}"
            )
    return specs or ["regular"]


def parse_tag_headers(value: Any, what: str) -> dict[str, str]:
    """Request headers read into tags (``--tag-header``, repeatable; in a variable or
    a mitmproxy option several, by spaces or commas): ``NAME`` is read into the tag
    ``NAME``, ``HEADER=TAG`` into the tag ``TAG``; names lower-cased."""
    from recorder.core.attribution import tag_name_ok

    given = value if isinstance(value, list | tuple) else [value]
    specs = [spec for raw in given for spec in str(raw or "").replace(",", " ").split()]
    out: dict[str, str] = {}
    for spec in specs:
        header, _, tag = spec.partition("=")
        header, tag = header.strip().lower(), (tag.strip() or header.strip()).lower()
        if not header or any(c in header for c in ":\r\n") or not tag_name_ok(tag):
            raise OptionError(
                f"{what} {spec!r}: a header name, or HEADER=TAG (a tag name is letters,"
                " digits and _ . : -, at most 64)"
            )
        out[header] = tag
    return out


# the labels every stream metric has already: a --metrics-tag may not take their names


def parse_metrics_tag(value: Any, what: str) -> str | None:
    """The tag exported as a label of the stream metrics (none when empty): a
    Prometheus label name that none of their labels has."""
    from recorder.metrics.budget_rules import label_name_ok
    from recorder.metrics.collectors import label_names

    name = str(value or "").strip()
    if not name:
        return None
    if not label_name_ok(name) or name in label_names():
        raise OptionError(
            f"{what} {name!r}: a tag exported as a label needs a Prometheus label name"
            " (letters, digits and _) that the metrics do not use already"
        )
    return name
