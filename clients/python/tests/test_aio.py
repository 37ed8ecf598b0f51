"""The async client against the stand-in daemon: the sync client's behaviour, awaited."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from standin import Reply, StandIn, lines_then, refusal, response, session

from hyperlightd import AsyncClient, Done, Output, QuotaExceeded, Tool


def test_exec_and_refusals(tmp_path: Path) -> None:
    sock = tmp_path / "d.sock"
    quota = Reply(429, refusal("quota_exceeded"), headers={"retry-after": "1"})
    routes = {
        "POST /v1/exec": lambda _: Reply(body=response(result=[1, 2]), schema="ExecResponse"),
        "POST /v1/sessions": lambda _: quota,
    }
    stand_in = StandIn(sock, routes)

    async def run() -> None:
        async with AsyncClient(str(sock)) as client:
            assert (await client.exec("javascript", "[1, 2]")).result == [1, 2]
            with pytest.raises(QuotaExceeded) as refused:
                await client.session("python")
            assert refused.value.retry_after == 1

    asyncio.run(run())
    stand_in.close()


def test_a_stream_with_async_and_plain_handlers_answering_at_once(tmp_path: Path) -> None:
    sock = tmp_path / "d.sock"
    both = threading.Event()
    answers: list[Any] = []

    def results(body: Any) -> Reply:
        answers.append(body)
        if len(answers) == 2:
            both.set()
        return Reply(204)

    calls = [
        {"type": "started", "execution_id": "e"},
        {"type": "tool_call", "id": "1", "name": "slow", "arguments": {"x": 2}},
        {"type": "tool_call", "id": "2", "name": "plain", "arguments": {}},
        {"type": "stdout", "text": "hi\n"},
    ]
    lines = lines_then(calls, both, [{"type": "result", **response()}])
    routes = {
        "POST /v1/sessions": lambda _: Reply(201, session("s"), schema="SessionInfo"),
        "POST /v1/sessions/s/exec": lambda _: Reply(lines=lines, schema="ExecEvent"),
        "POST /v1/executions/e/tool-results": results,
        "DELETE /v1/sessions/s": lambda _: Reply(204),
    }
    stand_in = StandIn(sock, routes)

    async def slow(x: int) -> int:
        await asyncio.sleep(0.2)  # the plain handler answers meanwhile
        return x * 2

    async def run() -> list[Any]:
        async with AsyncClient(str(sock)) as client, await client.session("python") as s:
            tools = [Tool("slow", slow), Tool("plain", lambda: "p")]
            return [e async for e in s.exec_stream("tools.slow(x=2)", tools=tools)]

    events = asyncio.run(run())
    stand_in.close()
    assert Output("stdout", "hi\n") in events and isinstance(events[-1], Done)
    assert answers == [{"id": "2", "result": "p"}, {"id": "1", "result": 4}]
    assert [(m, p) for m, p, _ in stand_in.seen][-1] == ("DELETE", "/v1/sessions/s")
