"""What the sync and async clients share: request bodies, how long to wait for an answer, and
how an answer becomes a value or an exception. No I/O here."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypedDict
from urllib.parse import quote

import httpx

from ._compat import Unpack
from .errors import AnswerLost, Refused, Timeout, Unreachable, refusal
from .tools import Handler, Tool, toolset
from .types import (
    Display,
    Done,
    Event,
    ExecResult,
    FileChange,
    FileContent,
    MoveFile,
    Output,
    RemoveFile,
    Started,
    ToolCall,
    WriteFile,
    encode_file,
)

DEFAULT_SOCKET = "/run/hyperlightd/hyperlightd.sock"
SOCKET_ENV = "HYPERLIGHTD_SOCKET"
BASE_URL = "http://hyperlightd"
NDJSON = "application/x-ndjson"
# An answer to a request that names no time limit (the daemon's default is 5 s, its cap 60 s
# unless configured otherwise).
DEFAULT_WAIT_S = 90.0
# Added to an execution's own limit: the daemon answers at the limit, plus sending it.
EXEC_MARGIN_S = 15.0
# Added again for a session's exec: the daemon moves its deadline on by the time the session
# spends saving earlier execs' state, up to a minute.
SESSION_SAVE_WAIT_S = 60.0
# A change to a session's files, or a restart: an exec that runs no program, so it may wait
# for saves too.
NO_PROGRAM_WAIT_S = DEFAULT_WAIT_S + SESSION_SAVE_WAIT_S
# A tool call's wait when the request names none: the daemon's default cap on one.
DEFAULT_TOOL_WAIT_S = 300.0
CONNECT_TIMEOUT_S = 5.0


# The W3C Trace Context headers a request carries from the caller's current span.
TRACE_HEADERS = ("traceparent", "tracestate")


def trace_headers() -> dict[str, str]:
    """The caller's current OpenTelemetry span as W3C Trace Context headers (``traceparent``,
    ``tracestate``), so that a daemon that traces puts its spans of the request under it; none
    when OpenTelemetry's API is not installed or no span is current. Baggage is not sent."""
    try:
        from opentelemetry import propagate
    except ImportError:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {name: value for name, value in carrier.items() if name in TRACE_HEADERS}


def add_trace_headers(request: httpx.Request) -> None:
    """An httpx request hook: :func:`trace_headers`, unless the request names its own."""
    for name, value in trace_headers().items():
        request.headers.setdefault(name, value)


async def add_trace_headers_async(request: httpx.Request) -> None:
    """:func:`add_trace_headers`, as an async client's hook."""
    add_trace_headers(request)


def default_socket() -> str:
    """``HYPERLIGHTD_SOCKET``, else the daemon's default path, as ``hlctl`` finds it."""
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


@dataclass(frozen=True)
class Exec:
    """One exec's request: its body and how long its answer (or a stream's next event) may take."""

    path: str
    body: dict[str, Any]
    wait: float
    tools: dict[str, Tool]


class ExecOptions(TypedDict, total=False):
    """What an exec may say besides its code (every exec method takes these as keywords).

    ``timeout_ms``: its wall-clock limit (the daemon's default applies when absent, values
    above its maximum are capped). ``max_output_bytes``: the cap on stdout and stderr.
    ``files``: files for its working directory, by path, as text or bytes. ``policy``: what
    the program may not name (``allowed_modules``, ``blocked_functions``, ``blocked_globals``),
    checked before it runs. ``tools``: functions it may call (:class:`~hyperlightd.Tool`, or
    typed functions), each call answered by its handler. ``tool_timeout_ms``: how long one
    call may wait for its answer. ``network``: what the program may reach over HTTP,
    narrowing the daemon's egress rules (``{"allow": [{"scheme": "https", "host":
    "api.example.com", "methods": ["GET"], "path_prefix": "/v1/"}]}``). ``env``: environment
    variables the program sees (``os.environ``, ``process.env``); in a session, for this exec
    only, over the session's own. ``packages``: Python packages to install before it runs
    (``"msgpack"``, ``"humanize==4.9.0"``), from the daemon's package index; in a session they
    stay."""

    timeout_ms: int
    max_output_bytes: int
    files: Mapping[str, FileContent]
    policy: Mapping[str, Any]
    tools: Iterable[Tool | Handler]
    tool_timeout_ms: int
    network: Mapping[str, Any]
    env: Mapping[str, str]
    packages: Iterable[str]


def exec_request(
    path: str, code: str, *, language: str | None = None, stream: bool = False, **options: Unpack[ExecOptions]
) -> Exec:
    """The body of ``POST /v1/exec`` (with ``language``) or of a session's exec (without)."""
    if not isinstance(code, str):
        raise TypeError(f"code is a str, not {type(code).__name__}")
    unknown = set(options) - set(ExecOptions.__annotations__)
    if unknown:
        raise TypeError(f"unknown exec options: {', '.join(sorted(unknown))}")
    body: dict[str, Any] = {"code": code}
    if language is not None:
        body["language"] = language
    for name in ("timeout_ms", "max_output_bytes", "tool_timeout_ms"):
        if options.get(name) is not None:
            body[name] = options[name]
    files, policy, tools = options.get("files"), options.get("policy"), toolset(options.get("tools"))
    timeout_ms, tool_timeout_ms = options.get("timeout_ms"), options.get("tool_timeout_ms")
    if files:
        body["files"] = {name: encode_file(content) for name, content in files.items()}
    if policy is not None:
        body["policy"] = dict(policy)
    if options.get("network") is not None:
        body["network"] = dict(options["network"])
    if options.get("env"):
        body["env"] = dict(options["env"])
    packages = list(options.get("packages") or [])
    if packages:
        body["packages"] = packages
    if tools:
        body["tools"] = [one.spec() for one in tools.values()]
    if stream or tools:
        body["stream"] = True
    wait = DEFAULT_WAIT_S if timeout_ms is None else timeout_ms / 1000 + EXEC_MARGIN_S
    if language is None:
        wait += SESSION_SAVE_WAIT_S
    if tools:
        wait += DEFAULT_TOOL_WAIT_S if tool_timeout_ms is None else tool_timeout_ms / 1000
    return Exec(path, body, wait, tools)


def fork_body(checkpoint: int | None) -> dict[str, int] | None:
    """The body of a fork: none for the session's newest state."""
    return None if checkpoint is None else {"checkpoint": checkpoint}


def file_changes(changes: Iterable[FileChange]) -> dict[str, Any]:
    """The body of ``POST /v1/sessions/{id}/files``: the changes in order."""
    body = []
    for change in changes:
        if isinstance(change, WriteFile):
            body.append({"write": {"path": change.path, "data": encode_file(change.content)}})
        elif isinstance(change, RemoveFile):
            body.append({"remove": {"path": change.path}})
        elif isinstance(change, MoveFile):
            body.append({"move": {"from": change.source, "to": change.destination}})
        else:
            raise TypeError(f"a file change is WriteFile, RemoveFile or MoveFile, not {type(change).__name__}")
    return {"changes": body}


def new_session(
    language: str,
    idle_timeout_s: int | None,
    labels: Mapping[str, str] | None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The body of ``POST /v1/sessions``."""
    body: dict[str, Any] = {"language": language}
    if idle_timeout_s is not None:
        body["idle_timeout_s"] = idle_timeout_s
    if labels:
        body["labels"] = dict(labels)
    if env:
        body["env"] = dict(env)
    return body


def sessions_path(labels: Mapping[str, str] | None) -> str:
    """``GET /v1/sessions``, asking for the sessions with all of ``labels``."""
    query = "&".join("label=" + quote(f"{name}={value}", safe="") for name, value in (labels or {}).items())
    return "/v1/sessions" + ("?" + query if query else "")


def session_path(session_id: str, *rest: str) -> str:
    return "/".join(["/v1/sessions", quote(session_id, safe=""), *rest])


def file_path(session_id: str, path: str) -> str:
    """``GET /v1/sessions/{id}/files/{path}``, each segment of ``path`` percent-encoded."""
    return session_path(session_id, "files", "/".join(quote(part, safe="") for part in path.split("/")))


def tool_results_path(execution_id: str) -> str:
    return f"/v1/executions/{quote(execution_id, safe='')}/tool-results"


def refused(status: int, body: bytes, headers: Mapping[str, str]) -> Refused:
    """The exception for a refusal (a status that is not 2xx)."""
    try:
        error = json.loads(body)["error"]
        kind, message = str(error["kind"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        kind, message = "unknown", body.decode("utf-8", "replace")[:500] or f"status {status}"
    retry = headers.get("retry-after")
    return refusal(
        status,
        kind,
        message,
        # RFC 9110's delay-seconds: ASCII digits only (str.isdigit also takes '²' and '١').
        int(retry) if retry and retry.isascii() and retry.isdigit() else None,
        headers.get("x-request-id"),
    )


def event(line: str | bytes, request_id: str | None) -> Event:
    """One line of a streamed exec's answer, as an event; an ``error`` line is raised."""
    try:
        item = json.loads(line)
        kind = item["type"]
        if kind in ("stdout", "stderr"):
            return Output(kind, item["text"])
        if kind == "display":
            return Display(item["data"])
        if kind == "started":
            return Started(item["execution_id"])
        if kind == "tool_call":
            return ToolCall(item["id"], item["name"], item.get("arguments"))
        if kind == "result":
            return Done(ExecResult.from_json(item, request_id))
        if kind == "error":
            error = item["error"]
            raise refusal(500, error["kind"], error["message"], None, request_id)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        # AttributeError: a field that should be an object is not (found by tests/test_fuzz.py).
        raise AnswerLost(f"the daemon's stream had a line this client cannot read ({e}): {line[:200]!r}") from e
    raise AnswerLost(f"the daemon's stream had an event of unknown type {kind!r}")


def ended_early() -> AnswerLost:
    return AnswerLost("the daemon's stream ended before the program's result: the program may have run")


def timeout(wait: float) -> httpx.Timeout:
    """An answer (or a stream's next event) within ``wait`` seconds, a connection within 5."""
    return httpx.Timeout(wait, connect=CONNECT_TIMEOUT_S)


@contextmanager
def translated(socket: str, wait: float) -> Iterator[None]:
    """httpx's errors as this client's: never connected, no answer in time, or answer lost."""
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:
        raise Unreachable(socket, str(e) or type(e).__name__) from e
    except httpx.TimeoutException as e:
        raise Timeout(f"no answer from {socket} within {wait:.0f} s: the program may have run") from e
    except httpx.TransportError as e:
        raise AnswerLost(
            f"the answer from {socket} was lost ({e or type(e).__name__}): the program may have run"
        ) from e
