"""OpenAI Agents SDK: an agent with hyperlightd's code tool.

pip install './clients/python[openai-agents]'
OPENAI_API_KEY=... python examples/openai_agents_agent.py"""

from __future__ import annotations

import asyncio

from _model import BASE_URL, MODEL, api_key
from agents import Agent, OpenAIChatCompletionsModel, Runner
from openai import AsyncOpenAI

from hyperlightd.integrations.openai_agents import hyperlightd_code_tool


async def main() -> None:
    code = hyperlightd_code_tool()
    model = OpenAIChatCompletionsModel(MODEL, AsyncOpenAI(api_key=api_key(), base_url=BASE_URL))
    agent = Agent(name="analyst", instructions="Answer by running code.", model=model, tools=[code.tool])
    try:
        result = await Runner.run(agent, "What is the 50th Fibonacci number, and how many digits has it?")
        print(result.final_output)
    finally:
        await code.aclose()


if __name__ == "__main__":
    asyncio.run(main())
