"""The official Python SDK client (PyPI `mcp`) against `toolgate mcp serve` over streamable
HTTP (run by cli/tests/mcp_serve.rs with the SDK installed by
layers/mcp/scripts/install-python-sdk.sh).

    python sdk_client.py URL ASSISTANT_TOKEN READER_TOKEN MODE

MODE is the SDK's own `mode`: `legacy` (the initialize handshake, capabilities declared
once) or `auto` (the SDK's default: `server/discover`, protocol 2026-07-28, capabilities in
every request's `_meta`, questions by `InputRequiredResult`). Prints one JSON object: what
each step saw. The Rust test asserts on it.
"""

import asyncio
import json
import sys

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

url, assistant_token, reader_token, mode = sys.argv[1:5]


def summary(result):
    return {
        "isError": bool(result.is_error),
        "text": " ".join(c.text for c in result.content if getattr(c, "type", "") == "text"),
        "toolgate": (result.structured_content or {}).get("toolgate"),
    }


async def run(token, answer, steps):
    """Connects with `token`, answering every elicitation with `answer` (or declaring none)."""
    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action=answer)

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    transport = streamable_http_client(url, http_client=http)
    kwargs = {"mode": mode}
    if answer is not None:
        kwargs["elicitation_callback"] = on_elicit
    async with http:
        async with Client(transport, **kwargs) as client:
            out = await steps(client)
            out["asked"] = asked
            out["protocol"] = client.protocol_version
            return out


async def main():
    out = {}

    async def lists(client):
        tools = (await client.list_tools()).tools
        return {"tools": sorted(t.name for t in tools)}

    out["reader"] = await run(reader_token, None, lists)

    async def allowed(client):
        return summary(await client.call_tool("everything__echo", {"message": "hi"}))

    out["allowed"] = await run(reader_token, None, allowed)

    async def asked(client):
        return summary(await client.call_tool("everything__toggle-simulated-logging", {}))

    for answer in ["accept", "decline"]:
        out[answer] = await run(assistant_token, answer, asked)
    out["undeclared"] = await run(assistant_token, None, asked)
    print(json.dumps(out))


asyncio.run(main())
