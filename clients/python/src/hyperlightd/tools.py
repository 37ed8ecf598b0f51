"""Tools a program may call (Python ``tools.NAME(...)``, JavaScript ``await tools.NAME({...})``),
each a declaration and the Python function that answers it.

The daemon checks a call's arguments against the tool's JSON Schema before it is sent; the
handler is called with them as keyword arguments and returns any JSON value. An exception in a
handler becomes the program's ``ToolError`` (Python) or ``Error`` (JavaScript) with its message."""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

Handler = Callable[..., Any | Awaitable[Any]]

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


@dataclass(frozen=True)
class Tool:
    """A tool: ``name`` (an identifier in both languages), what it does, a JSON Schema of its
    arguments (an object), and ``handler``, a function or coroutine function taking them as
    keyword arguments."""

    name: str
    handler: Handler
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})

    @staticmethod
    def from_function(function: Handler, name: str | None = None, description: str | None = None) -> Tool:
        """A tool from a typed function: its name, its docstring, and a schema from its
        parameters' annotations (``str``, ``int``, ``float``, ``bool``, ``list``, ``dict``,
        ``X | None``; a parameter without a default is required)."""
        return Tool(
            name=name or function.__name__,
            handler=function,
            description=description if description is not None else inspect.getdoc(function) or "",
            parameters=schema_of(function),
        )

    def spec(self) -> dict[str, Any]:
        """The declaration, as a request's ``tools`` takes it."""
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}


def tool(function: Handler) -> Tool:
    """Decorator: the tool :meth:`Tool.from_function` makes of ``function``."""
    return Tool.from_function(function)


def schema_of(function: Handler) -> dict[str, Any]:
    """A JSON Schema object of ``function``'s keyword parameters, from their annotations."""
    hints = typing.get_type_hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            continue
        properties[parameter.name] = _schema_of_type(hints.get(parameter.name, Any))
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _schema_of_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        options = [_schema_of_type(a) for a in typing.get_args(annotation)]
        return {"anyOf": options}
    if annotation is type(None):
        return {"type": "null"}
    base = origin or annotation
    if base in _JSON_TYPES:
        schema: dict[str, Any] = {"type": _JSON_TYPES[base]}
        args = typing.get_args(annotation)
        if base is list and args:
            schema["items"] = _schema_of_type(args[0])
        return schema
    return {}


def toolset(tools: Iterable[Tool | Handler] | None) -> dict[str, Tool]:
    """Tools by name, functions made tools; a name given twice is an error."""
    by_name: dict[str, Tool] = {}
    for item in tools or []:
        one = item if isinstance(item, Tool) else Tool.from_function(item)
        if one.name in by_name:
            raise ValueError(f"two tools are named {one.name!r}")
        by_name[one.name] = one
    return by_name


def call_sync(tools: Mapping[str, Tool], call_name: str, arguments: Any) -> dict[str, Any]:
    """Runs a synchronous handler: the answer to the call, without its id."""
    handler = _handler(tools, call_name)
    if handler is None:
        return {"error": f"this client has no handler for tool {call_name!r}"}
    try:
        value = handler(**(arguments or {}))
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()  # never awaited: closed, so Python does not warn of it
            raise TypeError(f"tool {call_name!r} is async: use AsyncClient, or give a plain function")
        return _result(value)
    except Exception as e:  # a handler's failure is the program's ToolError
        return {"error": _message(e)}


async def call_async(tools: Mapping[str, Tool], call_name: str, arguments: Any) -> dict[str, Any]:
    """Runs a handler from async code: a coroutine awaited, a plain function in a thread."""
    import asyncio

    handler = _handler(tools, call_name)
    if handler is None:
        return {"error": f"this client has no handler for tool {call_name!r}"}
    try:
        if inspect.iscoroutinefunction(handler):
            value = await handler(**(arguments or {}))
        else:
            value = await asyncio.to_thread(handler, **(arguments or {}))
            if inspect.isawaitable(value):
                value = await value
        return _result(value)
    except Exception as e:
        return {"error": _message(e)}


def _handler(tools: Mapping[str, Tool], name: str) -> Handler | None:
    found = tools.get(name)
    return found.handler if found else None


def _result(value: Any) -> dict[str, Any]:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as e:
        return {"error": f"the tool's result is not JSON: {e}"}
    return {"result": value}


def _message(error: BaseException) -> str:
    return str(error) or type(error).__name__
