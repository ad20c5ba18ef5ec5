"""Price tables the tests write themselves: the repricing tests' ``V1`` / ``V2``
(with ``expected_cost``, the cost the slow, obvious way) and ``LITELLM``, a
LiteLLM-format table with every tier and cache-write field."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from recorder.core.price_files import load_prices
from recorder.core.pricing import PriceTable

Q = Decimal("0.000000000001")


def table(version: str, models: dict[str, tuple[str, str]]) -> dict[str, Any]:
    return {
        "format": "recorder-prices/1",
        "version": version,
        "models": {
            name: {"input": i, "output": o, "as_of": "2026-01-01"}
            for name, (i, o) in models.items()
        },
    }


V1 = table(
    "v1",
    {
        "gpt-4o": ("0.0000025", "0.00001"),
        "claude-x": ("0.000003", "0.000015"),
        "legacy-model": ("0.00003", "0.00006"),
    },
)


V2 = table(
    "v2",
    {
        "gpt-4o": ("0.0000025", "0.00002"),  # output doubled
        "claude-x": ("0.000003", "0.000015"),  # unchanged rates
        "gpt-4o-mini": ("0.00000015", "0.0000006"),  # newly priced
        # legacy-model: gone, so now unpriced
    },
)


def prices(doc: dict[str, Any]) -> PriceTable:
    return load_prices(json.dumps(doc))


def expected_cost(doc: dict[str, Any], model: str, inp: int, out: int) -> Decimal | None:
    """The cost the slow, obvious way: tokens times the table's rates."""
    rates = doc["models"].get(model)
    if rates is None:
        return None
    return (inp * Decimal(rates["input"]) + out * Decimal(rates["output"])).quantize(Q)


LITELLM = b"""{
  "gpt-6-astra": {
    "litellm_provider": "openai", "mode": "responses",
    "input_cost_per_token": 1e-05, "output_cost_per_token": 5e-05,
    "cache_read_input_token_cost": 1e-06,
    "input_cost_per_token_priority": 2e-05, "output_cost_per_token_priority": 1e-04,
    "input_cost_per_token_ultrafast": 6e-05, "output_cost_per_token_ultrafast": 3e-04,
    "cache_read_input_token_cost_ultrafast": 6e-06,
    "cache_creation_input_token_cost_ultrafast": 7.5e-05,
    "input_cost_per_token_above_272k_tokens": 2e-05,
    "output_cost_per_token_above_272k_tokens": 7.5e-05,
    "input_cost_per_token_above_272k_tokens_ultrafast": 1.2e-04,
    "output_cost_per_token_above_272k_tokens_ultrafast": 4.5e-04,
    "input_cost_per_token_flex_above_272k_tokens": 1e-05,
    "input_cost_per_token_flex": 5e-06, "output_cost_per_token_flex": 2.5e-05,
    "input_cost_per_audio_token": 4e-05
  },
  "claude-opus-5-5": {
    "litellm_provider": "anthropic", "mode": "chat",
    "input_cost_per_token": 4e-06, "output_cost_per_token": 2e-05,
    "cache_read_input_token_cost": 4e-07, "cache_creation_input_token_cost": 5e-06,
    "cache_creation_input_token_cost_above_1hr": 8e-06,
    "cache_creation_input_token_cost_above_12hr": 1.2e-05,
    "input_cost_per_token_batches": 2e-06, "output_cost_per_token_batches": 1e-05,
    "provider_specific_entry": {"fast": 2.0}
  }
}"""
