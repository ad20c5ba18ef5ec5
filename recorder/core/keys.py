"""API key fingerprints: keyed, non-reversible, recognisable; and masks for echoes.

A key is never stored or exported. What is kept is
``…<last four characters>:<12 hex digits of HMAC-SHA256(secret, key)>``: the
last four characters let a person tell their keys apart (providers' dashboards
show the same), the HMAC makes the fingerprint stable for one secret and
useless for guessing the key without it. The secret comes from
``RECORDER_KEY_SECRET`` or from the database (``recorder.store.secret``), so
that every proxy sharing a database shares it.

A key travels in a header (``Authorization: Bearer``, Anthropic's ``x-api-key``,
Azure's ``api-key``, Google's ``x-goog-api-key``) or, with some gateways, in the
query string (``?api-key=``, ``?api_key=``, ``?key=``); a request may carry
several, and ``Proxy-Authorization`` besides. :func:`authenticating_key` picks the
one the provider authenticates with (fingerprinted); :func:`request_keys` lists
them all. An upstream may echo any of them back in an error, raw or written
with JSON escapes (``sk\\u002dabc``, ``\\/``) or percent-encoded:
:class:`KeyMask` masks every one of them in error texts (``[api key]``) and in a
captured body (as many ``*`` as the echo's bytes, so the body's timeline still
fits it).
"""

from __future__ import annotations

import hmac
import re
from bisect import bisect_right
from collections.abc import Iterable

KEY_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")
# Credentials that are masked but never fingerprinted: the proxy's, not the
# provider's, and AWS's session token (temporary credentials: a secret, not a key id).
MASK_ONLY_HEADERS = ("proxy-authorization", "x-amz-security-token")
CREDENTIAL_HEADERS = KEY_HEADERS + MASK_ONLY_HEADERS

QUERY_KEY_PARAMS = ("api-key", "api_key", "key")

# Which header a provider authenticates with, first: Anthropic's Messages API
# takes x-api-key (a Bearer token there is a gateway's or an OAuth one), Azure
# OpenAI takes api-key (a Bearer token there is an Entra ID one), OpenAI and
# the OpenAI-compatible APIs take the Bearer token.
_ORDER_DEFAULT = ("authorization", "api-key", "x-api-key", "x-goog-api-key")
_ORDER_MESSAGES = ("x-api-key", "authorization", "api-key", "x-goog-api-key")
_ORDER_AZURE = ("api-key", "authorization", "x-api-key", "x-goog-api-key")

# A string shorter than this is not masked: it is no real key, and masking it
# would blot out ordinary text.
MIN_KEY_CHARS = 8


_AUTH_HEADERS = frozenset({"authorization", "proxy-authorization"})
SIGV4 = "aws4-hmac-sha256"
_SIGV4_CREDENTIAL = re.compile(r"Credential=([A-Za-z0-9]+)/")
_SIGV4_SIGNATURE = re.compile(r"Signature=([0-9A-Fa-f]+)")


def sigv4_key_id(value: str) -> str | None:
    """The access key id of an ``Authorization: AWS4-HMAC-SHA256 Credential=AKIA…/…``
    value (what identifies an AWS caller, as an API key does; the signature is a
    one-request secret, never kept); None when the value is no SigV4 one."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != SIGV4:
        return None
    found = _SIGV4_CREDENTIAL.search(rest)
    return found.group(1) if found else None


def _sigv4_parts(value: str) -> list[str]:
    """What of a SigV4 Authorization value to mask: the whole, the key id, the signature."""
    parts = [value.strip()]
    for pattern in (_SIGV4_CREDENTIAL, _SIGV4_SIGNATURE):
        found = pattern.search(value)
        if found:
            parts.append(found.group(1))
    return parts


def _header_keys(name: str, value: str) -> list[str]:
    """The credentials in one header's value: for the Authorization headers, the
    token after the scheme (SigV4's: its key id and signature); a repeated header
    comes folded with ", " (its whole value and each part)."""
    value = value.strip()
    if name == "authorization" and value[:16].lower() == SIGV4:
        return _sigv4_parts(value)
    if name in _AUTH_HEADERS:
        scheme, _, token = value.partition(" ")
        value = token.strip() or scheme
    if "," not in value:
        return [value] if value else []
    out = [value]
    for part in value.split(","):
        part = part.strip()
        if name in _AUTH_HEADERS:
            scheme, _, token = part.partition(" ")
            part = token.strip() or scheme
        if part:
            out.append(part)
    return out


def authenticating_key(
    headers: dict[str, str] | object,
    query: object = None,
    *,
    endpoint: str | None = None,
    host: str = "",
    path: str = "",
) -> str | None:
    """The API key the provider authenticates this request with (the one that is
    fingerprinted), or None. ``query``: a mapping of the query string's parameters
    (e.g. mitmproxy's ``request.query``), read only when no header carries a key."""
    get = getattr(headers, "get", None)
    if get is not None:
        if endpoint == "messages":
            order = _ORDER_MESSAGES
        elif host.endswith(".azure.com") or "/openai/deployments/" in path:
            order = _ORDER_AZURE
        else:
            order = _ORDER_DEFAULT
        for name in order:
            value = get(name)
            if not value:
                continue
            value = str(value).strip()
            if name == "authorization":
                scheme, _, token = value.partition(" ")
                if scheme.lower() == SIGV4:  # Amazon Bedrock: the access key id
                    key_id = sigv4_key_id(value)
                    if key_id:
                        return key_id
                    continue
                if scheme.lower() != "bearer" or not token.strip():
                    continue
                value = token.strip()
            return value
    qget = getattr(query, "get", None)
    if qget is not None:
        for name in QUERY_KEY_PARAMS:
            value = qget(name)
            if value and str(value).strip():
                return str(value).strip()
    return None


def extract_key(headers: dict[str, str] | object, query: object = None) -> str | None:
    """The API key carried by request headers (``Authorization: Bearer``, then
    ``api-key``, ``x-api-key``, ``x-goog-api-key``) or, failing those, by the query
    string; :func:`authenticating_key` without knowing the provider."""
    return authenticating_key(headers, query)


def request_keys(headers: dict[str, str] | object, query: object = None) -> list[str]:
    """Every credential the request carries (each header form, any Authorization
    scheme, ``Proxy-Authorization``, each query form), without repeats."""
    found: list[str] = []
    get = getattr(headers, "get", None)
    if get is not None:
        for name in CREDENTIAL_HEADERS:
            value = get(name)
            if value:
                found += _header_keys(name, str(value))
    if query is not None:
        get_all = getattr(query, "get_all", None)
        qget = getattr(query, "get", None)
        for name in QUERY_KEY_PARAMS:
            if get_all is not None:
                values = list(get_all(name))
            elif qget is not None:
                values = [qget(name)]
            else:
                values = []
            found += [str(v).strip() for v in values if v and str(v).strip()]
    return list(dict.fromkeys(found))


# Fingerprints already computed, by (secret, key): a proxy sees the same few keys
# on request after request, and this runs per request on the event loop. The whole
# key and secret are the dict's key (never a hash of them), so one key's
# fingerprint can never be handed to another key or another secret. Bounded: past
# FINGERPRINTS_KEPT keys it starts again from empty. It lives in the process's
# memory only, as the request's own headers do.
FINGERPRINTS_KEPT = 256
_fingerprints: dict[tuple[bytes, str], str] = {}


def fingerprint(key: str, secret: bytes) -> str:
    """The short, keyed, recognisable form of ``key``."""
    known = _fingerprints.get((secret, key))
    if known is not None:
        return known
    # hmac.digest: the one-shot C path (hmac.new builds two hash objects in Python)
    digest = hmac.digest(secret, key.encode("utf-8", "replace"), "sha256").hex()
    found = f"…{key[-4:]}:{digest[:12]}"
    if len(_fingerprints) >= FINGERPRINTS_KEPT:
        _fingerprints.clear()
    _fingerprints[(secret, key)] = found
    return found


SECRET_ENV = "RECORDER_KEY_SECRET"

# Provider key shapes (OpenAI sk-..., sk-proj-..., Anthropic sk-ant-..., Google
# AIza...): an error text may echo another key than the one sent, or a prefix of
# it. Only the shape's fixed prefix is kept, never a character of the secret part
# (and a word that merely ends in "sk-", such as "task-force", is left alone).
_KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_\-])(sk-(?:proj-|svcacct-|admin-|ant-(?:[a-z]+\d*-)?)?|AIza)[A-Za-z0-9_\-]{8,}"
)

TEXT_MASK = "[api key]"
# A text that ends inside a key (an error body that is not JSON is kept to its
# first 500 characters) loses that key's start when at least this much of it is there.
TEXT_TAIL_MIN = 4


_HEX = frozenset(b"0123456789abcdefABCDEF")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _hex_cases(point: int) -> set[bytes]:
    """``point`` in two hex digits, each letter in either case."""
    digits = f"{point:02x}"
    hi, lo = digits[0], digits[1]
    return {(a + b).encode() for a in {hi, hi.upper()} for b in {lo, lo.upper()}}


class KeyMask:
    """The credentials of one request, held only to mask echoes of them.

    An echo may write a key raw or with any of its characters escaped: JSON's
    ``\\uXXXX`` (either case) and ``\\/``, or percent-encoded (``%2D``). Escapes
    are found with ``bytes.find`` (a body without any costs a few calls, nothing
    more); those that spell a key character are read back, and the keys are then
    looked for in that canonical text and masked at the original bytes. Keys
    are taken as ASCII (every provider's are): a non-ASCII character of a key is
    matched raw only. No regex runs over a body (Python's are ~100 times slower
    than ``find``, and hold the GIL the event loop needs).
    """

    __slots__ = ("_percent", "_raw", "_spelled", "keys")

    def __init__(self, keys: Iterable[str]) -> None:
        # only kept here: this runs per request, on the event loop; the rest is
        # built when a text or a body is first masked
        self.keys = [k for k in keys if len(k) >= MIN_KEY_CHARS]
        self._raw: list[bytes] | None = None
        self._spelled: dict[bytes, int] = {}
        self._percent: dict[bytes, int] = {}

    @classmethod
    def of(cls, keys: Iterable[str | None]) -> KeyMask | None:
        """A mask for ``keys`` (Nones and short strings left out), or None if none is left."""
        mask = cls([k for k in keys if k])
        return mask if mask.keys else None

    def _prepared(self) -> list[bytes]:
        """The keys' bytes, longest first (a key inside a longer one masks with it)."""
        raw = self._raw
        if raw is None:
            raw = [k.encode("utf-8", "surrogateescape") for k in dict.fromkeys(self.keys)]
            raw.sort(key=len, reverse=True)
            # the ASCII characters of the keys (an escape spelling another one is
            # no echo), by the two hex digits that spell them, e.g. b"2d": 0x2D
            points = {b for k in raw for b in k if b < 0x80}
            self._spelled = {h: p for p in points for h in _hex_cases(p)}
            # a URL leaves letters, digits and "-._~" as they are: a key made of
            # those (every provider's) has no percent-encoded form to look for
            self._percent = {h: p for h, p in self._spelled.items() if p not in _UNRESERVED}
            self._raw = raw
        return raw

    def _escapes(self, data: bytes) -> list[tuple[int, int, int]]:
        """``(start, end, character)`` of every escape in ``data`` that spells a
        character of a key, in order."""
        self._prepared()
        spelled = self._spelled
        found: list[tuple[int, int, int]] = []
        find = data.find
        at = find(b"\\u00")
        while at >= 0:
            c = spelled.get(data[at + 4 : at + 6])
            if c is not None:
                found.append((at, at + 6, c))
            at = find(b"\\u00", at + 4)
        if b"2f" in spelled:  # "/"
            at = find(b"\\/")
            while at >= 0:
                found.append((at, at + 2, 0x2F))
                at = find(b"\\/", at + 2)
        percent = self._percent
        at = find(b"%") if percent else -1
        while at >= 0:
            c = percent.get(data[at + 1 : at + 3])
            if c is not None:
                found.append((at, at + 3, c))
            at = find(b"%", at + 1)
        if len(found) > 1:
            found.sort()
            kept = [found[0]]
            for hit in found[1:]:
                if hit[0] >= kept[-1][1]:  # overlapping escapes: the first one reads
                    kept.append(hit)
            found = kept
        return found

    def spans(self, data: bytes, *, tail_min: int | None = None) -> list[tuple[int, int]]:
        """Where ``data`` holds a key, raw or escaped, as sorted ``(start, end)``
        byte spans (overlaps merged). With ``tail_min``: also a key's start, at least
        that many characters long, that ends ``data`` (what a cut in mid-key leaves;
        an escape cut in its middle counts with it)."""
        hits = self._escapes(data)
        if hits:  # the canonical text: every escape read back as its character
            parts: list[bytes] = []
            cpos: list[int] = []
            prev = shift = 0
            for s, e, c in hits:
                parts += (data[prev:s], bytes((c,)))
                cpos.append(s - shift)
                shift += e - s - 1
                prev = e
            parts.append(data[prev:])
            canon = b"".join(parts)
        else:
            canon, cpos = data, []
        found: list[tuple[int, int]] = []
        for k in self._prepared():
            at = canon.find(k)
            while at >= 0:
                found.append((at, at + len(k)))
                at = canon.find(k, at + 1)
        if tail_min is not None and canon:
            found += self._tail(canon, max(tail_min, 1))
        if not found:
            return []

        def orig(c: int) -> int:  # canonical offset -> offset in data
            i = bisect_right(cpos, c) - 1
            if i < 0:
                return c
            return hits[i][0] if cpos[i] == c else hits[i][1] + c - cpos[i] - 1

        def orig_end(c: int) -> int:  # canonical end (exclusive) -> end in data
            if c > len(canon):  # the tail ran into a cut escape: to the end
                return len(data)
            i = bisect_right(cpos, c - 1) - 1
            if i >= 0 and cpos[i] == c - 1:
                return hits[i][1]
            return orig(c - 1) + 1

        merged: list[tuple[int, int]] = []
        for s, e in sorted(found):
            s, e = orig(s), orig_end(e)
            if merged and s <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(e, merged[-1][1]))
            else:
                merged.append((s, e))
        return merged

    def _tail(self, canon: bytes, least: int) -> list[tuple[int, int]]:
        """A key's start that ends ``canon``. An escape cut in its middle (``\\u00``,
        ``%2``) is taken as the next character of the key: such a span reaches one
        past the end."""
        end, over = len(canon), 0
        last = canon[-5:]
        at = last.rfind(b"\\")
        if at >= 0:  # "\\", "\\u", ... "\\u002": a JSON escape cut short
            rest = last[at + 1 :]
            if not rest or (rest[:1] == b"u" and all(d in _HEX for d in rest[1:])):
                over = len(last) - at
        elif canon.endswith(b"%") or (canon[-2:-1] == b"%" and canon[-1] in _HEX):
            over = 1 if canon.endswith(b"%") else 2
        body = canon[: end - over] if over else canon
        best = 0
        for k in self._prepared():
            for n in range(min(len(k) - 1, len(body)), 0, -1):
                if n <= best:
                    break
                if body.endswith(k[:n]):
                    best = n
                    break
        if best + (1 if over else 0) < least:  # least >= 1
            return []
        return [(len(body) - best, end + (1 if over else 0))]

    def mask_bytes(self, data: bytes, *, cut: bool = False) -> bytes:
        """``data`` with every echo of a key replaced by as many ``*`` as it takes
        bytes: the length does not change (a captured body's timeline counts its
        bytes). ``cut``: ``data`` was cut off, so a key's start that ends it (of
        any length) is masked too."""
        spans = self.spans(data, tail_min=1 if cut else None)
        if not spans:
            return data
        out = bytearray(data)
        for s, e in spans:
            out[s:e] = b"*" * (e - s)
        return bytes(out)

    def scrub(self, text: str | None) -> str | None:
        """``text`` with every echo of a key, and anything shaped like a provider
        key, masked (``[api key]``, ``sk-…[masked]``)."""
        if not text:
            return text
        data = text.encode("utf-8", "surrogateescape")
        spans = self.spans(data, tail_min=TEXT_TAIL_MIN)
        if spans:
            parts: list[str] = []
            pos = 0
            for s, e in spans:
                parts.append(data[pos:s].decode("utf-8", "surrogateescape"))
                parts.append(TEXT_MASK)
                pos = e
            parts.append(data[pos:].decode("utf-8", "surrogateescape"))
            text = "".join(parts)
        return _KEY_SHAPES.sub(lambda m: m.group(1) + "…[masked]", text)


def _as_mask(key: str | KeyMask | None) -> KeyMask | None:
    if isinstance(key, KeyMask):
        return key
    return KeyMask.of([key])


def scrub_key(text: str | None, key: str | KeyMask | None) -> str | None:
    """``text`` with the key(s), and anything shaped like a provider key, masked."""
    if not text:
        return text
    mask = _as_mask(key)
    if mask is None:
        return _KEY_SHAPES.sub(lambda m: m.group(1) + "…[masked]", text)
    return mask.scrub(text)


def mask_key_bytes(data: bytes, key: str | KeyMask | None, *, cut: bool = False) -> bytes:
    """``data`` with every echo of the key(s) replaced by as many ``*``: the
    length does not change (a captured body's timeline counts its bytes)."""
    mask = _as_mask(key)
    return data if mask is None else mask.mask_bytes(data, cut=cut)
