"""What the daemon answers, as Python values: results, sessions, files and stream events.

Each dataclass mirrors one schema of ``api/openapi.json`` field for field (``tests/test_wire.py``
checks that), with files as ``bytes`` and times in milliseconds as the API gives them."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Violation:
    """One thing a program names that its policy refuses (``rule`` is ``allowed_modules``,
    ``blocked_functions`` or ``blocked_globals``)."""

    line: int
    rule: str
    name: str


@dataclass(frozen=True)
class ProgramError:
    """Why a program failed: the API's error kind (``exception``, ``timeout``,
    ``policy_violation``, ...), its message, and for a policy the names it refused."""

    kind: str
    message: str
    violations: tuple[Violation, ...] = ()

    @staticmethod
    def from_json(body: Mapping[str, Any]) -> ProgramError:
        violations = tuple(Violation(v["line"], v["rule"], v["name"]) for v in body.get("violations") or [])
        return ProgramError(body["kind"], body["message"], violations)


@dataclass(frozen=True)
class SessionState:
    """What a session exec did to its session: ``rolled_back`` when the exec timed out, ran
    out of memory or crashed and the session is as it was before it; ``checkpoint``, the
    checkpoint the exec left it at. ``lost_execs`` > 0 when the session had lost what earlier
    execs did (it came back at ``restored_from_checkpoint``) and this exec ran from there."""

    id: str
    rolled_back: bool
    checkpoint: int = 0
    restored_from_checkpoint: int | None = None
    lost_execs: int = 0

    @staticmethod
    def from_json(body: Mapping[str, Any]) -> SessionState:
        return SessionState(
            id=body["id"],
            rolled_back=body["rolled_back"],
            checkpoint=body.get("checkpoint", 0),
            restored_from_checkpoint=body.get("restored_from_checkpoint"),
            lost_execs=body.get("lost_execs", 0),
        )


@dataclass(frozen=True)
class ExecResult:
    """What a program did. ``status`` is ``ok``, ``error`` or ``timeout``: a program that fails
    is a result, not an exception, and ``error`` says how. ``files`` holds the files it created
    or changed (by path, as bytes); ``display`` its rich output (MIME type to content, binary
    types in base64); ``request_id`` is the daemon's id for the request, as in its audit log."""

    status: str
    stdout: str
    stderr: str
    truncated: bool
    result: Any
    error: ProgramError | None
    duration_ms: float
    queued_ms: float = 0.0
    files: dict[str, bytes] = field(default_factory=dict)
    display: list[dict[str, str]] = field(default_factory=list)
    session: SessionState | None = None
    request_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @staticmethod
    def from_json(body: Mapping[str, Any], request_id: str | None = None) -> ExecResult:
        error = body.get("error")
        session = body.get("session")
        return ExecResult(
            status=body["status"],
            stdout=body["stdout"],
            stderr=body["stderr"],
            truncated=body["truncated"],
            result=body.get("result"),
            error=ProgramError.from_json(error) if error else None,
            duration_ms=body["duration_ms"],
            queued_ms=body.get("queued_ms", 0.0),
            files={path: decode_file(data) for path, data in (body.get("files") or {}).items()},
            display=[item["data"] for item in body.get("display") or []],
            session=SessionState.from_json(session) if session else None,
            request_id=request_id,
        )


@dataclass(frozen=True)
class SessionInfo:
    """A session as the daemon describes it (times in RFC 3339, UTC)."""

    id: str
    language: str
    created_at: str
    expires_at: str
    idle_timeout_s: int
    execs: int
    memory_bytes: int
    checkpoint: int = 0
    checkpoints: int = 1
    restored_from_checkpoint: int | None = None
    lost_execs: int = 0
    durable: bool = False
    parked: bool = False
    lost: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    #: The packages its execs installed, as its newest checkpoint has them (only
    #: :meth:`~hyperlightd.Session.describe` tells them; lists leave them out).
    packages: list[Package] = field(default_factory=list)

    @staticmethod
    def from_json(body: Mapping[str, Any]) -> SessionInfo:
        return SessionInfo(
            id=body["id"],
            language=body["language"],
            created_at=body["created_at"],
            expires_at=body["expires_at"],
            idle_timeout_s=body["idle_timeout_s"],
            execs=body["execs"],
            memory_bytes=body["memory_bytes"],
            checkpoint=body.get("checkpoint", 0),
            checkpoints=body.get("checkpoints", 1),
            restored_from_checkpoint=body.get("restored_from_checkpoint"),
            lost_execs=body.get("lost_execs", 0),
            durable=body.get("durable", False),
            parked=body.get("parked", False),
            lost=body.get("lost"),
            labels=dict(body.get("labels", {})),
            env=dict(body.get("env", {})),
            packages=[Package.from_json(p) for p in body.get("packages", [])],
        )


@dataclass(frozen=True)
class Checkpoint:
    """One of a session's checkpoints: its state after an exec (``checkpoint`` 0: where the
    session started). ``parent`` is the checkpoint that exec started from; ``request_id`` the
    exec's; ``durable`` that it is on disk (a daemon with a state directory), so that it outlives
    a restart of the daemon."""

    checkpoint: int
    created_at: str
    bytes: int
    parent: int | None = None
    request_id: int | None = None
    durable: bool = False

    @staticmethod
    def from_json(body: Mapping[str, Any]) -> Checkpoint:
        return Checkpoint(
            checkpoint=body["checkpoint"],
            created_at=body["created_at"],
            bytes=body["bytes"],
            parent=body.get("parent"),
            request_id=body.get("request_id"),
            durable=body.get("durable", False),
        )


@dataclass(frozen=True)
class Package:
    """A package an install put in a session (``wheel``, its ``sha256``, whether it came from the
    daemon's cache, and the package that ``needed_by`` it), or one that was already there (only
    ``name`` and ``version``)."""

    name: str
    version: str
    wheel: str | None = None
    sha256: str | None = None
    cached: bool = False
    needed_by: str | None = None

    @staticmethod
    def from_json(body: Mapping[str, Any]) -> Package:
        return Package(
            name=body["name"],
            version=body["version"],
            wheel=body.get("wheel"),
            sha256=body.get("sha256"),
            cached=body.get("cached", False),
            needed_by=body.get("needed_by"),
        )


@dataclass(frozen=True)
class Installed:
    """What :meth:`~hyperlightd.Session.install` did: the packages ``installed`` (dependencies
    included), those asked for that were ``present`` already, and the session's ``checkpoint``
    after it."""

    installed: list[Package]
    present: list[Package]
    checkpoint: int

    @staticmethod
    def from_json(body: Mapping[str, Any]) -> Installed:
        return Installed(
            installed=[Package.from_json(p) for p in body["installed"]],
            present=[Package.from_json(p) for p in body["present"]],
            checkpoint=body["checkpoint"],
        )


@dataclass(frozen=True)
class FileInfo:
    """One file of a session's working directory."""

    path: str
    size: int


# Changes to a session's working directory (:meth:`~hyperlightd.Session.change_files`).


@dataclass(frozen=True)
class WriteFile:
    """Writes the file ``path`` (text or bytes), replacing it, making its directories."""

    path: str
    content: FileContent


@dataclass(frozen=True)
class RemoveFile:
    """Removes the file or directory ``path``, with everything in it."""

    path: str


@dataclass(frozen=True)
class MoveFile:
    """Renames ``source`` to ``destination``, replacing a file there, as POSIX's ``rename`` does;
    the directory ``destination`` is in must exist."""

    source: str
    destination: str


FileChange = WriteFile | RemoveFile | MoveFile


# The events of a streamed exec, in the order they arrive.


@dataclass(frozen=True)
class Output:
    """Text the program wrote; ``stream`` is ``stdout`` or ``stderr``."""

    stream: str
    text: str


@dataclass(frozen=True)
class Display:
    """Rich output the program showed: MIME type to content."""

    data: dict[str, str]


@dataclass(frozen=True)
class Started:
    """The first event of an exec with tools: the id its calls are answered under."""

    execution_id: str


@dataclass(frozen=True)
class ToolCall:
    """The program called a tool and waits for the answer (the client answers it)."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class Done:
    """The last event: the program ended, and this is its whole result."""

    result: ExecResult


Event = Output | Display | Started | ToolCall | Done

# What a caller may give as a file: text (sent as UTF-8) or bytes.
FileContent = str | bytes


def encode_file(content: FileContent) -> Any:
    """A file's content as the API takes it: text as a string, bytes in base64."""
    if isinstance(content, str):
        return content
    if isinstance(content, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(content)).decode("ascii")}
    raise TypeError(f"a file's content is str or bytes, not {type(content).__name__}")


def decode_file(data: Any) -> bytes:
    """A file's bytes from the API's form of them."""
    if isinstance(data, str):
        return data.encode("utf-8")
    try:
        return base64.b64decode(data["base64"], validate=True)
    except (KeyError, TypeError, binascii.Error) as e:
        raise ValueError(f"a file in the daemon's answer is neither text nor base64: {e}") from e
