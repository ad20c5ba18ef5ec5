"""Fixtures of what sits between the recorder and a provider (tests/kit/upstreams.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kit.upstreams import PrivateTLS, UpstreamProxy, make_private_tls


@pytest.fixture(scope="session")
def private_tls(tmp_path_factory: pytest.TempPathFactory) -> PrivateTLS:
    """A private CA and a server certificate for 127.0.0.1/localhost it signed."""
    return make_private_tls(tmp_path_factory.mktemp("private-tls"))


@pytest.fixture
def upstream_proxy() -> Iterator[UpstreamProxy]:
    """A counting HTTP/1.1 forward proxy (CONNECT, absolute-form) on 127.0.0.1."""
    with UpstreamProxy().running() as proxy:
        yield proxy
