"""Which requests are tapped."""

from __future__ import annotations

import pytest

from recorder.core.endpoints import bedrock_model, endpoint_for


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
