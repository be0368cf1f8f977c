"""The official Python SDK client (PyPI `mcp`) sending identity-provider JWTs to `toolgate
mcp serve --http` (issue 22; run by cli/tests/issue22_python_sdk_cli.rs with the SDK
installed by layers/mcp/scripts/install-python-sdk.sh).

    python jwt_client.py URL LABEL=TOKEN ...

For each token: the tools the SDK client lists with it (in `legacy` mode, the initialize
handshake), or the error it met; and, by a plain POST of `initialize` with the same token,
the HTTP status and `WWW-Authenticate` header, and the authorization servers of the
protected-resource metadata that header points to (what an MCP client follows to find where
to get a token). Prints one JSON object keyed by label; the Rust test asserts on it.
"""

import asyncio
import json
import re
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

url = sys.argv[1]
tokens = [arg.split("=", 1) for arg in sys.argv[2:]]

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


async def with_sdk(token):
    # The HTTP statuses the SDK's own requests got (its error does not say).
    statuses = []

    async def seen(response):
        statuses.append(response.status_code)

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
        event_hooks={"response": [seen]},
    )
    try:
        async with http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode="legacy") as client:
                tools = (await client.list_tools()).tools
                return {"tools": sorted(t.name for t in tools), "sdk_statuses": statuses}
    except BaseException as e:  # the SDK raises (an exception group) on a refused connect
        return {"error": "; ".join(leaves(e)), "sdk_statuses": statuses}


def leaves(e):
    """The messages of an exception and of everything it groups."""
    if isinstance(e, BaseExceptionGroup):
        return [m for sub in e.exceptions for m in leaves(sub)]
    return [f"{type(e).__name__}: {e}"]


async def raw(token):
    async with httpx2.AsyncClient(timeout=30) as http:
        r = await http.post(
            url,
            json=INITIALIZE,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
            },
        )
        out = {"status": r.status_code, "challenge": r.headers.get("www-authenticate", "")}
        found = re.search(r'resource_metadata="([^"]+)"', out["challenge"])
        if found:
            doc = (await http.get(found.group(1))).json()
            out["authorization_servers"] = doc.get("authorization_servers")
            out["resource"] = doc.get("resource")
        return out


async def main():
    out = {}
    for label, token in tokens:
        seen = await with_sdk(token)
        seen.update(await raw(token))
        out[label] = seen
    print(json.dumps(out))


asyncio.run(main())
