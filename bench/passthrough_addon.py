"""The anchor of the proxy benchmarks: ``mitmdump -s bench/passthrough_addon.py``.

Its only work is what any streaming addon must do: without a stream callable
mitmproxy buffers a whole SSE body before the client sees a byte. The callable
returns its input, so this is mitmproxy's own cost of carrying a stream.
"""

from typing import Any


def _same(data: bytes) -> bytes:
    return data


class Passthrough:
    def responseheaders(self, flow: Any) -> None:
        if flow.response is not None:
            flow.response.stream = _same


addons = [Passthrough()]
