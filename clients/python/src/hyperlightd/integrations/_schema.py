"""The code tool's arguments, as a JSON Schema every framework takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def arguments(languages: Sequence[str]) -> dict[str, Any]:
    """``{code, language}``; ``language`` is there only when there is a choice."""
    properties: dict[str, Any] = {"code": {"type": "string", "description": "The program's source text."}}
    if len(languages) > 1:
        properties["language"] = {
            "type": "string",
            "enum": list(languages),
            "description": f"The program's language (default {languages[0]}).",
        }
    return {"type": "object", "properties": properties, "required": ["code"], "additionalProperties": False}
