"""Trace context: a caller's current OpenTelemetry span goes with each request as W3C
``traceparent`` (and ``tracestate``), checked with the OpenTelemetry SDK from PyPI."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from standin import Reply, StandIn, response

from hyperlightd import AsyncClient, Client

PROVIDER = TracerProvider()
TRACER = PROVIDER.get_tracer("test")


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[tuple[Path, StandIn]]:
    sock = tmp_path / "d.sock"
    answer = Reply(body=response(), schema="ExecResponse")
    stand_in = StandIn(sock, {"POST /v1/exec": lambda _: answer})
    yield sock, stand_in
    stand_in.close()


def expected(span: trace.Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def test_the_current_span_is_the_parent_of_the_daemons(stand_in: tuple[Path, StandIn]) -> None:
    sock, seen = stand_in
    with Client(str(sock)) as client:
        client.exec("python", "1")
        with TRACER.start_as_current_span("agent tool call") as span:
            client.exec("python", "2")
            parent = expected(span)
        client.exec("python", "3")
    assert "traceparent" not in seen.headers[0], "no span, no header"
    assert seen.headers[1]["traceparent"] == parent
    assert "traceparent" not in seen.headers[2]
    assert all("baggage" not in headers for headers in seen.headers)


def test_the_async_client_sends_the_tasks_current_span(stand_in: tuple[Path, StandIn]) -> None:
    sock, seen = stand_in

    async def run() -> str:
        async with AsyncClient(str(sock)) as client:
            with TRACER.start_as_current_span("agent tool call") as span:
                await client.exec("javascript", "1")
                return expected(span)

    parent = asyncio.run(run())
    assert seen.headers[0]["traceparent"] == parent
