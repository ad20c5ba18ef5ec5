"""What the simulated model says: the answer to a request (read by
:mod:`~recorder.simulate.prompts`), cut into deltas, and its ids.

Everything here is a pure function of the request (and the faults that change
content: ``tools``, ``reasoning``, ``lang``, ``deltas``, ``hidden``, cache
sizes). The seed is a hash of the model and the conversation, so the same
request always gets the same answer, streamed or not, and ids come from the
same hash: no clock, no counter, no global random state.

The token rule (the simulator's ground truth, also in docs/simulator.md):

- every non-empty output delta is ONE output token: a text piece, a reasoning
  piece, a piece of tool-call arguments. Structure (role chunks, empty
  ``arguments: ""`` starters, signatures) is not a token. ``hidden=N`` adds N
  reasoning tokens that are reported but never streamed.
- input tokens = 3 + 4 per message + ceil(prompt characters / 4), where the
  prompt characters are those of the system prompt / instructions, of every
  message's text (tool results included) and of the tools' JSON definitions.
- ``max_tokens`` (and its aliases) caps the output tokens: the answer is cut
  there (reasoning first, then text, then tool arguments) and finishes as the
  protocol says a length limit does.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import re
from dataclasses import dataclass
from typing import Any

import orjson

from recorder.simulate.faults import Faults
from recorder.simulate.prompts import Prompt, ToolSpec

_JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff66-\uff9f]")
_EN_PIECES = re.compile(r"\s*[\w'’-]+|\s*[^\w\s]+|\s+")

EN_SENTENCES: tuple[str, ...] = (
    "Streaming lets a client show each token as soon as the model produces it.",
    "Server-sent events are plain text, and a blank line ends every event.",
    "A keepalive comment keeps an idle connection open but carries no output.",
    "The usage figures usually arrive with the last event of the stream.",
    "If the connection drops halfway, the tokens already generated are still billed.",
    "Here is a short plan: measure first, then change one thing at a time.",
    "Most proxies close a connection that stays silent for too long.",
    "A good retry policy waits a little longer after each failure.",
    "Tokyo has a humid summer, while its winters are dry and mild.",
    "To bake bread, mix flour, water, salt and yeast, then let the dough rest.",
    "The quickest fix is often to read the error message twice.",
    "Binary search halves the remaining range at every step.",
    "A cache is only as good as its invalidation rule.",
    "Paris is about an hour from London by plane, or a little over two by train.",
    "Write the test first, watch it fail, then make it pass.",
    "Rain is likely in the afternoon, so an umbrella would be wise.",
    "Compression saves bandwidth, at the price of a little CPU time.",
    "Each chunk of a chunked body starts with its size in hexadecimal.",
    "In short: it works, it is fast enough, and it is easy to test.",
    "Let me know if you would like a longer explanation or an example.",
    "The capital of Australia is Canberra, not Sydney.",
    "A histogram shows how values are spread, not only their average.",
    "Logs tell you what happened; metrics tell you how often.",
    "Water boils at a lower temperature high up in the mountains.",
)
JA_SENTENCES: tuple[str, ...] = (
    "ストリーミングでは、モデルが生成したトークンをすぐに表示できます。",
    "サーバー送信イベントはテキスト形式で、空行がイベントの区切りです。",
    "キープアライブのコメントは接続を維持しますが、出力ではありません。",
    "使用量は通常、ストリームの最後のイベントで届きます。",
    "途中で切断されても、それまでに生成された分は課金されます。",
    "まず計測し、それから一つずつ変更するのがよい方法です。",
    "東京の夏は蒸し暑く、冬は乾燥していて比較的穏やかです。",
    "再試行するときは、失敗のたびに待ち時間を少しずつ延ばします。",
    "パンを焼くには、小麦粉と水と塩と酵母を混ぜて生地を休ませます。",
    "エラーメッセージを二度読むのが、いちばん早い解決策であることも多いです。",
    "二分探索は、探す範囲を一歩ごとに半分にします。",
    "午後は雨の可能性が高いので、傘を持って行くと安心です。",
    "圧縮すると帯域を節約できますが、少し CPU を使います。",
    "要するに、動作し、十分に速く、テストもしやすいということです。",
    "もっと詳しい説明や例が必要でしたら、お知らせください。",
    "ログは何が起きたかを、メトリクスはそれがどれくらい起きたかを教えてくれます。",
    "京都には千年以上の歴史を持つ寺社がたくさんあります。",
    "富士山の山頂では、水は百度より低い温度で沸騰します。",
)
EN_REASONING: tuple[str, ...] = (
    "The user is asking a fairly direct question.",
    "Let me recall the relevant facts before answering.",
    "A short answer with one concrete example should be enough.",
    "I should double-check the numbers before I state them.",
    "There are two reasonable readings of the question; the first seems more likely.",
    "I will keep the answer brief and offer more detail if needed.",
    "The tool result contains what I need, so no further call is necessary.",
)
JA_REASONING: tuple[str, ...] = (
    "ユーザーはかなり直接的な質問をしています。",
    "答える前に関連する事実を整理します。",
    "具体例を一つ添えた短い回答で十分でしょう。",
    "数値を述べる前にもう一度確認します。",
    "回答は簡潔にして、必要なら詳しく説明します。",
)
EN_PREAMBLE: tuple[str, ...] = ("I'll look that up for you.", "Let me check that with the tool.")
JA_PREAMBLE: tuple[str, ...] = ("確認しますので、少々お待ちください。", "ツールで調べてみます。")
CITIES: tuple[str, ...] = ("Tokyo", "Paris", "New York City", "Osaka", "London", "Sydney")
JA_CITIES: tuple[str, ...] = ("東京", "大阪", "京都", "札幌", "福岡")
DEFAULT_TOOL: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city name."}},
    "required": ["city"],
}


@dataclass(slots=True)
class ToolCall:
    """One tool call of the answer."""

    name: str
    arguments: str
    pieces: list[str]
    call_id: str
    item_id: str


@dataclass(slots=True)
class Content:
    """The answer, cut into the deltas that will carry it."""

    lang: str
    reasoning: list[str]
    text: list[str]
    tool_calls: list[ToolCall]
    truncated: bool
    signature: str
    input_tokens: int
    cache_read: int
    cache_write: int
    hidden: int

    @property
    def reasoning_text(self) -> str:
        """The whole reasoning."""
        return "".join(self.reasoning)

    @property
    def answer(self) -> str:
        """The whole answer text."""
        return "".join(self.text)

    @property
    def output_tokens(self) -> int:
        """All output tokens by the rule above (reasoning and hidden included)."""
        args = sum(len(c.pieces) for c in self.tool_calls)
        return self.hidden + len(self.reasoning) + len(self.text) + args

    @property
    def reasoning_tokens(self) -> int:
        """The reasoning part of :attr:`output_tokens`."""
        return self.hidden + len(self.reasoning)


class Ids:
    """Deterministic ids of one response, derived from the request's seed."""

    _B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

    def __init__(self, seed: bytes) -> None:
        self._seed = seed

    def digest(self, label: str) -> bytes:
        """A 32-byte digest for ``label``."""
        return hashlib.sha256(self._seed + label.encode()).digest()

    def b62(self, label: str, n: int) -> str:
        """``n`` base-62 characters."""
        num = int.from_bytes(self.digest(label) + self.digest(label + "+"), "big")
        out = []
        for _ in range(n):
            num, r = divmod(num, 62)
            out.append(self._B62[r])
        return "".join(out)

    def hex(self, label: str, n: int) -> str:
        """``n`` hex digits."""
        return (self.digest(label) + self.digest(label + "+")).hex()[:n]

    def created(self) -> int:
        """A plausible, fixed Unix time for ``created`` fields (no clock is read)."""
        return 1_750_000_000 + int.from_bytes(self.digest("created")[:4], "big") % 20_000_000


def rng_for(seed: bytes, label: str) -> random.Random:
    """An independent random stream for one part of the answer."""
    return random.Random(hashlib.sha256(seed + label.encode()).digest())


def has_japanese(text: str) -> bool:
    """Whether ``text`` contains kana or kanji."""
    return _JAPANESE.search(text) is not None


def _pieces(text: str, lang: str, rng: random.Random) -> list[str]:
    if lang == "en":
        return [p for p in _EN_PIECES.findall(text) if p]
    out = []
    i = 0
    while i < len(text):
        n = rng.choice((1, 2, 2, 3, 3, 4))
        out.append(text[i : i + n])
        i += n
    return out


def _sentences(
    pool: tuple[str, ...], rng: random.Random, lang: str, target: int, exact: bool
) -> list[str]:
    """Pieces of sentences from ``pool`` until ``target`` pieces (exactly, if asked)."""
    order = list(pool)
    rng.shuffle(order)
    pieces: list[str] = []
    i = 0
    while len(pieces) < target:
        sentence = order[i % len(order)]
        if pieces and lang == "en":
            sentence = ("\n\n" if i % 3 == 2 else " ") + sentence
        elif pieces and i % 3 == 2:
            sentence = "\n\n" + sentence
        pieces.extend(_pieces(sentence, lang, rng))
        i += 1
    return pieces[:target] if exact else pieces


def _value(name: str, schema: Any, rng: random.Random, lang: str, query: str, depth: int) -> Any:
    if not isinstance(schema, dict) or depth > 4:
        return "value"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[rng.randrange(len(enum))]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return _value(name, options[0], rng, lang, query, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties")
        if not isinstance(props, dict):
            return {}
        return {k: _value(k, v, rng, lang, query, depth + 1) for k, v in props.items()}
    if kind == "array":
        return [_value(name, schema.get("items"), rng, lang, query, depth + 1)]
    if kind == "integer":
        return rng.randint(1, 100)
    if kind == "number":
        return rng.randint(1, 1000) / 10
    if kind == "boolean":
        return rng.random() < 0.5
    lname = name.lower()
    if any(w in lname for w in ("city", "location", "place", "town")):
        named = [c for c in CITIES + JA_CITIES if c in query]
        return named[0] if named else rng.choice(JA_CITIES if lang == "ja" else CITIES)
    if "unit" in lname:
        return "celsius"
    if "date" in lname:
        return f"2025-0{rng.randint(1, 9)}-{rng.randint(10, 28)}"
    if any(w in lname for w in ("query", "q", "search", "text", "prompt")):
        return query[:40] or "weather"
    return rng.choice(("alpha", "bravo", "charlie", "delta"))


def _arg_pieces(arguments: str, rng: random.Random) -> list[str]:
    out = []
    i = 0
    while i < len(arguments):
        n = rng.randint(2, 7)
        out.append(arguments[i : i + n])
        i += n
    return out


def _chosen_tools(p: Prompt, faults: Faults) -> list[ToolSpec]:
    if faults.tools == 0 or p.tool_choice == "none":
        return []
    tools = p.tools or [ToolSpec("get_weather", DEFAULT_TOOL)]
    if faults.tools is None:
        if not p.tools or p.after_tool_result:
            return []
        count = 1
    else:
        count = faults.tools
    if p.tool_choice not in (None, "auto", "required", "none"):
        named = [t for t in tools if t.name == p.tool_choice]
        tools = named or tools
    return [tools[i % len(tools)] for i in range(count)]


def choose(p: Prompt, faults: Faults, ids: Ids) -> Content:
    """The answer to ``p``, deterministic in the request and content faults."""
    seed = p.seed()
    lang = faults.lang or ("ja" if has_japanese(p.last_user) else "en")
    rng = rng_for(seed, "text")
    tools = _chosen_tools(p, faults)
    reasoning: list[str] = []
    if faults.reasoning or p.reasoning:
        r = rng_for(seed, "reasoning")
        pool = JA_REASONING if lang == "ja" else EN_REASONING
        reasoning = _sentences(pool, r, lang, r.randint(8, 24), exact=False)
    text: list[str] = []
    if faults.deltas is not None:
        pool = JA_SENTENCES if lang == "ja" else EN_SENTENCES
        text = _sentences(pool, rng, lang, faults.deltas, exact=True)
    elif tools:
        if p.endpoint == "messages":
            pool = JA_PREAMBLE if lang == "ja" else EN_PREAMBLE
            text = _pieces(pool[rng.randrange(len(pool))], lang, rng)
    else:
        pool = JA_SENTENCES if lang == "ja" else EN_SENTENCES
        text = _sentences(pool, rng, lang, rng.randint(18, 48), exact=False)
    calls = []
    for n, spec in enumerate(tools):
        r = rng_for(seed, f"tool:{n}:{spec.name}")
        args = _value(spec.name, spec.schema, r, lang, p.last_user, 0)
        arguments = orjson.dumps(args).decode() if args else "{}"
        if p.endpoint == "messages":
            call_id = "toolu_01" + ids.b62(f"toolu:{n}", 22)
        else:
            call_id = "call_" + ids.b62(f"call:{n}", 24)
        item_id = "fc_" + ids.hex(f"fc:{n}", 48)
        calls.append(ToolCall(spec.name, arguments, _arg_pieces(arguments, r), call_id, item_id))
    hidden = faults.hidden
    truncated = False
    if p.max_tokens is not None:
        budget = max(p.max_tokens - hidden, 0)
        if hidden > p.max_tokens:
            hidden = p.max_tokens
        total = len(reasoning) + len(text) + sum(len(c.pieces) for c in calls)
        if total > budget:
            truncated = True
            reasoning = reasoning[:budget]
            budget -= len(reasoning)
            text = text[:budget]
            budget -= len(text)
            kept = []
            for c in calls:
                if budget <= 0:
                    break
                c.pieces = c.pieces[:budget]
                c.arguments = "".join(c.pieces)
                budget -= len(c.pieces)
                kept.append(c)
            calls = kept
    signature = base64.b64encode(ids.digest("signature") * 3).decode()
    input_tokens = 3 + 4 * len(p.messages) + math.ceil(p.prompt_chars / 4)
    cache_read = min(faults.cache_read, input_tokens)
    cache_write = min(faults.cache_write, input_tokens - cache_read)
    return Content(
        lang=lang,
        reasoning=reasoning,
        text=text,
        tool_calls=calls,
        truncated=truncated,
        signature=signature,
        input_tokens=input_tokens,
        cache_read=cache_read,
        cache_write=cache_write,
        hidden=hidden,
    )
