"""The demo's scaled time, shared by its command (``demo``) and its scenarios.

A module of its own so that the scenarios, which import the SDKs, and the command,
which imports them only when it runs, need not import each other.
"""

# Time is scaled: the demo's stall threshold, in seconds (the proxy's default is 30).
DEMO_STALL_AFTER = 1.0
