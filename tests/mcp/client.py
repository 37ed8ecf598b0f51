"""Drives `hlctl mcp` with the official MCP Python SDK (PyPI `mcp`), as an MCP host would.

Usage: client.py HLCTL SOCKET CALLS_JSON [MCP_ARGS_JSON]
CALLS_JSON is a list of tool arguments; each is sent as one `tools/call` of `run_code`.
MCP_ARGS_JSON, a list, is added to `hlctl mcp`'s arguments (code mode's `--servers FILE`).
Prints one JSON report on stdout: the server's identity, the tools it lists, and for each
call what came back (isError, the text content, the structured content). The end-to-end test
(tests/tests/agents.rs) asserts on the report; this script only drives the protocol.
"""

import asyncio
import importlib.metadata
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(hlctl: str, socket: str, calls: list, mcp_args: list) -> dict:
    server = StdioServerParameters(command=hlctl, args=["--socket", socket, "mcp", *mcp_args])
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=120) as session:
            init = await session.initialize()
            listed = await session.list_tools()
            results = []
            for arguments in calls:
                result = await session.call_tool("run_code", arguments)
                results.append(
                    {
                        "is_error": result.is_error,
                        "text": [c.text for c in result.content if c.type == "text"],
                        "structured": result.structured_content,
                    }
                )
            unknown = None
            try:
                await session.call_tool("no_such_tool", {})
            except Exception as error:  # the SDK raises McpError for a JSON-RPC error
                unknown = str(error)
    return {
        "sdk_version": importlib.metadata.version("mcp"),
        "server": {"name": init.server_info.name, "version": init.server_info.version},
        "tools": [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in listed.tools
        ],
        "calls": results,
        "unknown_tool_error": unknown,
    }


if __name__ == "__main__":
    hlctl, socket, calls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    mcp_args = json.loads(sys.argv[4]) if len(sys.argv) > 4 else []
    print(json.dumps(asyncio.run(main(hlctl, socket, calls, mcp_args))))
