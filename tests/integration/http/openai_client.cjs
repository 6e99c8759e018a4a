// Drives nielsd's HTTP front with the official `openai` npm package: on the Unix socket (its fetch
// pointed at the socket through undici's Agent), or over loopback TCP with an API key (the client
// as anyone would use it: base URL and key, its own fetch).
// Usage: node openai_client.cjs SOCKET_PATH MODEL_ID CONTEXT
//        node openai_client.cjs http://127.0.0.1:PORT/v1 MODEL_ID CONTEXT API_KEY
// Prints one JSON object of what the client saw; exits 1 with the reason on the first mismatch.
'use strict';
const assert = require('node:assert/strict');
const { Agent, fetch: undiciFetch } = require('undici');
const OpenAI = require('openai');

const [where, modelId, contextText, apiKey] = process.argv.slice(2);
const overTcp = where.startsWith('http://');
const agent = overTcp ? null : new Agent({ connect: { socketPath: where } });
const client = overTcp
  ? new OpenAI({ baseURL: where, apiKey, maxRetries: 0, timeout: 60000 })
  : new OpenAI({
    baseURL: 'http://localhost/v1',
    apiKey: 'not-used-on-a-unix-socket',
    maxRetries: 0,
    timeout: 60000,
    fetch: (url, init) => undiciFetch(url, { ...init, dispatcher: agent }),
  });

async function expectError(promise, status) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof OpenAI.APIError, `not an APIError: ${error}`);
    assert.equal(error.status, status, `status ${error.status}: ${error.message}`);
    return error;
  }
  throw new Error(`expected an error with status ${status}`);
}

async function main() {
  const seen = {};
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, modelId);
  assert.equal(models.data[0].context_length, Number(contextText));
  seen.models = models.data.map((m) => m.id);

  const messages = [
    { role: 'system', content: 'You answer briefly.' },
    { role: 'user', content: 'Say something about sockets.' },
  ];
  const plain = await client.chat.completions.create({ model: modelId, messages, temperature: 0, max_tokens: 12 });
  assert.equal(plain.object, 'chat.completion');
  assert.equal(plain.choices.length, 1);
  assert.equal(plain.choices[0].message.role, 'assistant');
  assert.equal(typeof plain.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(plain.choices[0].finish_reason));
  assert.ok(plain.usage.prompt_tokens > 0);
  assert.ok(plain.usage.completion_tokens > 0 && plain.usage.completion_tokens <= 12);
  assert.equal(plain.usage.total_tokens, plain.usage.prompt_tokens + plain.usage.completion_tokens);
  seen.chat = { content: plain.choices[0].message.content, finish_reason: plain.choices[0].finish_reason,
                usage: plain.usage };

  // The same greedy request streamed: the deltas join to the same text.
  const stream = await client.chat.completions.create({
    model: modelId, messages, temperature: 0, max_tokens: 12, stream: true, stream_options: { include_usage: true },
  });
  let streamed = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.content) streamed += choice.delta.content;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(streamed, plain.choices[0].message.content);
  assert.equal(finish, plain.choices[0].finish_reason);
  assert.ok(usage !== null, 'no usage chunk with include_usage');
  assert.equal(usage.completion_tokens, plain.usage.completion_tokens);
  // The second request re-sent the same conversation: its prompt came from the prefix cache.
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0, 'nothing reused from the prefix cache');
  seen.chat_stream = { chunks, content: streamed, usage };

  // Logprobs as the client types them: per token its text, logprob, bytes and 2 alternatives; the
  // same entries streamed; the bytes of the tokens join to the content.
  const withLogprobs = await client.chat.completions.create({
    model: modelId, messages, temperature: 0, max_tokens: 12, logprobs: true, top_logprobs: 2,
  });
  const entries = withLogprobs.choices[0].logprobs.content;
  assert.ok(Array.isArray(entries) && entries.length === withLogprobs.usage.completion_tokens -
            (withLogprobs.choices[0].finish_reason === 'stop' ? 1 : 0), 'one entry per token of the reply');
  for (const entry of entries) {
    assert.equal(typeof entry.token, 'string');
    assert.ok(entry.logprob <= 0);
    assert.ok(Array.isArray(entry.bytes));
    assert.equal(entry.top_logprobs.length, 2);
    assert.ok(entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob);
    // (The best of the model's distribution may be a role token the chat bans: no bytes.)
    assert.ok(entry.top_logprobs[0].logprob >= entry.logprob);
  }
  const joined = Buffer.from(entries.flatMap((e) => e.bytes)).toString('utf8');
  assert.equal(joined, withLogprobs.choices[0].message.content);
  const logprobStream = await client.chat.completions.create({
    model: modelId, messages, temperature: 0, max_tokens: 12, logprobs: true, top_logprobs: 2, stream: true,
  });
  const streamedEntries = [];
  for await (const chunk of logprobStream) {
    for (const choice of chunk.choices) {
      if (choice.logprobs && choice.logprobs.content) streamedEntries.push(...choice.logprobs.content);
    }
  }
  assert.deepEqual(streamedEntries, entries);
  seen.logprobs = { tokens: entries.length, first: entries[0] };

  // Two choices, seeded: the client reads both, indexed 0 and 1; streamed, its chunks name their
  // choice and join to the same two texts.
  const two = await client.chat.completions.create({ model: modelId, messages, temperature: 1, seed: 5, n: 2,
                                                     max_tokens: 8 });
  assert.equal(two.choices.length, 2);
  assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
  const firstAlone = await client.chat.completions.create({ model: modelId, messages, temperature: 1, seed: 5,
                                                            max_tokens: 8 });
  assert.equal(two.choices[0].message.content, firstAlone.choices[0].message.content);
  assert.equal(two.usage.prompt_tokens, firstAlone.usage.prompt_tokens);
  // Both choices' tokens: more than the first's alone (each choice makes at least one), at most 2 x 8.
  assert.ok(two.usage.completion_tokens > firstAlone.usage.completion_tokens && two.usage.completion_tokens <= 16,
            `completion_tokens ${two.usage.completion_tokens}`);
  const twoStream = await client.chat.completions.create({ model: modelId, messages, temperature: 1, seed: 5, n: 2,
                                                           max_tokens: 8, stream: true });
  const twoStreamed = ['', ''];
  for await (const chunk of twoStream) {
    for (const choice of chunk.choices) {
      assert.ok(choice.index === 0 || choice.index === 1, `choice index ${choice.index}`);
      if (choice.delta.content) twoStreamed[choice.index] += choice.delta.content;
    }
  }
  assert.deepEqual(twoStreamed, two.choices.map((c) => c.message.content));
  const tooMany = await expectError(client.chat.completions.create({ model: modelId, messages, n: 9 }), 400);
  assert.equal(tooMany.param, 'n');
  seen.two_choices = two.choices.map((c) => c.message.content);

  // A conversation of several turns goes to the daemon as messages.
  const multi = await client.chat.completions.create({
    model: modelId, temperature: 0, max_tokens: 4,
    messages: [...messages, { role: 'assistant', content: plain.choices[0].message.content },
               { role: 'user', content: 'And more?' }],
  }).then((r) => ({ ok: true, content: r.choices[0].message.content }),
          (e) => ({ ok: false, status: e.status, message: e.message }));
  seen.multi_turn = multi;

  const completion = await client.completions.create({ model: modelId, prompt: 'Once upon a time', max_tokens: 8,
                                                       temperature: 0 });
  assert.equal(completion.object, 'text_completion');
  assert.equal(typeof completion.choices[0].text, 'string');
  assert.ok(completion.usage.completion_tokens > 0);
  const completionStream = await client.completions.create({ model: modelId, prompt: 'Once upon a time',
                                                             max_tokens: 8, temperature: 0, stream: true });
  let completionText = '';
  for await (const chunk of completionStream) completionText += chunk.choices[0]?.text ?? '';
  assert.equal(completionText, completion.choices[0].text);
  seen.completion = { text: completion.choices[0].text, finish_reason: completion.choices[0].finish_reason };

  const unknownModel = await expectError(client.chat.completions.create({ model: 'gpt-4o', messages }), 404);
  assert.equal(unknownModel.code, 'model_not_found');
  const badField = await expectError(
    client.chat.completions.create({ model: modelId, messages, temperature: 'warm' }), 400);
  assert.equal(badField.param, 'temperature');
  const badMessage = await expectError(
    client.chat.completions.create({ model: modelId, messages: [{ role: 'user', content: 42 }] }), 400);
  assert.equal(badMessage.param, 'messages[0].content');
  const oversized = await expectError(client.chat.completions.create({
    model: modelId, messages: [{ role: 'user', content: 'x'.repeat(5 * 1024 * 1024) }] }), 413);
  seen.errors = { unknown_model: unknownModel.message, bad_field: badField.message, bad_message: badMessage.message,
                  oversized: oversized.message };
  if (overTcp) {
    // Another key is refused in OpenAI's shape, which the client reads as an AuthenticationError.
    const stranger = new OpenAI({ baseURL: where, apiKey: 'not-a-key-of-this-daemon', maxRetries: 0 });
    const unauthorized = await expectError(stranger.chat.completions.create({ model: modelId, messages }), 401);
    assert.ok(unauthorized instanceof OpenAI.AuthenticationError, unauthorized.constructor.name);
    assert.equal(unauthorized.code, 'invalid_api_key');
    seen.errors.unauthorized = unauthorized.message;
  }
  // Still served after the refusals.
  const again = await client.models.list();
  assert.equal(again.data[0].id, modelId);
  console.log(JSON.stringify(seen));
}

main().then(() => agent && agent.close()).catch((error) => {
  console.error(`openai client: ${error && error.stack ? error.stack : error}`);
  process.exit(1);
});
