"""OpenAI Agents SDK: a function tool running the model's code in hyperlightd.

::

    from agents import Agent, Runner
    from hyperlightd.integrations.openai_agents import hyperlightd_code_tool

    code = hyperlightd_code_tool()
    agent = Agent(name="analyst", tools=[code.tool])
    await Runner.run(agent, "What is the 30th Fibonacci number?")
    await code.aclose()

One :class:`HyperlightdCode` keeps one hyperlightd session per language for its lifetime (a
conversation): make one per conversation, or pass ``stateful=False``. The SDK's sandbox agents
drive a shell and a filesystem, which hyperlightd does not offer (it runs Python and
JavaScript programs), so this is a function tool. Needs ``pip install hyperlightd[openai-agents]``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agents import FunctionTool, RunContextWrapper

from ..aio import AsyncClient
from ..tools import Tool
from . import _observation, _schema
from ._runner import LANGUAGES, AsyncRunner


class HyperlightdCode:
    """The tool (``.tool``, named ``execute_code``) and the sessions behind it."""

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
        self.tool = FunctionTool(
            name=name,
            description=_observation.description(list(languages), stateful),
            params_json_schema=_schema.arguments(languages),
            on_invoke_tool=self._invoke,
            strict_json_schema=False,
        )

    async def _invoke(self, _: RunContextWrapper[Any], arguments: str) -> str:
        try:
            parsed = json.loads(arguments)
            code, language = parsed["code"], parsed.get("language")
        except (ValueError, KeyError, TypeError) as e:
            return f"The arguments must be a JSON object with a string 'code': {e}"
        try:
            return await self.runner.run(code, language)
        except ValueError as e:  # a language this tool does not offer
            return str(e)

    async def aclose(self) -> None:
        """Deletes the sessions the tool made."""
        await self.runner.close()


def hyperlightd_code_tool(client: AsyncClient | None = None, **options: Any) -> HyperlightdCode:
    """A :class:`HyperlightdCode` (the options are its keyword arguments)."""
    return HyperlightdCode(client, **options)
