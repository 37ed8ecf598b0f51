"""The synchronous client: hyperlightd's HTTP API on its Unix socket, through httpx."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from . import _wire
from ._compat import Unpack
from ._wire import ExecOptions
from .errors import Conflict, HyperlightdError, NotFound, SessionNotFound
from .tools import Tool, call_sync
from .types import (
    Checkpoint,
    Done,
    Event,
    ExecResult,
    FileChange,
    FileContent,
    FileInfo,
    Installed,
    Package,
    SessionInfo,
    Started,
    ToolCall,
    WriteFile,
)

log = logging.getLogger("hyperlightd")
# Tool calls one exec may have answered at once (the daemon keeps them outstanding together).
TOOL_WORKERS = 16


class Client:
    """A client of one daemon, safe to share between threads. Every call is bounded in time,
    and its errors say whether the request was sent (see :mod:`hyperlightd.errors`)."""

    def __init__(self, socket: str | None = None) -> None:
        self.socket = socket or _wire.default_socket()
        self._http = httpx.Client(
            transport=httpx.HTTPTransport(uds=self.socket),
            base_url=_wire.BASE_URL,
            timeout=_wire.timeout(_wire.DEFAULT_WAIT_S),
            event_hooks={"request": [_wire.add_trace_headers]},
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
        **options: Unpack[ExecOptions],
    ) -> ExecResult:
        """Runs ``code`` in a fresh sandbox of ``language`` (``python`` or ``javascript``) and
        returns what it did. ``files`` go into its working directory; ``policy`` narrows what it
        may name; ``tools`` are functions it may call (each call answered by its handler, several
        at once). See :class:`~hyperlightd.ExecOptions` for every option."""
        request = _wire.exec_request("/v1/exec", code, language=language, **options)
        return self._exec(request)

    def exec_stream(
        self,
        language: str,
        code: str,
        **options: Unpack[ExecOptions],
    ) -> Iterator[Event]:
        """Runs ``code`` as :meth:`exec` does, yielding its output as it is written and then
        :class:`~hyperlightd.Done` with the result. Leaving the loop early stops the program."""
        request = _wire.exec_request("/v1/exec", code, language=language, stream=True, **options)
        return self._stream(request)

    def session(
        self,
        language: str,
        *,
        idle_timeout_s: int | None = None,
        labels: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Session:
        """A new session: execs that share their state, files included. Use it as a context
        manager to delete it at the end (it also expires when idle). ``labels`` name it, to
        find it by later (:meth:`sessions`); ``env`` is environment variables every exec of it
        sees."""
        body = _wire.new_session(language, idle_timeout_s, labels, env)
        return Session(self, SessionInfo.from_json(self._json("POST", "/v1/sessions", body)))

    def attach(self, session_id: str) -> Session:
        """The session ``session_id`` (which another process may have created)."""
        return Session(self, SessionInfo.from_json(self._json("GET", _wire.session_path(session_id))))

    def sessions(self, labels: Mapping[str, str] | None = None) -> list[SessionInfo]:
        """This caller's live sessions, oldest first; with ``labels``, those that have them all."""
        return [SessionInfo.from_json(s) for s in self._json("GET", _wire.sessions_path(labels))["sessions"]]

    def health(self) -> dict[str, Any]:
        """The daemon's health: whether it is ready, its languages, limits, packages, counts.
        Answered also when it is not ready (``status`` says so)."""
        answer: dict[str, Any] = self._json("GET", "/v1/health", accept=(503,))
        return answer

    def _exec(self, request: _wire.Exec) -> ExecResult:
        if request.body.get("stream"):
            for item in self._stream(request):
                if isinstance(item, Done):
                    return item.result
            raise _wire.ended_early()
        response = self._send("POST", request.path, request.body, request.wait)
        return ExecResult.from_json(response.json(), response.headers.get("x-request-id"))

    def _stream(self, request: _wire.Exec) -> Iterator[Event]:
        answers: ThreadPoolExecutor | None = None
        execution_id = ""
        try:
            with (
                _wire.translated(self.socket, request.wait),
                self._http.stream(
                    "POST",
                    request.path,
                    json=request.body,
                    headers={"accept": _wire.NDJSON},
                    timeout=_wire.timeout(request.wait),
                ) as response,
            ):
                if not response.is_success:
                    raise _wire.refused(response.status_code, response.read(), response.headers)
                request_id = response.headers.get("x-request-id")
                for line in response.iter_lines():
                    if not line.strip():
                        continue
                    item = _wire.event(line, request_id)
                    if isinstance(item, Started):
                        execution_id = item.execution_id
                    elif isinstance(item, ToolCall):
                        answers = answers or ThreadPoolExecutor(TOOL_WORKERS, thread_name_prefix="hyperlightd-tool")
                        answers.submit(self._answer, execution_id, item, request.tools, request.wait)
                    yield item
                    if isinstance(item, Done):
                        return
                raise _wire.ended_early()
        finally:
            if answers is not None:
                answers.shutdown(wait=False, cancel_futures=True)

    def _answer(self, execution_id: str, call: ToolCall, tools: Mapping[str, Tool], wait: float) -> None:
        outcome = call_sync(tools, call.name, call.arguments)
        try:
            self._send("POST", _wire.tool_results_path(execution_id), {"id": call.id, **outcome}, wait)
        except (Conflict, NotFound):
            pass  # the exec ended (its time ran out, or its caller left) before the answer
        except HyperlightdError as e:
            log.warning("answering tool call %s (%s) failed: %s", call.id, call.name, e)

    def _json(self, method: str, path: str, body: Any = None, accept: tuple[int, ...] = ()) -> Any:
        return self._send(method, path, body, _wire.DEFAULT_WAIT_S, accept).json()

    def _send(self, method: str, path: str, body: Any, wait: float, accept: tuple[int, ...] = ()) -> httpx.Response:
        with _wire.translated(self.socket, wait):
            response = self._http.request(method, path, json=body, timeout=_wire.timeout(wait))
        if not response.is_success and response.status_code not in accept:
            raise _wire.refused(response.status_code, response.content, response.headers)
        return response


class Session:
    """A session: each exec sees what earlier ones defined and left in the working directory.
    As a context manager it is deleted on exit."""

    def __init__(self, client: Client, info: SessionInfo) -> None:
        self.client = client
        self.id = info.id
        self.language = info.language
        self.info = info

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_: object) -> None:
        self.delete()

    def exec(
        self,
        code: str,
        **options: Unpack[ExecOptions],
    ) -> ExecResult:
        """Runs ``code`` in the session, as :meth:`Client.exec` does. A program that times out
        or crashes leaves the session as it was (``result.session.rolled_back``)."""
        request = _wire.exec_request(_wire.session_path(self.id, "exec"), code, **options)
        return self.client._exec(request)

    def exec_stream(
        self,
        code: str,
        **options: Unpack[ExecOptions],
    ) -> Iterator[Event]:
        """Runs ``code`` in the session, yielding events as :meth:`Client.exec_stream` does."""
        request = _wire.exec_request(_wire.session_path(self.id, "exec"), code, stream=True, **options)
        return self.client._stream(request)

    def fork(self, checkpoint: int | None = None) -> Session:
        """A new session starting from this one's state, or from its ``checkpoint``; each goes
        on alone (:class:`~hyperlightd.CheckpointNotFound` for a checkpoint it does not keep)."""
        info = self.client._json("POST", _wire.session_path(self.id, "fork"), _wire.fork_body(checkpoint))
        return Session(self.client, SessionInfo.from_json(info))

    def checkpoints(self) -> list[Checkpoint]:
        """Its checkpoints, oldest first: the state after each exec it kept. The last is the
        one it is at."""
        listed = self.client._json("GET", _wire.session_path(self.id, "checkpoints"))["checkpoints"]
        return [Checkpoint.from_json(c) for c in listed]

    def rollback(self, checkpoint: int) -> SessionInfo:
        """Returns the session to ``checkpoint``, dropping the later ones (fork from it instead
        to keep them); the next exec starts from there."""
        body = {"checkpoint": checkpoint}
        return SessionInfo.from_json(self.client._json("POST", _wire.session_path(self.id, "rollback"), body))

    def park(self) -> SessionInfo:
        """Parks the session now: its state written to the daemon's state directory and out of
        memory (``parked``); its next exec brings it back. A daemon without ``--state-dir``
        refuses it (:class:`~hyperlightd.InvalidRequest`)."""
        return SessionInfo.from_json(self.client._json("POST", _wire.session_path(self.id, "park")))

    def restart(self) -> SessionInfo:
        """Starts the session's interpreter afresh, keeping its files and environment: its next
        checkpoint, which a rollback to the one before undoes."""
        path = _wire.session_path(self.id, "restart")
        return SessionInfo.from_json(self.client._send("POST", path, None, _wire.NO_PROGRAM_WAIT_S).json())

    def install(self, requirements: Iterable[str]) -> Installed:
        """Installs packages in the session (``"msgpack"``, ``"humanize==4.9.0"``), with what
        they need, from the daemon's package index: importable from its next exec, kept in its
        checkpoints. :class:`~hyperlightd.PackageRefused` says why one cannot be (installs off,
        denied, no wheel for the guest, a conflict); nothing changes then."""
        body = {"requirements": list(requirements)}
        path = _wire.session_path(self.id, "packages")
        return Installed.from_json(self.client._send("POST", path, body, _wire.NO_PROGRAM_WAIT_S).json())

    def packages(self) -> list[Package]:
        """The packages it installed, as its newest checkpoint has them (name, version, sha256)."""
        listed = self.client._json("GET", _wire.session_path(self.id, "packages"))["packages"]
        return [Package.from_json(p) for p in listed]

    def describe(self) -> SessionInfo:
        """The session as the daemon describes it now (execs, expiry, memory)."""
        return SessionInfo.from_json(self.client._json("GET", _wire.session_path(self.id)))

    def files(self) -> list[FileInfo]:
        """The files of its working directory, as its last exec left them."""
        listed = self.client._json("GET", _wire.session_path(self.id, "files"))["files"]
        return [FileInfo(f["path"], f["size"]) for f in listed]

    def read_file(self, path: str) -> bytes:
        """One file's bytes (:class:`~hyperlightd.NotFound` when the session has no such file)."""
        return self.client._send("GET", _wire.file_path(self.id, path), None, _wire.DEFAULT_WAIT_S).content

    def change_files(self, changes: Iterable[FileChange]) -> int:
        """Makes ``changes`` (:class:`~hyperlightd.WriteFile`, :class:`~hyperlightd.RemoveFile`,
        :class:`~hyperlightd.MoveFile`) to its working directory, in order, all or none, and
        returns the checkpoint they made (roll back to the one before to undo them). A change
        refused refuses them all: :class:`~hyperlightd.NotFound` for a path that is not there,
        :class:`~hyperlightd.PayloadTooLarge` past the file limits,
        :class:`~hyperlightd.InvalidRequest` for a path outside the directory."""
        body = _wire.file_changes(changes)
        answer = self.client._send("POST", _wire.session_path(self.id, "files"), body, _wire.NO_PROGRAM_WAIT_S).json()
        return int(answer["checkpoint"])

    def write_files(self, files: Mapping[str, FileContent]) -> int:
        """Writes ``files`` (by path, as text or bytes) into its working directory; see
        :meth:`change_files`."""
        return self.change_files([WriteFile(path, content) for path, content in files.items()])

    def set_idle_timeout(self, idle_timeout_s: int) -> SessionInfo:
        """Makes its idle timeout ``idle_timeout_s`` (capped by the daemon's maximum), counted
        from now: it expires once idle that long, or at the end of its lifetime."""
        body = {"idle_timeout_s": idle_timeout_s}
        return SessionInfo.from_json(self.client._json("PATCH", _wire.session_path(self.id), body))

    def delete(self) -> None:
        """Deletes the session; one that is already gone (deleted, expired) is not an error."""
        try:
            self.client._send("DELETE", _wire.session_path(self.id), None, _wire.DEFAULT_WAIT_S)
        except SessionNotFound:
            pass
