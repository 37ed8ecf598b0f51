"""Each framework adapter with the real framework from PyPI, a scripted model standing in for
the LLM (no network), and real code run by the daemon. Each prints its conversation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from conftest import show

from hyperlightd import AsyncClient, Client


def test_smolagents_code_agent_with_tools_and_final_answer(client: Client) -> None:
    from smolagents import CodeAgent, tool
    from smolagents.models import ChatMessage, MessageRole, Model
    from smolagents.monitoring import LogLevel, TokenUsage

    from hyperlightd.integrations.smolagents import HyperlightdExecutor

    looked_up: list[str] = []

    @tool
    def population(city: str) -> int:
        """The number of people living in a city.

        Args:
            city: The city's name.
        """
        looked_up.append(city)
        return {"Oslo": 709_000, "Bergen": 291_000}[city]

    replies = [
        "Thought: I look both cities up with the tool, then add them.\n<code>\n"
        'oslo = population("Oslo")\nbergen = population(city="Bergen")\nprint(oslo + bergen)\n</code>',
        "Thought: The variables are still there; I answer.\n<code>\nfinal_answer(oslo + bergen)\n</code>",
    ]
    transcript: list[tuple[str, str]] = []

    class ScriptedModel(Model):
        def generate(self, messages: list[Any], stop_sequences: Any = None, **_: Any) -> ChatMessage:
            last = messages[-1]
            content = (
                last.content
                if isinstance(last.content, str)
                else " ".join(part.get("text", "") for part in last.content or [])
            )
            transcript.append((str(last.role), content[-600:]))
            reply = replies.pop(0)
            transcript.append(("model", reply))
            return ChatMessage(role=MessageRole.ASSISTANT, content=reply, token_usage=TokenUsage(0, 0))

    executor = HyperlightdExecutor(client=client, timeout_ms=60_000)
    agent = CodeAgent(
        tools=[population], model=ScriptedModel(model_id="scripted"), executor=executor, verbosity_level=LogLevel.OFF
    )
    try:
        answer = agent.run("How many people live in Oslo and Bergen together?")
    finally:
        agent.cleanup()
    show("smolagents CodeAgent, HyperlightdExecutor", [*transcript, ("agent's answer", str(answer))])
    assert answer == 1_000_000
    assert looked_up == ["Oslo", "Bergen"]
    assert "1000000" in transcript[2][1], "the second step's model input carries the first step's output"


def test_agent_framework_agent_keeps_state_per_conversation(socket: str) -> None:
    from agent_framework import Agent, BaseChatClient, ChatResponse, Content, FunctionInvocationLayer, Message

    from hyperlightd.integrations.agent_framework import HyperlightdCodeTool

    def call(call_id: str, arguments: dict[str, Any]) -> Message:
        return Message("assistant", [Content.from_function_call(call_id, "execute_code", arguments=arguments)])

    script = [
        call("c1", {"code": "import math\nr = math.factorial(10)\nr"}),
        Message("assistant", ["10! is 3628800."]),
        call("c2", {"code": "r * 2"}),
        call("c3", {"code": "[1, 2, 3].map(x => x * x)", "language": "javascript"}),
        Message("assistant", ["Twice that is 7257600; the squares are 1, 4, 9."]),
    ]
    transcript: list[tuple[str, str]] = []

    class ScriptedClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
        async def _reply(self, messages: Any) -> ChatResponse:
            last = messages[-1]
            results = [str(c.result) for c in last.contents if c.type == "function_result"]
            transcript.append((last.role, "\n".join(results) or last.text))
            reply = script.pop(0)
            said = reply.text or json.dumps([c.arguments for c in reply.contents])
            transcript.append(("model", said))
            return ChatResponse(messages=reply)

        def _inner_get_response(self, *, messages: Any, stream: bool, options: Any, **_: Any) -> Any:
            return self._reply(messages)

    async def run() -> tuple[str, str]:
        async with AsyncClient(socket) as daemon:
            code = HyperlightdCodeTool(daemon, timeout_ms=60_000)
            agent = Agent(ScriptedClient(), tools=[code])
            conversation = agent.create_session()
            first = await agent.run("What is 10 factorial?", session=conversation)
            second = await agent.run("Twice that? And square 1, 2, 3 in JavaScript.", session=conversation)
            assert len(await daemon.sessions()) == 2  # one per language in this conversation
            await code.aclose()
            assert await daemon.sessions() == []
            return first.text, second.text

    first, second = asyncio.run(run())
    show("Microsoft Agent Framework, HyperlightdCodeTool", transcript)
    tool_results = [text for who, text in transcript if who == "tool"]
    assert "result: 3628800" in tool_results[0]
    assert "result: 7257600" in tool_results[1], "the second call saw the first call's variable"
    assert "result: [1, 4, 9]" in tool_results[2]
    assert (first, second) == ("10! is 3628800.", "Twice that is 7257600; the squares are 1, 4, 9.")


def test_openai_agents_function_tool(socket: str) -> None:
    from agents import Agent, ModelResponse, RunConfig, Runner, Usage, set_tracing_disabled
    from agents.items import ToolCallOutputItem
    from agents.models.interface import Model
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from hyperlightd.integrations.openai_agents import hyperlightd_code_tool

    set_tracing_disabled(True)
    code = "words = 'the quick brown fox jumps over the lazy dog'.split()\nmax(words, key=len)"
    script: list[Any] = [
        ResponseFunctionToolCall(
            arguments=json.dumps({"code": code}),
            call_id="c1",
            name="execute_code",
            type="function_call",
            id="fc1",
            status="completed",
        ),
        ResponseFunctionToolCall(
            arguments=json.dumps({"code": "len(words)"}),
            call_id="c2",
            name="execute_code",
            type="function_call",
            id="fc2",
            status="completed",
        ),
        ResponseOutputMessage(
            id="m1",
            role="assistant",
            status="completed",
            type="message",
            content=[ResponseOutputText(text="'quick' is longest; 9 words.", type="output_text", annotations=[])],
        ),
    ]
    transcript: list[tuple[str, str]] = []

    class ScriptedModel(Model):
        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
            last = input[-1] if isinstance(input, list) else {"role": "user", "content": input}
            transcript.append(
                (str(last.get("role") or last.get("type")), str(last.get("content") or last.get("output")))
            )
            item = script.pop(0)
            transcript.append(("model", getattr(item, "arguments", None) or item.content[0].text))
            return ModelResponse(output=[item], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    async def run() -> Any:
        async with AsyncClient(socket) as daemon:
            tool = hyperlightd_code_tool(daemon, languages=["python"], timeout_ms=60_000)
            agent = Agent(name="analyst", model=ScriptedModel(), tools=[tool.tool])
            try:
                return await Runner.run(
                    agent, "Which word is longest, and how many are there?", run_config=RunConfig(tracing_disabled=True)
                )
            finally:
                await tool.aclose()

    result = asyncio.run(run())
    show("OpenAI Agents SDK, execute_code function tool", transcript)
    outputs = [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert outputs == ['result: "quick"', "result: 9"]
    assert result.final_output == "'quick' is longest; 9 words."


def test_langchain_base_tool_sync_and_async(socket: str) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

    from hyperlightd.integrations.langchain import HyperlightdCodeTool

    calls = [
        {"name": "execute_code", "args": {"code": "total = sum(range(101))\ntotal"}, "id": "c1", "type": "tool_call"},
        {"name": "execute_code", "args": {"code": "total // 2"}, "id": "c2", "type": "tool_call"},
        {
            "name": "execute_code",
            "args": {"code": "'abc'.toUpperCase()", "language": "javascript"},
            "id": "c3",
            "type": "tool_call",
        },
    ]
    model = GenericFakeChatModel(
        messages=iter([AIMessage("", tool_calls=[call]) for call in calls] + [AIMessage("5050, 2525 and ABC.")])
    )
    tool = HyperlightdCodeTool(socket, timeout_ms=60_000)
    messages: list[BaseMessage] = [HumanMessage("Add 0..100, halve it, and upper-case abc in JavaScript.")]
    for _ in calls:
        reply = model.invoke(messages)
        messages.append(reply)
        tool_call = reply.tool_calls[0]
        if tool_call["id"] == "c3":
            messages.append(asyncio.run(tool.ainvoke(tool_call)))
        else:
            messages.append(tool.invoke(tool_call))
    messages.append(model.invoke(messages))
    tool.close()
    asyncio.run(tool.aclose())
    show("LangChain BaseTool", [(m.type, str(m.content) or json.dumps(getattr(m, "tool_calls", []))) for m in messages])
    tool_messages = [m.content for m in messages if m.type == "tool"]
    assert tool_messages == ["result: 5050", "result: 2525", 'result: "ABC"']
    with Client(socket) as daemon:
        assert daemon.sessions() == []
