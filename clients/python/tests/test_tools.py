"""Tools from functions, and how a handler's outcome becomes the program's answer."""

from __future__ import annotations

import asyncio

from hyperlightd.tools import Tool, call_async, call_sync, schema_of, toolset


def test_a_schema_from_annotations() -> None:
    def find(name: str, limit: int | None = None, tags: list[str] | None = None, *, exact: bool = False) -> None:
        pass

    assert schema_of(find) == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
            "exact": {"type": "boolean"},
        },
        "required": ["name"],
    }


def test_outcomes_of_handlers() -> None:
    async def later() -> int:
        return 1

    tools = toolset([Tool("ok", lambda x: x * 2), Tool("bad", lambda: {1, 2}), Tool("slow", later)])
    assert call_sync(tools, "ok", {"x": 4}) == {"result": 8}
    assert "got an unexpected keyword argument 'y'" in call_sync(tools, "ok", {"y": 4})["error"]
    assert call_sync(tools, "bad", {})["error"].startswith("the tool's result is not JSON")
    assert "is async: use AsyncClient" in call_sync(tools, "slow", {})["error"]
    assert call_sync(tools, "gone", {}) == {"error": "this client has no handler for tool 'gone'"}
    assert asyncio.run(call_async(tools, "slow", {})) == {"result": 1}
    assert asyncio.run(call_async(tools, "ok", {"x": 1})) == {"result": 2}
