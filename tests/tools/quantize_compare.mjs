// llama.cpp (node-llama-cpp 3.21.1's prebuilt libllama, CPU) on several GGUF files in one process:
// teacher-forced logits at every position of some prompts, for quantize_reference_test.py.
//
//   node quantize_compare.mjs NODE_MODULES_DIR REQUEST.json
//
// REQUEST: {"files": [[GGUF, OUT.bin], ...], "prompts": [[ids], ...], "context_size": N (default 256)}
// Each OUT gets, for every position of every prompt in order, one row of V float32 (little-endian)
// = log(p / p_max) = logit - max(logit), as llamacpp_reference.mjs writes them (node-llama-cpp hands
// out the greedy sampler's probabilities, softmax of llama.cpp's logits over the whole vocabulary,
// not the logits). F32 KV cache, no flash attention, one thread, one sequence, a fresh context per
// file. Exit status 0, or 1 with the error on stderr.

import {closeSync, openSync, readFileSync, writeSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const [modulesDir, requestPath] = process.argv.slice(2);
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(join(modulesDir, "node-llama-cpp", "dist", "index.js")).href);
const request = JSON.parse(readFileSync(requestPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const greedyNext = {token: true, probabilities: true, options: {temperature: 0}};

for (const [path, out] of request.files) {
  const model = await llama.loadModel({modelPath: path});
  const vocab = model.tokens.vocabularySize ?? model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const context = await model.createContext({
    contextSize: request.context_size ?? 256, batchSize: 256, threads: 1,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", flashAttention: false,
  });
  const sequence = context.getSequence();
  const fd = openSync(out, "w");
  try {
    for (const prompt of request.prompts) {
      await sequence.clearHistory();
      const results = await sequence.controlledEvaluate(prompt.map((t) => [t, {generateNext: greedyNext}]));
      for (const r of results) {
        const probs = r.next.probabilities;
        if (probs.size !== vocab) throw new Error(`${path}: probabilities for ${probs.size} of ${vocab} tokens`);
        const row = new Float32Array(vocab);
        const pmax = probs.values().next().value;  // the map is sorted, most probable first
        for (const [token, p] of probs) row[token] = Math.log(p / pmax);
        writeSync(fd, new Uint8Array(row.buffer));
      }
    }
  } finally {
    closeSync(fd);
    await context.dispose();
    await model.dispose();
  }
}
await llama.dispose();
