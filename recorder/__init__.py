"""recorder: observability and metering for LLM API streaming traffic."""

__version__ = "0.1.0"
