"""The official Python SDK client (PyPI `mcp`), protocol 2026-07-28 (its default `auto` mode),
answering toolgate's approval questions through a load balancer that does not stick (run by
cli/tests/replicas_cli.rs).

    python replica_elicit.py URL TOKEN CALLS

Makes CALLS calls of `drift__bare`, each from a new client that accepts every elicitation,
and prints one JSON list, one object per call: what it returned, the questions it was asked,
and which replica answered each `tools/call` request (the balancer's `X-Toolgate-Replica`
response header), so the test can see a question asked by one replica answered by another.
"""

import asyncio
import json
import sys

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

url, token, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])


async def one(i):
    asked = []
    replicas = []

    async def on_elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept")

    async def seen(response):
        body = response.request.content or b""
        if b'"tools/call"' in body:
            replicas.append(response.headers.get("x-toolgate-replica"))

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
        event_hooks={"response": [seen]},
    )
    transport = streamable_http_client(url, http_client=http)
    async with http:
        async with Client(transport, mode="auto", elicitation_callback=on_elicit) as client:
            result = await client.call_tool("drift__bare", {"i": i})
            return {
                "isError": bool(result.is_error),
                "text": " ".join(
                    c.text for c in result.content if getattr(c, "type", "") == "text"
                ),
                "asked": asked,
                "replicas": replicas,
                "protocol": client.protocol_version,
            }


async def main():
    out = []
    for i in range(calls):
        out.append(await one(i))
    print(json.dumps(out))


asyncio.run(main())
