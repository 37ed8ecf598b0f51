"""The sync client against a stand-in daemon: what it sends, what it makes of each answer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from standin import Reply, StandIn, lines_then, refusal, response, session

from hyperlightd import (
    AnswerLost,
    Client,
    Done,
    FileChange,
    InvalidRequest,
    MoveFile,
    NotFound,
    Output,
    Overloaded,
    PackageRefused,
    RemoveFile,
    SessionNotFound,
    Started,
    Tool,
    ToolCall,
    Unreachable,
    WriteFile,
    tool,
)


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "d.sock"


def test_a_failed_program_is_a_result_with_its_kind(sock: Path) -> None:
    error = {"kind": "exception", "message": "ValueError: bad"}
    answer = response(status="error", stderr="Traceback ...", error=error)
    stand_in = StandIn(sock, {"POST /v1/exec": lambda _: Reply(body=answer, schema="ExecResponse")})
    with Client(str(sock)) as client:
        result = client.exec("python", "raise ValueError('bad')", timeout_ms=500, files={"a.txt": "x", "b": b"\0"})
    stand_in.close()
    assert not result.ok and result.error is not None and result.request_id == "req-1"
    assert (result.error.kind, result.error.message) == ("exception", "ValueError: bad")
    sent = stand_in.seen[0][2]
    assert sent == {
        "language": "python",
        "code": "raise ValueError('bad')",
        "timeout_ms": 500,
        "files": {"a.txt": "x", "b": {"base64": "AA=="}},
    }


def test_files_and_rich_output_come_back_as_bytes_and_mime_data(sock: Path) -> None:
    answer = response(
        result=45,
        files={"out.txt": "hi", "img.bin": {"base64": "AAE="}},
        display=[{"data": {"text/plain": "df", "text/html": "<table>"}}],
    )
    stand_in = StandIn(sock, {"POST /v1/exec": lambda _: Reply(body=answer, schema="ExecResponse")})
    with Client(str(sock)) as client:
        result = client.exec("python", "45")
    stand_in.close()
    assert result.ok and result.result == 45
    assert result.files == {"out.txt": b"hi", "img.bin": b"\x00\x01"}
    assert result.display == [{"text/plain": "df", "text/html": "<table>"}]


def test_a_refusal_is_its_exception_with_retry_after_and_nothing_else_is_sent(sock: Path) -> None:
    busy = Reply(503, refusal("overloaded", "every sandbox is busy"), headers={"retry-after": "2"})
    stand_in = StandIn(sock, {"POST /v1/exec": lambda _: busy})
    with Client(str(sock)) as client, pytest.raises(Overloaded) as refused:
        client.exec("javascript", "1")
    stand_in.close()
    assert (refused.value.retry_after, refused.value.kind, refused.value.request_id) == (2, "overloaded", "req-1")
    assert len(stand_in.seen) == 1


def test_an_answer_that_is_not_the_apis_is_answer_lost(sock: Path) -> None:
    stand_in = StandIn(sock, {"POST /v1/exec": lambda _: Reply(200, lines=[{"type": "stdout", "text": "a"}])})
    with Client(str(sock)) as client, pytest.raises(AnswerLost):
        client.exec("python", "print('a')", tools=[Tool("t", lambda: 1)])
    stand_in.close()


def test_nothing_listening_is_unreachable(tmp_path: Path) -> None:
    with Client(str(tmp_path / "none.sock")) as client, pytest.raises(Unreachable) as error:
        client.exec("javascript", "1")
    assert "HYPERLIGHTD_SOCKET" in str(error.value)


def test_the_socket_defaults_as_hlctls_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYPERLIGHTD_SOCKET", raising=False)
    assert Client().socket == "/run/hyperlightd/hyperlightd.sock"
    monkeypatch.setenv("HYPERLIGHTD_SOCKET", "/tmp/x.sock")
    assert Client().socket == "/tmp/x.sock"


def test_bad_input_is_refused_before_anything_is_sent(sock: Path) -> None:
    stand_in = StandIn(sock, {})
    with Client(str(sock)) as client:
        with pytest.raises(TypeError, match="code is a str"):
            client.exec("python", b"1")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="unknown exec options: timeout"):
            client.exec("python", "1", timeout=3)  # type: ignore[call-arg]
        with pytest.raises(ValueError, match="two tools"):
            client.exec("python", "1", tools=[Tool("a", print), Tool("a", print)])
    stand_in.close()
    assert stand_in.seen == []


def test_a_stream_yields_output_then_the_result(sock: Path) -> None:
    lines = [{"type": "stdout", "text": "1\n"}, {"type": "stderr", "text": "w\n"}, {"type": "result", **response()}]
    stand_in = StandIn(sock, {"POST /v1/exec": lambda _: Reply(lines=lines, schema="ExecEvent")})
    with Client(str(sock)) as client:
        events = list(client.exec_stream("python", "print(1)"))
    stand_in.close()
    assert events[:2] == [Output("stdout", "1\n"), Output("stderr", "w\n")]
    assert isinstance(events[2], Done) and events[2].result.ok
    assert stand_in.seen[0][2]["stream"] is True


def test_tool_calls_are_answered_by_their_handlers(sock: Path) -> None:
    answered = threading.Event()
    answers: list[Any] = []

    def results(body: Any) -> Reply:
        answers.append(body)
        if len(answers) == 2:
            answered.set()
        return Reply(204)

    calls = [
        {"type": "started", "execution_id": "exec_1"},
        {"type": "tool_call", "id": "c1", "name": "weather", "arguments": {"city": "Oslo"}},
        {"type": "tool_call", "id": "c2", "name": "fail", "arguments": {}},
    ]
    lines = lines_then(calls, answered, [{"type": "result", **response(result="ok")}])
    stand_in = StandIn(
        sock,
        {
            "POST /v1/exec": lambda _: Reply(lines=lines, schema="ExecEvent"),
            "POST /v1/executions/exec_1/tool-results": results,
        },
    )

    @tool
    def weather(city: str, days: int = 1) -> dict[str, Any]:
        """The weather in a city."""
        return {"city": city, "temp": 3}

    def fail() -> None:
        raise RuntimeError("no such place")

    with Client(str(sock)) as client:
        result = client.exec("python", "tools.weather(city='Oslo')", tools=[weather, fail], tool_timeout_ms=1000)
    stand_in.close()
    assert result.result == "ok"
    assert sorted(answers, key=lambda a: a["id"]) == [
        {"id": "c1", "result": {"city": "Oslo", "temp": 3}},
        {"id": "c2", "error": "no such place"},
    ]
    declared = stand_in.seen[0][2]["tools"]
    assert declared[0] == {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    }
    assert declared[1]["name"] == "fail" and stand_in.seen[0][2]["tool_timeout_ms"] == 1000


def test_a_stream_shows_the_tool_calls_it_answers(sock: Path) -> None:
    answered = threading.Event()
    calls = [
        {"type": "started", "execution_id": "e"},
        {"type": "tool_call", "id": "c", "name": "ping", "arguments": {}},
    ]
    lines = lines_then(calls, answered, [{"type": "result", **response()}])

    def results(_: Any) -> Reply:
        answered.set()
        return Reply(204)

    routes = {
        "POST /v1/exec": lambda _: Reply(lines=lines, schema="ExecEvent"),
        "POST /v1/executions/e/tool-results": results,
    }
    stand_in = StandIn(sock, routes)
    with Client(str(sock)) as client:
        events = list(client.exec_stream("javascript", "await tools.ping({})", tools=[Tool("ping", lambda: "pong")]))
    stand_in.close()
    assert events[:2] == [Started("e"), ToolCall("c", "ping", {})]
    assert stand_in.seen[1][2] == {"id": "c", "result": "pong"}


def test_a_session_runs_forks_lists_reads_and_is_deleted_on_exit(sock: Path) -> None:
    stand_in = StandIn(
        sock,
        {
            "POST /v1/sessions": lambda _: Reply(201, session("s1"), schema="SessionInfo"),
            "POST /v1/sessions/s1/exec": lambda _: Reply(
                body=response(session={"id": "s1", "rolled_back": False, "checkpoint": 1}), schema="ExecResponse"
            ),
            "POST /v1/sessions/s1/fork": lambda _: Reply(201, session("s2"), schema="SessionInfo"),
            "GET /v1/sessions/s1/files": lambda _: Reply(
                body={"files": [{"path": "out/a b.txt", "size": 3}]}, schema="FileList"
            ),
            "GET /v1/sessions/s1/files/out/a%20b.txt": lambda _: Reply(raw=b"abc"),
            "DELETE /v1/sessions/s1": lambda _: Reply(204),
            "DELETE /v1/sessions/s2": lambda _: Reply(404, refusal("session_not_found")),
        },
    )
    with Client(str(sock)) as client:
        with client.session("python", idle_timeout_s=60) as one:
            result = one.exec("x = 1", timeout_ms=1000)
            assert result.session is not None and not result.session.rolled_back
            with one.fork() as two:
                assert two.id == "s2"
            assert [(f.path, f.size) for f in one.files()] == [("out/a b.txt", 3)]
            assert one.read_file("out/a b.txt") == b"abc"
    stand_in.close()
    assert [(m, p) for m, p, _ in stand_in.seen] == [
        ("POST", "/v1/sessions"),
        ("POST", "/v1/sessions/s1/exec"),
        ("POST", "/v1/sessions/s1/fork"),
        ("DELETE", "/v1/sessions/s2"),
        ("GET", "/v1/sessions/s1/files"),
        ("GET", "/v1/sessions/s1/files/out/a%20b.txt"),
        ("DELETE", "/v1/sessions/s1"),
    ]
    assert stand_in.seen[0][2] == {"language": "python", "idle_timeout_s": 60}


def test_checkpoints_are_listed_rolled_back_to_forked_from_and_a_loss_is_reported(sock: Path) -> None:
    listed = {
        "checkpoints": [
            {"checkpoint": 0, "created_at": "2026-11-25T00:00:00Z", "bytes": 0},
            {"checkpoint": 1, "parent": 0, "created_at": "2026-11-25T00:00:01Z", "request_id": 7, "bytes": 1024},
        ]
    }
    lost = {"id": "s1", "rolled_back": False, "checkpoint": 4, "restored_from_checkpoint": 1, "lost_execs": 2}
    stand_in = StandIn(
        sock,
        {
            "POST /v1/sessions": lambda _: Reply(201, session("s1"), schema="SessionInfo"),
            "GET /v1/sessions/s1/checkpoints": lambda _: Reply(body=listed, schema="CheckpointList"),
            "POST /v1/sessions/s1/rollback": lambda _: Reply(body=session("s1"), schema="SessionInfo"),
            "POST /v1/sessions/s1/fork": lambda _: Reply(201, session("s2"), schema="SessionInfo"),
            "POST /v1/sessions/s1/exec": lambda _: Reply(body=response(session=lost), schema="ExecResponse"),
            "POST /v1/sessions/s1/park": lambda _: Reply(body={**session("s1"), "parked": True}, schema="SessionInfo"),
            "POST /v1/sessions/s1/restart": lambda _: Reply(
                body={**session("s1"), "checkpoint": 5}, schema="SessionInfo"
            ),
            "DELETE /v1/sessions/s1": lambda _: Reply(204),
        },
    )
    with Client(str(sock)) as client:
        one = client.session("python")
        checkpoints = one.checkpoints()
        assert [(c.checkpoint, c.parent, c.request_id, c.bytes) for c in checkpoints] == [
            (0, None, None, 0),
            (1, 0, 7, 1024),
        ]
        assert one.rollback(0).checkpoint == 0
        assert one.fork(1).id == "s2"
        assert one.fork().id == "s2"
        state = one.exec("x").session
        assert state is not None
        assert (state.checkpoint, state.restored_from_checkpoint, state.lost_execs) == (4, 1, 2)
        assert one.park().parked
        assert one.restart().checkpoint == 5
        one.delete()
    stand_in.close()
    sent = [(m, p, body) for m, p, body in stand_in.seen]
    assert sent[2] == ("POST", "/v1/sessions/s1/rollback", {"checkpoint": 0})
    assert sent[3] == ("POST", "/v1/sessions/s1/fork", {"checkpoint": 1})
    assert sent[4][:2] == ("POST", "/v1/sessions/s1/fork")
    assert sent[6] == ("POST", "/v1/sessions/s1/park", None)
    assert sent[7] == ("POST", "/v1/sessions/s1/restart", None)


def test_an_unknown_session_and_a_bad_request_are_their_exceptions(sock: Path) -> None:
    stand_in = StandIn(
        sock,
        {
            "GET /v1/sessions/nope": lambda _: Reply(404, refusal("session_not_found")),
            "POST /v1/exec": lambda _: Reply(400, refusal("invalid_request", "blocked_globals is JavaScript's")),
        },
    )
    with Client(str(sock)) as client:
        with pytest.raises(SessionNotFound):
            client.attach("nope")
        with pytest.raises(InvalidRequest, match="JavaScript's"):
            client.exec("python", "1", policy={"blocked_globals": ["eval"]})
    stand_in.close()


def test_file_changes_are_sent_in_order_and_a_refused_one_is_its_exception(sock: Path) -> None:
    answers = iter([Reply(body={"checkpoint": 2}, schema="FilesChanged"), Reply(404, refusal("not_found", "gone.txt"))])
    stand_in = StandIn(
        sock,
        {
            "POST /v1/sessions": lambda _: Reply(201, session("s1"), schema="SessionInfo"),
            "POST /v1/sessions/s1/files": lambda _: next(answers),
            "PATCH /v1/sessions/s1": lambda _: Reply(body=session("s1"), schema="SessionInfo"),
        },
    )
    with Client(str(sock)) as client:
        one = client.session("python")
        changes: list[FileChange] = [
            WriteFile("in/a.csv", "a\n1\n"),
            WriteFile("b.bin", b"\0\1"),
            MoveFile("x", "y"),
            RemoveFile("z"),
        ]
        assert one.change_files(changes) == 2
        with pytest.raises(NotFound, match="gone.txt"):
            one.write_files({"gone.txt": "x"})
        not_a_change: Any = "a.txt"
        with pytest.raises(TypeError, match="not str"):
            one.change_files([not_a_change])
        assert one.set_idle_timeout(600).id == "s1"
    stand_in.close()
    assert [body for _, _, body in stand_in.seen[1:]] == [
        {
            "changes": [
                {"write": {"path": "in/a.csv", "data": "a\n1\n"}},
                {"write": {"path": "b.bin", "data": {"base64": "AAE="}}},
                {"move": {"from": "x", "to": "y"}},
                {"remove": {"path": "z"}},
            ]
        },
        {"changes": [{"write": {"path": "gone.txt", "data": "x"}}]},
        {"idle_timeout_s": 600},
    ]


def test_packages_are_installed_and_listed_and_a_refusal_is_its_exception(sock: Path) -> None:
    installed = {
        "installed": [
            {"name": "markdown-it-py", "version": "3.0.0", "wheel": "m.whl", "sha256": "ab", "cached": False},
            {
                "name": "mdurl",
                "version": "0.1.2",
                "wheel": "d.whl",
                "sha256": "cd",
                "cached": True,
                "needed_by": "markdown-it-py",
            },
        ],
        "present": [{"name": "numpy", "version": "2.4.6"}],
        "checkpoint": 3,
    }
    listed = {"packages": [{"name": "mdurl", "version": "0.1.2", "sha256": "cd"}]}
    stand_in = StandIn(
        sock,
        {
            "POST /v1/sessions": lambda _: Reply(201, session("s1"), schema="SessionInfo"),
            "POST /v1/sessions/s1/packages": lambda body: (
                Reply(body=installed, schema="InstallResponse")
                if body["requirements"] != ["evil"]
                else Reply(422, refusal("package_refused", "evil may not be installed"))
            ),
            "GET /v1/sessions/s1/packages": lambda _: Reply(body=listed, schema="PackageList"),
        },
    )
    with Client(str(sock)) as client:
        one = client.session("python")
        done = one.install(["markdown-it-py", "numpy"])
        assert done.checkpoint == 3
        assert [(p.name, p.cached, p.needed_by) for p in done.installed] == [
            ("markdown-it-py", False, None),
            ("mdurl", True, "markdown-it-py"),
        ]
        assert [(p.name, p.version) for p in done.present] == [("numpy", "2.4.6")]
        assert [(p.name, p.sha256) for p in one.packages()] == [("mdurl", "cd")]
        with pytest.raises(PackageRefused, match="evil"):
            one.install(["evil"])
    stand_in.close()
    assert stand_in.seen[1][2] == {"requirements": ["markdown-it-py", "numpy"]}
