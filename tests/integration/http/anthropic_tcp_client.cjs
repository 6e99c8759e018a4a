// Drives nielsd's loopback TCP listener with the official `@anthropic-ai/sdk` npm package as anyone
// would use it: a base URL and an API key (which it sends as x-api-key), its own fetch.
// Usage: node anthropic_tcp_client.cjs http://127.0.0.1:PORT MODEL_ID API_KEY
// Prints one JSON object of what the client saw; exits 1 with the reason on the first mismatch.
'use strict';
const assert = require('node:assert/strict');
const Anthropic = require('@anthropic-ai/sdk');

const [baseURL, modelId, apiKey] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });

async function main() {
  const seen = {};
  const request = { model: modelId, max_tokens: 8, temperature: 0,
                    messages: [{ role: 'user', content: 'Say something about ports.' }] };
  const message = await client.messages.create(request);
  assert.equal(message.type, 'message');
  assert.equal(message.role, 'assistant');
  const text = message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  assert.ok(message.usage.output_tokens > 0 && message.usage.output_tokens <= 8);
  seen.message = { type: message.type, text, output_tokens: message.usage.output_tokens,
                   stop_reason: message.stop_reason };

  // The same greedy request streamed: the text deltas join to the same text.
  let streamed = '';
  const stream = client.messages.stream(request);
  stream.on('text', (delta) => { streamed += delta; });
  await stream.finalMessage();
  seen.streamed_text = streamed;

  // Another key: 401 in Anthropic's shape, which the SDK reads as an AuthenticationError.
  const stranger = new Anthropic({ baseURL, apiKey: 'not-a-key-of-this-daemon', maxRetries: 0 });
  try {
    await stranger.messages.create(request);
    throw new Error('a request with an unknown key was served');
  } catch (error) {
    assert.ok(error instanceof Anthropic.AuthenticationError, `not an AuthenticationError: ${error}`);
    seen.unauthorized = { status: error.status, type: error.error.error.type };
  }
  console.log(JSON.stringify(seen));
}

main().catch((error) => {
  console.error(`anthropic client: ${error && error.stack ? error.stack : error}`);
  process.exit(1);
});
