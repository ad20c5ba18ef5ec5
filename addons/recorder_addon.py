"""Hand this file to mitmproxy: ``mitmdump -s addons/recorder_addon.py`` (or
``mitmweb -s addons/recorder_addon.py``: each metered flow then carries the
record's summary as its comment, and an "LLM stream" content view shows its
events with their times).

It records what ``recorder proxy`` records, and serves ``/metrics`` on
127.0.0.1:9464 (``--set recorder_metrics_port=0`` for none). The addon lives in
the ``recorder`` package (recorder/app/script.py); ``mitmdump --options`` lists
its ``recorder_…`` options, and the README has the table.
"""

from recorder.app.script import ScriptRecorder

addons = [ScriptRecorder()]
