"""Property-based fuzzing (Hypothesis) of what the client reads from the daemon: each line of a
streamed answer, and a refusal's body and headers. Anything is read or raised as this client's
own error (AnswerLost, or a Refused kind), never as another exception. ``HYPOTHESIS_PROFILE=long``
runs many more examples (docs/guide/developing.md)."""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from hyperlightd import AnswerLost, Refused, _wire

settings.register_profile("long", max_examples=50_000, deadline=None)
settings.register_profile("default", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

# A whole event of each type, as the daemon sends them: the fuzz changes their fields.
EVENTS: dict[str, dict[str, Any]] = {
    "stdout": {"text": "a"},
    "display": {"data": {"image/png": "AA=="}},
    "started": {"execution_id": "exec_1"},
    "tool_call": {"id": "1", "name": "t", "arguments": {}},
    "result": {
        "status": "error",
        "stdout": "",
        "stderr": "",
        "truncated": False,
        "result": 1,
        "error": {"kind": "exception", "message": "x", "violations": []},
        "duration_ms": 1.0,
        "queued_ms": 0.0,
        "files": {"a": "b"},
        "session": {"id": "s", "rolled_back": False, "checkpoint": 1},
        "display": [{"data": {"text/plain": "x"}}],
        "tools": {"calls": 1},
    },
    "error": {"error": {"kind": "internal", "message": "x"}},
}


@st.composite
def event_lines(draw: st.DrawFn) -> str | bytes:
    """A streamed line: a whole event with some fields set to any JSON, or any text or bytes."""
    kind = draw(st.sampled_from(sorted(EVENTS)))
    shaped: dict[str, Any] = {"type": kind, **EVENTS[kind]}
    for name in draw(st.lists(st.sampled_from(sorted(shaped)), max_size=3)):
        shaped[name] = draw(json_values)
    choices: list[str | bytes] = [json.dumps(shaped), draw(st.text()), draw(st.binary())]
    return draw(st.sampled_from(choices))


@example(
    '{"type": "result", "status": "ok", "stdout": "", "stderr": "", "truncated": false, '
    '"result": 1, "error": true, "duration_ms": 1.0}',
    None,
)  # an error that is no object
@given(event_lines(), st.none() | st.text(max_size=8))
def test_any_stream_line_is_an_event_or_this_client_s_error(line: str | bytes, request_id: str | None) -> None:
    try:
        _wire.event(line, request_id)
    except (AnswerLost, Refused):
        pass


@example(429, b"", {"retry-after": "\u00b2"})  # '²': isdigit, yet no int
@given(
    st.integers(min_value=100, max_value=599),
    st.one_of(st.binary(), json_values.map(lambda v: json.dumps({"error": v}).encode())),
    st.dictionaries(
        st.sampled_from(["retry-after", "x-request-id", "other"]),
        # Digits of every script, which str.isdigit takes and int() does not always.
        st.text(max_size=6) | st.text(st.characters(categories=["Nd", "No"]), min_size=1, max_size=3),
        max_size=3,
    ),
)
def test_any_refusal_is_one_of_this_client_s_errors(status: int, body: bytes, headers: dict[str, str]) -> None:
    refused = _wire.refused(status, body, headers)
    assert isinstance(refused, Refused)
    assert refused.retry_after is None or refused.retry_after >= 0
