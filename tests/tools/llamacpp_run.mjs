// Runs an exported GGUF in real llama.cpp (node-llama-cpp 3.21.1's prebuilt libllama, CPU only, the
// packages of scripts/install_references.sh) and prints what export_gguf_test.py compares with
// nielsd: greedy continuations with the logits of every step, tokenizations, and the chat template
// rendered from the GGUF's own metadata.
//
//   node llamacpp_run.mjs NODE_MODULES_DIR REQUEST.json RESULT.json
//
// REQUEST: {"gguf": PATH, "kv_type": "F16" | "F32", "flash_attention": "auto" | false,
//           "raw":  [{"prompt": [ids], "max_new": N}],                        greedy from token ids
//           "chat": [{"messages": [{"role","content"}], "max_new": N,          render the GGUF's
//                     "banned": [ids], "stop": id}],                           tokenizer.chat_template
//           "texts": ["..."]}                                                  tokenize as plain text
// RESULT: {"raw": [{"tokens": [ids], "logits": [[V numbers or null] per generated token]}],
//          "chat": [{"rendered": text, "prompt": [ids], "tokens": [ids], "logits": [[..]]}],
//          "texts": [[ids]], "metadata": {...}}
// Greedy = llama.cpp's own sampler at temperature 0; "banned" ids get llama.cpp's "never" bias.
//
// Logits: node-llama-cpp 3.21.1 hands out no raw logits, only its sampler's probabilities; with
// temperature 0 (the greedy sampler alone) they are softmax(logits) over the whole vocabulary,
// computed in float32. Each row holds log(p / p_max) = logit - max(logit): the logits up to the
// per-row constant no softmax sees. A token whose p is 0 (a banned token, or a logit so far below
// the maximum that float32 underflows) is null.
// Exit status 0 on success, 1 with the error on stderr.

import {readFileSync, writeFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const [modulesDir, requestPath, resultPath] = process.argv.slice(2);
const load = (pkg, file) => import(pathToFileURL(join(modulesDir, pkg, file)).href);
const {getLlama, LlamaLogLevel, TokenBias} = await load("node-llama-cpp", "dist/index.js");
const {Template} = await load("@huggingface/jinja", "dist/index.js");

const request = JSON.parse(readFileSync(requestPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: request.gguf});
const vocab = model.fileInfo.metadata.llama.vocab_size;  // niels-export writes llama.vocab_size
// llama.cpp's defaults: an F16 KV cache and flash attention where supported ("auto"; its CPU
// kernel rounds q to f16). "kv_type": "F32" with "flash_attention": false computes attention in f32.
const kvType = request.kv_type ?? "F16";
const context = await model.createContext({
  contextSize: model.trainContextSize, batchSize: 512, threads: 1,
  experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType,
  flashAttention: request.flash_attention ?? "auto",
});
const sequence = context.getSequence();

// One row of log(p / p_max) by token id; null where p is 0 or missing.
function shiftedLogits(probabilities) {
  const out = new Array(vocab).fill(null);
  let pmax = 0;
  for (const p of probabilities.values()) pmax = Math.max(pmax, p);
  for (const [token, p] of probabilities) {
    if (p > 0) out[token] = Math.log(p / pmax);
  }
  return out;
}

// Greedy decoding of max_new tokens after `prompt`; stops early only at `stop` (when given).
async function greedy(prompt, maxNew, banned, stop) {
  await sequence.clearHistory();
  const bias = new TokenBias(model.tokenizer);
  for (const id of banned ?? []) bias.set(id, "never");
  const next = {token: true, probabilities: true, options: {temperature: 0, tokenBias: bias}};
  const tokens = [], logits = [];
  let input = prompt;
  while (tokens.length < maxNew) {
    const items = input.map((t, i) => (i === input.length - 1 ? [t, {generateNext: next}] : t));
    const results = await sequence.controlledEvaluate(items);
    const out = results[input.length - 1].next;
    tokens.push(out.token);
    logits.push(shiftedLogits(out.probabilities));
    if (stop !== undefined && out.token === stop) break;
    input = [out.token];
  }
  return {tokens, logits};
}

const result = {raw: [], chat: [], texts: [], metadata: {}};
const meta = model.fileInfo.metadata;
result.metadata = {
  architecture: meta.general.architecture,
  tokenizer_model: meta.tokenizer.ggml.model,
  context_length: model.trainContextSize,
  vocab_size: vocab,
  eos: model.tokens.eos,
  bos: model.tokens.bos,
  chat_template: meta.tokenizer.chat_template,
  sampling: meta.general.sampling ?? null,
};
for (const r of request.raw ?? []) result.raw.push(await greedy(r.prompt, r.max_new));
const template = new Template(meta.tokenizer.chat_template);
for (const c of request.chat ?? []) {
  const rendered = template.render({
    messages: c.messages,
    add_generation_prompt: true,  // raise_exception is built into @huggingface/jinja
  });
  const prompt = model.tokenize(rendered, true);  // special-token literals of the template -> ids
  result.chat.push({rendered, prompt, ...(await greedy(prompt, c.max_new, c.banned, c.stop))});
}
for (const t of request.texts ?? []) result.texts.push(model.tokenize(t, false));
writeFileSync(resultPath, JSON.stringify(result));
await context.dispose();
await model.dispose();
await llama.dispose();
