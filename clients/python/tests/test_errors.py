"""Every refusal kind of the API has its exception class; program failure kinds are results."""

import json
from pathlib import Path

from hyperlightd.errors import KINDS

OPENAPI = Path(__file__).resolve().parents[3] / "api" / "openapi.json"
# Kinds an execution's response carries: its program failed; not a refusal.
PROGRAM_KINDS = {
    "syntax_error", "exception", "timeout", "result_too_large", "out_of_memory",
    "sandbox_failure", "resource_limit", "policy_violation", "file_limit", "wall_clock",
}


def test_every_refusal_kind_of_the_api_has_an_exception() -> None:
    schema = json.loads(OPENAPI.read_text())["components"]["schemas"]["ErrorKind"]
    kinds = {variant["const"] for variant in schema["oneOf"]}
    assert kinds - PROGRAM_KINDS == set(KINDS), "the API's refusal kinds and KINDS differ"
