"""Every method of the sync and async clients against the real daemon."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hyperlightd import (
    AsyncClient,
    Client,
    Done,
    InvalidRequest,
    MoveFile,
    Output,
    PackageRefused,
    SessionNotFound,
    Started,
    Tool,
    ToolCall,
    WriteFile,
    tool,
)


def test_health_names_both_languages(client: Client) -> None:
    health = client.health()
    assert health["ready"] is True and health["status"] == "ok"
    assert {"python", "javascript"} <= set(health["runtimes"])


def test_exec_in_both_languages_with_files_in_and_out(client: Client) -> None:
    code = "data = open('in.txt').read()\nopen('out.bin', 'wb').write(bytes([0, 255]))\nlen(data)"
    result = client.exec("python", code, files={"in.txt": "hello", "raw.bin": b"\x00\x01"}, timeout_ms=20_000)
    assert result.ok, result
    assert result.result == 5 and result.files == {"out.bin": b"\x00\xff"}
    assert result.request_id
    js = client.exec("javascript", "console.log('hi'); [1, 2, 3].map(x => x * x)")
    assert (js.ok, js.stdout, js.result) == (True, "hi\n", [1, 4, 9])


def test_a_failing_program_is_a_result_and_a_bad_request_an_exception(client: Client) -> None:
    failed = client.exec("python", "1 / 0")
    assert failed.status == "error" and failed.error is not None and failed.error.kind == "exception"
    assert "ZeroDivisionError" in failed.error.message
    looping = client.exec("javascript", "for (;;) {}", timeout_ms=1000)
    assert looping.status == "timeout" and looping.error is not None and looping.error.kind == "timeout"
    refused = client.exec("python", "import os", policy={"allowed_modules": ["json"]})
    assert refused.error is not None and refused.error.kind == "policy_violation"
    assert [(v.name, v.rule, v.line) for v in refused.error.violations] == [("os", "allowed_modules", 1)]
    with pytest.raises(InvalidRequest, match="blocked_globals"):
        client.exec("python", "1", policy={"blocked_globals": ["eval"]})


def test_a_stream_yields_output_as_it_is_written(client: Client) -> None:
    code = "for i in range(3):\n    print(i)\n'done'"
    events = list(client.exec_stream("python", code))
    printed = "".join(e.text for e in events if isinstance(e, Output))
    assert printed == "0\n1\n2\n"
    assert isinstance(events[-1], Done) and events[-1].result.result == "done"


def test_tools_from_code_in_both_languages(client: Client) -> None:
    asked: list[Any] = []

    @tool
    def weather(city: str) -> dict[str, Any]:
        """Today's weather in a city."""
        asked.append(city)
        if city == "Atlantis":
            raise LookupError("no such city")
        return {"city": city, "celsius": 4}

    code = (
        "w = tools.weather(city='Oslo')\n"
        "try:\n    tools.weather(city='Atlantis')\nexcept tools.ToolError as e:\n    print(e)\n"
        "w['celsius']"
    )
    result = client.exec("python", code, tools=[weather], timeout_ms=30_000)
    assert result.ok and result.result == 4, result
    assert "no such city" in result.stdout and asked == ["Oslo", "Atlantis"]
    events = list(
        client.exec_stream(
            "javascript",
            "const [a, b] = await Promise.all([tools.weather({city: 'Rome'}), tools.weather({city: 'Paris'})]);"
            " a.celsius + b.celsius",
            tools=[weather],
        )
    )
    assert isinstance(events[0], Started)
    assert sorted(e.arguments["city"] for e in events if isinstance(e, ToolCall)) == ["Paris", "Rome"]
    assert isinstance(events[-1], Done) and events[-1].result.result == 8


def test_a_session_keeps_state_forks_lists_files_and_is_deleted_on_exit(client: Client) -> None:
    with client.session("python", idle_timeout_s=120) as session:
        assert session.exec("x = 41\nopen('notes.txt', 'w').write('kept')", timeout_ms=60_000).ok
        assert session.exec("x + 1", timeout_ms=60_000).result == 42
        with session.fork() as fork:
            assert fork.exec("x = 0\nx", timeout_ms=60_000).result == 0
            assert [s.id for s in client.sessions()] == [session.id, fork.id]
        assert session.exec("x", timeout_ms=60_000).result == 41
        assert [(f.path, f.size) for f in session.files()] == [("notes.txt", 4)]
        assert session.read_file("notes.txt") == b"kept"
        assert session.describe().execs == 3  # the fork's exec is the fork's
        moved = session.change_files([MoveFile("notes.txt", "kept.txt"), WriteFile("in/n.txt", "7")])
        assert session.exec("open('kept.txt').read() + open('in/n.txt').read()", timeout_ms=60_000).result == "kept7"
        session.rollback(moved - 1)
        assert [f.path for f in session.files()] == ["notes.txt"]
        assert session.set_idle_timeout(300).idle_timeout_s == 300
        assert session.park().parked  # the daemon of these tests keeps sessions on disk
        assert session.exec("x", timeout_ms=60_000).result == 41
        session.restart()
        assert session.exec("'x' in globals()", timeout_ms=60_000).result is False
        assert session.read_file("notes.txt") == b"kept"
        timed_out = session.exec("while True: pass", timeout_ms=2000)
        assert timed_out.session is not None and timed_out.session.rolled_back
    with pytest.raises(SessionNotFound):
        client.attach(session.id)


def test_a_session_installs_packages_from_the_daemon_s_index(client: Client) -> None:
    # The daemon of these tests installs from a loopback index of real wheels from PyPI; its
    # Python is the WebAssembly runtime, which takes pure-Python wheels.
    with client.session("python", idle_timeout_s=120) as session:
        installed = session.install(["markdown-it-py==3.0.0"])
        pairs = sorted((p.name, p.version) for p in installed.installed)
        assert pairs == [("markdown-it-py", "3.0.0"), ("mdurl", "0.1.2")]
        # The session's newest checkpoint, once the install's state is saved.
        assert session.checkpoints()[-1].checkpoint == installed.checkpoint
        render = "import markdown_it\nmarkdown_it.MarkdownIt().render('# hi')"
        assert session.exec(render, timeout_ms=120_000).result == "<h1>hi</h1>\n"
        assert sorted(p.name for p in session.packages()) == ["markdown-it-py", "mdurl"]
        assert sorted(p.name for p in session.describe().packages) == ["markdown-it-py", "mdurl"]
        # A `%pip install` line of what is there installs nothing, and the rest runs.
        again = session.exec("%pip install mdurl\nimport mdurl\nmdurl.__version__", timeout_ms=120_000)
        assert again.result == "0.1.2", again
        assert again.session is not None
        # A C extension has no wheel for this runtime: refused, and nothing changes.
        with pytest.raises(PackageRefused, match="none of its wheels"):
            session.install(["msgpack"])
        assert session.checkpoints()[-1].checkpoint == again.session.checkpoint
        # A rollback past the install takes it away.
        session.rollback(installed.checkpoint - 1)
        assert session.packages() == []
        gone = "import importlib.util\nimportlib.util.find_spec('mdurl') is None"
        assert session.exec(gone, timeout_ms=60_000).result is True


def test_the_async_client(socket: str) -> None:
    async def run() -> None:
        async with AsyncClient(socket) as client:
            assert (await client.health())["ready"]
            assert (await client.exec("javascript", "6 * 7")).result == 42

            async def double(n: int) -> int:
                await asyncio.sleep(0)
                return n * 2

            async with await client.session("javascript") as session:
                await session.exec("globalThis.base = 10", timeout_ms=60_000)
                result = await session.exec(
                    "base + await tools.double({n: 16})", tools=[Tool.from_function(double)], timeout_ms=60_000
                )
                assert result.result == 42, result
                events = [e async for e in session.exec_stream("console.log(base)", timeout_ms=60_000)]
                assert Output("stdout", "10\n") in events
                assert [f.path for f in await session.files()] == []
                assert (await session.park()).parked
                await session.write_files({"n.json": b"[1, 2]"})
                assert (await session.exec("JSON.parse(files.read('n.json'))[1]")).result == 2
                assert (await session.set_idle_timeout(60)).idle_timeout_s == 60
            assert await client.sessions() == []

    asyncio.run(run())


def test_the_quickstart_example_runs(socket: str) -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"
    env = {**os.environ, "HYPERLIGHTD_SOCKET": socket}
    run = subprocess.run([sys.executable, str(example)], env=env, capture_output=True, text=True, timeout=300)
    print(run.stdout)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "5050",
        "error exception",
        "5.333333333333333",
        "streamed: 0",
        "streamed: 1",
        "streamed: 2",
        "status: ok",
        "92.0",
    ]


def test_the_readme_python_example_runs(socket: str) -> None:
    """The repository README's Python example, run as written: it prints what its comment says."""
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    blocks = readme.split("```python\n")[1:]
    assert blocks, "the README has a Python example"
    for block in blocks:
        code = block.split("```", 1)[0]
        env = {**os.environ, "HYPERLIGHTD_SOCKET": socket}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        expected = [line.split("# ", 1)[1] for line in code.splitlines() if "print(" in line and "# " in line]
        assert run.stdout.splitlines() == expected, code
