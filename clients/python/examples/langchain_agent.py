"""LangChain: a chat model with hyperlightd's code tool, in a plain tool loop.

pip install './clients/python[langchain]' langchain-openai
OPENAI_API_KEY=... python examples/langchain_agent.py"""

from __future__ import annotations

from _model import BASE_URL, MODEL, api_key
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from hyperlightd.integrations.langchain import HyperlightdCodeTool


def main() -> None:
    tool = HyperlightdCodeTool()
    model = ChatOpenAI(model=MODEL, api_key=SecretStr(api_key()), base_url=BASE_URL).bind_tools([tool])
    messages: list[BaseMessage] = [HumanMessage("Which weekday was 1 January 2000? Check it with code.")]
    try:
        for _ in range(5):
            reply = model.invoke(messages)
            messages.append(reply)
            if not isinstance(reply, AIMessage) or not reply.tool_calls:
                break
            messages.extend(tool.invoke(call) for call in reply.tool_calls)
        print(messages[-1].content)
    finally:
        tool.close()


if __name__ == "__main__":
    main()
