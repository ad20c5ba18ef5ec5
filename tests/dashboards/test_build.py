"""The dashboard is built with Grafana's own library (dashboards/build.py, with
grafana-foundation-sdk): building it again, with every socket refused, gives the
committed file byte for byte, and the committed JSON read back through the
library's dashboard model and written again is unchanged, so every field in it is
one of Grafana's schema (as the library knows it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "recorder-overview.json"

_OFFLINE = textwrap.dedent(
    """
    import socket, sys

    def refuse(*args, **kwargs):
        raise OSError("network blocked by the test")

    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.getaddrinfo = refuse
    socket.create_connection = refuse
    sys.path.insert(0, ".")
    from dashboards import build

    sys.exit(build.main(["--check"]))
    """
)


def test_building_again_offline_gives_the_committed_file() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _OFFLINE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "up to date" in done.stdout


def test_the_json_is_the_librarys_own_model() -> None:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    register_default_plugins()  # the panel and query types, to read them back
    model = Dashboard.from_json(doc)
    again = json.loads(JSONEncoder(sort_keys=True).encode(model))
    assert again == doc
    # a field Grafana does not know would be dropped on the way: the test would see it
    doc["panels"][1]["notAGrafanaOption"] = 1
    assert json.loads(JSONEncoder().encode(Dashboard.from_json(doc))) != doc


def test_the_check_fails_on_a_file_edited_by_hand(tmp_path: Path) -> None:
    from dashboards import build

    edited = tmp_path / "recorder-overview.json"
    edited.write_text(DASHBOARD.read_text().replace('"Requests"', '"Requests!"', 1))
    assert build.main(["--check", "--file", str(edited)]) == 1
    edited.write_text(DASHBOARD.read_text())
    assert build.main(["--check", "--file", str(edited)]) == 0
