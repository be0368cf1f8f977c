// The official TypeScript SDK client against `toolgate mcp serve` over streamable HTTP
// (run by layers/mcp-testkit/tests/serve_clients.rs with NODE_PATH pointing at the installed SDK).
//
//   node sdk_client.mjs URL ASSISTANT_TOKEN READER_TOKEN
//
// Prints one JSON object: what each step saw. The Rust test asserts on it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, assistantToken, readerToken] = process.argv.slice(2);

async function connect(token, answer) {
  const capabilities = answer ? { elicitation: {} } : {};
  const client = new Client({ name: "toolgate-sdk-test", version: "0" }, { capabilities });
  const asked = [];
  if (answer) {
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params.message);
      return { action: answer };
    });
  }
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return { client, asked };
}

function summary(result) {
  return {
    isError: result.isError === true,
    text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join(" "),
    toolgate: result.structuredContent?.toolgate ?? null,
  };
}

const out = {};
const assistant = await connect(assistantToken, null);
const reader = await connect(readerToken, null);
out.assistantTools = (await assistant.client.listTools()).tools.map((t) => t.name).sort();
out.readerTools = (await reader.client.listTools()).tools.map((t) => t.name).sort();
out.allowed = summary(await reader.client.callTool({ name: "everything__echo", arguments: { message: "hi" } }));
out.refused = summary(
  await reader.client.callTool({ name: "everything__toggle-simulated-logging", arguments: {} }),
);
for (const answer of ["accept", "decline"]) {
  const asker = await connect(assistantToken, answer);
  out[answer] = summary(
    await asker.client.callTool({ name: "everything__toggle-simulated-logging", arguments: {} }),
  );
  out[answer].asked = asker.asked;
  await asker.client.close();
}
await assistant.client.close();
await reader.client.close();
console.log(JSON.stringify(out));
