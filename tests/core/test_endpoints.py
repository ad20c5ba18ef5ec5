"""Which requests are tapped."""

from __future__ import annotations

import pytest

from recorder.core.endpoints import bedrock_model, endpoint_for, model_in_path, provider_for


@pytest.mark.parametrize(
    ("method", "path", "endpoint"),
    [
        ("POST", "/v1/chat/completions", "chat.completions"),
        ("post", "/v1/chat/completions?x=1", "chat.completions"),
        ("POST", "/api/openai/v1/chat/completions/", "chat.completions"),
        (
            "POST",
            "/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21",
            "chat.completions",
        ),
        ("POST", "/v1/responses", "responses"),
        ("POST", "/openai/responses", "responses"),
        ("POST", "/v1/messages", "messages"),
        ("POST", "/anthropic/v1/messages", "messages"),
        ("GET", "/v1/chat/completions", None),
        ("POST", "/v1/responses/resp_1", None),
        ("POST", "/v1/responses/resp_1/cancel", None),
        ("POST", "/v1/messages/count_tokens", None),
        ("POST", "/v1/threads/t_1/messages", None),
        ("POST", "/v1/completions", None),
        ("POST", "/v1/embeddings", None),
    ],
)
def test_endpoint_for(method: str, path: str, endpoint: str | None) -> None:
    assert endpoint_for(method, path) == endpoint


@pytest.mark.parametrize(
    ("path", "endpoint", "model"),
    [
        (
            "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/converse-stream",
            "converse",
            "anthropic.claude-sonnet-4-5-20250929-v1:0",
        ),
        (
            "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse",
            "converse",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        ),
        (
            "/model/global.anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke-with-response-stream",
            "invoke_model",
            "global.anthropic.claude-haiku-4-5-20251001-v1:0",
        ),
        (
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F"
            "eu.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke",
            "invoke_model",
            "arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
            "eu.anthropic.claude-sonnet-4-5-20250929-v1:0",
        ),
    ],
)
def test_bedrock_paths_name_the_endpoint_and_the_model(
    path: str, endpoint: str, model: str
) -> None:
    assert endpoint_for("POST", path) == endpoint
    assert bedrock_model(path) == model
    assert endpoint_for("GET", path) is None


def test_other_paths_are_not_bedrock() -> None:
    assert endpoint_for("POST", "/v1/invoke") is None
    assert bedrock_model("/v1/messages") is None


GOOGLE = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
VERTEX = "/v1/projects/p-1/locations/us-central1/publishers/google/models/gemini-2.5-pro"


@pytest.mark.parametrize(
    ("path", "endpoint", "provider", "model"),
    [
        (GOOGLE + "?alt=sse", "generate_content", None, "gemini-2.5-flash"),
        (GOOGLE, "generate_content", None, "gemini-2.5-flash"),
        (
            "/v1/models/gemini-2.0-flash:generateContent",
            "generate_content",
            None,
            "gemini-2.0-flash",
        ),
        ("/v1beta/tunedModels/my-tune:generateContent", "generate_content", None, "my-tune"),
        (
            VERTEX + ":streamGenerateContent?alt=sse",
            "generate_content",
            "gcp.vertex_ai",
            "gemini-2.5-pro",
        ),
        (VERTEX + ":generateContent", "generate_content", "gcp.vertex_ai", "gemini-2.5-pro"),
        (
            "/v1/projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4-5:streamRawPredict",
            "messages",
            "gcp.vertex_ai",
            "claude-sonnet-4-5",
        ),
        ("/v1beta/interactions", "interactions", None, None),
        ("/v1beta/models/gemini-2.5-flash:countTokens", None, None, "gemini-2.5-flash"),
        ("/v1beta/models/gemini-embedding-001:embedContent", None, None, "gemini-embedding-001"),
        ("/v1beta/cachedContents", None, None, None),
        ("/v1/projects/p/locations/l/publishers/google/models/m:predict", None, None, "m"),
    ],
)
def test_google_paths(
    path: str, endpoint: str | None, provider: str | None, model: str | None
) -> None:
    """Google names the model and the method in the path: both endpoints and the
    provider (Gemini's API, Vertex AI) are told from it; other methods are not metered."""
    assert endpoint_for("POST", path) == endpoint
    if endpoint is not None:
        assert provider_for(endpoint, path) == provider
    assert model_in_path(path) == model
    assert endpoint_for("GET", path) is None
