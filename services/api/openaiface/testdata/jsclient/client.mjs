// A real OpenAI client for the OpenAI face's tests: the official openai npm SDK (pinned in
// package.json, installed by scripts/testdeps; the test links TOOLMESH_OPENAI_SDK as the
// node_modules folder next to a copy of this file).
//
//   node client.mjs < plan.json
//
// The plan is one JSON object on stdin:
//
//   {"base_url": "http://127.0.0.1:PORT/v1", "api_key": "TOKEN", "steps": [STEP, ...]}
//
// and each STEP one of
//
//   {"op": "create", "params": {...}}  client.chat.completions.create(params), not streamed
//   {"op": "stream", "params": {...}}  client.chat.completions.stream(params): the SDK's own
//                                      helper, which reassembles text and tool-call deltas
//   {"op": "models"}                   client.models.list(), every page
//   {"op": "model", "id": "X"}         client.models.retrieve("X")
//
// with optional "max_retries" (default 0: the tests want the first answer, and the SDK would
// retry a 429 or 5xx) and "headers" (extra request headers). Steps run in order; each prints one
// line on stdout, as soon as it ends:
//
//   {"ok": true, "result": ..., "chunks": [...]}     chunks: stream only, every chunk the
//                                                     helper yielded, as the SDK parsed it
//   {"ok": false, "error": {...}, "chunks": [...]}   the SDK threw (see describe below)
//
// result is the returned object: the completion, for stream the one finalChatCompletion()
// assembled, the array of models for models, the model for model.
import OpenAI from "openai";

// The SDK's error classes a test may expect, most specific first.
const ERROR_CLASSES = [
  "AuthenticationError",
  "BadRequestError",
  "NotFoundError",
  "RateLimitError",
  "PermissionDeniedError",
  "InternalServerError",
  "APIConnectionError",
  "APIError",
];

// describe turns what the SDK threw into plain JSON (undefined fields are left out).
function describe(err) {
  return {
    class: err?.constructor?.name,
    status: err?.status,
    message: err?.message ?? String(err),
    type: err?.type,
    param: err?.param,
    code: err?.code,
    instanceof: ERROR_CLASSES.filter((n) => err instanceof OpenAI[n]),
  };
}

async function runStep(client, step) {
  const options = { maxRetries: step.max_retries ?? 0, headers: step.headers };
  switch (step.op) {
    case "create":
      return { result: await client.chat.completions.create(step.params, options) };
    case "stream": {
      const stream = client.chat.completions.stream(step.params, options);
      // Asked for before iterating, so that a failed stream is never an unhandled rejection;
      // the same failure is thrown by the loop below.
      const final = stream.finalChatCompletion();
      final.catch(() => {});
      const chunks = [];
      try {
        for await (const chunk of stream) chunks.push(chunk);
        return { result: await final, chunks };
      } catch (err) {
        if (err instanceof Error) err.chunks = chunks; // reported beside the error
        throw err;
      }
    }
    case "models": {
      const models = [];
      for await (const model of client.models.list(options)) models.push(model);
      return { result: models };
    }
    case "model":
      return { result: await client.models.retrieve(step.id, options) };
    default:
      throw new Error(`unknown op ${JSON.stringify(step.op)}`);
  }
}

let input = "";
for await (const part of process.stdin) input += part;
const plan = JSON.parse(input);
const client = new OpenAI({ baseURL: plan.base_url, apiKey: plan.api_key, maxRetries: 0 });

for (const step of plan.steps ?? []) {
  let line;
  try {
    line = { ok: true, ...(await runStep(client, step)) };
  } catch (err) {
    line = { ok: false, error: describe(err), ...(err?.chunks ? { chunks: err.chunks } : {}) };
  }
  process.stdout.write(JSON.stringify(line) + "\n");
}
