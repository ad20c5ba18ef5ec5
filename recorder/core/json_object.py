"""A JSON document read leniently: the object it holds, or None."""

from __future__ import annotations

from typing import Any

import orjson


def json_object(data: bytes | str) -> dict[str, Any] | None:
    """The JSON object ``data`` holds; None if it is no JSON, or JSON but no object."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None
