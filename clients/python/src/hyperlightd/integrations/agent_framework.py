"""Microsoft Agent Framework: a code-execution tool for an ``Agent`` (``ChatAgent``).

::

    from agent_framework import Agent
    from hyperlightd.integrations.agent_framework import HyperlightdCodeTool

    agent = Agent(chat_client, tools=[HyperlightdCodeTool()])
    session = agent.create_session()
    await agent.run("What is the 30th Fibonacci number?", session=session)

Each agent session (conversation) gets its own hyperlightd session per language, so variables
and files carry from one call to the next; ``await tool.aclose()`` deletes them (they also
expire when idle). Needs ``pip install hyperlightd[agent-framework]``."""

from __future__ import annotations

from collections.abc import Sequence

from agent_framework import FunctionInvocationContext, FunctionTool

from ..aio import AsyncClient
from ..tools import Tool
from . import _observation, _schema
from ._runner import LANGUAGES, AsyncRunner


class HyperlightdCodeTool(FunctionTool):
    """A ``FunctionTool`` (``execute_code``) that runs the model's code in hyperlightd.

    ``languages`` are those the model may choose from (the first is the default);
    ``stateful=False`` runs every call in a fresh sandbox; ``tools`` are functions the code may
    call (``tools.NAME(...)``), answered in this process."""

    def __init__(
        self,
        client: AsyncClient | None = None,
        *,
        languages: Sequence[str] = LANGUAGES,
        stateful: bool = True,
        timeout_ms: int | None = None,
        tools: Sequence[Tool] = (),
        name: str = "execute_code",
    ) -> None:
        self.runner = AsyncRunner(client or AsyncClient(), languages, stateful, timeout_ms, tools)
        super().__init__(
            name=name,
            description=_observation.description(list(languages), stateful),
            func=self._execute,
            input_model=_schema.arguments(languages),
        )

    async def _execute(self, code: str, ctx: FunctionInvocationContext, language: str | None = None) -> str:
        conversation = ctx.session.session_id if ctx.session is not None else ""
        return await self.runner.run(code, language, conversation)

    async def aclose(self) -> None:
        """Deletes the sessions the tool made."""
        await self.runner.close()
