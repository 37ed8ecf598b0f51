"""Python client for hyperlightd (work in progress: issue 29)."""

from .client import Client, ExecResult, ProgramError, default_socket
from .errors import (
    AnswerLost,
    Busy,
    Conflict,
    HyperlightdError,
    Internal,
    InvalidRequest,
    NotAllowed,
    NotFound,
    Refused,
    Unreachable,
)

__all__ = [
    "AnswerLost",
    "Busy",
    "Client",
    "Conflict",
    "ExecResult",
    "HyperlightdError",
    "Internal",
    "InvalidRequest",
    "NotAllowed",
    "NotFound",
    "ProgramError",
    "Refused",
    "Unreachable",
    "default_socket",
]
