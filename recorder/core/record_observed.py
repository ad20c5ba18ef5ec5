"""What a stream's interpreter observed, put on its record when the meter finishes
it (``StreamMeter.finish``): the output, the in-stream error, the reported usage
and where each figure came from."""

from __future__ import annotations

from recorder.core.protocols.observations import Observations
from recorder.core.record import StreamRecord, combine_sources
from recorder.core.usage import usage_parts

# the figures of the reported usage (``Usage``) that the record takes as they are
_REPORTED = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "input_audio_tokens",
    "cache_read_audio_tokens",
    "input_image_tokens",
    "cache_read_image_tokens",
    "output_audio_tokens",
)


def put_observed(rec: StreamRecord, obs: Observations) -> None:
    """What the interpreter observed, onto the record."""
    rec.output_chars = obs.output_chars
    rec.tool_calls = obs.tool_calls
    rec.finish_reason = obs.finish_reason
    rec.response_model = obs.response_model
    rec.response_id = obs.response_id
    rec.parse_issues = obs.parse_issues
    if obs.error_type or obs.error_code or obs.error_message:
        # an in-stream error; otherwise keep what the edge read from an error body
        rec.error_type = obs.error_type
        rec.error_code = obs.error_code
        rec.error_message = obs.error_message
    usage = obs.usage
    if usage is not None:
        for name in _REPORTED:
            setattr(rec, name, getattr(usage, name))
        rec.raw_usage = obs.raw_usage
        rec.usage_parts = usage_parts(usage.parts)
    rec.input_source = "reported" if rec.input_tokens is not None else "none"
    rec.output_source = "reported" if rec.output_tokens is not None else "none"
    rec.usage_source = combine_sources(rec.input_source, rec.output_source)
