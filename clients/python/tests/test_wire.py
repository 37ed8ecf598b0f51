"""The client's wire types against ``api/openapi.json``: a field the API adds, renames or drops,
a request field it stops taking, or an event type it adds, fails here."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from standin import OPENAPI, validate

from hyperlightd import Tool, tool
from hyperlightd._wire import event, exec_request
from hyperlightd.errors import KINDS
from hyperlightd.types import ExecResult, FileInfo, ProgramError, SessionInfo, SessionState, Violation

SCHEMAS: dict[str, Any] = OPENAPI["components"]["schemas"]
# Fields the client adds of its own: the daemon's request id comes from a header.
CLIENT_ONLY = {"request_id"}
# Kinds an execution's response carries: its program failed; not a refusal.
PROGRAM_KINDS = {
    "syntax_error",
    "exception",
    "timeout",
    "result_too_large",
    "out_of_memory",
    "sandbox_failure",
    "resource_limit",
    "policy_violation",
    "file_limit",
    "wall_clock",
    "install_failed",
}


@pytest.mark.parametrize(
    ("cls", "schema"),
    [
        (ExecResult, "ExecResponse"),
        (ProgramError, "ErrorBody"),
        (Violation, "Violation"),
        (SessionState, "ExecSession"),
        (SessionInfo, "SessionInfo"),
        (FileInfo, "FileInfo"),
    ],
)
def test_each_type_has_the_fields_of_its_schema(cls: type, schema: str) -> None:
    fields = {f.name for f in dataclasses.fields(cls)} - CLIENT_ONLY
    assert fields == set(SCHEMAS[schema]["properties"]), f"{cls.__name__} and {schema} differ"


def test_every_refusal_kind_of_the_api_has_an_exception() -> None:
    kinds = {variant["const"] for variant in SCHEMAS["ErrorKind"]["oneOf"]}
    assert kinds - PROGRAM_KINDS == set(KINDS), "the API's refusal kinds and KINDS differ"


def test_every_event_type_of_the_api_is_read() -> None:
    samples: dict[str, dict[str, Any]] = {
        "stdout": {"text": "a"},
        "stderr": {"text": "b"},
        "display": {"data": {"image/png": "AA=="}},
        "started": {"execution_id": "exec_1"},
        "tool_call": {"id": "1", "name": "t", "arguments": {}},
        "result": {
            "status": "ok",
            "stdout": "",
            "stderr": "",
            "truncated": False,
            "result": 1,
            "error": None,
            "duration_ms": 1.0,
            "queued_ms": 0.0,
        },
    }
    types = {v["properties"]["type"]["const"] for v in SCHEMAS["ExecEvent"]["oneOf"]}
    assert types - {"error"} == set(samples)
    for kind, fields in samples.items():
        line = {"type": kind, **fields}
        validate(line, "ExecEvent")
        event(json.dumps(line), None)


def test_requests_with_every_option_are_what_the_api_takes() -> None:
    @tool
    def lookup(key: str, limit: int | None = None, tags: list[str] | None = None) -> str:
        """Looks a key up."""
        return key

    options: dict[str, Any] = {
        "timeout_ms": 1000,
        "max_output_bytes": 4096,
        "files": {"a": "t", "b": b"\xff"},
        "policy": {"allowed_modules": ["json"], "blocked_functions": ["eval"]},
        "tools": [lookup, Tool("other", print, "d", {"type": "object"})],
        "tool_timeout_ms": 500,
        "network": {"allow": [{"scheme": "https", "host": "*.example.com", "methods": ["GET"]}]},
        "env": {"API_URL": "https://api.example.com"},
        "packages": ["msgpack==1.1.0"],
    }
    assert exec_request("/v1/exec", "1", language="python", **options).body["packages"] == ["msgpack==1.1.0"]
    validate(exec_request("/v1/exec", "1", language="python", **options).body, "ExecRequest")
    validate(exec_request("/v1/sessions/s/exec", "1", stream=True, **options).body, "SessionExecRequest")
    validate(lookup.spec(), "ToolSpec")
    assert set(options) == set(SCHEMAS["SessionExecRequest"]["properties"]) - {"code", "stream"}


def test_labels_go_in_the_body_and_the_list_query_percent_encoded() -> None:
    from hyperlightd._wire import new_session, sessions_path

    body = new_session("python", None, {"conversation": "c 1", "example.com/user": "ana"})
    validate(body, "CreateSessionRequest")
    assert body == {"language": "python", "labels": {"conversation": "c 1", "example.com/user": "ana"}}
    assert new_session("python", 60, None) == {"language": "python", "idle_timeout_s": 60}
    with_env = new_session("python", None, None, {"MODE": "test"})
    validate(with_env, "CreateSessionRequest")
    assert with_env == {"language": "python", "env": {"MODE": "test"}}
    assert sessions_path(None) == "/v1/sessions"
    assert (
        sessions_path({"conversation": "c 1", "u": "a&b=c"})
        == "/v1/sessions?label=conversation%3Dc%201&label=u%3Da%26b%3Dc"
    )
    info = SessionInfo.from_json(
        {
            "id": "s",
            "language": "python",
            "created_at": "t",
            "expires_at": "t",
            "idle_timeout_s": 1,
            "execs": 0,
            "memory_bytes": 0,
            "labels": {"a": "1"},
            "env": {"MODE": "test"},
        }
    )
    assert info.labels == {"a": "1"}
    assert info.env == {"MODE": "test"}
