"""smolagents: a CodeAgent whose code runs in hyperlightd, calling a tool that stays in this
process (its code and any credentials never enter the sandbox).

    pip install './clients/python[smolagents]' openai
    OPENAI_API_KEY=... python examples/smolagents_agent.py"""

from __future__ import annotations

from _model import BASE_URL, MODEL, api_key
from smolagents import CodeAgent, OpenAIServerModel, tool

from hyperlightd.integrations.smolagents import HyperlightdExecutor


@tool
def stock_price(ticker: str) -> float:
    """Today's closing price of a stock, in dollars.

    Args:
        ticker: The stock's ticker symbol, such as MSFT.
    """
    return {"MSFT": 512.3, "NVDA": 181.6}.get(ticker.upper(), 0.0)


def main() -> None:
    model = OpenAIServerModel(model_id=MODEL, api_key=api_key(), api_base=BASE_URL)
    agent = CodeAgent(tools=[stock_price], model=model, executor=HyperlightdExecutor())
    try:
        print(agent.run("How many NVDA shares cost as much as 10 MSFT shares?"))
    finally:
        agent.cleanup()


if __name__ == "__main__":
    main()
