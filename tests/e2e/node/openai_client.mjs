// One request to `ft serve` through the official openai Node package, as a
// Node user's code sends it; prints what came back as one JSON line for
// tests/e2e/test_node_openai.py to check.
//
//   node openai_client.mjs BASE_URL MODEL tool_stream|json_schema PARAMS_JSON
import OpenAI from "openai";

const [baseURL, model, mode, paramsJson] = process.argv.slice(2);
const params = JSON.parse(paramsJson);
const client = new OpenAI({ baseURL, apiKey: "unused" });
const messages = [{ role: "user", content: params.prompt }];

if (mode === "tool_stream") {
  // A call forced to a named function, streamed: the deltas carry the
  // call's index, its id and name once, then pieces of its arguments.
  const stream = await client.chat.completions.create({
    model, messages, stream: true, temperature: 0, max_tokens: 200,
    stream_options: { include_usage: true },
    tools: params.tools,
    tool_choice: { type: "function", function: { name: params.name } }, parallel_tool_calls: false,
    performance_metrics: true,
  });
  const calls = [];
  let content = "", finish = null, chunks = 0, usage = null, metrics = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    if (chunk.metrics) metrics = chunk.metrics;
    for (const ch of chunk.choices) {
      content += ch.delta?.content ?? "";
      for (const tc of ch.delta?.tool_calls ?? []) {
        calls[tc.index] ??= { id: null, name: null, arguments: "" };
        if (tc.id) calls[tc.index].id = tc.id;
        if (tc.function?.name) calls[tc.index].name = tc.function.name;
        calls[tc.index].arguments += tc.function?.arguments ?? "";
      }
      finish = ch.finish_reason ?? finish;
    }
  }
  console.log(JSON.stringify({ content, calls, finish, chunks, usage, metrics }));
} else if (mode === "json_schema") {
  const r = await client.chat.completions.create({
    model, messages, temperature: 0.8, seed: params.seed, max_tokens: 300,
    response_format: { type: "json_schema", json_schema: { name: "answer", strict: true, schema: params.schema } },
  });
  const ch = r.choices[0];
  console.log(JSON.stringify({ content: ch.message.content, finish: ch.finish_reason, usage: r.usage }));
} else {
  console.error(`openai_client.mjs: unknown mode ${mode}`);
  process.exit(2);
}
