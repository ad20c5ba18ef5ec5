"""Fixtures shared by the core's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from recorder.core.protocols import template


@pytest.fixture(scope="module", params=["C reader", "Python reader"])
def both_readers(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a module's tests with the template reader in C, then in Python (the
    fallback of an install without a C compiler), so both stay checked against
    the full parse. Module-scoped: hypothesis tests may use it."""
    saved = template.native
    if request.param == "C reader" and saved is None:
        pytest.skip("the C reader is not built (tests/core/protocols/test_native_reader.py fails)")
    if request.param == "Python reader":
        template.native = None
    try:
        yield request.param
    finally:
        template.native = saved
