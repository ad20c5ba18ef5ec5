"""A model name built to attack the terminal it is printed on (issue 34 §4): it
sets the window's title, clears the screen and forges a log line of its own. A
client controls it (the request's ``model``), so does an upstream (the response's).

- ``HOSTILE_MODEL``: the value, as the client sends it;
- ``ESCAPED_MODEL``: how a text surface shows it (``recorder.core.printable``);
- ``assert_inert(text)``: ``text`` (a console's, a table's, a log's output) shows the
  value escaped and carries none of its sequences raw.
"""

from __future__ import annotations

HOSTILE_MODEL = "gpt-4o\x1b]0;PWNED\x07\x1b[2J\r\nrecorder: FORGED"
ESCAPED_MODEL = "gpt-4o\\x1b]0;PWNED\\x07\\x1b[2J\\r\\nrecorder: FORGED"
# the request's body, as the curl sends it
HOSTILE_BODY = (
    b'{"model":"gpt-4o\\u001b]0;PWNED\\u0007\\u001b[2J\\r\\nrecorder: FORGED",'
    b'"stream":true,"messages":[{"role":"user","content":"hi"}]}'
)


def assert_inert(text: str, *, shortened: bool = False) -> None:
    """The hostile value shows escaped in ``text`` (only its start when the
    surface ``shortened`` it), and none of its sequences or its forged line is there."""
    for raw in ("\x1b]0;", "\x1b[2J", "\x07", "\r"):
        assert raw not in text, f"{raw!r} reached the output:\n{text!r}"
    assert not any(line.lstrip().startswith("recorder: FORGED") for line in text.splitlines())
    assert ("gpt-4o\\x1b" if shortened else ESCAPED_MODEL) in text, text
