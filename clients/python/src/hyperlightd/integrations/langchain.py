"""LangChain: a ``BaseTool`` running the model's code in hyperlightd.

::

    from hyperlightd.integrations.langchain import HyperlightdCodeTool

    tool = HyperlightdCodeTool()
    model_with_tools = chat_model.bind_tools([tool])
    ...
    message = tool.invoke(tool_call)   # a ToolMessage with what the program did
    tool.close()

One tool keeps one hyperlightd session per language for its lifetime (a conversation); pass
``stateful=False`` for a fresh sandbox per call. ``invoke`` uses the sync client, ``ainvoke``
the async one. Needs ``pip install hyperlightd[langchain]``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, PrivateAttr

from ..aio import AsyncClient
from ..client import Client
from ..tools import Tool
from . import _observation, _schema
from ._runner import LANGUAGES, AsyncRunner, Runner


class HyperlightdCodeTool(BaseTool):
    """``execute_code``: runs ``code`` in one of ``languages`` (the first is the default)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = "execute_code"
    description: str = ""
    _runner: Runner = PrivateAttr()
    _async_runner: AsyncRunner = PrivateAttr()

    def __init__(
        self,
        socket: str | None = None,
        *,
        languages: Sequence[str] = LANGUAGES,
        stateful: bool = True,
        timeout_ms: int | None = None,
        tools: Sequence[Tool] = (),
        **fields: Any,
    ) -> None:
        fields.setdefault("description", _observation.description(list(languages), stateful))
        super().__init__(args_schema=_schema.arguments(languages), **fields)
        self._runner = Runner(Client(socket), languages, stateful, timeout_ms, tools)
        self._async_runner = AsyncRunner(AsyncClient(socket), languages, stateful, timeout_ms, tools)

    def _run(self, code: str, language: str | None = None, run_manager: CallbackManagerForToolRun | None = None) -> str:
        return self._runner.run(code, language)

    async def _arun(
        self, code: str, language: str | None = None, run_manager: AsyncCallbackManagerForToolRun | None = None
    ) -> str:
        return await self._async_runner.run(code, language)

    def close(self) -> None:
        """Deletes the sessions ``invoke`` made (``aclose`` those of ``ainvoke``)."""
        self._runner.close()

    async def aclose(self) -> None:
        """Deletes the sessions ``ainvoke`` made."""
        await self._async_runner.close()
