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
from enum import IntEnum
from typing import Any

from orjson import JSONDecodeError, loads

from recorder.core.framing import EventReader
from recorder.core.protocols.observations import Observations, OutputKind

try:  # the same reader in C (_reader.c), built at install when a C compiler is there
    import recorder.core.protocols._reader as native
except ImportError:  # pragma: no cover - an install without a compiler
    native = None  # type: ignore[assignment]


class HoleKind(IntEnum):
    """What a template's hole holds. Integers because the C reader takes them as such."""

    TEXT = 0  # the output text: the inside of a JSON string
    STRING = 1  # an ignored string: printable ASCII, no quote nor backslash
    INT = 2  # an ignored integer: 1 to 18 digits, no leading zero


MAX_LEARNED = 32  # templates learned per stream at most: a stream that never repeats a
# shape (an id rotated on every event) would otherwise learn on every delta

Path = tuple[str | int, ...]

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
        left: tuple[tuple[HoleKind, bytes], ...],
        right: tuple[tuple[bytes, HoleKind], ...],
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

    def literals(self) -> tuple[bytes, ...]:
        """The fixed bytes: the head, those after and before the holes, the tail."""
        return (
            self.head,
            *(lit for _, lit in self.left),
            *(lit for lit, _ in self.right),
            self.tail,
        )

    def enclosed(self, lead: bytes, trail: bytes) -> Template:
        """This template with ``lead`` before it and ``trail`` after it (a framer
        writes an event's data so as one piece: ``SSEFramer.whole_event``)."""
        return Template(lead + self.head, self.left, self.right, self.tail + trail)

    def reader(self, obs: Observations, kind: OutputKind, *, in_c: bool = True) -> EventReader:
        """A function of an event's data that, if the event matches the template
        and its text is a valid string, counts the text into ``obs`` as
        ``obs.add(kind, text)`` would, adds its length to ``output_chars`` and
        returns it; else it returns -1 and has counted nothing. No hole nor text
        that it reads holds a control character.

        The C reader (``_reader.Reader``) when the extension is built and
        ``in_c``, else :meth:`python_reader`, which is its reference: both read
        the same bytes alike (tests/core/protocols/test_native_reader.py).
        """
        if in_c and native is not None:
            return native.Reader(obs, kind, self.head, self.left, self.right, self.tail)
        return self.python_reader(obs, kind)

    def python_reader(self, obs: Observations, kind: OutputKind) -> EventReader:
        """:meth:`reader` in Python, the definition the C reader is held to: the
        event is the template with a valid token in each ignored hole
        (:meth:`match`) and one JSON string's inside in the text's
        (:func:`string_at`); its text counts as ``obs.add(kind, text)``."""
        match = self.match

        def read(data: bytes) -> int:
            span = match(data)
            if span is None:
                return -1
            text = string_at(data, *span)
            if text is None:
                return -1
            n = obs.add(kind, text)
            obs.output_chars += n
            return n

        return read


def native_scan() -> Callable[[bytes, int, int, int], tuple[int, int, int]] | None:
    """The C reader's ``scan`` (a JSON element walked to its end, see
    ``JSONArrayFramer``), None without the C reader (looked up at each call:
    the tests take it away)."""
    return None if native is None else native.scan


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
    ignored: tuple[tuple[str | Path, HoleKind], ...] = (),
) -> Template | None:
    """A template of the event ``data`` (parsed: ``obj``), its text at the path
    ``text`` (whose last key names it in the bytes), with a hole for each key of
    ``ignored`` that the event has (a top-level name, or a path whose last key is
    written once in the event), of the given kind. None if the event cannot be
    one (a key written twice or with escapes, spaced JSON this does not read, a
    probe that does not parse as it should, ...)."""
    holes: list[tuple[int, int, HoleKind, Path]] = []
    key = text[-1]
    span = _locate(data, key, HoleKind.TEXT) if type(key) is str else None
    if span is None:
        return None
    holes.append((span[0], span[1], HoleKind.TEXT, text))
    for name, kind in ignored:
        path: Path = name if isinstance(name, tuple) else (name,)
        if _has(obj, path):
            last = path[-1]
            span = _locate(data, last, kind) if type(last) is str else None
            if span is None:
                return None
            holes.append((span[0], span[1], kind, path))
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
            if kind is HoleKind.INT:
                if type(learned) is not int or not _valid(kind, raw):
                    return None
                value = 100 + i if learned != 100 + i else 200 + i
            else:
                if type(learned) is not str or (kind is HoleKind.STRING and not _valid(kind, raw)):
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
    at = next(i for i, hole in enumerate(holes) if hole[2] is HoleKind.TEXT)
    left = tuple((holes[i][2], lits[i + 1]) for i in range(at))
    right = tuple((lits[i], holes[i][2]) for i in range(len(holes) - 1, at, -1))
    template = Template(lits[0], left, right, lits[-1])
    span = template.match(data)  # the template must read its own event
    if span is None or string_at(data, span[0], span[1]) != value:
        return None
    return template


def _valid(kind: HoleKind, raw: bytes) -> bool:
    """Whether ``raw`` is a whole token of an ignored hole of this kind."""
    if kind is HoleKind.STRING:
        return raw.isalnum() or _NOT_PLAIN(raw) is None
    return raw.isdigit() and len(raw) <= _MAX_DIGITS and (raw[0] != 0x30 or len(raw) == 1)


def _locate(data: bytes, key: str, kind: HoleKind) -> tuple[int, int] | None:
    """The span of the value of ``"key":`` in ``data`` (a string's inside, or an
    integer's digits), if the key is written once, plainly; else None."""
    marker = b'"' + key.encode() + b'":'
    at = data.find(marker)
    if at < 0 or data.find(marker, at + 1) >= 0:
        return None
    start = at + len(marker)
    while data[start : start + 1] in (b" ", b"\t"):
        start += 1
    if kind is HoleKind.INT:
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


def _has(obj: Any, path: Path) -> bool:
    """Whether ``obj`` has a value at ``path`` (through dicts and lists)."""
    try:
        _get(obj, path)
    except (LookupError, TypeError):
        return False
    return True


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
