"""Interleaved A/B of a governed MCP call over stdio against a direct one, from the official
MCP Python SDK client (PyPI `mcp`, installed by layers/mcp/scripts/install-python-sdk.sh).

    .tmp/python-sdk/bin/python benches/mcp/stdio_ab.py [ROUNDS] [CALLS] [MODE]

Two sessions stay open for the whole run: `direct` is the SDK client talking to
server-everything (`node .../server-everything/dist/index.js`) over stdio; `governed` is the
same client talking to `target/release/toolgate mcp serve --agent assistant --config
examples/mcp-proxy.json`, which starts its own server-everything and sends every `echo` call
through the governed stack. Each round makes CALLS `echo` calls on one and then CALLS on the
other, the order alternating by round, and prints both medians and their ratio; the last line
is the median of the per-round ratios with its range. With `TOOLGATE_BASE=<binary>` a third
session runs that binary (say, main's build) the same way, so a change is measured against
what it replaces in the same run. MODE is the SDK's `mode` (`legacy`,
the default, or `auto`). Run from the repository root (`TOOLGATE` overrides the binary).

With `STDIO_AB_ONLY=governed`, only the governed session is opened and CALLS calls made (one
round): with `TOOLGATE=benches/mcp/callgrind-toolgate.sh` that counts the proxy's
instructions (run it at two CALLS and divide the difference by the difference of calls).
"""

import asyncio
from contextlib import AsyncExitStack
import os
import statistics
import sys
import time

from mcp import Client
from mcp.client.stdio import StdioServerParameters

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVERS = os.environ.get("TOOLGATE_MCP_SERVERS", os.path.join(ROOT, ".tmp/mcp-servers"))
EVERYTHING = os.path.join(SERVERS, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")
TOOLGATE = os.environ.get("TOOLGATE", os.path.join(ROOT, "target/release/toolgate"))


async def timed(client, name, calls):
    out = []
    for i in range(calls):
        t = time.perf_counter()
        r = await client.call_tool(name, {"message": f"hello {i}"})
        out.append(time.perf_counter() - t)
        if r.is_error:
            raise SystemExit(f"{name}: {r.content}")
    return out


async def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    mode = sys.argv[3] if len(sys.argv) > 3 else "legacy"
    direct = StdioServerParameters(command="node", args=[EVERYTHING])
    governed = StdioServerParameters(
        command=TOOLGATE,
        args=["mcp", "serve", "--agent", "assistant", "--config", "mcp-proxy.json"],
        cwd=os.path.join(ROOT, "examples"),
        # The SDK passes a child only a default environment: the callgrind wrapper's settings.
        env={k: os.environ[k] for k in ("TOOLGATE_BIN", "CALLGRIND_DIR") if k in os.environ},
    )
    if os.environ.get("STDIO_AB_ONLY") == "governed":
        async with Client(governed, mode=mode) as g:
            t = time.perf_counter()
            await timed(g, "everything__echo", calls)
            print(f"governed only: {calls} calls in {time.perf_counter() - t:.2f} s")
        return
    sides = [("direct", direct, "echo"), ("governed", governed, "everything__echo")]
    if "TOOLGATE_BASE" in os.environ:
        # A second binary (say, main's) as a third side, interleaved the same way.
        base = governed.model_copy(update={"command": os.environ["TOOLGATE_BASE"]})
        sides.append(("base", base, "everything__echo"))
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client(p, mode=mode)) for _, p, _ in sides]
        for c, (_, _, tool) in zip(clients, sides):
            await timed(c, tool, 50)
        ratios = {name: [] for name, _, _ in sides[1:]}
        every = {name: [] for name, _, _ in sides}
        for r in range(rounds):
            medians = {}
            k = len(sides)
            for j in range(k):
                i = (j + r) % k if r % 2 == 0 else (k - 1 - j + r) % k
                name, _, tool = sides[i]
                t = await timed(clients[i], tool, calls)
                every[name] += t
                medians[name] = statistics.median(t)
            for name in ratios:
                ratios[name].append(medians[name] / medians["direct"])
            print(f"round {r}: " + ", ".join(f"{n} {m * 1e6:.1f} us" for n, m in medians.items())
                  + ", ratios " + ", ".join(f"{n} {v[-1]:.3f}" for n, v in ratios.items()), flush=True)
        md = statistics.median(every["direct"])
        for name, v in ratios.items():
            mg = statistics.median(every[name])
            print(f"python sdk ({mode}), {rounds} rounds x {calls} calls: {name} / direct median ratio"
                  f" {statistics.median(v):.3f} (rounds {min(v):.3f}-{max(v):.3f}); all calls: direct"
                  f" {md * 1e6:.1f} us, {name} {mg * 1e6:.1f} us (+{(mg - md) * 1e6:.1f} us)")


asyncio.run(main())
