"""The optional parts of the recorder: packages only some commands need, each in
an extra of the package (``pip install 'recorder[audit]'``; pyproject.toml lists
them), so that a user who only records installs none of them. The recording path
(``recorder proxy``, ``mitmdump -s addons/recorder_addon.py``) imports none; a
command that needs one asks :func:`require` first, and says in one line which
extra to install when it is missing."""

from __future__ import annotations

import importlib

from recorder.core.errors import RecorderError

# package -> the extra that installs it
EXTRAS = {
    "pandas": "audit",  # `recorder audit`: the groups are computed in pandas
    "pyarrow": "audit",  # `recorder audit --format parquet`
    "matplotlib": "plot",  # `recorder show ID --plot FILE`
    "openai": "demo",  # `recorder demo`: traffic through the official SDKs
    "anthropic": "demo",
    "boto3": "demo",  # its Amazon Bedrock step
    "google.genai": "demo",  # its Gemini steps (google-genai)
}


class MissingExtra(RecorderError):
    """A package of an extra is not installed (or cannot be imported)."""


def require(*packages: str, what: str = "") -> None:
    """Import ``packages``; for the first that cannot be, raise MissingExtra naming
    its extra (``what``: the option that needs it, ``--format parquet``)."""
    for package in packages:
        try:
            importlib.import_module(package)
        except ImportError:
            extra = EXTRAS[package]
            needs = f"{what} needs" if what else "needs"
            raise MissingExtra(
                f"{needs} the {extra!r} extra ({package}): pip install 'recorder[{extra}]'"
            ) from None
