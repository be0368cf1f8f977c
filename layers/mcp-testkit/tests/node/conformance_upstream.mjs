// An upstream MCP server for the official conformance suite's tool-call, resource, prompt and
// completion scenarios, written with the official TypeScript SDK (McpServer over stdio): the
// `test_*` tools, the `test://` resources and the `test_*` prompts exactly as the suite's own
// scenario texts require (grep the suite's dist/index.js for "Implement").
// `cli/tests/mcp_serve.rs` copies it next to the installed SDK and puts `toolgate mcp serve`
// (with `mcp.wire_names: "own"`) in front of it.
//
//   node conformance_upstream.mjs
import { McpServer, ResourceTemplate } from "@modelcontextprotocol/sdk/server/mcp.js";
import { completable } from "@modelcontextprotocol/sdk/server/completable.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { SubscribeRequestSchema, UnsubscribeRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const server = new McpServer(
  { name: "toolgate-conformance-upstream", version: "1.0.0" },
  { capabilities: { logging: {} } },
);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A 1x1 red pixel PNG.
const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

// A minimal WAV: 8 kHz, 8-bit mono, 8 samples of silence.
function wav() {
  const samples = 8;
  const b = Buffer.alloc(44 + samples);
  b.write("RIFF", 0);
  b.writeUInt32LE(36 + samples, 4);
  b.write("WAVE", 8);
  b.write("fmt ", 12);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20); // PCM
  b.writeUInt16LE(1, 22); // mono
  b.writeUInt32LE(8000, 24);
  b.writeUInt32LE(8000, 28);
  b.writeUInt16LE(1, 32);
  b.writeUInt16LE(8, 34);
  b.write("data", 36);
  b.writeUInt32LE(samples, 40);
  b.fill(128, 44);
  return b.toString("base64");
}

server.registerTool(
  "test_simple_text",
  { description: "Returns simple text content" },
  async () => ({
    content: [{ type: "text", text: "This is a simple text response for testing." }],
  }),
);

server.registerTool(
  "test_image_content",
  { description: "Returns image content (a 1x1 red PNG)" },
  async () => ({ content: [{ type: "image", data: PNG, mimeType: "image/png" }] }),
);

server.registerTool(
  "test_audio_content",
  { description: "Returns audio content (a minimal WAV)" },
  async () => ({ content: [{ type: "audio", data: wav(), mimeType: "audio/wav" }] }),
);

server.registerTool(
  "test_embedded_resource",
  { description: "Returns an embedded resource" },
  async () => ({
    content: [
      {
        type: "resource",
        resource: {
          uri: "test://embedded-resource",
          mimeType: "text/plain",
          text: "This is an embedded resource content.",
        },
      },
    ],
  }),
);

server.registerTool(
  "test_multiple_content_types",
  { description: "Returns text, image and resource content" },
  async () => ({
    content: [
      { type: "text", text: "Multiple content types test:" },
      { type: "image", data: PNG, mimeType: "image/png" },
      {
        type: "resource",
        resource: {
          uri: "test://mixed-content-resource",
          mimeType: "application/json",
          text: JSON.stringify({ test: "data", value: 123 }),
        },
      },
    ],
  }),
);

server.registerTool(
  "test_error_handling",
  { description: "Always fails with an error result" },
  async () => ({
    isError: true,
    content: [{ type: "text", text: "This tool intentionally returns an error for testing" }],
  }),
);

server.registerTool(
  "test_tool_with_logging",
  { description: "Sends three info log messages while it runs" },
  async () => {
    await server.sendLoggingMessage({ level: "info", data: "Tool execution started" });
    await sleep(50);
    await server.sendLoggingMessage({ level: "info", data: "Tool processing data" });
    await sleep(50);
    await server.sendLoggingMessage({ level: "info", data: "Tool execution completed" });
    return { content: [{ type: "text", text: "Tool with logging executed successfully" }] };
  },
);

server.registerTool(
  "test_tool_with_progress",
  { description: "Reports progress 0, 50 and 100 of 100 when asked for progress" },
  async (extra) => {
    const progressToken = extra?._meta?.progressToken;
    for (const progress of [0, 50, 100]) {
      if (progressToken !== undefined) {
        await extra.sendNotification({
          method: "notifications/progress",
          params: { progressToken, progress, total: 100 },
        });
      }
      if (progress < 100) await sleep(50);
    }
    return { content: [{ type: "text", text: `Progress reported: ${progressToken !== undefined}` }] };
  },
);

server.registerTool(
  "test_sampling",
  {
    description: "Asks the client's model (sampling/createMessage) and returns its answer",
    inputSchema: { prompt: z.string().describe("The prompt to send to the LLM") },
  },
  async ({ prompt }) => {
    const result = await server.server.createMessage({
      messages: [{ role: "user", content: { type: "text", text: prompt } }],
      maxTokens: 100,
    });
    const text = result.content?.type === "text" ? result.content.text : JSON.stringify(result.content);
    return { content: [{ type: "text", text: `LLM response: ${text}` }] };
  },
);

server.registerTool(
  "test_elicitation",
  {
    description: "Asks the user (elicitation/create) and returns the answer",
    inputSchema: { message: z.string().describe("The message to show the user") },
  },
  async ({ message }) => {
    const result = await server.server.elicitInput({
      message,
      requestedSchema: {
        type: "object",
        properties: {
          username: { type: "string", description: "User's response" },
          email: { type: "string", description: "User's email address" },
        },
        required: ["username", "email"],
      },
    });
    return {
      content: [
        {
          type: "text",
          text: `User response: action: ${result.action}, content: ${JSON.stringify(result.content ?? {})}`,
        },
      ],
    };
  },
);

// SEP-1034: defaults for every primitive type (the relay must carry them unchanged).
server.registerTool(
  "test_elicitation_sep1034_defaults",
  { description: "Asks the user with a schema holding a default for each primitive type" },
  async () => {
    const result = await server.server.elicitInput({
      message: "Please confirm your details (defaults filled in)",
      requestedSchema: {
        type: "object",
        properties: {
          name: { type: "string", description: "User name", default: "John Doe" },
          age: { type: "integer", description: "User age", default: 30 },
          score: { type: "number", description: "User score", default: 95.5 },
          status: {
            type: "string",
            description: "User status",
            enum: ["active", "inactive", "pending"],
            default: "active",
          },
          verified: { type: "boolean", description: "Verification status", default: true },
        },
        required: [],
      },
    });
    return {
      content: [
        {
          type: "text",
          text: `Elicitation completed: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`,
        },
      ],
    };
  },
);

// SEP-1330: the five enum forms (the relay must carry them unchanged).
server.registerTool(
  "test_elicitation_sep1330_enums",
  { description: "Asks the user with a schema holding each of the five enum forms" },
  async () => {
    const result = await server.server.elicitInput({
      message: "Please choose",
      requestedSchema: {
        type: "object",
        properties: {
          untitledSingle: { type: "string", enum: ["option1", "option2", "option3"] },
          titledSingle: {
            type: "string",
            oneOf: [
              { const: "value1", title: "First Option" },
              { const: "value2", title: "Second Option" },
              { const: "value3", title: "Third Option" },
            ],
          },
          legacyEnum: {
            type: "string",
            enum: ["opt1", "opt2", "opt3"],
            enumNames: ["Option One", "Option Two", "Option Three"],
          },
          untitledMulti: {
            type: "array",
            items: { type: "string", enum: ["option1", "option2", "option3"] },
          },
          titledMulti: {
            type: "array",
            items: {
              anyOf: [
                { const: "value1", title: "First Choice" },
                { const: "value2", title: "Second Choice" },
                { const: "value3", title: "Third Choice" },
              ],
            },
          },
        },
        required: [],
      },
    });
    return {
      content: [
        {
          type: "text",
          text: `Elicitation completed: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`,
        },
      ],
    };
  },
);

// ---- Resources (resources-* scenarios) ----

server.registerResource(
  "static-text",
  "test://static-text",
  { description: "A static text resource", mimeType: "text/plain" },
  async (uri) => ({
    contents: [{ uri: uri.href, mimeType: "text/plain", text: "This is the content of the static text resource." }],
  }),
);

server.registerResource(
  "static-binary",
  "test://static-binary",
  { description: "A static binary resource", mimeType: "image/png" },
  async (uri) => ({ contents: [{ uri: uri.href, mimeType: "image/png", blob: PNG }] }),
);

server.registerResource(
  "watched-resource",
  "test://watched-resource",
  { description: "A resource to subscribe to", mimeType: "text/plain" },
  async (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: "watched" }] }),
);

server.registerResource(
  "template",
  new ResourceTemplate("test://template/{id}/data", { list: undefined }),
  { description: "A resource template", mimeType: "application/json" },
  async (uri, { id }) => ({
    contents: [
      {
        uri: uri.href,
        mimeType: "application/json",
        text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
      },
    ],
  }),
);

const subscribed = new Set();
server.server.registerCapabilities({ resources: { subscribe: true, listChanged: true } });
server.server.setRequestHandler(SubscribeRequestSchema, async (req) => {
  subscribed.add(req.params.uri);
  return {};
});
server.server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
  subscribed.delete(req.params.uri);
  return {};
});

// ---- Prompts and completion (prompts-*, completion-complete) ----

server.registerPrompt(
  "test_simple_prompt",
  { description: "A simple prompt without arguments" },
  async () => ({
    messages: [{ role: "user", content: { type: "text", text: "This is a simple prompt for testing." } }],
  }),
);

server.registerPrompt(
  "test_prompt_with_arguments",
  {
    description: "A prompt with two arguments",
    argsSchema: {
      arg1: completable(z.string().describe("First test argument"), (value) =>
        ["paris", "park", "party", "test", "testing"].filter((v) => v.startsWith(value)),
      ),
      arg2: z.string().describe("Second test argument"),
    },
  },
  async ({ arg1, arg2 }) => ({
    messages: [
      { role: "user", content: { type: "text", text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` } },
    ],
  }),
);

server.registerPrompt(
  "test_prompt_with_embedded_resource",
  {
    description: "A prompt embedding a resource",
    argsSchema: { resourceUri: z.string().describe("URI of the resource to embed") },
  },
  async ({ resourceUri }) => ({
    messages: [
      {
        role: "user",
        content: {
          type: "resource",
          resource: { uri: resourceUri, mimeType: "text/plain", text: "Embedded resource content for testing." },
        },
      },
      { role: "user", content: { type: "text", text: "Please process the embedded resource above." } },
    ],
  }),
);

server.registerPrompt("test_prompt_with_image", { description: "A prompt with an image" }, async () => ({
  messages: [
    { role: "user", content: { type: "image", data: PNG, mimeType: "image/png" } },
    { role: "user", content: { type: "text", text: "Please analyze the image above." } },
  ],
}));

await server.connect(new StdioServerTransport());
