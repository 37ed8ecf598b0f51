"""A stand-in daemon on a Unix socket for the unit tests: it answers each route with a scripted
reply, records what it was sent, and checks both against ``api/openapi.json`` so a client that
drifts from the API (or a test that answers what the daemon never would) fails."""

from __future__ import annotations

import json
import socketserver
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import jsonschema

OPENAPI = json.loads((Path(__file__).resolve().parents[3] / "api" / "openapi.json").read_text())


def validate(value: Any, schema_name: str) -> None:
    """Raises unless ``value`` is what the API's schema ``schema_name`` accepts."""
    schema = {"$ref": f"#/components/schemas/{schema_name}", "components": OPENAPI["components"]}
    jsonschema.Draft202012Validator(schema).validate(value)


@dataclass
class Reply:
    """An answer: JSON (``body``), NDJSON lines (``lines``, sent as they are produced), or bytes."""

    status: int = 200
    body: Any = None
    lines: Iterable[Any] | None = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    schema: str | None = None  # the API schema ``body`` (or each line) must match


Route = Callable[[Any], Reply]


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up is expected
            super().handle_error(request, client_address)


class StandIn:
    """Routes by ``"METHOD /path"``; ``seen`` holds every request as (method, path, body)."""

    # Request schemas by route prefix: what the client sends must match.
    SESSION_REQUESTS = {
        "/exec": "SessionExecRequest",
        "/rollback": "RollbackRequest",
        "/fork": "ForkRequest",
        "/files": "FileChanges",
        "/packages": "InstallRequest",
    }
    REQUESTS = {
        "POST /v1/exec": "ExecRequest",
        "POST /v1/sessions": "CreateSessionRequest",
        "POST /v1/executions/": "ToolResult",
    }

    def __init__(self, path: Path, routes: Mapping[str, Route]) -> None:
        self.routes = routes
        self.seen: list[tuple[str, str, Any]] = []
        self.headers: list[dict[str, str]] = []  # each request's, in order, names lowercased
        self.invalid: list[str] = []
        self.server = _Server(str(path), self._handler())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stops serving; fails the test if anything sent or answered did not match the API."""
        self.server.shutdown()
        self.server.server_close()
        assert not self.invalid, "\n".join(self.invalid)

    def request_schema(self, method: str, path: str) -> str | None:
        if method == "PATCH" and path.startswith("/v1/sessions/"):
            return "UpdateSessionRequest"
        if method == "POST" and path.startswith("/v1/sessions/"):
            for action, body in self.SESSION_REQUESTS.items():
                if path.endswith(action):
                    return body
        for prefix, schema in self.REQUESTS.items():
            key = f"{method} {path}"
            if key == prefix or (prefix.endswith("/") and key.startswith(prefix)):
                return schema
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def address_string(self) -> str:
                return "unix"

            def log_message(self, *_: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                stand_in.seen.append((self.command, self.path, body))
                stand_in.headers.append({name.lower(): value for name, value in self.headers.items()})
                schema = stand_in.request_schema(self.command, self.path)
                try:
                    # A fork's body may be empty.
                    if schema is not None and not (schema == "ForkRequest" and body is None):
                        validate(body, schema)
                    route = stand_in.routes.get(f"{self.command} {self.path}")
                    reply = route(body) if route else Reply(404, {"error": {"kind": "not_found", "message": "none"}})
                    self._send(reply)
                except jsonschema.ValidationError as e:
                    stand_in.invalid.append(f"{self.command} {self.path}: {e.message}")
                    self.close_connection = True

            def _send(self, reply: Reply) -> None:
                self.send_response(reply.status)
                headers = {"x-request-id": "req-1", **reply.headers}
                if reply.lines is not None:
                    headers["content-type"] = "application/x-ndjson"
                    headers["transfer-encoding"] = "chunked"
                    self._headers(headers)
                    for line in reply.lines:
                        if reply.schema:
                            validate(line, reply.schema)
                        self._chunk((json.dumps(line) + "\n").encode())
                    self._chunk(b"")
                    return
                if reply.raw is not None:
                    data = reply.raw
                    headers["content-type"] = "application/octet-stream"
                else:
                    if reply.schema:
                        validate(reply.body, reply.schema)
                    data = json.dumps(reply.body).encode() if reply.body is not None else b""
                    headers["content-type"] = "application/json"
                headers["content-length"] = str(len(data))
                self._headers(headers)
                self.wfile.write(data)

            def _headers(self, headers: dict[str, str]) -> None:
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            do_GET = _answer
            do_POST = _answer
            do_DELETE = _answer
            do_PATCH = _answer

        return Handler


def response(**fields: Any) -> dict[str, Any]:
    """An ``ExecResponse`` that succeeded, with ``fields`` changed."""
    base: dict[str, Any] = {
        "status": "ok",
        "stdout": "",
        "stderr": "",
        "truncated": False,
        "result": None,
        "error": None,
        "duration_ms": 1.5,
        "queued_ms": 0.25,
    }
    return {**base, **fields}


def session(id: str = "s1", language: str = "python") -> dict[str, Any]:
    return {
        "id": id,
        "language": language,
        "created_at": "2026-11-25T00:00:00Z",
        "expires_at": "2026-11-25T00:10:00Z",
        "idle_timeout_s": 600,
        "execs": 0,
        "memory_bytes": 0,
        "checkpoint": 0,
        "checkpoints": 1,
    }


def refusal(kind: str, message: str = "refused") -> dict[str, Any]:
    return {"error": {"kind": kind, "message": message}}


def lines_then(items: list[Any], wait: threading.Event | None = None, after: list[Any] | None = None) -> Iterator[Any]:
    """NDJSON lines: ``items``, then (once ``wait`` is set) ``after``."""
    yield from items
    if wait is not None:
        assert wait.wait(10), "the client never answered"
    yield from after or []
