// llama.cpp's grammar sampling, timed the way nielsd-constraint-compare times nielsd's: decode
// tokens/s with and without a JSON Schema grammar on one GGUF (node-llama-cpp 3.21.1's prebuilt
// libllama, CPU only; the packages of scripts/install_references.sh). Runs alternate free and
// constrained; temperature 1, top-k and top-p off, a seed per run.
//
//   node llama_grammar_bench.mjs NODE_MODULES_DIR MODEL.gguf SCHEMA.json RUNS MAX_TOKENS THREADS
//
// Prints one JSON line per mode: {"engine":"llama.cpp","mode":"free"|"schema","runs":N,
// "tokens":T,"decode_tok_s":X} -- decode tokens/s = tokens after the first / time after the first.

import {readFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const [modulesDir, modelPath, schemaPath, runs, maxTokens, threads] = process.argv.slice(2);
const {getLlama, LlamaCompletion, LlamaLogLevel} =
    await import(pathToFileURL(join(modulesDir, "node-llama-cpp", "dist/index.js")).href);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: 1024, threads: Number(threads)});
const sequence = context.getSequence();
const completion = new LlamaCompletion({contextSequence: sequence});
const grammar = await llama.createGrammarForJsonSchema(JSON.parse(readFileSync(schemaPath, "utf8")));

const totals = {free: {tokens: 0, seconds: 0, runs: 0}, schema: {tokens: 0, seconds: 0, runs: 0}};
for (let run = 0; run < Number(runs); ++run) {
  for (const mode of ["free", "schema"]) {
    await sequence.clearHistory();
    let n = 0, first = 0;
    await completion.generateCompletion("is nielsd a daemon? answer in json", {
      maxTokens: Number(maxTokens), temperature: 1, topK: 0, topP: 1, minP: 0, seed: 100 + run,
      grammar: mode === "schema" ? grammar : undefined,
      onToken: (tokens) => {
        if (n === 0) first = performance.now();
        n += tokens.length;
      },
    });
    const end = performance.now();
    if (n >= 2) {
      totals[mode].tokens += n - 1;
      totals[mode].seconds += (end - first) / 1000;
      totals[mode].runs += 1;
    }
  }
}
for (const [mode, t] of Object.entries(totals)) {
  console.log(JSON.stringify({engine: "llama.cpp", mode, runs: t.runs, tokens: t.tokens,
                              decode_tok_s: t.tokens / t.seconds}));
}
