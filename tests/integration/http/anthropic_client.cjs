// Drives nielsd's HTTP socket with the official `@anthropic-ai/sdk` npm package (its fetch pointed at
// the Unix socket through undici's Agent), on a model with tools and reasoning (Qwen3's chat
// template, its generation prompt opening the <think> block unless thinking is disabled).
// Usage: node anthropic_client.cjs SOCKET_PATH MODEL_ID
// Prints one JSON object of what the client saw; exits 1 with the reason on the first mismatch (a
// response the SDK cannot parse throws, and fails the same way).
'use strict';
const assert = require('node:assert/strict');
const { Agent, fetch: undiciFetch } = require('undici');
const Anthropic = require('@anthropic-ai/sdk');

const [socketPath, modelId] = process.argv.slice(2);
const agent = new Agent({ connect: { socketPath } });
const client = new Anthropic({
  baseURL: 'http://localhost',
  apiKey: 'not-used-on-a-unix-socket',
  maxRetries: 0,
  timeout: 60000,
  fetch: (url, init) => undiciFetch(url, { ...init, dispatcher: agent }),
});

const weatherTool = {
  name: 'get_weather',
  description: 'The current weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

async function expectError(promise, status, ErrorClass) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof Anthropic.APIError, `not an APIError: ${error}`);
    assert.ok(error instanceof ErrorClass, `not a ${ErrorClass.name}: ${error.constructor.name}`);
    assert.equal(error.status, status, `status ${error.status}: ${error.message}`);
    // Anthropic's error shape, parsed by the SDK.
    assert.equal(error.error.type, 'error', JSON.stringify(error.error));
    assert.equal(typeof error.error.error.message, 'string');
    return error;
  }
  throw new Error(`expected an error with status ${status}`);
}

function textOf(message) {
  return message.content.filter((block) => block.type === 'text').map((block) => block.text).join('');
}

async function main() {
  const seen = {};
  const request = {
    model: modelId,
    max_tokens: 12,
    temperature: 0,
    system: 'You answer briefly.',
    thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'Say something about sockets.' }],
  };
  const plain = await client.messages.create(request);
  assert.equal(plain.type, 'message');
  assert.equal(plain.role, 'assistant');
  assert.equal(plain.model, modelId);
  assert.ok(plain.id.startsWith('msg'), plain.id);
  assert.ok(['end_turn', 'max_tokens'].includes(plain.stop_reason), plain.stop_reason);
  assert.equal(plain.stop_sequence, null);
  assert.ok(plain.content.length >= 1);
  assert.ok(plain.usage.input_tokens > 0);
  assert.ok(plain.usage.output_tokens > 0 && plain.usage.output_tokens <= 12, JSON.stringify(plain.usage));
  assert.equal(typeof plain.usage.cache_read_input_tokens, 'number');
  seen.plain = { text: textOf(plain), stop_reason: plain.stop_reason, usage: plain.usage };

  // The same greedy request streamed through the SDK's MessageStream (which assembles the named
  // events into a message): the same text, and the prompt's prefix from the cache.
  const stream = client.messages.stream(request);
  let streamedText = '';
  const eventTypes = new Set();
  stream.on('text', (delta) => { streamedText += delta; });
  stream.on('streamEvent', (event) => { eventTypes.add(event.type); });
  const streamed = await stream.finalMessage();
  assert.equal(streamedText, textOf(plain));
  assert.equal(textOf(streamed), textOf(plain));
  assert.equal(streamed.stop_reason, plain.stop_reason);
  assert.equal(streamed.usage.output_tokens, plain.usage.output_tokens);
  assert.ok(streamed.usage.cache_read_input_tokens > 0, `nothing read from the cache: ${JSON.stringify(streamed.usage)}`);
  assert.equal(streamed.usage.input_tokens + streamed.usage.cache_read_input_tokens,
               plain.usage.input_tokens + plain.usage.cache_read_input_tokens);
  for (const type of ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop',
                      'message_delta', 'message_stop']) {
    assert.ok(eventTypes.has(type), `no ${type} event (saw ${[...eventTypes]})`);
  }
  seen.stream = { text: streamedText, events: [...eventTypes], usage: streamed.usage };

  // Raw `stream: true`: the SDK's iterator of events.
  const raw = await client.messages.create({ ...request, stream: true });
  let rawText = '';
  let rawStop = null;
  for await (const event of raw) {
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') rawText += event.delta.text;
    if (event.type === 'message_delta') rawStop = event.delta.stop_reason;
  }
  assert.equal(rawText, textOf(plain));
  assert.equal(rawStop, plain.stop_reason);

  // A stop sequence from the answer's second half: the SDK reports it, the text ends before it.
  const text = textOf(plain);
  const match = /[A-Za-z0-9]{2}/.exec(text.slice(Math.floor(text.length / 2)));
  assert.ok(match, `no two ASCII letters in the second half of '${text}'`);
  const stopSequence = match[0];
  const stopped = await client.messages.create({ ...request, stop_sequences: [stopSequence] });
  assert.equal(stopped.stop_reason, 'stop_sequence', JSON.stringify(stopped));
  assert.equal(stopped.stop_sequence, stopSequence);
  assert.equal(textOf(stopped), text.slice(0, text.indexOf(stopSequence)));
  seen.stop_sequence = { stop: stopSequence, text: textOf(stopped) };

  // A tool round trip: the call is forced, its result sent back as a tool_result block.
  const question = { role: 'user', content: 'What is the weather in Paris?' };
  const call = await client.messages.create({
    model: modelId, max_tokens: 64, temperature: 0, tools: [weatherTool],
    tool_choice: { type: 'tool', name: 'get_weather' }, thinking: { type: 'disabled' }, messages: [question],
  });
  assert.equal(call.stop_reason, 'tool_use', JSON.stringify(call));
  const toolUse = call.content.find((block) => block.type === 'tool_use');
  assert.ok(toolUse, JSON.stringify(call.content));
  assert.equal(toolUse.name, 'get_weather');
  assert.equal(typeof toolUse.id, 'string');
  assert.ok(toolUse.id.length > 0);
  assert.equal(typeof toolUse.input.city, 'string', JSON.stringify(toolUse.input));

  // The same call streamed: the SDK assembles the input from input_json_delta events.
  const callStream = client.messages.stream({
    model: modelId, max_tokens: 64, temperature: 0, tools: [weatherTool],
    tool_choice: { type: 'tool', name: 'get_weather' }, thinking: { type: 'disabled' }, messages: [question],
  });
  let partialJson = '';
  callStream.on('inputJson', (partial) => { partialJson += partial; });
  const streamedCall = await callStream.finalMessage();
  const streamedUse = streamedCall.content.find((block) => block.type === 'tool_use');
  assert.ok(streamedUse, JSON.stringify(streamedCall.content));
  assert.equal(streamedCall.stop_reason, 'tool_use');
  assert.equal(streamedUse.name, 'get_weather');
  assert.deepEqual(streamedUse.input, toolUse.input);
  assert.deepEqual(JSON.parse(partialJson), toolUse.input);

  const answer = await client.messages.create({
    model: modelId, max_tokens: 8, temperature: 0, tools: [weatherTool], thinking: { type: 'disabled' },
    messages: [question, { role: 'assistant', content: call.content },
               { role: 'user', content: [{ type: 'tool_result', tool_use_id: toolUse.id,
                                           content: [{ type: 'text', text: '{"temperature_c": 21}' }] }] }],
  });
  assert.equal(answer.type, 'message');
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(answer.stop_reason), answer.stop_reason);
  assert.ok(answer.usage.input_tokens + answer.usage.cache_read_input_tokens >
            call.usage.input_tokens + call.usage.cache_read_input_tokens);
  seen.tools = { input: toolUse.input, answer_stop_reason: answer.stop_reason, answer_text: textOf(answer),
                 answer_usage: answer.usage };

  // Reasoning: a thinking block first, streamed as thinking deltas.
  const thinkingRequest = { ...request, thinking: { type: 'enabled', budget_tokens: 1024 }, max_tokens: 8 };
  const reasoned = await client.messages.create(thinkingRequest);
  assert.equal(reasoned.content[0].type, 'thinking', JSON.stringify(reasoned.content));
  assert.ok(reasoned.content[0].thinking.length > 0);
  const thinkingStream = client.messages.stream(thinkingRequest);
  let streamedThinking = '';
  thinkingStream.on('thinking', (delta) => { streamedThinking += delta; });
  const streamedReasoned = await thinkingStream.finalMessage();
  assert.equal(streamedThinking, reasoned.content[0].thinking);
  assert.deepEqual(streamedReasoned.content.map((block) => block.type), reasoned.content.map((block) => block.type));
  assert.equal(streamedReasoned.content[0].thinking, reasoned.content[0].thinking);
  seen.thinking = { thinking: reasoned.content[0].thinking, blocks: reasoned.content.map((block) => block.type) };

  // Errors, as the SDK's own classes.
  const unknownModel = await expectError(client.messages.create({ ...request, model: 'claude-opus-4-1' }), 404,
                                         Anthropic.NotFoundError);
  assert.equal(unknownModel.error.error.type, 'not_found_error');
  const badField = await expectError(client.messages.create({ ...request, temperature: 'warm' }), 400,
                                     Anthropic.BadRequestError);
  assert.equal(badField.error.error.type, 'invalid_request_error');
  assert.ok(badField.error.error.message.includes('temperature'), badField.error.error.message);
  const badBlock = await expectError(client.messages.create({
    ...request, messages: [{ role: 'user', content: [{ type: 'text', text: 42 }] }] }), 400, Anthropic.BadRequestError);
  assert.ok(badBlock.error.error.message.includes('messages[0].content[0].text'), badBlock.error.error.message);
  const oversized = await expectError(client.messages.create({
    ...request, messages: [{ role: 'user', content: 'x'.repeat(5 * 1024 * 1024) }] }), 413, Anthropic.APIError);
  assert.equal(oversized.error.error.type, 'request_too_large');
  seen.errors = { unknown_model: unknownModel.error.error.message, bad_field: badField.error.error.message,
                  bad_block: badBlock.error.error.message, oversized: oversized.error.error.message };
  // Still served after the refusals.
  const again = await client.messages.create({ ...request, max_tokens: 2 });
  assert.equal(again.type, 'message');
  console.log(JSON.stringify(seen));
}

main().then(() => agent.close()).catch((error) => {
  console.error(`anthropic client: ${error && error.stack ? error.stack : error}`);
  process.exit(1);
});
