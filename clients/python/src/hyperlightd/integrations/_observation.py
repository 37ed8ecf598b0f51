"""What a code tool tells the model: one text for every framework, built from an exec's result,
and the description that makes the model use it well."""

from __future__ import annotations

import json
from typing import Any

from ..errors import HyperlightdError, Refused
from ..types import ExecResult

# How much of a program's output a model is shown; the rest is elided in the middle.
MAX_OBSERVATION_CHARS = 20_000


def description(languages: list[str], session: bool) -> str:
    """The tool's description for the model."""
    state = (
        "Variables, functions, imports and files persist between calls in the same conversation."
        if session
        else "Each call starts from a fresh interpreter."
    )
    return (
        f"Run code in an isolated sandbox (a Hyperlight micro-VM) and get its output. Languages: "
        f"{', '.join(languages)}. The value of the last expression is returned as the result; "
        f"print() output is returned too. {state} HTTP requests (fetch in JavaScript, urllib in "
        f"Python) reach only the destinations the daemon's operator allowed, if any; there is no "
        f"other network access."
    )


def observation(result: ExecResult) -> str:
    """What the model sees of a finished program."""
    parts: list[str] = []
    if result.stdout:
        parts.append(f"stdout:\n{result.stdout}")
    if result.stderr and result.ok:
        parts.append(f"stderr:\n{result.stderr}")
    if result.ok:
        if result.result is not None:
            parts.append(f"result: {json.dumps(result.result)}")
        if result.files:
            parts.append("files written: " + ", ".join(sorted(result.files)))
        if result.display:
            kinds = sorted({mime for item in result.display for mime in item})
            parts.append(f"displayed: {len(result.display)} item(s) ({', '.join(kinds)})")
    elif result.error is not None:
        parts.append(f"error ({result.error.kind}): {result.error.message}")
        for violation in result.error.violations:
            parts.append(f"  line {violation.line}: {violation.name} is refused by {violation.rule}")
        if result.stderr:
            parts.append(f"stderr:\n{result.stderr}")
        if result.session is not None and result.session.rolled_back:
            parts.append("The session's state is as it was before this call.")
    if result.truncated:
        parts.append("(the output was cut at the daemon's cap)")
    return _elide("\n".join(parts) or "(no output)")


def refusal(error: HyperlightdError) -> str:
    """What the model sees when the daemon could not run its code (the agent goes on)."""
    if isinstance(error, Refused) and error.retry_after is not None:
        return f"The sandbox service is busy ({error.kind}); try again in {error.retry_after} s."
    return f"The code was not run: {error}"


def jsonable(value: Any) -> Any:
    """``value`` if it is JSON, else its ``str``: what a tool's answer to a program can carry."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def _elide(text: str) -> str:
    if len(text) <= MAX_OBSERVATION_CHARS:
        return text
    half = MAX_OBSERVATION_CHARS // 2
    return f"{text[:half]}\n... ({len(text) - 2 * half} characters elided) ...\n{text[-half:]}"
