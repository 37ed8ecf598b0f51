"""E2B's own SDK (``e2b-code-interpreter``, pinned in requirements.txt), unmodified, against
``hlctl e2b-gateway`` in front of the daemon: only the environment says where E2B is. The
programs are those of E2B's documentation for the code interpreter."""

from __future__ import annotations

import os
import socket as sockets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b import (
    AuthenticationException,
    FileNotFoundException,
    FileType,
    NotFoundException,
    SandboxException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)
from e2b_code_interpreter import Sandbox

from hyperlightd import Client

KEY = "e2b_test_key_0123456789abcdef"


def free_port() -> int:
    with sockets.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_gateway(socket: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    """``hlctl e2b-gateway *args`` on a free loopback port, once it listens; and its URL."""
    hlctl = os.environ.get("HLCTL")
    if not hlctl:
        pytest.fail("HLCTL must name the hlctl binary (tests/tests/python_sdk.rs sets it)")
    port = free_port()
    process = subprocess.Popen(
        [hlctl, "--socket", socket, "e2b-gateway", "--listen", f"127.0.0.1:{port}", *args],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            sockets.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the gateway did not start: {process.communicate()[1]}")
            time.sleep(0.1)


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def gateway(socket: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``hlctl e2b-gateway`` with a key of the test's, named by the environment as E2B; its URL."""
    key_file = tmp_path_factory.mktemp("gateway") / "key"
    key_file.write_text(KEY + "\n")
    process, url = start_gateway(socket, "--api-key-file", str(key_file))
    saved = {name: os.environ.get(name) for name in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")}
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=KEY)
    yield url
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    stop(process)


@pytest.fixture
def leaves_nothing(socket: str) -> Iterator[None]:
    yield
    with Client(socket) as check:
        assert check.sessions() == [], "a test left a sandbox's session behind"


def test_state_carries_over_and_output_errors_and_languages_come_back_as_e2b_says(
    gateway: str, leaves_nothing: None
) -> None:
    # E2B's quickstart and "Run code" pages.
    with Sandbox.create() as sandbox:
        sandbox.run_code("x = 1")
        execution = sandbox.run_code("x+=1; x")
        assert execution.text == "2", execution
        assert execution.results[0].is_main_result

        printed = sandbox.run_code("print('hello world')")
        assert printed.logs.stdout == ["hello world\n"], printed.logs

        seen: list[str] = []
        sandbox.run_code(
            "for i in range(3):\n    print(i)",
            on_stdout=lambda message: seen.append(message.line),
        )
        assert "".join(seen) == "0\n1\n2\n", seen

        failed = sandbox.run_code("undefined_name")
        assert failed.error is not None and failed.error.name == "NameError", failed.error
        assert "undefined_name" in failed.error.value

        # E2B's "Install custom packages" page: `!pip install` in the code (the daemon of
        # these tests installs from a loopback index of real wheels).
        installed = sandbox.run_code("!pip install mdurl\nimport mdurl\nmdurl.__version__")
        assert installed.error is None, installed.error
        assert installed.text == "'0.1.2'", installed
        assert sandbox.run_code("import mdurl\nmdurl.__name__").text == "'mdurl'"

        js = sandbox.run_code("const a = 40; a + 2", language="js")
        assert js.text == "42", js
        again = sandbox.run_code("a - 2", language="javascript")
        assert again.text == "38", "the JavaScript context keeps its state"

        context = sandbox.create_code_context(language="python")
        sandbox.run_code("x = 100", context=context)
        assert sandbox.run_code("x").text == "2", "a context has its own state"
        assert sandbox.run_code("x", context=context).text == "100"
        sandbox.restart_code_context(context)
        assert sandbox.run_code("'x' in globals()", context=context).text == "False", "restarted afresh"
        ids = {c.id for c in sandbox.list_code_contexts()}
        assert {sandbox.sandbox_id, context.id} <= ids
        sandbox.remove_code_context(context)
        assert context.id not in {c.id for c in sandbox.list_code_contexts()}


def test_envs_of_the_sandbox_and_of_a_run_are_what_programs_see(gateway: str, leaves_nothing: None) -> None:
    # E2B's "Environment variables" page: the sandbox's, and a run's own for that run only.
    read = "import os\n[os.environ.get(n) for n in ('MODE', 'ONLY')]"
    with Sandbox.create(envs={"MODE": "sandbox"}) as sandbox:
        assert sandbox.run_code(read).text == "['sandbox', None]"
        own = sandbox.run_code(read, envs={"MODE": "run", "ONLY": "1"})
        assert own.text == "['run', '1']", own
        assert sandbox.run_code(read).text == "['sandbox', None]"
        js = sandbox.run_code("[process.env.MODE, process.env.ONLY ?? null]", language="js", envs={"ONLY": "js"})
        assert js.text == '["sandbox","js"]', js
        context = sandbox.create_code_context(language="python")
        assert sandbox.run_code(read, context=context).text == "['sandbox', None]", "a context has the sandbox's"
        with pytest.raises(SandboxException) as refused:
            sandbox.run_code("1", envs={"NOT-A-NAME": "x"})
        assert "letters, digits" in str(refused.value), refused.value


def test_sandboxes_are_listed_described_timed_and_killed(gateway: str, socket: str, leaves_nothing: None) -> None:
    sandbox = Sandbox.create(metadata={"user": "ana"}, timeout=60)
    sandbox.run_code("1", language="js")  # a second context, which takes the sandbox's timeout too
    sandbox.set_timeout(120)
    with Client(socket) as daemon:
        timeouts = {s.id: s.idle_timeout_s for s in daemon.sessions()}
    assert len(timeouts) == 2 and set(timeouts.values()) == {120}, timeouts
    listed = Sandbox.list().next_items()
    assert sandbox.sandbox_id in [s.sandbox_id for s in listed]
    info = sandbox.get_info()
    assert (info.sandbox_id, info.metadata) == (sandbox.sandbox_id, {"user": "ana"})
    assert sandbox.is_running()
    assert Sandbox.kill(sandbox.sandbox_id) is True
    assert Sandbox.kill(sandbox.sandbox_id) is False, "a killed sandbox is not found"


def test_files_are_written_read_listed_renamed_and_removed(gateway: str, leaves_nothing: None) -> None:
    # E2B's "Read & write files" and "Upload data" pages; programs see the files where they run.
    with Sandbox.create() as sandbox:
        written = sandbox.files.write("/home/user/data.csv", "n\n1\n2\n")
        assert (written.name, written.path, written.type) == ("data.csv", "/home/user/data.csv", FileType.FILE)
        assert sandbox.files.read("/home/user/data.csv") == "n\n1\n2\n"
        many = sandbox.files.write_files([{"path": "in/a.bin", "data": b"\x00\xff"}, {"path": "in/b.txt", "data": "b"}])
        assert [w.path for w in many] == ["/home/user/in/a.bin", "/home/user/in/b.txt"]
        assert sandbox.files.read("in/a.bin", format="bytes") == bytearray(b"\x00\xff")
        assert b"".join(sandbox.files.read("in/b.txt", format="stream")) == b"b"
        assert [(e.name, e.type) for e in sandbox.files.list("/home/user")] == [
            ("data.csv", FileType.FILE),
            ("in", FileType.DIR),
        ]
        assert sandbox.files.exists("in/b.txt") and not sandbox.files.exists("nope.txt")
        info = sandbox.files.get_info("/home/user/data.csv")
        assert (info.type, info.size) == (FileType.FILE, 6)

        total = sandbox.run_code("import csv\nsum(int(r['n']) for r in csv.DictReader(open('data.csv')))")
        assert (total.error, total.text) == (None, "3"), total
        sandbox.run_code("open('out.txt', 'w').write('from the program')")
        assert sandbox.files.read("/home/user/out.txt") == "from the program"

        moved = sandbox.files.rename("in/b.txt", "/home/user/c.txt")
        assert (moved.path, moved.size) == ("/home/user/c.txt", 1)
        sandbox.files.remove("/home/user/in")
        assert [e.name for e in sandbox.files.list("/home/user")] == ["c.txt", "data.csv", "out.txt"]
        for missing in ("in/a.bin", "/etc/passwd"):
            with pytest.raises(FileNotFoundException):
                sandbox.files.read(missing)
        with pytest.raises(FileNotFoundException):
            sandbox.files.remove("in")
        assert sandbox.files.make_dir("/home/user") is False, "it exists"
        with pytest.raises(SandboxException) as refused:
            sandbox.files.make_dir("empty")
        assert "write a file into it" in str(refused.value), refused.value


def test_a_run_past_the_sdks_timeout_raises_its_error_and_is_stopped(
    gateway: str, socket: str, leaves_nothing: None
) -> None:
    with Sandbox.create() as sandbox:
        sandbox.run_code("x = 1")
        with pytest.raises(TimeoutException):
            sandbox.run_code("while True:\n    pass", timeout=3)
        # Stopped when the SDK gave up, not at the daemon's own limit (60 s): the pool's one
        # Python sandbox is free again, and the sandbox's state is as its last run left it.
        with Client(socket) as daemon:
            deadline = time.monotonic() + 30
            while daemon.health()["sandboxes"]["python"]["ready"] < 1:
                assert time.monotonic() < deadline, "the program ran on after the SDK gave up"
                time.sleep(0.2)
        assert sandbox.run_code("x + 1").text == "2"


def test_a_paused_sandbox_keeps_its_state_and_files_and_comes_back_on_connect(
    gateway: str, socket: str, leaves_nothing: None
) -> None:
    # E2B's "Sandbox persistence" page: pause, list the paused, connect, carry on.
    sandbox = Sandbox.create()
    sandbox.run_code("kept = 41")
    sandbox.run_code("const js = 1", language="js")
    sandbox.files.write("note.txt", "before the pause")
    assert sandbox.pause() is True
    assert Sandbox.pause(sandbox.sandbox_id) is False, "paused already"
    with Client(socket) as daemon:
        assert all(s.parked for s in daemon.sessions()), "every context's state is on disk only"
    assert sandbox.get_info().state == SandboxState.PAUSED
    paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
    assert [s.sandbox_id for s in paused] == [sandbox.sandbox_id]
    assert sandbox.files.read("note.txt") == "before the pause", "files read while paused"
    with pytest.raises(SandboxException) as refused:
        sandbox.pause(mode="filesystem")
    assert "paused and resumed whole" in str(refused.value), refused.value

    same = Sandbox.connect(sandbox.sandbox_id, timeout=120)
    assert same.run_code("kept + 1").text == "42"
    assert same.run_code("js + 1", language="js").text == "2"
    assert same.get_info().state == SandboxState.RUNNING
    same.kill()


def test_what_cannot_be_done_is_refused_with_why(gateway: str, leaves_nothing: None) -> None:
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="e2b_not_the_key_0000000000000000")
    with Sandbox.create() as sandbox:
        with pytest.raises(SandboxException) as refused:
            sandbox.commands.run("ls")
        assert "run_code" in str(refused.value), refused.value


def test_the_gateway_refuses_requests_without_its_key(gateway: str) -> None:
    import httpx

    for headers in ({}, {"X-API-Key": "e2b_wrong_key_000000000000000"}):
        answer = httpx.get(f"{gateway}/v2/sandboxes", headers=headers)
        assert answer.status_code == 401, answer.text
        assert answer.json()["code"] == 401
    assert Path(os.environ["HLCTL"]).exists()


ALICE = "e2b_alice_0123456789abcdef"
BOB = "e2b_bob_0123456789abcdef"


def keys_keep_sandboxes_apart(url: str, socket: str) -> None:
    """Alice's sandbox on the listener at ``url`` runs and keeps her state, files and contexts;
    to bob's key, to an unknown key and to the test's own user on the socket it does not exist."""
    as_alice = {"api_key": ALICE, "api_url": url, "sandbox_url": url}
    as_bob = {"api_key": BOB, "api_url": url, "sandbox_url": url}
    sandbox = Sandbox.create(**as_alice)
    try:
        assert sandbox.run_code("x = 41; x + 1").text == "42"
        seen: list[str] = []
        sandbox.run_code("for i in range(3):\n    print(i)", on_stdout=lambda message: seen.append(message.line))
        assert "".join(seen) == "0\n1\n2\n", seen
        sandbox.files.write("note.txt", "from alice")
        assert sandbox.run_code("open('note.txt').read()").text == "'from alice'"
        assert sandbox.run_code("const a = 40; a + 2", language="js").text == "42"
        # Neither bob nor the test's own user sees it; bob cannot reach it.
        listed = Sandbox.list(**as_bob).next_items()
        assert sandbox.sandbox_id not in [s.sandbox_id for s in listed]
        with Client(socket) as own:
            assert sandbox.sandbox_id not in [s.id for s in own.sessions()]
        with pytest.raises(NotFoundException):
            Sandbox.connect(sandbox.sandbox_id, **as_bob)
        assert Sandbox.kill(sandbox.sandbox_id, **as_bob) is False
        with pytest.raises(AuthenticationException):
            Sandbox.list(api_key=KEY, api_url=url, sandbox_url=url).next_items()
        # Alice's own list has it, and her state is there.
        mine = Sandbox.list(**as_alice).next_items()
        assert sandbox.sandbox_id in [s.sandbox_id for s in mine]
        assert sandbox.run_code("x").text == "41"
    finally:
        assert Sandbox.kill(sandbox.sandbox_id, **as_alice) is True
    assert Sandbox.list(**as_alice).next_items() == [], "the sandbox and its contexts are gone"


def test_a_shared_gateway_keeps_each_key_s_sandboxes_apart(socket: str, tmp_path: Path) -> None:
    # One listener for two callers: the daemon trusts the gateway's user to act for the name of
    # each key (tests/tests/python_sdk.rs starts it with --delegate-uid).
    keys = tmp_path / "keys"
    keys.write_text(f"alice {ALICE}\nbob {BOB}\n")
    keys.chmod(0o600)
    process, url = start_gateway(socket, "--api-keys", str(keys))
    try:
        keys_keep_sandboxes_apart(url, socket)
    finally:
        stop(process)


def test_the_daemon_s_own_listener_keeps_each_key_s_sandboxes_apart(socket: str) -> None:
    # The daemon serves E2B's API itself (hyperlightd --e2b-listen, with alice's and bob's keys
    # in its keys file: tests/tests/python_sdk.rs): no gateway process, each key a caller of
    # the daemon's own.
    url = os.environ.get("HYPERLIGHTD_E2B_URL")
    if not url:
        pytest.fail("HYPERLIGHTD_E2B_URL must name the daemon's E2B listener (tests/tests/python_sdk.rs sets it)")
    keys_keep_sandboxes_apart(url, socket)
