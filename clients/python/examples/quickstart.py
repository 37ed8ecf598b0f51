"""The client without an agent: run code, keep a session, stream, and let code call a tool.

    HYPERLIGHTD_SOCKET=/run/hyperlightd/hyperlightd.sock python examples/quickstart.py

(The end-to-end tests run this against a real daemon.)"""

from __future__ import annotations

from hyperlightd import Client, Done, Output, tool


@tool
def exchange_rate(currency: str) -> float:
    """Euros per unit of a currency."""
    return {"USD": 0.92, "NOK": 0.085}[currency]


def main() -> None:
    with Client() as client:
        print(client.exec("python", "sum(range(101))").result)  # 5050

        failed = client.exec("javascript", "undefined.x")
        print(failed.status, failed.error.kind if failed.error else None)  # error exception

        with client.session("python") as session:
            session.exec("prices = [3, 5, 8]")
            print(session.exec("sum(prices) / len(prices)").result)  # 5.333...

        for event in client.exec_stream("python", "for i in range(3): print(i)"):
            if isinstance(event, Output):
                print("streamed:", event.text, end="")
            elif isinstance(event, Done):
                print("status:", event.result.status)

        code = "round(100 * tools.exchange_rate(currency='USD'), 2)"
        print(client.exec("python", code, tools=[exchange_rate]).result)  # 92.0


if __name__ == "__main__":
    main()
