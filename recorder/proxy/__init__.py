"""The mitmproxy edge: the addon that taps streams, and how it is run."""
