// llamacpp-bench: llama.cpp's prefill and decode speed on a GGUF file, measured the way llama-bench
// measures them, through node-llama-cpp 3.21.1's prebuilt llama.cpp (CPU only; the npm prefix of
// scripts/install_references.sh), so that nielsd-bench's figures have a side-by-side reference on
// the same file, threads and KV dtype (README.md, "Benchmarks").
//
//   node bench/llamacpp_bench.mjs --gguf FILE [--threads 2] [--pp 512] [--depth 512] [--tg 128]
//        [--repeats 5] [--kv f16|f32|q8_0] [--fa auto|on|off] [--batch 512] [--json]
//        [--modules DIR]     (default: $(scripts/install_references.sh --print-dir)/node_modules)
//
// pp: a prompt of --pp random tokens into an empty KV cache, in batches of --batch tokens (llama.cpp's
//     n_batch = n_ubatch, as llama-bench's default ubatch), logits of the last token only.
// tg: --tg single-token decode steps (logits every step, no sampling) after a prompt of --depth
//     tokens, as llama-bench -n TG -d DEPTH.
// Each figure is the median of --repeats runs after one warm-up run. Two timings per run: llama.cpp's
// own (llama_perf_context: the time inside llama_decode, what llama-bench reports) and the wall
// clock around the calls from JavaScript (adds the addon's per-call overhead, some tens of
// microseconds a step); the first is the one to compare with.
// Prints one line per figure, or with --json one JSON object per line:
//   {"bench":"llamacpp","test":"pp"|"tg","tokens":N,"depth":D,"tok_s":X,"wall_tok_s":X,
//    "threads":T,"kv":"f16","fa":"auto","gguf":PATH,"llama_cpp":"node-llama-cpp 3.21.1",
//    "cpu_backend":"sapphirerapids"}   (the libggml-cpu-<variant>.so ggml picked for this CPU)

import {execFileSync} from "node:child_process";
import {dirname, join, resolve} from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

function parseArgs(argv) {
  const o = {threads: 2, pp: 512, depth: 512, tg: 128, repeats: 5, kv: "f16", fa: "auto", batch: 512, json: false};
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      return argv[++i];
    };
    switch (flag) {
      case "--gguf": o.gguf = value(); break;
      case "--threads": o.threads = Number(value()); break;
      case "--pp": o.pp = Number(value()); break;
      case "--depth": o.depth = Number(value()); break;
      case "--tg": o.tg = Number(value()); break;
      case "--repeats": o.repeats = Number(value()); break;
      case "--kv": o.kv = value(); break;
      case "--fa": o.fa = value(); break;
      case "--batch": o.batch = Number(value()); break;
      case "--modules": o.modules = value(); break;
      case "--json": o.json = true; break;
      default: throw new Error(`unknown flag ${flag} (see the comment at the top of llamacpp_bench.mjs)`);
    }
  }
  if (!o.gguf) throw new Error("--gguf FILE is required");
  for (const k of ["threads", "pp", "depth", "tg", "repeats", "batch"]) {
    if (!Number.isInteger(o[k]) || o[k] < 0) throw new Error(`--${k} must be a whole number`);
  }
  if (!["f16", "f32", "q8_0"].includes(o.kv)) throw new Error("--kv must be f16, f32 or q8_0");
  if (!["auto", "on", "off"].includes(o.fa)) throw new Error("--fa must be auto, on or off");
  if (o.threads < 1 || o.repeats < 1 || o.batch < 1) throw new Error("--threads, --repeats, --batch must be >= 1");
  if (!o.modules) {
    const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
    const prefix = execFileSync(join(root, "scripts", "install_references.sh"), ["--print-dir"], {encoding: "utf8"});
    o.modules = join(prefix.trim(), "node_modules");
  }
  return o;
}

const median = (values) => {
  const v = [...values].sort((a, b) => a - b);
  return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
};

// Deterministic random token ids in [0, vocab) (xorshift32).
function randomTokens(n, vocab, seed) {
  let x = seed >>> 0 || 1;
  const out = new Uint32Array(n);
  for (let i = 0; i < n; ++i) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    out[i] = x % vocab;
  }
  return out;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const load = (pkg, file) => import(pathToFileURL(join(o.modules, pkg, file)).href);
  const {getLlama, LlamaLogLevel} = await load("node-llama-cpp", "dist/index.js");
  // llama.cpp's perf lines arrive through the logger (info level), and which ggml CPU variant it
  // loaded (ggml_backend_load_best's pick for this CPU: "load_backend: loaded CPU backend from
  // .../libggml-cpu-<variant>.so", log level); everything else is dropped.
  const perfLines = [];
  let backend = "unknown";
  const llama = await getLlama({
    gpu: false, build: "never", maxThreads: o.threads, logLevel: LlamaLogLevel.debug,
    logger: (level, message) => {
      const loaded = message.match(/loaded CPU backend from \S*libggml-cpu-([A-Za-z0-9_]+)\.so/);
      if (loaded) backend = loaded[1];
      if (message.includes("llama_perf_context_print")) perfLines.push(message);
      else if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) process.stderr.write(message);
    },
  });
  const model = await llama.loadModel({modelPath: o.gguf});
  const vocab = model.tokens.vocabularySize ?? model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const kvType = o.kv.toUpperCase();
  const context = await model.createContext({
    contextSize: Math.max(o.pp, o.depth + o.tg) + 16, batchSize: o.batch, sequences: 1,
    threads: {ideal: o.threads, min: o.threads},
    flashAttention: o.fa === "auto" ? "auto" : o.fa === "on",
    experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType, performanceTracking: true,
  });
  const ctx = context._ctx;  // the addon's context: llama_decode on batches we build
  ctx.setThreads(o.threads);
  const seq = 0;

  // The time llama.cpp itself counted since the last call (prompt eval + eval, ms), then reset.
  const perfMs = async () => {
    perfLines.length = 0;
    ctx.printTimings();
    for (let i = 0; i < 100 && perfLines.filter((l) => l.includes("eval time")).length < 2; ++i) {
      await new Promise((r) => setTimeout(r, 5));
    }
    let ms = 0;
    for (const line of perfLines) {
      const m = line.match(/(prompt eval|eval) time\s*=\s*([0-9.]+) ms/);
      if (m) ms += Number(m[2]);
    }
    return ms;
  };
  // Feeds `tokens` at positions from `start`, in batches of o.batch; logits of the last one only.
  const feed = async (tokens, start) => {
    for (let i = 0; i < tokens.length; i += o.batch) {
      const chunk = tokens.subarray(i, Math.min(tokens.length, i + o.batch));
      ctx.initBatch(chunk.length);
      const last = i + chunk.length === tokens.length;
      ctx.addToBatch(seq, start + i, chunk, last ? Uint32Array.of(chunk.length - 1) : new Uint32Array(0));
      await ctx.decodeBatch();
    }
  };
  const clear = () => ctx.removeTokenCellsFromSequence(seq, 0, -1);

  const prompt = randomTokens(Math.max(o.pp, o.depth + o.tg), vocab, 12345);
  const results = [];
  const run = async (test, tokens, depth, once) => {
    const wall = [], inside = [];
    for (let r = 0; r <= o.repeats; ++r) {  // run 0 warms up
      clear();
      if (depth > 0) await feed(prompt.subarray(0, depth), 0);
      await perfMs();
      const t0 = process.hrtime.bigint();
      await once();
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      const ms = await perfMs();
      if (r > 0) {
        wall.push(tokens / seconds);
        inside.push(tokens / (ms / 1e3));
      }
    }
    results.push({bench: "llamacpp", test, tokens, depth, tok_s: median(inside), wall_tok_s: median(wall),
                  threads: ctx.getThreads(), kv: o.kv, fa: o.fa, gguf: o.gguf, llama_cpp: "node-llama-cpp 3.21.1",
                  cpu_backend: backend});
  };
  if (o.pp > 0) await run("pp", o.pp, 0, () => feed(prompt.subarray(0, o.pp), 0));
  if (o.tg > 0) {
    await run("tg", o.tg, o.depth, async () => {
      for (let i = 0; i < o.tg; ++i) {
        ctx.initBatch(1);
        ctx.addToBatch(seq, o.depth + i, prompt.subarray(o.depth + i, o.depth + i + 1), Uint32Array.of(0));
        await ctx.decodeBatch();
      }
    });
  }
  for (const r of results) {
    if (o.json) {
      console.log(JSON.stringify(r));
    } else {
      const name = r.test === "pp" ? `pp${r.tokens}` : `tg${r.tokens} @ d${r.depth}`;
      console.log(`llama.cpp ${name.padEnd(14)} ${r.tok_s.toFixed(1).padStart(9)} tok/s  (wall ${r.wall_tok_s.toFixed(1)}; ` +
                  `${r.threads} threads, KV ${r.kv}, flash attention ${r.fa}, CPU backend ${r.cpu_backend}, ` +
                  `median of ${o.repeats})`);
    }
  }
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

main().catch((err) => {
  process.stderr.write(`llamacpp_bench: ${err.message}\n`);
  process.exit(1);
});
