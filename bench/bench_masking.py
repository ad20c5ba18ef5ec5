"""What masking a request's credentials costs a captured body, against packing it.

With ``--capture-bodies``, every credential the request carried is masked in the
body once, when the writer packs it (``CapturedBody.pack``: join, mask, zstd); the
per-piece path is not touched. This measures that masking step against the anchor
``zstd`` (level 3, what ``pack`` compresses with), on the same bodies, in the same
run: bodies from ``bench_core``'s builders (real captures' texts, every fifth delta
Japanese, raw UTF-8), the same with every non-ASCII character written ``\\uXXXX``
(as ``json.dumps`` does by default), and a hostile one with a ``\\u002d`` (a key
character) every 40 bytes. Also the per-request cost of reading the credentials
(``requestheaders``), against reading the headers it picks anyway.

    .venv/bin/python bench/bench_masking.py          # about 20 s
    .venv/bin/python bench/bench_masking.py --quick  # a smoke run

Contenders run interleaved, in a rotating order; medians of the rounds, with their
spread (min-max). It exits non-zero only if masking missed or changed a byte.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import build_chat, build_messages
from mitmproxy import http
from timing import fmt as _fmt
from timing import rounds

from recorder.core.captured import compress
from recorder.core.keys import KeyMask, authenticating_key, request_keys
from recorder.proxy.making import REQUEST_HEADERS, pick_headers

K1 = "sk-proj-Q9vTzAXk2-Lm_8Rb4Nc7Wd1Ye6Hf3Jg5Kh0PqQ9vTzAXk2-Lm_8Rb4Nc7Wd1Ye6Hf3Jg5"
K2 = "sk-ant-api03-Zy8Xw7Vu6Ts5Rq4Po3Nm2Lk1Jh0-Gf9Ed8Cb7UaZy8Xw7Vu6Ts5Rq4Po3Nm2Lk1Jh0-Gf9Ed8Cb7Ua"


def _ascii_escaped(body: bytes) -> bytes:
    text = body.decode()
    return "".join(c if ord(c) < 0x80 else f"\\u{ord(c):04x}" for c in text).encode()


def bodies(n_deltas: int) -> dict[str, bytes]:
    chat = b"".join(build_chat(n_deltas, 1)[1])
    messages = b"".join(build_messages(n_deltas, 2)[1])
    hostile = b"".join(b"data: " + b"x" * 28 + b"\\u002d\n\n" for _ in range(len(chat) // 40))
    return {
        "chat, raw UTF-8": chat,
        "messages, raw UTF-8": messages,
        "chat, \\uXXXX": _ascii_escaped(chat),
        "hostile: \\u002d every 40 B": hostile,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small bodies, 3 rounds")
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 9
    failed = False
    print("| body | MB | zstd ms (anchor) | mask ms | mask / zstd (spread) |")
    print("|---|---|---|---|---|")
    for name, body in bodies(2_000 if args.quick else 20_000).items():
        mask = KeyMask([K1, K2])
        echo = b'data: {"error":"' + K1.replace("-", "\\u002d").encode() + b" " + K2.encode()
        with_echo = body + echo + b'"}\n\n'
        masked = mask.mask_bytes(with_echo)
        if masked[: len(body)] != body or K2.encode() in masked or len(masked) != len(with_echo):
            print(f"FAILED: masking {name} missed or changed a byte")
            failed = True
        s = rounds(
            {
                "zstd": lambda body=body: compress(body),
                "mask": lambda body=body, mask=mask: mask.mask_bytes(body),
            },
            repeats,
        )
        ratios = sorted(m / z for m, z in zip(s["mask"], s["zstd"], strict=True))
        print(
            f"| {name} | {len(body) / 1e6:.2f} | {_fmt(s['zstd'], 1e-3)} | {_fmt(s['mask'], 1e-3)}"
            f" | {statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f}) |"
        )
    headers = http.Headers(
        [
            (b"Authorization", f"Bearer {K1}".encode()),
            (b"x-api-key", K2.encode()),
            (b"content-type", b"application/json"),
            (b"accept-encoding", b"gzip, br"),
            (b"user-agent", b"Anthropic/Python 0.40.0"),
            (b"anthropic-version", b"2023-06-01"),
        ]
    )
    n = 2_000 if args.quick else 50_000

    def pick() -> None:
        for _ in range(n):
            pick_headers(headers, REQUEST_HEADERS)

    picked = pick_headers(headers, REQUEST_HEADERS)

    def credentials() -> None:
        for _ in range(n):
            authenticating_key(picked, None, endpoint="messages", host="api.anthropic.com")
            KeyMask.of(request_keys(picked, None))

    s = rounds({"pick": pick, "credentials": credentials}, repeats)
    ratios = sorted(c / p for c, p in zip(s["credentials"], s["pick"], strict=True))
    print(
        f"\nper request: picking the headers (anchor) {_fmt(s['pick'], n * 1e-6)} µs,"
        f" reading every credential {_fmt(s['credentials'], n * 1e-6)} µs,"
        f" ratio {statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
