"""Byte templates: the repeated output deltas of a stream, read without a full parse.

Most events of a stream are output deltas that differ from one another only in
their text, and sometimes in a field that the interpreter ignores (OpenAI's
``obfuscation`` padding, the Responses ``sequence_number``). The interpreter
parses the first such event in full, like any other event, and learns a
:class:`Template` from it: the event's bytes, with holes where those values
are. A later event that is exactly the template's bytes with a valid token in
each hole parses, by construction, to the learned object with only those values
changed. Its whole effect is then known, and only the text is decoded, from its
hole. Any other event misses the template and is parsed in full.

Why a hit says exactly what a full parse would:

- The bytes around the holes are compared byte for byte. Each hole must hold one
  whole token of its kind: the inside of a JSON string that orjson accepts (the
  text); printable ASCII with no quote or backslash (an ignored string); an
  integer of 1 to 18 digits without a leading zero (an ignored integer). So the
  event tokenises like the learned one, token for token, with other values in
  the holes.
- When a template is learned, a probe (the learned bytes with other values in
  the holes) is parsed in full and must equal the learned object with those
  values changed at their paths. So each hole is exactly the token of the value
  at its path: not a part of a longer token, not the value of another key, not
  a duplicate key that loses.
- Interpreters learn only from an event whose whole effect is its text (a
  content delta, nothing else that counts), so that every other field of the
  event, fixed by the template, acts as it did on the learned event.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from recorder.core.protocols.base import TEXT, JSONDecodeError, Observations, loads

try:  # the same reader in C (_reader.c), built at install when a C compiler is there
    from recorder.core.protocols import _reader as native
except ImportError:  # pragma: no cover - an install without a compiler
    native = None  # type: ignore[assignment]

_TEXT, STRING, INT = 0, 1, 2  # hole kinds: the output text, an ignored string, an ignored integer
MAX_LEARNED = 32  # templates learned per stream at most: a stream that never repeats a
# shape (an id rotated on every event) would otherwise learn on every delta

Path = tuple[str | int, ...]
# a reader: an event's data -> the output characters it carried, or -1 (not read);
# a run: (a piece, where to start, the events' size cap) -> (where it stopped,
# events read, events that carried output); see Template.reader and runner
EventReader = Callable[[bytes], int]
EventRun = Callable[[bytes, int, int], tuple[int, int, int]]

_MAX_DIGITS = 18  # orjson reads an integer past 64 bits as a float; 18 digits never are
# A byte that a string's inside cannot hold as itself (a control character, the
# quote) or that begins an escape.
SPECIAL = re.compile(rb'[\x00-\x1f"\\]').search
# A byte other than printable ASCII without quote and backslash.
_NOT_PLAIN = re.compile(rb"[^\x20\x21\x23-\x5b\x5d-\x7e]").search
_AFTER_VALUE = frozenset(b",} \t\r\n")
_CONTAINER: dict[type, type] = {int: list, str: dict}  # what a path's key indexes


class Template:
    """The bytes of a learned event, with holes; see the module docstring.

    ``head`` is the literal before the first hole and ``tail`` the one after the
    last. ``left`` holds the holes before the text, in order, each as (kind, the
    literal after it); ``right`` the holes after the text, from the end, each as
    (the literal before it, kind).
    """

    __slots__ = ("head", "left", "right", "tail")

    def __init__(
        self,
        head: bytes,
        left: tuple[tuple[int, bytes], ...],
        right: tuple[tuple[bytes, int], ...],
        tail: bytes,
    ) -> None:
        self.head = head
        self.left = left
        self.right = right
        self.tail = tail

    def match(self, data: bytes) -> tuple[int, int] | None:
        """Where the text's inside is (``data[start:end]``), if ``data`` is the
        template with a valid token in each ignored hole; else None. The text
        itself is not checked here (see :func:`string_at`).

        Each ignored hole is found by the literal next to it (the first one after
        it, the last one before it): a valid hole cannot hold a part of that
        literal, whose end next to the hole is a byte the hole cannot hold (a
        quote, a colon, a comma, ...). Whatever is found, ``data`` is checked to
        be exactly the literals with valid holes between them."""
        head = self.head
        if not data.startswith(head):
            return None
        pos = len(head)
        for kind, lit in self.left:
            end = data.find(lit, pos)
            if end < 0 or not _valid(kind, data[pos:end]):
                return None
            pos = end + len(lit)
        tail = self.tail
        if not data.endswith(tail):
            return None
        end = len(data) - len(tail)
        for lit, kind in self.right:
            begin = data.rfind(lit, pos, end)
            if begin < 0 or not _valid(kind, data[begin + len(lit) : end]):
                return None
            end = begin
        if end < pos:
            return None
        return pos, end

    def framed(self, lead: bytes) -> Template | None:
        """This template for a whole SSE piece: ``lead`` (the lines before the
        data, ``data: `` or ``event: N`` + ``data: ``) and the event's data, then
        the line end and the blank line. None if a literal holds a line end (an
        event learned from several data lines).

        A piece this template reads is exactly one event whose data the plain
        template reads alike: the literals hold no line end, and no hole nor
        text that a reader accepts holds a control character (so neither CR
        nor LF), so the data is one line. The caller must still check the
        framer's conditions that are not in the bytes (nothing pending, the
        size cap) and that ``lead`` is the start of one event as above."""
        literals = [self.head, self.tail]
        literals += [lit for _, lit in self.left]
        literals += [lit for lit, _ in self.right]
        if any(lit.find(b"\n") >= 0 or lit.find(b"\r") >= 0 for lit in literals):
            return None
        return Template(lead + self.head, self.left, self.right, self.tail + b"\n\n")

    def reader(self, obs: Observations, kind: int, *, in_c: bool = True) -> EventReader:
        """A function of an event's data that, if the event matches the template
        and its text is a valid string, counts the text into ``obs`` as
        ``obs.add(kind, text)`` would, adds its length to ``output_chars`` and
        returns it; else it returns -1 and has counted nothing.

        The C reader (``_reader.Reader``) when the extension is built and
        ``in_c``, else the Python one below, which is its reference: both read
        the same bytes alike (tests/core/protocols/test_native_reader.py).
        """
        if in_c and native is not None:
            return native.Reader(obs, kind, self.head, self.left, self.right, self.tail)
        return self.python_reader(obs, kind)

    def python_reader(self, obs: Observations, kind: int) -> EventReader:
        """:meth:`reader` in Python. One call per event: :meth:`match` unrolled
        for the usual layouts (at most one hole before the text and two after
        it), then the tests of :func:`string_at` in the order that costs least,
        and the counting."""
        match = self.match if len(self.left) > 1 or len(self.right) > 2 else None
        head, tail = self.head, self.tail
        head_n, tail_n = len(head), len(tail)
        # b"": no such hole; else the literal after the hole before the text, the
        # literal before the hole next to the text, the one before the last hole
        # (with more holes than that, ``match`` reads the event and these go unused)
        kind0, lit0 = self.left[0] if self.left else (INT, b"")
        (lit2, kind2), (lit1, kind1) = (((b"", INT),) * 2 + self.right)[-2:]
        n0, n1, n2 = len(lit0), len(lit1), len(lit2)

        def read(data: bytes) -> int:
            if match is not None:
                span = match(data)
                if span is None:
                    return -1
                pos, end = span
            elif not data.startswith(head) or not data.endswith(tail):
                return -1
            else:
                pos = head_n
                end = len(data) - tail_n
                if lit0:
                    at = data.find(lit0, pos)
                    if at < 0:
                        return -1
                    hole = data[pos:at]
                    if kind0 == STRING:
                        if not hole.isalnum() and _NOT_PLAIN(hole) is not None:
                            return -1
                    elif (
                        not hole.isdigit()
                        or len(hole) > _MAX_DIGITS
                        or (hole[0] == 48 and len(hole) > 1)
                    ):
                        return -1
                    pos = at + n0
                if lit2:  # the last hole
                    at = data.rfind(lit2, pos, end)
                    if at < 0:
                        return -1
                    hole = data[at + n2 : end]
                    if kind2 == STRING:
                        if not hole.isalnum() and _NOT_PLAIN(hole) is not None:
                            return -1
                    elif (
                        not hole.isdigit()
                        or len(hole) > _MAX_DIGITS
                        or (hole[0] == 48 and len(hole) > 1)
                    ):
                        return -1
                    end = at
                if lit1:  # the hole next to the text
                    at = data.rfind(lit1, pos, end)
                    if at < 0:
                        return -1
                    hole = data[at + n1 : end]
                    if kind1 == STRING:
                        if not hole.isalnum() and _NOT_PLAIN(hole) is not None:
                            return -1
                    elif (
                        not hole.isdigit()
                        or len(hole) > _MAX_DIGITS
                        or (hole[0] == 48 and len(hole) > 1)
                    ):
                        return -1
                    end = at
                elif end < pos:
                    return -1
            # the text: data[pos:end], between two quotes
            raw = data[pos:end]
            if raw.find(b"\\") < 0:
                if raw.isascii():  # the commonest of all: a character a byte
                    if SPECIAL(raw) is not None:
                        return -1  # a quote or a control character, unescaped
                    n = end - pos
                    if n:
                        if kind == TEXT:
                            obs.text_chars += n
                            obs.output_deltas += 1
                        else:
                            obs.add_ascii(kind, n)
                        obs.output_chars += n
                    return n
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    return -1
                # (cheaper than the regular expression on multibyte text: isprintable
                # is false for every control character, and for a few others)
                if raw.find(b'"') >= 0 or (not text.isprintable() and SPECIAL(raw) is not None):
                    return -1
                n = obs.add_decoded(kind, text, end - pos)
            else:  # escapes: orjson reads them, and checks the rest
                try:
                    text = loads(data[pos - 1 : end + 1])  # the string with its quotes
                except JSONDecodeError:
                    return -1
                if type(text) is not str:
                    return -1
                n = obs.add_text(text) if kind == TEXT else obs.add(kind, text)
            obs.output_chars += n
            return n

        return read


def runner(read: EventReader) -> EventRun:
    """``run(data, pos, limit)`` for a reader of framed events (see
    :meth:`Template.framed`): read the whole events of ``data`` from ``pos`` on
    while each is at most ``limit`` bytes (its blank line included) and ``read``
    reads it; return where it stopped, the events read and how many carried
    output. The C reader's own ``run`` when ``read`` is one (no Python call per
    event), else the same loop in Python."""
    if native is not None and type(read) is native.Reader:
        return read.run

    def run(data: bytes, pos: int, limit: int) -> tuple[int, int, int]:
        events = outputs = 0
        size = len(data)
        while pos < size:
            stop = data.find(b"\n\n", pos)
            if stop < 0 or stop + 2 - pos > limit:
                break
            n = read(data[pos : stop + 2])
            if n < 0:
                break
            events += 1
            if n:
                outputs += 1
            pos = stop + 2
        return pos, events, outputs

    return run


def string_at(data: bytes, start: int, end: int) -> str | None:
    """The text of the JSON string whose inside is ``data[start:end]`` (between
    two quotes in ``data``), as orjson reads it; None if that is not exactly the
    inside of one string (an unescaped quote or control character, a bad escape,
    bad UTF-8). What a template's reader tests, in another order."""
    raw = data[start:end]
    if raw.find(b"\\") >= 0:
        try:
            text = loads(data[start - 1 : end + 1])
        except JSONDecodeError:
            return None
        return text if type(text) is str else None
    if SPECIAL(raw) is not None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def learn(
    data: bytes,
    obj: dict[str, Any],
    text: Path,
    ignored: tuple[tuple[str, int], ...] = (),
) -> Template | None:
    """A template of the event ``data`` (parsed: ``obj``), its text at the path
    ``text`` (whose last key names it in the bytes), with a hole for each
    top-level key of ``ignored`` that the event has, of the given kind. None if
    the event cannot be one (a key written twice or with escapes, spaced JSON
    this does not read, a probe that does not parse as it should, ...)."""
    holes: list[tuple[int, int, int, Path]] = []
    key = text[-1]
    span = _locate(data, key, _TEXT) if type(key) is str else None
    if span is None:
        return None
    holes.append((span[0], span[1], _TEXT, text))
    for name, kind in ignored:
        if name in obj:
            span = _locate(data, name, kind)
            if span is None:
                return None
            holes.append((span[0], span[1], kind, (name,)))
    holes.sort()
    # the probe: other values in the holes, each unlike the learned one and the others
    probe = bytearray()
    expected: Any = obj
    pos = 0
    try:
        for i, (start, end, kind, path) in enumerate(holes):
            if start < pos:
                return None
            learned = _get(obj, path)
            raw = data[start:end]
            value: str | int
            if kind == INT:
                if type(learned) is not int or not _valid(INT, raw):
                    return None
                value = 100 + i if learned != 100 + i else 200 + i
            else:
                if type(learned) is not str or (kind == STRING and not _valid(STRING, raw)):
                    return None
                value = f"q{i}" if learned != f"q{i}" else f"w{i}"
            probe += data[pos:start]
            probe += str(value).encode()
            pos = end
            expected = _replace(expected, path, value)
        probe += data[pos:]
        if loads(bytes(probe)) != expected:
            return None
        value = _get(obj, text)
    except (JSONDecodeError, LookupError, TypeError):
        return None
    lits = [data[: holes[0][0]]]
    lits += [data[holes[i][1] : holes[i + 1][0]] for i in range(len(holes) - 1)]
    lits.append(data[holes[-1][1] :])
    at = next(i for i, hole in enumerate(holes) if hole[2] == _TEXT)
    left = tuple((holes[i][2], lits[i + 1]) for i in range(at))
    right = tuple((lits[i], holes[i][2]) for i in range(len(holes) - 1, at, -1))
    template = Template(lits[0], left, right, lits[-1])
    span = template.match(data)  # the template must read its own event
    if span is None or string_at(data, span[0], span[1]) != value:
        return None
    return template


def _valid(kind: int, raw: bytes) -> bool:
    """Whether ``raw`` is a whole token of an ignored hole of this kind."""
    if kind == STRING:
        return raw.isalnum() or _NOT_PLAIN(raw) is None
    return raw.isdigit() and len(raw) <= _MAX_DIGITS and (raw[0] != 0x30 or len(raw) == 1)


def _locate(data: bytes, key: str, kind: int) -> tuple[int, int] | None:
    """The span of the value of ``"key":`` in ``data`` (a string's inside, or an
    integer's digits), if the key is written once, plainly; else None."""
    marker = b'"' + key.encode() + b'":'
    at = data.find(marker)
    if at < 0 or data.find(marker, at + 1) >= 0:
        return None
    start = at + len(marker)
    while data[start : start + 1] in (b" ", b"\t"):
        start += 1
    if kind == INT:
        end = start
        while data[end : end + 1].isdigit():
            end += 1
        if end == start or end >= len(data) or data[end] not in _AFTER_VALUE:
            return None
        return start, end
    if data[start : start + 1] != b'"':
        return None
    start += 1
    end = _string_end(data, start)
    return None if end < 0 else (start, end)


def _string_end(data: bytes, start: int) -> int:
    """Index of the quote closing the JSON string that starts at ``start``, or -1."""
    i = start
    while True:
        j = data.find(b'"', i)
        if j < 0:
            return -1
        k = j
        while k > start and data[k - 1] == 0x5C:  # count the backslashes before it
            k -= 1
        if (j - k) % 2 == 0:
            return j
        i = j + 1


def _get(obj: Any, path: Path) -> Any:
    for key in path:
        container = type(obj)
        if _CONTAINER.get(type(key)) is not container:
            raise TypeError("not the JSON container this path goes through")
        obj = obj[key]
    return obj


def _replace(obj: Any, path: Path, value: Any) -> Any:
    """A copy of ``obj`` with ``value`` at ``path`` (copying only along the path)."""
    if not path:
        return value
    copy = dict(obj) if type(obj) is dict else list(obj)
    copy[path[0]] = _replace(obj[path[0]], path[1:], value)  # type: ignore[index]
    return copy
