// Run with `npm test` (node --test) after `npm ci`. Uses the real model: loading takes well under
// a second and each test is bounded by a timeout.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, loadModel, MODEL, DIM } from "./server.mjs";

let server, base;

before(async () => {
  const model = await loadModel();
  server = createServer(model, { maxTokens: 64 });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(() => new Promise((resolve) => server.close(resolve)));

const post = async (body, path = "/v1/embeddings") => {
  const res = await fetch(base + path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
};

const norm = (v) => Math.hypot(...v);
const cos = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0) / (norm(a) * norm(b));

test("embeds a list in order, with the OpenAI response shape", { timeout: 20000 }, async () => {
  const texts = ["convert celsius to fahrenheit", "find the greatest common divisor", "temperature conversion from C to F"];
  const { status, body } = await post({ input: texts, model: "anything" });
  assert.equal(status, 200);
  assert.equal(body.object, "list");
  assert.equal(body.model, MODEL);
  assert.equal(body.data.length, 3);
  body.data.forEach((d, i) => {
    assert.equal(d.object, "embedding");
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, DIM);
    assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-3, `norm ${norm(d.embedding)}`);
  });
  assert.ok(body.usage.prompt_tokens > 0 && body.usage.total_tokens === body.usage.prompt_tokens);
  // A real sentence model: the paraphrase is nearer than the unrelated text.
  const [a, b, c] = body.data.map((d) => d.embedding);
  assert.ok(cos(a, c) > cos(a, b), `cos(para)=${cos(a, c)} cos(other)=${cos(a, b)}`);
});

test("a single string, base64, and concurrent requests agree", { timeout: 20000 }, async () => {
  const one = await post({ input: "compute a factorial", model: MODEL });
  assert.equal(one.status, 200);
  assert.equal(one.body.data.length, 1);
  const b64 = await post({ input: ["compute a factorial"], encoding_format: "base64" });
  const buf = Buffer.from(b64.body.data[0].embedding, "base64");
  const f = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
  assert.equal(f.length, DIM);
  assert.ok(Math.abs(f[7] - one.body.data[0].embedding[7]) < 1e-6);
  const many = await Promise.all(Array.from({ length: 6 }, () => post({ input: ["compute a factorial", "x"] })));
  for (const r of many) {
    assert.equal(r.status, 200);
    assert.ok(Math.abs(r.body.data[0].embedding[7] - one.body.data[0].embedding[7]) < 1e-5);
  }
});

test("bad requests are 400/404/405/413 naming the problem", { timeout: 20000 }, async () => {
  const cases = [
    ["not json", "{", 400, /not valid JSON/, null],
    ["no input", { model: "m" }, 400, /'input' is required/, "input"],
    ["input a number", { input: 3 }, 400, /string or an array of strings/, "input"],
    ["empty list", { input: [] }, 400, /must not be empty/, "input"],
    ["empty string", { input: ["ok", ""] }, 400, /'input\[1\]' is empty/, "input"],
    ["token array", { input: [[1, 2]] }, 400, /token arrays are not supported/, "input"],
    ["format", { input: "x", encoding_format: "int8" }, 400, /encoding_format/, "encoding_format"],
    ["dimensions", { input: "x", dimensions: 256 }, 400, /512 dimensions/, "dimensions"],
    ["too long", { input: "word ".repeat(200) }, 400, /tokens; this server accepts at most 64/, "input"],
    ["model not a string", { input: "x", model: 7 }, 400, /'model' must be a string/, "model"],
  ];
  for (const [name, body, status, msg, param] of cases) {
    const r = await post(body);
    assert.equal(r.status, status, name);
    assert.equal(r.body.error.type, "invalid_request_error", name);
    assert.match(r.body.error.message, msg, name);
    assert.equal(r.body.error.param, param, name);
  }
  const big = await post({ input: "a".repeat(9 << 20) });
  assert.equal(big.status, 413);
  assert.match(big.body.error.message, /larger than/);
  const nf = await post({ input: "x" }, "/v1/chat/completions");
  assert.equal(nf.status, 404);
  assert.match(nf.body.error.message, /POST \/v1\/embeddings/);
  const get = await fetch(base + "/v1/embeddings");
  assert.equal(get.status, 405);
  // The server still answers after all that.
  assert.equal((await post({ input: "still up" })).status, 200);
});

test("health", { timeout: 5000 }, async () => {
  const res = await fetch(base + "/health");
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { status: "ok", model: MODEL, dim: DIM });
});
