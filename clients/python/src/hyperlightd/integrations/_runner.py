"""Runs a model's code for the code tools: in a session per conversation and language when the
tool keeps state (made on first use, deleted by ``close``), else in a fresh sandbox per call.
A refusal (busy, quota) is told to the model as text; an unreachable daemon is raised."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from ..aio import AsyncClient, AsyncSession
from ..client import Client, Session
from ..errors import Refused, SessionLost, SessionNotFound
from ..tools import Tool
from . import _observation

LANGUAGES = ("python", "javascript")
EXPIRED = "The earlier state of this conversation had expired: this ran in a new session.\n"
GONE = (
    "The service lost the earlier state of this conversation (it restarted and could not bring it back): "
    "this ran in a new session.\n"
)


class _Choices:
    def __init__(self, languages: Sequence[str], stateful: bool, timeout_ms: int | None, tools: Sequence[Tool]):
        if not languages:
            raise ValueError("a code tool needs at least one language")
        self.languages = list(languages)
        self.stateful = stateful
        self.timeout_ms = timeout_ms
        self.tools = list(tools)

    def language(self, language: str | None) -> str:
        chosen = language or self.languages[0]
        if chosen not in self.languages:
            raise ValueError(f"language {chosen!r} is not one of {', '.join(self.languages)}")
        return chosen

    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.timeout_ms is not None:
            options["timeout_ms"] = self.timeout_ms
        if self.tools:
            options["tools"] = self.tools
        return options


class AsyncRunner(_Choices):
    """The async runner: sessions by (conversation, language)."""

    def __init__(
        self,
        client: AsyncClient,
        languages: Sequence[str] = LANGUAGES,
        stateful: bool = True,
        timeout_ms: int | None = None,
        tools: Sequence[Tool] = (),
    ) -> None:
        super().__init__(languages, stateful, timeout_ms, tools)
        self.client = client
        self._sessions: dict[tuple[str, str], AsyncSession] = {}
        self._lock = asyncio.Lock()

    async def run(self, code: str, language: str | None = None, conversation: str = "") -> str:
        """The observation of running ``code``; a refusal is an observation too."""
        chosen = self.language(language)
        try:
            if not self.stateful:
                return _observation.observation(await self.client.exec(chosen, code, **self.options()))
            try:
                session = await self._session(conversation, chosen)
                return _observation.observation(await session.exec(code, **self.options()))
            except (SessionNotFound, SessionLost) as e:  # expired while idle, or lost: say so, go on anew
                old = self._sessions.pop((conversation, chosen), None)
                if isinstance(e, SessionLost) and old is not None:
                    await old.delete()
                session = await self._session(conversation, chosen)
                notice = GONE if isinstance(e, SessionLost) else EXPIRED
                return notice + _observation.observation(await session.exec(code, **self.options()))
        except Refused as e:
            return _observation.refusal(e)

    async def _session(self, conversation: str, language: str) -> AsyncSession:
        async with self._lock:
            key = (conversation, language)
            if key not in self._sessions:
                self._sessions[key] = await self.client.session(language)
            return self._sessions[key]

    async def close(self) -> None:
        """Deletes the sessions this runner made."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.delete()


class Runner(_Choices):
    """The sync runner, for frameworks that call tools from threads."""

    def __init__(
        self,
        client: Client,
        languages: Sequence[str] = LANGUAGES,
        stateful: bool = True,
        timeout_ms: int | None = None,
        tools: Sequence[Tool] = (),
    ) -> None:
        super().__init__(languages, stateful, timeout_ms, tools)
        self.client = client
        self._sessions: dict[tuple[str, str], Session] = {}
        self._lock = threading.Lock()

    def run(self, code: str, language: str | None = None, conversation: str = "") -> str:
        """The observation of running ``code``."""
        chosen = self.language(language)
        try:
            if not self.stateful:
                return _observation.observation(self.client.exec(chosen, code, **self.options()))
            try:
                return _observation.observation(self._session(conversation, chosen).exec(code, **self.options()))
            except (SessionNotFound, SessionLost) as e:  # expired while idle, or lost: say so, go on anew
                with self._lock:
                    old = self._sessions.pop((conversation, chosen), None)
                if isinstance(e, SessionLost) and old is not None:
                    old.delete()
                session = self._session(conversation, chosen)
                notice = GONE if isinstance(e, SessionLost) else EXPIRED
                return notice + _observation.observation(session.exec(code, **self.options()))
        except Refused as e:
            return _observation.refusal(e)

    def _session(self, conversation: str, language: str) -> Session:
        with self._lock:
            key = (conversation, language)
            if key not in self._sessions:
                self._sessions[key] = self.client.session(language)
            return self._sessions[key]

    def close(self) -> None:
        """Deletes the sessions this runner made."""
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.delete()
