// The official `openai` package against a running `hibana serve` (HIBANA_BASE_URL).
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = process.env.HIBANA_BASE_URL + "/v1";
const client = new OpenAI({ baseURL, apiKey: process.env.HIBANA_API_KEY || "none", maxRetries: 0 });
const models = await client.models.list();
const model = models.data[0].id;

// Forced calls follow the tool's schema: with a closed set of cities and no other keys, even the
// tiny fixture model's call ends within a few tokens (a free string could run to max_tokens).
const cities = ["Oslo", "Paris", "Rome"];
const weatherParameters = {
  type: "object", properties: { city: { type: "string", enum: cities } }, required: ["city"],
  additionalProperties: false,
};
const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather for a city",
    parameters: weatherParameters,
  },
};

test("models list names the served model", () => {
  assert.ok(model.length > 0);
  assert.equal(models.data[0].object, "model");
});

test("chat completion: shape, usage, length finish", async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Write a Python function." }], max_tokens: 5,
  });
  assert.equal(r.object, "chat.completion");
  assert.ok(r.id.length > 0);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 5);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test("streaming: same id, role first, usage chunk last, text equals the parts", async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "def add(a, b):" }], max_tokens: 12, stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.ok(chunks.length >= 3);
  const ids = new Set(chunks.map((c) => c.id));
  assert.equal(ids.size, 1);
  assert.equal(chunks[0].choices[0].delta.role, "assistant");
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.equal(usage.usage.completion_tokens, 12);
  const finish = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason);
  assert.equal(finish.length, 1);
  assert.equal(finish[0].choices[0].finish_reason, "length");
  for (const c of chunks.slice(1)) {
    if (c.choices.length) assert.equal(c.choices[0].delta.role, undefined);
  }
  for (const c of chunks) {
    if (c.choices.length && c.choices[0].delta.content !== undefined && c.choices[0].delta.content !== null) {
      assert.notEqual(c.choices[0].delta.content, "", "no empty content deltas");
    }
  }
});

test("stop sequences are honoured and removed", async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "List three Unix commands, one per line." }],
    max_tokens: 60, stop: ["\n"], temperature: 0,
  });
  assert.ok(!r.choices[0].message.content.includes("\n"));
});

test("forced tool call round trip", async () => {
  const messages = [{ role: "user", content: "What is the weather in Paris?" }];
  const r = await client.chat.completions.create({
    model, messages, tools: [weatherTool], max_tokens: 60,
    tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  const msg = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  assert.equal(msg.tool_calls.length, 1);
  const call = msg.tool_calls[0];
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "get_weather");
  const args = JSON.parse(call.function.arguments);
  assert.ok(cities.includes(args.city), call.function.arguments);
  messages.push(msg, { role: "tool", tool_call_id: call.id, content: "{\"temp_c\": 21}" });
  const r2 = await client.chat.completions.create({ model, messages, tools: [weatherTool], max_tokens: 8 });
  assert.ok(["stop", "length", "tool_calls"].includes(r2.choices[0].finish_reason));
});

test("streamed forced tool call: id and name first, arguments concatenate to JSON", async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Weather in Oslo?" }], tools: [weatherTool],
    tool_choice: "required", max_tokens: 60, stream: true,
  });
  let args = "", name = "", id = "", finish = "";
  for await (const c of stream) {
    if (!c.choices.length) continue;
    for (const tc of c.choices[0].delta.tool_calls || []) {
      if (tc.id) { assert.equal(id, ""); id = tc.id; name = tc.function.name; }
      if (tc.function?.arguments) args += tc.function.arguments;
    }
    if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  assert.ok(id.length > 0);
  assert.equal(name, "get_weather");
  assert.ok(cities.includes(JSON.parse(args).city), args);
  assert.equal(finish, "tool_calls");
});

test("n, seed, logprobs", async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "import" }], max_tokens: 4, n: 2, seed: 7,
    temperature: 1, logprobs: true, top_logprobs: 2,
  });
  assert.equal(r.choices.length, 2);
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 4);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(Array.isArray(t.bytes));
  }
  assert.equal(lp.map((t) => t.token).join(""), r.choices[0].message.content);
  const again = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "import" }], max_tokens: 4, seed: 7, temperature: 1,
  });
  const once = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "import" }], max_tokens: 4, seed: 7, temperature: 1,
  });
  assert.equal(again.choices[0].message.content, once.choices[0].message.content);
});

test("errors come in OpenAI's shape", async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: "user", content: 12 }] }),
    (e) => e.status === 400 && typeof e.error?.message === "string");
  const huge = "word ".repeat(200000);
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: "user", content: huge }] }),
    (e) => e.status === 400 && /context/i.test(e.message));
});

test("a cancelled stream does not block the next request", async () => {
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { model, messages: [{ role: "user", content: "Write a long story." }], max_tokens: 4000, stream: true },
    { signal: controller.signal });
  let n = 0;
  try {
    for await (const c of stream) { if (++n === 3) controller.abort(); }
  } catch (e) { /* aborted */ }
  const t0 = Date.now();
  const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  assert.equal(r.usage.completion_tokens, 2);
  assert.ok(Date.now() - t0 < 10000);
});

test("legacy completions", async () => {
  const r = await client.completions.create({ model, prompt: "def main():", max_tokens: 6 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.usage.completion_tokens, 6);
  assert.equal(typeof r.choices[0].text, "string");
});
