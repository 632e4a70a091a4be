// A real MCP client for the MCP face's tests: the official TypeScript SDK over streamable HTTP.
//
//   node client.mjs URL
//
// MCP_TOKEN, when set, is sent as a bearer token. The script talks to its test over stdio, one
// JSON object a line: it prints {"event":"listed","tools":[...]} and waits for a line "change"
// on stdin (the test then changes the mesh's catalog), waits for
// notifications/tools/list_changed, lists again, calls CALL_TOOL with CALL_ARGS (JSON), calls
// PROGRESS_TOOL with PROGRESS_ARGS asking for progress and reports the progress it heard, then
// starts SLOW_TOOL with SLOW_ARGS and cancels it after CANCEL_AFTER_MS, and reports each step.
// Any failure is printed as {"event":"error",...} and exits 1.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import readline from "node:readline";

const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const fail = (step, e) => {
  say({ event: "error", step, message: String(e && e.message ? e.message : e) });
  process.exit(1);
};

const url = new URL(process.argv[2]);
const headers = process.env.MCP_TOKEN ? { Authorization: `Bearer ${process.env.MCP_TOKEN}` } : {};
const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers } });
const client = new Client({ name: "toolmesh-ts-test", version: "0.0.0" });

let changed = 0;
let onChange = () => {};
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  changed++;
  onChange();
});

async function listAll() {
  const tools = [];
  let cursor;
  let pages = 0;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    tools.push(...page.tools);
    cursor = page.nextCursor;
    pages++;
  } while (cursor && pages < 1000);
  return tools;
}

const lines = readline.createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve) => lines.once("line", resolve));

try {
  await client.connect(transport);
} catch (e) {
  fail("connect", e);
}
say({ event: "connected", protocol: transport.protocolVersion ?? null, session: transport.sessionId ?? null });

let tools;
try {
  tools = await listAll();
} catch (e) {
  fail("list", e);
}
say({ event: "listed", tools: tools.map((t) => ({ name: t.name, id: t._meta?.["toolmesh/id"] ?? null })) });

if ((await nextLine()) !== "change") fail("protocol", "expected the line change");
const before = changed;
const waited = await new Promise((resolve) => {
  if (changed > before) return resolve(true);
  const timer = setTimeout(() => resolve(false), 30000);
  onChange = () => {
    clearTimeout(timer);
    resolve(true);
  };
});
if (!waited) fail("list_changed", "no notifications/tools/list_changed within 30 s");
try {
  tools = await listAll();
} catch (e) {
  fail("relist", e);
}
say({ event: "list_changed", tools: tools.map((t) => t.name) });

try {
  const res = await client.callTool({ name: process.env.CALL_TOOL, arguments: JSON.parse(process.env.CALL_ARGS || "{}") });
  say({ event: "called", isError: !!res.isError, content: res.content });
} catch (e) {
  fail("call", e);
}

if (process.env.PROGRESS_TOOL) {
  const reports = [];
  try {
    // onprogress makes the SDK send a progress token with the call.
    const res = await client.callTool(
      { name: process.env.PROGRESS_TOOL, arguments: JSON.parse(process.env.PROGRESS_ARGS || "{}") },
      undefined,
      { onprogress: (p) => reports.push(p) },
    );
    say({ event: "progress", isError: !!res.isError, content: res.content, reports });
  } catch (e) {
    fail("progress", e);
  }
}

const ac = new AbortController();
const start = Date.now();
setTimeout(() => ac.abort(), Number(process.env.CANCEL_AFTER_MS || 500));
try {
  await client.callTool({ name: process.env.SLOW_TOOL, arguments: JSON.parse(process.env.SLOW_ARGS || "{}") }, undefined, { signal: ac.signal });
  fail("cancel", "the slow call finished instead of being cancelled");
} catch (e) {
  say({ event: "cancelled", ms: Date.now() - start, message: String(e.message || e) });
}

await client.close();
say({ event: "done", notifications: changed });
process.exit(0);
