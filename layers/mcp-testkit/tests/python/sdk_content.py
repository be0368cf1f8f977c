"""The official Python SDK client (PyPI `mcp`) lists and reads resources, gets prompts and
asks for a completion through `toolgate mcp serve` (streamable HTTP) as two agents with
different rights (run by cli/tests/mcp_content_cli.rs).

    python sdk_content.py URL ASSISTANT_TOKEN READER_TOKEN MODE

MODE is the SDK's own `mode`: `legacy` (the initialize handshake, protocol 2025-11-25) or
`auto` (the SDK's default: `server/discover`, protocol 2026-07-28, whose results carry a
`resultType` the SDK requires). Prints one JSON object in the shape of
tests/node/sdk_content.mjs's, with the protocol each agent's session spoke. The Rust test
asserts on it.
"""

import asyncio
import json
import sys

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

url, assistant_token, reader_token, mode = sys.argv[1:5]


async def attempt(f):
    try:
        return {"ok": True, "value": await f()}
    except MCPError as e:
        return {"ok": False, "code": e.code, "message": e.message, "data": e.data}


async def seen(client):
    out = {}
    caps = client.server_capabilities
    out["capabilities"] = caps.model_dump(by_alias=True, exclude_none=True)
    out["resources"] = [
        {"name": r.name, "uri": str(r.uri)} for r in (await client.list_resources()).resources
    ]
    out["templates"] = [
        {"name": t.name, "uriTemplate": t.uri_template}
        for t in (await client.list_resource_templates()).resource_templates
    ]
    out["prompts"] = sorted(p.name for p in (await client.list_prompts()).prompts)

    async def read_static():
        r = await client.read_resource("demo://resource/static/document/architecture.md")
        return len(r.contents)

    async def read_dynamic():
        r = await client.read_resource("demo://resource/dynamic/text/1")
        return r.contents[0].text

    async def simple():
        return len((await client.get_prompt("everything__simple-prompt")).messages)

    async def args():
        r = await client.get_prompt("everything__args-prompt", {"city": "Oslo"})
        return r.messages[0].content.text

    async def complete():
        r = await client.complete(
            types.PromptReference(type="ref/prompt", name="everything__completable-prompt"),
            {"name": "department", "value": "S"},
        )
        return r.completion.values

    out["readStatic"] = await attempt(read_static)
    out["readDynamic"] = await attempt(read_dynamic)
    out["simplePrompt"] = await attempt(simple)
    out["argsPrompt"] = await attempt(args)
    out["complete"] = await attempt(complete)

    async def no_such_prompt():
        r = await client.get_prompt("everything__no-such-prompt", {"city": "Oslo"})
        return len(r.messages)

    # Issue 33 item 10: a prompt nobody offers is refused as a hidden one is.
    out["noSuchPrompt"] = await attempt(no_such_prompt)
    return out


async def run(token):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    transport = streamable_http_client(url, http_client=http)
    async with http:
        async with Client(transport, mode=mode) as client:
            out = await seen(client)
            out["protocol"] = client.protocol_version
            return out


async def main():
    out = {"assistant": await run(assistant_token), "reader": await run(reader_token)}
    print(json.dumps(out))


asyncio.run(main())
