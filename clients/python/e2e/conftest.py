"""End-to-end tests of the Python client against a real daemon, whose socket
``HYPERLIGHTD_SOCKET`` names (``./x test`` starts one in the VM, with Python and JavaScript
pools, and runs these through tests/tests/python_sdk.rs)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from hyperlightd import Client


@pytest.fixture(scope="session")
def socket() -> str:
    path = os.environ.get("HYPERLIGHTD_SOCKET")
    if not path:
        pytest.fail("HYPERLIGHTD_SOCKET must name a running daemon's socket (./x test starts one)")
    return path


@pytest.fixture
def client(socket: str) -> Iterator[Client]:
    with Client(socket) as client:
        yield client
    # Every test leaves the daemon as it found it: no session outlives its test.
    with Client(socket) as check:
        assert check.sessions() == [], "a test left a session behind"


def show(title: str, transcript: list[tuple[str, str]]) -> None:
    """Prints a conversation, so a reader of the test's output sees what happened."""
    print(f"\n----- {title} -----")
    for who, text in transcript:
        print(f"[{who}]\n{text.rstrip()}\n")
