"""The hosts of the LLM providers, and the shape of an API path: what tells a
user which calls to a provider the recorder did not meter, without a line per
request or a label per model.
"""

from __future__ import annotations

import re

# Exact host names, and suffixes (a leading dot) for per-region or per-resource hosts.
_HOSTS = frozenset(
    {
        "api.openai.com",
        "api.anthropic.com",
        "generativelanguage.googleapis.com",
        "aiplatform.googleapis.com",
        "api.groq.com",
        "api.together.xyz",
        "api.together.ai",
        "api.mistral.ai",
        "api.deepseek.com",
        "openrouter.ai",
        "api.x.ai",
        "api.fireworks.ai",
        "api.perplexity.ai",
        "api.cerebras.ai",
        "api.cohere.com",
        "api.cohere.ai",
    }
)
_SUFFIXES = (
    ".openai.azure.com",
    ".cognitiveservices.azure.com",
    ".services.ai.azure.com",
    "-aiplatform.googleapis.com",
    ".amazonaws.com",  # bedrock-runtime.<region>.amazonaws.com, checked below
)
_VERSION = re.compile(r"^v\d+[a-z0-9]*$")
_WORD = re.compile(r"^[A-Za-z_-]{1,32}$")


def is_provider_host(host: str) -> bool:
    """Whether ``host`` is an LLM provider's API host (one we know)."""
    host = host.lower().rstrip(".")
    if host in _HOSTS:
        return True
    if host.endswith(".amazonaws.com"):
        return host.startswith(("bedrock-runtime.", "bedrock-runtime-fips.", "bedrock."))
    return host.endswith(_SUFFIXES)


def path_shape(path: str) -> str:
    """``path`` with what names one thing (a model, an id, a deployment) as ``*``:
    ``/v1beta/models/gemini-2.0-flash:countTokens`` is ``/v1beta/models/*:countTokens``.
    Never the query (some gateways carry keys there)."""
    path = path.split("?", 1)[0].split("#", 1)[0]
    out = []
    for segment in path.split("/"):
        name, colon, verb = segment.partition(":")
        kept = name if (not name or _VERSION.match(name) or _WORD.match(name)) else "*"
        if colon:
            kept += ":" + (verb if _WORD.match(verb) else "*")
        out.append(kept)
    return "/".join(out)
