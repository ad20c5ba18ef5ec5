"""The anchor of ``bench_overhead.py --anchor master``: mitmproxy as ``recorder proxy``
runs it, without the recorder.

``recorder proxy`` builds mitmproxy's ``DumpMaster`` without its Dumper addon
(``recorder/proxy/runner.py``: ``with_dumper=False``), while the default anchor,
``mitmdump``, runs the Dumper's hooks on every flow even with ``flow_detail=0``.
On long streams that difference is lost in the per-event cost; on short ones
(``--short``) it is a per-flow cost that the recorder does not pay and the default
anchor does. This runs mitmdump's command line on the master ``recorder proxy``
uses: ``python bench/anchor_proxy.py [mitmdump arguments]`` (the passthrough
addon with ``-s``, as for ``mitmdump``).
"""

from __future__ import annotations

import sys
from typing import Any

from mitmproxy import options
from mitmproxy.tools import cmdline, main
from mitmproxy.tools.dump import DumpMaster


class NoDumperMaster(DumpMaster):
    """``DumpMaster`` as ``recorder proxy`` builds it: no Dumper."""

    def __init__(self, opts: options.Options, loop: Any = None) -> None:
        super().__init__(opts, loop, with_termlog=True, with_dumper=False)


if __name__ == "__main__":
    main.run(NoDumperMaster, cmdline.mitmdump, sys.argv[1:])
