"""Microsoft Agent Framework: an agent that answers by running code in hyperlightd, keeping
its variables across the turns of one conversation.

    pip install './clients/python[agent-framework]' agent-framework-openai
    OPENAI_API_KEY=... python examples/agent_framework_agent.py"""

from __future__ import annotations

import asyncio

from _model import BASE_URL, MODEL, api_key
from agent_framework import Agent
from agent_framework.openai import OpenAIChatClient

from hyperlightd.integrations.agent_framework import HyperlightdCodeTool


async def main() -> None:
    code = HyperlightdCodeTool()
    client = OpenAIChatClient(MODEL, api_key=api_key(), base_url=BASE_URL)
    agent = Agent(client, "Answer by running code. Show your numbers.", tools=[code])
    conversation = agent.create_session()
    try:
        for question in ["Make a list of the first 20 primes and keep it.", "What is the sum of that list?"]:
            answer = await agent.run(question, session=conversation)
            print(f"> {question}\n{answer.text}\n")
    finally:
        await code.aclose()


if __name__ == "__main__":
    asyncio.run(main())
