"""smolagents: a Python executor for ``CodeAgent`` that runs the agent's code in hyperlightd, as
its E2B, Docker and Modal executors do elsewhere.

::

    from smolagents import CodeAgent
    from hyperlightd.integrations.smolagents import HyperlightdExecutor

    agent = CodeAgent(tools=[...], model=model, executor=HyperlightdExecutor())
    agent.run("How many days are there between 2024-01-01 and 2024-03-01?")
    agent.cleanup()

The agent's steps share one hyperlightd session, so variables carry from step to step. The
agent's tools run here, in the agent's process: the code calls them as it calls any function
(``web_search("x")``), and each call reaches this process as a hyperlightd tool call, so a
tool's code and credentials never enter the sandbox. ``final_answer(x)`` ends the step with
``x`` as the agent's answer. Arguments and results cross as JSON; a tool's result that is not
JSON reaches the code as its ``str``. Needs ``pip install hyperlightd[smolagents]``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from smolagents.local_python_executor import CodeOutput, PythonExecutor
from smolagents.tools import Tool as SmolTool

from ..client import Client, Session
from ..errors import SessionLost, SessionNotFound
from ..tools import Tool
from ..types import ExecResult
from ._observation import jsonable

# smolagents' input types as JSON Schema types; "any", "image" and "audio" take anything.
_TYPES = {"string", "boolean", "integer", "number", "array", "object", "null"}

# Defines each tool as a plain function of the session (positional arguments named by the
# tool's inputs), which makes the hyperlightd tool call; and final_answer, which ends the step.
_PRELUDE = """
class FinalAnswerException(BaseException):
    pass

def _hyperlightd_tool(_name, _inputs):
    def call(*args, **kwargs):
        if len(args) > len(_inputs):
            raise TypeError(f"{_name}() takes {len(_inputs)} arguments ({len(args)} given)")
        kwargs.update(zip(_inputs, args))
        return getattr(tools, _name)(**kwargs)
    call.__name__ = _name
    return call

def _hyperlightd_json(value):
    import json
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)

def final_answer(answer):
    tools.final_answer(answer=_hyperlightd_json(answer))
    raise FinalAnswerException()
"""


RESTARTED = "(The session had expired: this step ran in a new one, without earlier steps' variables.)\n"


class ExecutionFailed(Exception):
    """The step's code failed: its output and error, for the agent's next step to read."""


class HyperlightdExecutor(PythonExecutor):
    """Runs ``CodeAgent``'s code in one hyperlightd Python session (made on first use).

    ``timeout_ms`` bounds each step; ``allowed_modules`` (``None``: any) is the only modules
    the code may import, checked before it runs, as the daemon's policy does."""

    def __init__(
        self,
        additional_imports: Sequence[str] = (),
        logger: Any = None,
        *,
        client: Client | None = None,
        timeout_ms: int | None = None,
        allowed_modules: Sequence[str] | None = None,
    ) -> None:
        self.client = client or Client()
        self.timeout_ms = timeout_ms
        self.policy = None if allowed_modules is None else {"allowed_modules": [*allowed_modules, *additional_imports]}
        self.logger = logger
        self._session: Session | None = None
        self._tools: list[Tool] = []
        self._inputs: dict[str, list[str]] = {}
        self._answers: list[Any] = []
        self._variables: dict[str, Any] = {}

    def send_tools(self, tools: dict[str, SmolTool]) -> None:
        """Declares the agent's tools to every later step and defines them in the session."""
        own = {name: tool for name, tool in tools.items() if name != "final_answer"}
        self._tools = [self._tool(name, tool) for name, tool in own.items()]
        self._tools.append(Tool("final_answer", self._final_answer, "The agent's final answer.", {"type": "object"}))
        self._inputs = {name: list(tool.inputs) for name, tool in own.items()}
        self._define_tools()

    def _define_tools(self) -> None:
        lines = [f"{name} = _hyperlightd_tool({name!r}, {inputs!r})" for name, inputs in self._inputs.items()]
        self._run_setup("\n".join([_PRELUDE, *lines]))

    def send_variables(self, variables: dict[str, Any]) -> None:
        """Makes ``variables`` globals of the session (JSON values; others as their ``str``)."""
        if variables:
            self._variables = {name: jsonable(value) for name, value in variables.items()}
            payload = json.dumps(self._variables)
            self._run_setup(f"import json as _json\nglobals().update(_json.loads({payload!r}))\ndel _json")

    def __call__(self, code_action: str) -> CodeOutput:
        """Runs one step's code: its output and last value, or the final answer."""
        self._answers.clear()
        result, restarted = self._exec(code_action)
        logs = (RESTARTED if restarted else "") + result.stdout
        if self._answers:
            return CodeOutput(output=self._answers[-1], logs=logs, is_final_answer=True)
        if not result.ok:
            error = result.error
            what = f"{error.kind}: {error.message}" if error else result.status
            raise ExecutionFailed(f"{logs}\nExecuting code yielded an error:\n{what}\n{result.stderr}".strip())
        return CodeOutput(output=result.result, logs=logs, is_final_answer=False)

    def cleanup(self) -> None:
        """Deletes the session (``CodeAgent.cleanup`` calls this)."""
        if self._session is not None:
            self._session.delete()
            self._session = None

    delete = cleanup

    def _exec(self, code: str) -> tuple[ExecResult, bool]:
        """The step's result, and whether it ran in a new session because the old one expired."""
        options: dict[str, Any] = {"tools": self._tools}
        if self.timeout_ms is not None:
            options["timeout_ms"] = self.timeout_ms
        if self.policy is not None:
            options["policy"] = self.policy
        try:
            return self._ensure_session().exec(code, **options), False
        except (SessionNotFound, SessionLost):
            # Expired while the agent waited, or lost by a restarted daemon: start again with the
            # tools and variables defined.
            if self._session is not None:
                self._session.delete()
            self._session = None
            self._define_tools()
            self.send_variables(self._variables)
            return self._ensure_session().exec(code, **options), True

    def _run_setup(self, code: str) -> None:
        result = self._ensure_session().exec(code)
        if not result.ok:
            raise ExecutionFailed(f"setting the session up failed: {result.error}")

    def _ensure_session(self) -> Session:
        if self._session is None:
            self._session = self.client.session("python")
        return self._session

    def _final_answer(self, answer: Any = None) -> None:
        self._answers.append(answer)

    @staticmethod
    def _tool(name: str, tool: Any) -> Tool:
        properties: dict[str, Any] = {}
        required = []
        for input_name, spec in tool.inputs.items():
            kinds = spec.get("type")
            kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
            json_kinds = [k for k in kinds if k in _TYPES]
            properties[input_name] = {"description": spec.get("description", "")}
            if json_kinds and len(json_kinds) == len(kinds):
                properties[input_name]["type"] = json_kinds if len(json_kinds) > 1 else json_kinds[0]
            if not spec.get("nullable"):
                required.append(input_name)

        def handler(**arguments: Any) -> Any:
            return jsonable(tool(**arguments))

        schema = {"type": "object", "properties": properties, "required": required}
        return Tool(name, handler, getattr(tool, "description", "") or "", schema)
