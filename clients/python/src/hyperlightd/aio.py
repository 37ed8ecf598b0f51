"""The asynchronous client: :class:`~hyperlightd.Client`'s methods, awaited (asyncio, httpx)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import httpx

from . import _wire
from ._compat import Unpack
from ._wire import ExecOptions
from .client import log
from .errors import Conflict, HyperlightdError, NotFound, SessionNotFound
from .tools import Tool, call_async
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


class AsyncClient:
    """A client of one daemon for asyncio code; see :class:`~hyperlightd.Client`. Tool handlers
    may be coroutine functions (awaited) or plain functions (run in a thread)."""

    def __init__(self, socket: str | None = None) -> None:
        self.socket = socket or _wire.default_socket()
        self._http = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=self.socket),
            base_url=_wire.BASE_URL,
            timeout=_wire.timeout(_wire.DEFAULT_WAIT_S),
            event_hooks={"request": [_wire.add_trace_headers_async]},
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def exec(
        self,
        language: str,
        code: str,
        **options: Unpack[ExecOptions],
    ) -> ExecResult:
        """Runs ``code`` in a fresh sandbox of ``language``; see :meth:`Client.exec`."""
        request = _wire.exec_request("/v1/exec", code, language=language, **options)
        return await self._exec(request)

    def exec_stream(
        self,
        language: str,
        code: str,
        **options: Unpack[ExecOptions],
    ) -> AsyncIterator[Event]:
        """Runs ``code``, yielding its events as they come (``async for``); see
        :meth:`Client.exec_stream`."""
        request = _wire.exec_request("/v1/exec", code, language=language, stream=True, **options)
        return self._stream(request)

    async def session(
        self,
        language: str,
        *,
        idle_timeout_s: int | None = None,
        labels: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AsyncSession:
        """A new session (``async with`` deletes it at the end); see :meth:`Client.session`."""
        body = _wire.new_session(language, idle_timeout_s, labels, env)
        return AsyncSession(self, SessionInfo.from_json(await self._json("POST", "/v1/sessions", body)))

    async def attach(self, session_id: str) -> AsyncSession:
        """The session ``session_id``."""
        return AsyncSession(self, SessionInfo.from_json(await self._json("GET", _wire.session_path(session_id))))

    async def sessions(self, labels: Mapping[str, str] | None = None) -> list[SessionInfo]:
        """This caller's live sessions, oldest first; with ``labels``, those that have them all."""
        return [SessionInfo.from_json(s) for s in (await self._json("GET", _wire.sessions_path(labels)))["sessions"]]

    async def health(self) -> dict[str, Any]:
        """The daemon's health; see :meth:`Client.health`."""
        answer: dict[str, Any] = await self._json("GET", "/v1/health", accept=(503,))
        return answer

    async def _exec(self, request: _wire.Exec) -> ExecResult:
        if request.body.get("stream"):
            async for item in self._stream(request):
                if isinstance(item, Done):
                    return item.result
            raise _wire.ended_early()
        response = await self._send("POST", request.path, request.body, request.wait)
        return ExecResult.from_json(response.json(), response.headers.get("x-request-id"))

    async def _stream(self, request: _wire.Exec) -> AsyncIterator[Event]:
        answers: set[asyncio.Task[None]] = set()
        execution_id = ""
        try:
            with _wire.translated(self.socket, request.wait):
                async with self._http.stream(
                    "POST",
                    request.path,
                    json=request.body,
                    headers={"accept": _wire.NDJSON},
                    timeout=_wire.timeout(request.wait),
                ) as response:
                    if not response.is_success:
                        raise _wire.refused(response.status_code, await response.aread(), response.headers)
                    request_id = response.headers.get("x-request-id")
                    async for line in response.aiter_lines():
                        if not line.strip():
                            continue
                        item = _wire.event(line, request_id)
                        if isinstance(item, Started):
                            execution_id = item.execution_id
                        elif isinstance(item, ToolCall):
                            task = asyncio.create_task(self._answer(execution_id, item, request.tools, request.wait))
                            answers.add(task)
                            task.add_done_callback(answers.discard)
                        yield item
                        if isinstance(item, Done):
                            return
                    raise _wire.ended_early()
        finally:
            for task in answers:
                task.cancel()

    async def _answer(self, execution_id: str, call: ToolCall, tools: Mapping[str, Tool], wait: float) -> None:
        outcome = await call_async(tools, call.name, call.arguments)
        try:
            await self._send("POST", _wire.tool_results_path(execution_id), {"id": call.id, **outcome}, wait)
        except (Conflict, NotFound):
            pass  # the exec ended before the answer
        except HyperlightdError as e:
            log.warning("answering tool call %s (%s) failed: %s", call.id, call.name, e)

    async def _json(self, method: str, path: str, body: Any = None, accept: tuple[int, ...] = ()) -> Any:
        return (await self._send(method, path, body, _wire.DEFAULT_WAIT_S, accept)).json()

    async def _send(
        self, method: str, path: str, body: Any, wait: float, accept: tuple[int, ...] = ()
    ) -> httpx.Response:
        with _wire.translated(self.socket, wait):
            response = await self._http.request(method, path, json=body, timeout=_wire.timeout(wait))
        if not response.is_success and response.status_code not in accept:
            raise _wire.refused(response.status_code, response.content, response.headers)
        return response


class AsyncSession:
    """A session for asyncio code; see :class:`~hyperlightd.Session`."""

    def __init__(self, client: AsyncClient, info: SessionInfo) -> None:
        self.client = client
        self.id = info.id
        self.language = info.language
        self.info = info

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.delete()

    async def exec(
        self,
        code: str,
        **options: Unpack[ExecOptions],
    ) -> ExecResult:
        """Runs ``code`` in the session; see :meth:`Session.exec`."""
        request = _wire.exec_request(_wire.session_path(self.id, "exec"), code, **options)
        return await self.client._exec(request)

    def exec_stream(
        self,
        code: str,
        **options: Unpack[ExecOptions],
    ) -> AsyncIterator[Event]:
        """Runs ``code`` in the session, yielding its events."""
        request = _wire.exec_request(_wire.session_path(self.id, "exec"), code, stream=True, **options)
        return self.client._stream(request)

    async def fork(self, checkpoint: int | None = None) -> AsyncSession:
        """A new session starting from this one's state, or from its ``checkpoint``."""
        info = await self.client._json("POST", _wire.session_path(self.id, "fork"), _wire.fork_body(checkpoint))
        return AsyncSession(self.client, SessionInfo.from_json(info))

    async def checkpoints(self) -> list[Checkpoint]:
        """Its checkpoints, oldest first; see :meth:`Session.checkpoints`."""
        listed = (await self.client._json("GET", _wire.session_path(self.id, "checkpoints")))["checkpoints"]
        return [Checkpoint.from_json(c) for c in listed]

    async def rollback(self, checkpoint: int) -> SessionInfo:
        """Returns the session to ``checkpoint``; see :meth:`Session.rollback`."""
        body = {"checkpoint": checkpoint}
        return SessionInfo.from_json(await self.client._json("POST", _wire.session_path(self.id, "rollback"), body))

    async def park(self) -> SessionInfo:
        """Parks the session now; see :meth:`Session.park`."""
        return SessionInfo.from_json(await self.client._json("POST", _wire.session_path(self.id, "park")))

    async def restart(self) -> SessionInfo:
        """Starts the session's interpreter afresh; see :meth:`Session.restart`."""
        path = _wire.session_path(self.id, "restart")
        return SessionInfo.from_json((await self.client._send("POST", path, None, _wire.NO_PROGRAM_WAIT_S)).json())

    async def install(self, requirements: Iterable[str]) -> Installed:
        """Installs packages in the session; see :meth:`Session.install`."""
        body = {"requirements": list(requirements)}
        path = _wire.session_path(self.id, "packages")
        return Installed.from_json((await self.client._send("POST", path, body, _wire.NO_PROGRAM_WAIT_S)).json())

    async def packages(self) -> list[Package]:
        """The packages it installed; see :meth:`Session.packages`."""
        listed = (await self.client._json("GET", _wire.session_path(self.id, "packages")))["packages"]
        return [Package.from_json(p) for p in listed]

    async def describe(self) -> SessionInfo:
        """The session as the daemon describes it now."""
        return SessionInfo.from_json(await self.client._json("GET", _wire.session_path(self.id)))

    async def files(self) -> list[FileInfo]:
        """The files of its working directory."""
        listed = (await self.client._json("GET", _wire.session_path(self.id, "files")))["files"]
        return [FileInfo(f["path"], f["size"]) for f in listed]

    async def read_file(self, path: str) -> bytes:
        """One file's bytes."""
        return (await self.client._send("GET", _wire.file_path(self.id, path), None, _wire.DEFAULT_WAIT_S)).content

    async def change_files(self, changes: Iterable[FileChange]) -> int:
        """Changes its working directory, all or none; see :meth:`Session.change_files`."""
        body = _wire.file_changes(changes)
        answer = (
            await self.client._send("POST", _wire.session_path(self.id, "files"), body, _wire.NO_PROGRAM_WAIT_S)
        ).json()
        return int(answer["checkpoint"])

    async def write_files(self, files: Mapping[str, FileContent]) -> int:
        """Writes ``files`` into its working directory; see :meth:`Session.write_files`."""
        return await self.change_files([WriteFile(path, content) for path, content in files.items()])

    async def set_idle_timeout(self, idle_timeout_s: int) -> SessionInfo:
        """Makes its idle timeout ``idle_timeout_s``; see :meth:`Session.set_idle_timeout`."""
        body = {"idle_timeout_s": idle_timeout_s}
        return SessionInfo.from_json(await self.client._json("PATCH", _wire.session_path(self.id), body))

    async def delete(self) -> None:
        """Deletes the session; one already gone is not an error."""
        try:
            await self.client._send("DELETE", _wire.session_path(self.id), None, _wire.DEFAULT_WAIT_S)
        except SessionNotFound:
            pass
