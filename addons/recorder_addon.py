"""Hand this file to mitmproxy: ``mitmdump -s addons/recorder_addon.py`` (or
``mitmweb -s addons/recorder_addon.py``: each metered flow then carries the
record's summary as its comment, and an "LLM stream" content view shows its
events with their times).

The addon itself lives in the ``recorder`` package (recorder/proxy/); see its
docstring for the options.
"""

from recorder.proxy.script import ScriptRecorder
from recorder.proxy.webview import WebView

recorder = ScriptRecorder()
addons = [recorder, WebView(recorder)]
