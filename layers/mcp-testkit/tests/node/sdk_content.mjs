// The official TypeScript SDK client lists and reads resources, gets prompts and asks for a
// completion through `toolgate mcp serve` (streamable HTTP) as two agents with different
// rights (run by cli/tests/mcp_content_cli.rs with the SDK installed beside it).
//
//   node sdk_content.mjs URL ASSISTANT_TOKEN READER_TOKEN
//
// Prints one JSON object: what each agent saw. The Rust test asserts on it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, assistantToken, readerToken] = process.argv.slice(2);

async function connect(token) {
  const client = new Client({ name: "toolgate-sdk-content", version: "0" }, { capabilities: {} });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}

async function attempt(f) {
  try {
    return { ok: true, value: await f() };
  } catch (e) {
    return { ok: false, code: e.code ?? null, message: String(e.message), data: e.data ?? null };
  }
}

async function seen(client) {
  const out = {};
  out.capabilities = client.getServerCapabilities();
  out.resources = (await client.listResources()).resources.map((r) => ({ name: r.name, uri: r.uri }));
  out.templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => ({
    name: t.name,
    uriTemplate: t.uriTemplate,
  }));
  out.prompts = (await client.listPrompts()).prompts.map((p) => p.name).sort();
  out.readStatic = await attempt(async () =>
    (await client.readResource({ uri: "demo://resource/static/document/architecture.md" })).contents.length,
  );
  out.readDynamic = await attempt(async () =>
    (await client.readResource({ uri: "demo://resource/dynamic/text/1" })).contents[0].text,
  );
  out.simplePrompt = await attempt(async () =>
    (await client.getPrompt({ name: "everything__simple-prompt" })).messages.length,
  );
  out.argsPrompt = await attempt(async () =>
    (await client.getPrompt({ name: "everything__args-prompt", arguments: { city: "Oslo" } })).messages[0]
      .content.text,
  );
  // Issue 33 item 10: a prompt nobody offers is refused as a hidden one is.
  out.noSuchPrompt = await attempt(async () =>
    (await client.getPrompt({ name: "everything__no-such-prompt", arguments: { city: "Oslo" } })).messages
      .length,
  );
  out.complete = await attempt(async () =>
    (
      await client.complete({
        ref: { type: "ref/prompt", name: "everything__completable-prompt" },
        argument: { name: "department", value: "S" },
      })
    ).completion.values,
  );
  return out;
}

const assistant = await connect(assistantToken);
const reader = await connect(readerToken);
const out = { assistant: await seen(assistant), reader: await seen(reader) };
console.log(JSON.stringify(out));
await assistant.close();
await reader.close();
