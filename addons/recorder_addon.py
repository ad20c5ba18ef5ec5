"""Hand this file to mitmproxy: ``mitmdump -s addons/recorder_addon.py``.

The addon itself lives in the ``recorder`` package (recorder/proxy/); see its
docstring for the options.
"""

from recorder.proxy.script import ScriptRecorder

addons = [ScriptRecorder()]
