"""One exception hierarchy for every way a request to hyperlightd can fail before its program
ran to an answer. A program that fails (an exception, a timeout) is not an exception here: it is
a result whose ``status`` and ``error`` say so, as in the Rust client."""

from __future__ import annotations


class HyperlightdError(Exception):
    """Anything that kept a request from being answered."""


class Unreachable(HyperlightdError):
    """No connection could be made; the request was never sent, so retrying is safe."""

    def __init__(self, socket: str, reason: str) -> None:
        super().__init__(
            f"cannot reach hyperlightd at {socket}: {reason}. Is the daemon running? Start it, "
            "or point HYPERLIGHTD_SOCKET at its socket"
        )
        self.socket = socket
        self.reason = reason


class AnswerLost(HyperlightdError):
    """The request was sent and its answer cut off: the program may have run."""


class Timeout(AnswerLost):
    """The request was sent and no answer came within the client's wait: the program may have
    run. (A program that runs past its own ``timeout_ms`` is a result with status ``timeout``.)"""


class Refused(HyperlightdError):
    """The daemon refused the request (nothing ran); ``kind`` is the API's error kind."""

    def __init__(
        self, status: int, kind: str, message: str, retry_after: int | None = None, request_id: str | None = None
    ) -> None:
        super().__init__(f"{kind} ({status}): {message}")
        self.status = status
        self.kind = kind
        self.message = message
        self.retry_after = retry_after
        self.request_id = request_id


class InvalidRequest(Refused):
    """400 ``invalid_request``, 413 ``payload_too_large`` and the like: the request is wrong."""


class PayloadTooLarge(InvalidRequest):
    """413 ``payload_too_large``: the code, its files or a tool's answer are over the daemon's caps."""


class Busy(Refused):
    """Nothing ran for lack of capacity: try again after ``retry_after`` seconds."""


class Overloaded(Busy):
    """``overloaded``, ``no_sandbox_available``, ``shutting_down``: the daemon is full or stopping."""


class QuotaExceeded(Busy):
    """``quota_exceeded``, ``too_many_sessions``: this caller (or the daemon) is at its limit."""


class SessionBusy(Busy):
    """``session_busy``: the session's earlier execs kept it busy for the request's whole limit."""


class NotFound(Refused):
    """Something the request names does not exist (``not_found``: a session's file)."""


class SessionNotFound(NotFound):
    """``session_not_found``: the session never existed, was deleted, or expired."""


class SessionLost(NotFound):
    """``session_lost``: a restarted daemon could bring back none of the session's state; delete it."""


class CheckpointNotFound(NotFound):
    """``checkpoint_not_found``: the session keeps no such checkpoint (the message lists those it keeps)."""


class ExecutionNotFound(NotFound):
    """``execution_not_found``, ``tool_call_not_found``: no such execution or call (for this caller)."""


class Conflict(Refused):
    """``execution_ended``, ``tool_call_answered``: the answer came too late or twice."""


class PackageRefused(Refused):
    """``package_refused``: a package cannot be installed (installs off, denied, not on the index,
    no wheel for the guest, a conflict, too large, a hash mismatch); the message says which."""


class PackageIndexUnavailable(Busy):
    """``package_index_unavailable``: the daemon could not read its package index; retry later."""


class NotAllowed(Refused):
    """``caller_not_allowed``: this user may not use the daemon."""


class Internal(Refused):
    """``internal``: a fault in the daemon."""


# Every refusal kind of the API (api/src/lib.rs, ErrorKind), and its class. A kind missing here
# is a test failure (tests/test_errors.py reads the kinds from api/openapi.json).
KINDS: dict[str, type[Refused]] = {
    "invalid_request": InvalidRequest,
    "payload_too_large": PayloadTooLarge,
    "method_not_allowed": InvalidRequest,
    "request_timeout": InvalidRequest,
    "not_found": NotFound,
    "session_not_found": SessionNotFound,
    "session_lost": SessionLost,
    "checkpoint_not_found": CheckpointNotFound,
    "execution_not_found": ExecutionNotFound,
    "tool_call_not_found": ExecutionNotFound,
    "overloaded": Overloaded,
    "no_sandbox_available": Overloaded,
    "shutting_down": Overloaded,
    "session_busy": SessionBusy,
    "too_many_sessions": QuotaExceeded,
    "quota_exceeded": QuotaExceeded,
    "execution_ended": Conflict,
    "tool_call_answered": Conflict,
    "package_refused": PackageRefused,
    "package_index_unavailable": PackageIndexUnavailable,
    "caller_not_allowed": NotAllowed,
    "internal": Internal,
}


def refusal(status: int, kind: str, message: str, retry_after: int | None, request_id: str | None = None) -> Refused:
    """The exception for a refusal the daemon answered with."""
    return KINDS.get(kind, Refused)(status, kind, message, retry_after, request_id)
