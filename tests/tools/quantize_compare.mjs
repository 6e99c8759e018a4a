// llama.cpp (node-llama-cpp 3.21.1's prebuilt libllama, CPU) on several GGUF files in one process:
// teacher-forced logits at every position of some prompts, for quantize_reference_test.py.
//
//   node quantize_compare.mjs NODE_MODULES_DIR REQUEST.json
//
// REQUEST: {"files": [[GGUF, OUT.bin], ...], "prompts": [[ids], ...], "context_size": N (default 256),
//           "report": REPORT.json (optional)}
// Each OUT gets, for every position of every prompt in order, one row of V float32 (little-endian)
// = log(p / p_max) = logit - max(logit), as llamacpp_reference.mjs writes them (node-llama-cpp hands
// out the greedy sampler's probabilities, softmax of llama.cpp's logits over the whole vocabulary,
// not the logits). F32 KV cache, no flash attention, one thread, one sequence, a fresh context per
// file. REPORT, when given, gets {"ggml_cpu_variant": NAME}: the ggml CPU backend this process
// mapped after loading the first model (libggml-cpu-NAME.so in /proc/self/maps: ggml picks the
// variant with the best score for this CPU), which decides how llama.cpp computes f16 matrices
// (quantize_reference_test.py, F16_TOL). Exit status 0, or 1 with the error on stderr.

import {closeSync, openSync, readFileSync, writeFileSync, writeSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const [modulesDir, requestPath] = process.argv.slice(2);
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(join(modulesDir, "node-llama-cpp", "dist", "index.js")).href);
const request = JSON.parse(readFileSync(requestPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const greedyNext = {token: true, probabilities: true, options: {temperature: 0}};

// The ggml CPU variants mapped into this process (libggml-cpu-NAME.so), in the order of the maps.
function mappedCpuVariants() {
  const names = new Set();
  for (const line of readFileSync("/proc/self/maps", "utf8").split("\n")) {
    const m = line.match(/libggml-cpu-([A-Za-z0-9_.-]+?)\.so/);
    if (m) names.add(m[1]);
  }
  return [...names];
}
let reported = false;

for (const [path, out] of request.files) {
  const model = await llama.loadModel({modelPath: path});
  if (request.report && !reported) {
    const variants = mappedCpuVariants();
    if (variants.length !== 1) throw new Error(`expected one ggml CPU variant mapped, found [${variants.join(", ")}]`);
    writeFileSync(request.report, JSON.stringify({ggml_cpu_variant: variants[0]}));
    reported = true;
  }
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
