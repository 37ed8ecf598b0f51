"""Where the examples' model comes from: any OpenAI-compatible endpoint, from the environment
(OPENAI_API_KEY; OPENAI_BASE_URL for another server, such as a local Ollama or vLLM;
OPENAI_MODEL, default gpt-4.1-mini)."""

from __future__ import annotations

import os
import sys

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4.1-mini")
BASE_URL = os.environ.get("OPENAI_BASE_URL")


def api_key() -> str:
    key = os.environ.get("OPENAI_API_KEY")
    if not key:
        sys.exit("set OPENAI_API_KEY (and OPENAI_BASE_URL, OPENAI_MODEL for another endpoint) to run this example")
    return key
