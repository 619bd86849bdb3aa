// The official `@anthropic-ai/sdk` package against a running `hibana serve` (HIBANA_BASE_URL).
import { test } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({
  baseURL: process.env.HIBANA_BASE_URL, apiKey: process.env.HIBANA_API_KEY || "none", maxRetries: 0,
});
const model = (await (await fetch(process.env.HIBANA_BASE_URL + "/v1/models")).json()).data[0].id;

// Forced calls follow the tool's schema: with a closed set of cities and no other keys, even the
// tiny fixture model's call ends within a few tokens (a free string could run to max_tokens).
const cities = ["Oslo", "Paris", "Rome"];
const weatherParameters = {
  type: "object", properties: { city: { type: "string", enum: cities } }, required: ["city"],
  additionalProperties: false,
};
const weatherTool = {
  name: "get_weather", description: "Current weather for a city",
  input_schema: weatherParameters,
};

test("message: shape and usage", async () => {
  const m = await client.messages.create({
    model, max_tokens: 6, system: "You are terse.", messages: [{ role: "user", content: "Hello" }],
  });
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.ok(m.id.startsWith("msg_"));
  assert.equal(m.stop_reason, "max_tokens");
  assert.equal(m.usage.output_tokens, 6);
  assert.ok(m.usage.input_tokens > 0);
  assert.equal(typeof m.usage.cache_read_input_tokens, "number");
});

test("streaming: the exact event sequence", async () => {
  const stream = client.messages.stream({
    model, max_tokens: 10, messages: [{ role: "user", content: "def f():" }],
  });
  const types = [];
  for await (const ev of stream) types.push(ev.type);
  const final = await stream.finalMessage();
  assert.equal(types[0], "message_start");
  assert.equal(types.at(-1), "message_stop");
  assert.equal(types.at(-2), "message_delta");
  const body = types.filter((t) => t !== "ping");
  assert.equal(body[1], "content_block_start");
  assert.ok(body.includes("content_block_delta"));
  assert.equal(body.at(-3), "content_block_stop");
  assert.equal(final.usage.output_tokens, 10);
});

test("forced tool use round trip with tool_result", async () => {
  const messages = [{ role: "user", content: "Weather in Rome?" }];
  const m = await client.messages.create({
    model, max_tokens: 60, tools: [weatherTool], tool_choice: { type: "tool", name: "get_weather" }, messages,
  });
  assert.equal(m.stop_reason, "tool_use");
  const use = m.content.find((b) => b.type === "tool_use");
  assert.ok(use);
  assert.equal(use.name, "get_weather");
  assert.ok(cities.includes(use.input.city), JSON.stringify(use.input));
  messages.push({ role: "assistant", content: m.content });
  messages.push({ role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "21 C, sunny" }] });
  const m2 = await client.messages.create({ model, max_tokens: 8, tools: [weatherTool], messages });
  assert.ok(["end_turn", "max_tokens", "tool_use", "stop_sequence"].includes(m2.stop_reason));
});

test("stop_sequences report stop_sequence", async () => {
  const m = await client.messages.create({
    model, max_tokens: 80, temperature: 0, stop_sequences: ["\n"],
    messages: [{ role: "user", content: "Write three lines of Python." }],
  });
  if (m.stop_reason === "stop_sequence") assert.equal(m.stop_sequence, "\n");
  assert.ok(!m.content.map((b) => b.text || "").join("").includes("\n"));
});

test("count_tokens returns only input_tokens", async () => {
  const r = await client.messages.countTokens({ model, messages: [{ role: "user", content: "Hello there" }] });
  assert.ok(r.input_tokens > 0);
  assert.equal(r.output_tokens, undefined);
});

test("Claude Code's extra fields are accepted", async () => {
  const m = await client.messages.create({
    model, max_tokens: 4,
    system: [{ type: "text", text: "x-anthropic-billing-header: cc_version=2.1.0.abc; cc_entrypoint=cli; cch=12345;" },
             { type: "text", text: "You are Claude Code.", cache_control: { type: "ephemeral" } }],
    messages: [{ role: "user", content: [{ type: "text", text: "hi", cache_control: { type: "ephemeral" } }] },
               { role: "system", content: "Reminder: be brief." },
               { role: "assistant", content: "Hello." },
               { role: "user", content: "again" }],
    thinking: { type: "adaptive" }, metadata: { user_id: JSON.stringify({ device_id: "d", session_id: "s" }) },
    context_management: { edits: [] }, output_config: { effort: "high" },
  }, { headers: { "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,made-up-beta" },
       query: { beta: "true" } });
  assert.equal(m.type, "message");
});

test("errors come in Anthropic's shape", async () => {
  await assert.rejects(
    client.messages.create({ model, max_tokens: 0, messages: [{ role: "user", content: "x" }] }),
    (e) => e.status === 400 && e.error?.type === "error" && e.error?.error?.type === "invalid_request_error");
});
