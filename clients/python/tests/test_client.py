"""The sync client against a stand-in daemon on a Unix socket: what it sends, what it makes of
each answer."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from hyperlightd import Busy, Client, NotFound, Unreachable


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def stand_in(path: Path, answers: dict[str, tuple[int, dict[str, Any], dict[str, str]]],
             seen: list[tuple[str, str, Any]]) -> _Server:
    class Handler(BaseHTTPRequestHandler):
        def address_string(self) -> str:
            return "unix"

        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            seen.append((self.command, self.path, body))
            status, payload, headers = answers[self.path]
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = _answer
        do_POST = _answer

        def log_message(self, *_: Any) -> None:
            pass

    server = _Server(str(path), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def socket_path(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "d.sock"


def test_a_failed_program_is_a_result_with_its_kind(socket_path: Path) -> None:
    seen: list[tuple[str, str, Any]] = []
    answer = {"status": "error", "stdout": "", "stderr": "Traceback ...", "result": None,
              "error": {"kind": "exception", "message": "ValueError: bad"}, "duration_ms": 3.0}
    server = stand_in(socket_path, {"/v1/exec": (200, answer, {})}, seen)
    with Client(str(socket_path)) as client:
        result = client.exec("python", "raise ValueError('bad')", timeout_ms=500)
    server.shutdown()
    assert not result.ok and result.error is not None
    assert (result.error.kind, result.error.message) == ("exception", "ValueError: bad")
    assert seen == [("POST", "/v1/exec", {"language": "python", "code": "raise ValueError('bad')",
                                          "timeout_ms": 500})]


def test_a_refusal_is_its_exception_with_retry_after(socket_path: Path) -> None:
    busy = {"error": {"kind": "overloaded", "message": "every sandbox is busy"}}
    gone = {"error": {"kind": "session_not_found", "message": "no session"}}
    server = stand_in(socket_path, {"/v1/exec": (503, busy, {"retry-after": "2"}),
                                    "/v1/health": (404, gone, {})}, [])
    with Client(str(socket_path)) as client:
        with pytest.raises(Busy) as refused:
            client.exec("javascript", "1")
        assert refused.value.retry_after == 2 and refused.value.kind == "overloaded"
        with pytest.raises(NotFound):
            client.health()
    server.shutdown()


def test_nothing_listening_is_unreachable(tmp_path: Path) -> None:
    with Client(str(tmp_path / "none.sock")) as client:
        with pytest.raises(Unreachable) as error:
            client.exec("javascript", "1")
    assert "HYPERLIGHTD_SOCKET" in str(error.value)
