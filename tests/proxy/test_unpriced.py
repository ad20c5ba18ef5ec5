"""recorder/proxy/unpriced.py: one warning line per unpriced model, bounded."""

from __future__ import annotations

import pytest

from recorder.core.record import StreamRecord
from recorder.proxy.unpriced import UnpricedWarnings
from tests.kit.hostile import ESCAPED_MODEL, HOSTILE_MODEL, assert_inert


def unpriced(model: str, reason: str | None = "no price for model") -> StreamRecord:
    return StreamRecord(model=model, input_tokens=1, unpriced_reason=reason)


def test_one_line_per_model_and_none_for_priced(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="recorder.prices")
    w = UnpricedWarnings()
    assert w.check(unpriced("m1"))
    assert not w.check(unpriced("m1"))
    assert not w.check(unpriced("m2", reason=None))  # priced (or no usage): nothing to say
    assert w.check(unpriced("m2", reason="no 'ultrafast' service-tier rate for m2"))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "m2" in messages[1] and "ultrafast" in messages[1]


def test_junk_model_names_cannot_flood_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="recorder.prices")
    w = UnpricedWarnings(max_named=3)
    said = [w.check(unpriced(f"junk-{i}")) for i in range(50)]
    assert said.count(True) == 4  # three named, then one line saying no more are named
    assert "further ones are not named" in caplog.records[-1].getMessage()


def test_a_hostile_model_name_is_escaped_in_the_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 34 §4: the warning names the model escaped (the end-to-end test in
    tests/cli/test_top.py reads it off the proxy's console, in both log formats)."""
    caplog.set_level("WARNING", logger="recorder.prices")
    reason = f"no price for model {HOSTILE_MODEL!r}"
    assert UnpricedWarnings().check(unpriced(HOSTILE_MODEL, reason=reason))
    (message,) = [r.getMessage() for r in caplog.records]
    assert_inert(message)
    assert message.startswith(f"recorder: {ESCAPED_MODEL} streams are recorded without a cost")
