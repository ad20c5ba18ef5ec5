"""The optional parts: recording (the mitmproxy script, `recorder proxy`) imports
none of the packages of an extra; a command that needs a missing one says so in
one line, naming the extra. Both run in a fresh interpreter, whose modules are
its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recorder.cli.extras import EXTRAS

ROOT = Path(__file__).parents[2]

# Built as users build it: the script's first configure, then what `recorder proxy`
# makes of its command line (its composition root, the runner imported), each
# opening its store and closing it again.
RECORDING = """
import json, runpy, sys
from mitmproxy.test import taddons

def optional():
    return sorted({name.split(".")[0] for name in sys.modules} & set(OPTIONAL))

OPTIONAL = sys.argv[1].split(",")
tmp = sys.argv[2]
addon = runpy.run_path("addons/recorder_addon.py")["addons"][0]
with taddons.context(addon) as tctx:
    tctx.configure(addon, recorder_db=f"sqlite:///{tmp}/s.db", recorder_metrics_port=0)
    assert addon.app is not None
    addon.close()
script = optional()

from recorder.app import build
from recorder.cli.main import build_parser
from recorder.cli.proxy import Settings
import recorder.proxy.runner

args = build_parser().parse_args(["proxy", "--db", f"{tmp}/p.db", "--metrics-port", "0"])
app = build(Settings(args))
app.close()
print(json.dumps({"script": script, "proxy": optional()}))
"""


def test_recording_imports_no_optional_package(tmp_path: Path) -> None:
    """numpy is not among them: the metrics bucket intervals with it, on the
    recording path. Nor rich: every command's output goes through it (the CLI's
    entry point imports it), but the mitmproxy script does not."""
    optional = sorted({*EXTRAS, "rich"})
    res = subprocess.run(
        [sys.executable, "-c", RECORDING, ",".join(optional), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    found = json.loads(res.stdout.splitlines()[-1])
    assert found == {"script": [], "proxy": ["rich"]}, found
    assert (tmp_path / "s.db").is_file() and (tmp_path / "p.db").is_file()


# `recorder ARGS…` in an interpreter where the packages named in RECORDER_REFUSE
# cannot be imported, as if they were not installed.
REFUSING = """
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

REFUSED = set(sys.argv[1].split(","))
for name in list(sys.modules):
    if name.split(".")[0] in REFUSED:
        del sys.modules[name]
sys.meta_path.insert(0, Refuse())
from recorder.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(
    ("refused", "argv", "line"),
    [
        (
            "pyarrow",
            ["audit", "--format", "parquet", "--output", "out.parquet"],
            "recorder audit: --format parquet needs the 'audit' extra (pyarrow):"
            " pip install 'recorder[audit]'",
        ),
        (
            "pandas",
            ["audit", "--format", "json"],
            "recorder audit: needs the 'audit' extra (pandas): pip install 'recorder[audit]'",
        ),
        (
            "matplotlib",
            ["show", "0190", "--plot", "out.svg"],
            "recorder show: --plot needs the 'plot' extra (matplotlib):"
            " pip install 'recorder[plot]'",
        ),
        (
            "anthropic",
            ["demo"],
            "recorder demo: needs the 'demo' extra (anthropic): pip install 'recorder[demo]'",
        ),
    ],
)
def test_a_command_without_its_extra_says_which_in_one_line(
    tmp_path: Path, refused: str, argv: list[str], line: str
) -> None:
    db = f"sqlite:///{tmp_path}/recorder.db"  # never opened: the command stops first
    res = subprocess.run(
        [sys.executable, "-c", REFUSING, refused, *argv, "--db", db],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert (res.returncode, res.stderr, res.stdout) == (1, line + "\n", ""), res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


def test_with_the_extra_the_command_runs(tmp_path: Path, db_url: str) -> None:
    """The same command, nothing refused (the test would pass for a command that
    always refused otherwise)."""
    argv = ["audit", "--format", "parquet", "--output", "a.pq", "--db", db_url]
    res = subprocess.run(
        [sys.executable, "-c", REFUSING, "", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "a.pq").read_bytes()[:4] == b"PAR1"
    assert res.stderr == ""
