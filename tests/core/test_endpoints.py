"""Which requests are tapped."""

from __future__ import annotations

import pytest

from recorder.core.endpoints import endpoint_for


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
