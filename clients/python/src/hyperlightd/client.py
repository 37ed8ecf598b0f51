"""The synchronous client: hyperlightd's HTTP API on its Unix socket, through httpx."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import httpx

from .errors import AnswerLost, HyperlightdError, Unreachable, refusal

DEFAULT_SOCKET = "/run/hyperlightd/hyperlightd.sock"
SOCKET_ENV = "HYPERLIGHTD_SOCKET"
# Added to an execution's own time limit: the daemon answers at the limit, plus sending it.
EXEC_MARGIN_S = 15.0
# An execution that names no limit (the daemon's default is 5 s, its cap 60 s unless configured).
DEFAULT_RESPONSE_TIMEOUT_S = 90.0


def default_socket() -> str:
    """``HYPERLIGHTD_SOCKET``, else the daemon's default path, as ``hlctl`` finds it."""
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


@dataclass(frozen=True)
class ProgramError:
    """Why a program failed: the API's error kind (``exception``, ``timeout``, ...) and message."""

    kind: str
    message: str


@dataclass(frozen=True)
class ExecResult:
    """What a program did. ``status`` is ``ok``, ``error`` or ``timeout``; a failed program is
    a result, not an exception."""

    status: str
    stdout: str
    stderr: str
    result: Any
    error: ProgramError | None
    duration_ms: float
    queued_ms: float = 0.0
    truncated: bool = False
    files: dict[str, Any] = field(default_factory=dict)
    display: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @staticmethod
    def from_json(body: dict[str, Any]) -> ExecResult:
        error = body.get("error")
        return ExecResult(
            status=body["status"],
            stdout=body.get("stdout", ""),
            stderr=body.get("stderr", ""),
            result=body.get("result"),
            error=ProgramError(error["kind"], error["message"]) if error else None,
            duration_ms=body.get("duration_ms", 0.0),
            queued_ms=body.get("queued_ms", 0.0),
            truncated=body.get("truncated", False),
            files=body.get("files") or {},
            display=body.get("display") or [],
        )


class Client:
    """A client of one daemon. Every call is bounded in time; errors say whether the request
    was sent (see :mod:`hyperlightd.errors`)."""

    def __init__(self, socket: str | None = None, connect_timeout: float = 5.0) -> None:
        self.socket = socket or default_socket()
        self._http = httpx.Client(
            transport=httpx.HTTPTransport(uds=self.socket),
            base_url="http://hyperlightd",
            timeout=httpx.Timeout(DEFAULT_RESPONSE_TIMEOUT_S, connect=connect_timeout),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def exec(
        self,
        language: str,
        code: str,
        *,
        timeout_ms: int | None = None,
        max_output_bytes: int | None = None,
        files: dict[str, Any] | None = None,
        policy: dict[str, Any] | None = None,
    ) -> ExecResult:
        """Runs ``code`` in a fresh interpreter of ``language`` (``python`` or ``javascript``)."""
        body: dict[str, Any] = {"language": language, "code": code}
        for name, value in [
            ("timeout_ms", timeout_ms),
            ("max_output_bytes", max_output_bytes),
            ("files", files),
            ("policy", policy),
        ]:
            if value is not None:
                body[name] = value
        wait = DEFAULT_RESPONSE_TIMEOUT_S
        if timeout_ms is not None:
            wait = timeout_ms / 1000 + EXEC_MARGIN_S
        return ExecResult.from_json(self._call("POST", "/v1/exec", body, wait))

    def health(self) -> dict[str, Any]:
        """The daemon's health: languages, limits, packages, counts."""
        answer: dict[str, Any] = self._call("GET", "/v1/health", None, DEFAULT_RESPONSE_TIMEOUT_S)
        return answer

    def _call(self, method: str, path: str, body: Any, wait: float) -> Any:
        try:
            response = self._http.request(method, path, json=body, timeout=httpx.Timeout(wait, connect=5.0))
        except (httpx.ConnectError, httpx.ConnectTimeout, FileNotFoundError) as e:
            raise Unreachable(self.socket, str(e)) from e
        except httpx.TimeoutException as e:
            raise AnswerLost(f"no answer from {self.socket} within {wait:.0f} s: the program may have run") from e
        except httpx.TransportError as e:
            raise AnswerLost(f"the answer from {self.socket} was lost ({e}): the program may have run") from e
        if response.status_code == 503 and path.startswith("/v1/health"):
            return response.json()
        if response.is_success:
            return response.json()
        try:
            error = response.json()["error"]
            kind, message = error["kind"], error["message"]
        except (ValueError, KeyError, TypeError):
            kind, message = "unknown", response.text
        retry = response.headers.get("retry-after")
        raise refusal(response.status_code, kind, message, int(retry) if retry and retry.isdigit() else None)


__all__ = ["Client", "ExecResult", "HyperlightdError", "ProgramError", "default_socket"]
