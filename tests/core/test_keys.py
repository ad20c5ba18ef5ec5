"""API keys: found in headers, fingerprinted, never kept."""

from __future__ import annotations

import hashlib
import hmac
import random

import pytest

from recorder.core.keys import (
    FINGERPRINTS_KEPT,
    KeyMask,
    authenticating_key,
    extract_key,
    fingerprint,
    mask_key_bytes,
    request_keys,
    scrub_key,
)


def test_extract_key_from_each_header() -> None:
    assert extract_key({"authorization": "Bearer sk-abc"}) == "sk-abc"
    assert extract_key({"authorization": "bearer   sk-abc  "}) == "sk-abc"
    assert extract_key({"x-api-key": "sk-ant-xyz"}) == "sk-ant-xyz"
    assert extract_key({"api-key": "azure-key"}) == "azure-key"
    assert extract_key({"authorization": "Basic dXNlcjpwYXNz"}) is None
    assert extract_key({"authorization": "Bearer "}) is None
    assert extract_key({}) is None
    assert extract_key(object()) is None


def test_fingerprint_is_keyed_stable_and_short() -> None:
    key = "sk-live-SECRETKEY123456"
    fp = fingerprint(key, b"secret-a")
    assert fp == fingerprint(key, b"secret-a")
    assert fp != fingerprint(key, b"secret-b")
    assert fp.startswith("…3456:") and len(fp) == len("…3456:") + 12
    assert "SECRETKEY" not in fp


def _uncached(key: str, secret: bytes) -> str:
    digest = hmac.new(secret, key.encode("utf-8", "replace"), hashlib.sha256).hexdigest()
    return f"…{key[-4:]}:{digest[:12]}"


def test_a_remembered_fingerprint_never_goes_to_another_key_or_secret() -> None:
    # two keys with the same last four characters, two secrets, asked in turn and
    # again: each pair gets the HMAC of its own key under its own secret, from the
    # first call and from the remembered one alike
    keys = ("sk-proj-AAAAAAAAAAAA1234", "sk-proj-BBBBBBBBBBBB1234")
    secrets = (b"secret-one", b"secret-two")
    seen = {}
    for _ in range(3):
        for key in keys:
            for secret in secrets:
                fp = fingerprint(key, secret)
                assert fp == _uncached(key, secret)
                seen.setdefault((key, secret), fp)
                assert seen[(key, secret)] == fp
    assert len(set(seen.values())) == 4


def test_fingerprints_stay_right_past_the_cache_bound() -> None:
    secret = b"s"
    many = [f"sk-key-{i:08d}" for i in range(FINGERPRINTS_KEPT * 2 + 3)]
    for key in many + many[:10]:
        assert fingerprint(key, secret) == _uncached(key, secret)


def test_extract_key_from_the_query_string_after_the_headers() -> None:
    assert extract_key({}, {"api-key": "q-key-123456"}) == "q-key-123456"
    assert extract_key({}, {"key": "AIzaXYZ"}) == "AIzaXYZ"
    assert extract_key({"x-api-key": "sk-ant-h"}, {"key": "q"}) == "sk-ant-h"
    assert extract_key({}, {"api-version": "2024-10-21"}) is None


def test_scrub_key_keeps_no_character_of_a_secret_part() -> None:
    key = "sk-proj-ABCDEFGHIJKLMNOP1234"
    assert scrub_key(f"bad key {key}!", key) == "bad key [api key]!"
    other = "sk-QRSTUVWX5678abcd"
    assert scrub_key(f"not {other}", key) == "not sk-…[masked]"
    assert scrub_key("AIza" + "B" * 35, "") == "AIza…[masked]"
    assert scrub_key("sk-ant-api03-abcdefghijkl", "") == "sk-ant-api03-…[masked]"
    assert scrub_key("a task-force-member list", "") == "a task-force-member list"


def test_mask_key_bytes_keeps_the_length() -> None:
    key = "sk-SECRET-0123456789"
    data = b'data: {"error": "' + key.encode() + b'"}\n\n'
    masked = mask_key_bytes(data, key)
    assert len(masked) == len(data) and key.encode() not in masked
    assert mask_key_bytes(data, None) == data and mask_key_bytes(data, "short") == data


# -- every credential of a request, and the one that is fingerprinted -----------------

K1 = "sk-proj-Q9vTz/Xk2-Lm_8Rb4Nc7Wd1Ye6Hf3Jg5Kh0Pq"  # a "/" and a "-" to be escaped
K2 = "sk-ant-api03-Zy8Xw7Vu6Ts5Rq4Po3Nm2Lk1Jh0-Gf9Ed8Cb7Ua"


def test_request_keys_lists_every_credential() -> None:
    from mitmproxy.coretypes.multidict import MultiDict

    headers = {
        "authorization": "Bearer sk-bearer-0001",
        "x-api-key": "sk-ant-xkey-0002",
        "api-key": "azure-key-0003",
        "x-goog-api-key": "AIzaGoog-0004",
        "proxy-authorization": "Basic cHJveHk6c2VjcmV0",
        "content-type": "application/json",
    }
    query = MultiDict([("api-key", "q-key-0005"), ("key", "q-key-0006"), ("key", "q-key-0007")])
    assert request_keys(headers, query) == [
        "sk-bearer-0001",
        "sk-ant-xkey-0002",
        "azure-key-0003",
        "AIzaGoog-0004",
        "cHJveHk6c2VjcmV0",
        "q-key-0005",
        "q-key-0006",
        "q-key-0007",
    ]
    # a repeated header (folded with ", "), any scheme, a bare value
    folded = {"x-api-key": "key-one-0001, key-two-0002", "authorization": "token raw-tok-0003"}
    assert request_keys(folded) == [
        "raw-tok-0003",
        "key-one-0001, key-two-0002",
        "key-one-0001",
        "key-two-0002",
    ]
    assert request_keys({"authorization": "just-a-key-0004"}) == ["just-a-key-0004"]
    assert request_keys({}, None) == [] and request_keys(object()) == []


def test_the_key_fingerprinted_is_the_one_the_provider_authenticates_with() -> None:
    both = {"authorization": f"Bearer {K1}", "x-api-key": K2}
    assert authenticating_key(both, endpoint="messages") == K2  # Anthropic: x-api-key
    assert authenticating_key({"authorization": f"Bearer {K1}"}, endpoint="messages") == K1
    assert authenticating_key(both, endpoint="chat.completions") == K1  # OpenAI: Bearer
    assert authenticating_key(both, endpoint="responses") == K1
    azure = {"authorization": f"Bearer {K1}", "api-key": "azure-key-0003"}
    assert authenticating_key(azure, endpoint="chat.completions") == K1
    for where in (
        {"host": "my.openai.azure.com"},
        {"path": "/openai/deployments/gpt-4o/chat/completions?api-version=1"},
    ):
        assert authenticating_key(azure, endpoint="chat.completions", **where) == "azure-key-0003"
    goog = {"x-goog-api-key": "AIzaGoog-0004"}
    assert authenticating_key(goog, endpoint="chat.completions") == "AIzaGoog-0004"
    # the proxy's credential is masked, never fingerprinted
    proxy_auth = {"proxy-authorization": "Bearer sk-proxy-0005"}
    assert authenticating_key(proxy_auth, {"key": "AIzaQuery"}) == "AIzaQuery"
    assert authenticating_key(proxy_auth) is None


# -- echoes, raw and escaped -------------------------------------------------------------


def escaped(key: str, rnd: random.Random) -> str:
    """``key`` as an echo may write it: each character raw or escaped (``\\uXXXX``
    in either case, ``\\/``, ``%XX`` as a URL has it), chosen at random."""
    out = []
    for c in key:
        forms = [c, f"\\u{ord(c):04x}", f"\\u{ord(c):04X}"]
        if c == "/":
            forms.append("\\/")
        if not c.isalnum() and c not in "-._~":  # what a URL encodes
            forms += [f"%{ord(c):02X}", f"%{ord(c):02x}"]
        out.append(rnd.choice(forms))
    return "".join(out)


def json_escapes(key: str) -> list[str]:
    """The JSON-escaped forms an encoder writes (``-`` as ``\\u002d``/``\\u002D``,
    ``/`` as ``\\/``) and the all-``\\uXXXX`` one."""
    return [
        key.replace("-", "\\u002d").replace("/", "\\/"),
        key.replace("-", "\\u002D"),
        "".join(f"\\u{ord(c):04x}" for c in key),
        "".join(f"\\u{ord(c):04X}" for c in key),
    ]


@pytest.mark.parametrize("seed", range(40))
def test_every_echo_of_both_keys_is_masked_to_its_length_and_nothing_else(seed: int) -> None:
    rnd = random.Random(seed)
    mask = KeyMask.of([K1, K2])
    assert mask is not None
    e1 = escaped(K1, rnd) if seed % 4 else K1
    e2 = escaped(K2, rnd) if seed % 3 else rnd.choice(json_escapes(K2))
    parts = ['data: {"error":{"message":"bad keys: ', e1, " and ", e2, '. 50% \\u00e9\\/"}}\n\n']
    data = "".join(parts).encode()
    want = "".join(p if i % 2 == 0 else "*" * len(p) for i, p in enumerate(parts)).encode()
    assert mask.mask_bytes(data) == want
    assert mask.scrub(data.decode()) == "".join(
        p if i % 2 == 0 else "[api key]" for i, p in enumerate(parts)
    )


def test_a_body_without_an_echo_is_handed_back_as_it_was() -> None:
    """A text with only unrelated escapes and no key is handed back as it was."""
    mask = KeyMask.of([K1, K2])
    assert mask is not None
    data = b'data: {"t":"\\u00e9\\u65e5 50% \\/ sk-proj-Q9 \\u002d"}\n\n'
    assert mask.mask_bytes(data) is data
    assert KeyMask.of(["short", None]) is None


@pytest.mark.parametrize("which", [K1, K2])
def test_a_body_cut_inside_a_key_loses_the_keys_start(which: str) -> None:
    """A captured body cut at its cap in the middle of an echo (raw, escaped, or
    inside an escape) keeps no character of the key's start."""
    mask = KeyMask.of([K1, K2])
    assert mask is not None
    for form in (which, json_escapes(which)[0], json_escapes(which)[2]):
        for cut in range(1, len(form)):
            data = b"data: x " + form[:cut].encode()
            masked = mask.mask_bytes(data, cut=True)
            assert masked[:8] == b"data: x " and len(masked) == len(data)
            assert set(masked[8:]) == {ord("*")}, (form, cut)
    # a whole body is not cut: its last word is kept even if it starts a key
    assert mask.mask_bytes(b"data: sk-p") == b"data: sk-p"
    assert mask.scrub(f"cut error: {K2[:20]}") == "cut error: [api key]"


SIGV4 = (
    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20261206/us-east-1/bedrock/aws4_request,"
    " SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,"
    " Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"
)


def test_sigv4_is_fingerprinted_by_its_access_key_id() -> None:
    headers = {"authorization": SIGV4, "x-amz-security-token": "FwoGZXIvYXdzEXAMPLEtoken"}
    assert authenticating_key(headers) == "AKIAIOSFODNN7EXAMPLE"


def test_sigv4_signature_and_session_token_are_masked_wherever_echoed() -> None:
    token = "FwoGZXIvYXdzEXAMPLEtokenXYZ0123456789"
    headers = {"authorization": SIGV4, "x-amz-security-token": token}
    mask = KeyMask.of(request_keys(headers))
    assert mask is not None
    signature = SIGV4.rpartition("Signature=")[2]
    echo = f"bad signature {signature} for token {token} of AKIAIOSFODNN7EXAMPLE"
    scrubbed = mask.scrub(echo)
    assert scrubbed is not None
    for secret in (signature, token, "AKIAIOSFODNN7EXAMPLE"):
        assert secret not in scrubbed


def test_a_bedrock_api_key_is_a_bearer_key() -> None:
    assert authenticating_key({"authorization": "Bearer ABSKQmVkcm9ja0FQSUtleS1example"}) == (
        "ABSKQmVkcm9ja0FQSUtleS1example"
    )
