#!/usr/bin/python3
"""nielsd against llama.cpp on the same GGUF file, side by side (issues 26 and 27; README.md,
"Benchmarks against llama.cpp").

    bench/vs_llamacpp.py compare --shape SHAPE --type TYPE [--rounds 3] [--repeats 3] [--tg 128]
    bench/vs_llamacpp.py system-prompt [--system-tokens 100 6000] [--turns 6] [--rounds 2]
    bench/vs_llamacpp.py tool-loop [--type q4_k_m] [--turns 6] [--result-tokens 60] [--thinking]
    bench/vs_llamacpp.py startup [--format gguf|hf] [--type f16|bf16] [--runs 10]
    bench/vs_llamacpp.py http [--shapes qwen3-0.6b qwen3-mini] [--type q4_k_m] [--clients 32] [--turns 20]
    common: [--build DIR] [--work DIR] [--keep] [--threads 2]

SHAPE: qwen3-0.6b (hidden 1024, 28 layers, 16/8 heads, head_dim 128, FFN 3072, vocab 151936,
tied), qwen3-mini (the same vocabulary and tokenizer, hidden 512, 8 layers, 8/4 heads, head_dim 64,
FFN 1536: a smaller shape for the client benches), llama3.2-1b (hidden 2048, 16 layers, 32/8 heads, head_dim 64, FFN 8192, vocab 128256, tied),
personal, base (niels_gpt presets, the niels-demo tokenizer's vocabulary). TYPE: f16, bf16 (family
shapes only: niels-export writes f32/f16), q8_0, q4_0, q4_k_m (niels-quantize of the f16 file,
llama.cpp's recipe).

compare: writes ONE GGUF file with random weights (tests/tools/make_family_model.py, or nielsd-bench
--write-model-dir + tools/export/niels_export.py for the niels shapes; then niels-quantize), then
per round runs nielsd-bench --model FILE and bench/llamacpp_bench.mjs on it, the two engines in
turn (the first one alternates between rounds). Both: --threads threads, f16 KV cache, prefill
(pp) of 512 tokens into an empty cache (llama.cpp: n_batch = n_ubatch = 512, as llama-bench), tg
decode steps one token at a time after a prompt of --depth tokens (default 512; 384 for personal,
whose context is 512). Prints per round and the medians over rounds, and nielsd / llama.cpp.

system-prompt: a Qwen3-0.6B-shaped f16 GGUF (real Qwen3 tokenizer and chat template), a real nielsd
on it (--kv-dtype f16 --ephemeral), nielsd-system-prompt-bench through its socket (time to first
token of turns 2..N with a 100- vs a 6000-token system prompt; turn 1's prefill tokens/s), then
llama.cpp's prompt processing of as many tokens as nielsd's first long turn prefilled.

tool-loop: a Qwen3-0.6B-shaped GGUF (default Q4_K_M; real Qwen3 tokenizer and chat template), a real
nielsd on it, nielsd-tool-loop-bench through its socket: each round a forced tool call, then the
tool's result as a tool message against a plain user turn of the same new-token count on a fork
(time to first token, tokens prefilled and reused; target: the result turn within 1.2x). nielsd
only: llama.cpp's server is not part of the references.

http: per shape a GGUF (default Q4_K_M; real Qwen3 tokenizer and chat template), a real nielsd on it
with --http-socket (--max-batch and --max-running-per-uid = --clients), nielsd-http-bench through both
sockets: batch-1 inter-token gaps over HTTP SSE against the protobuf socket, --clients concurrent
streaming clients' aggregate tok/s on each, and a --turns-turn conversation re-sent whole over
/v1/chat/completions (and bound to a session with nielsd_session) against the same turns on a session
(time to first token per turn). The Qwen3-0.6B shape runs with fewer tokens per reply than the
smaller one (--tokens-0.6b), to keep the run within minutes on 2 cores.

startup: nielsd's READY time (sd_notify) and first answered Info on a Qwen3-0.6B-shaped model
(GGUF file or Hugging Face directory, with the 151,936-token tokenizer), warm page cache: nielsd-bench
--startup-only. Target 300 ms.

Files go to --work (default a new directory under $TMPDIR) and are deleted at the end unless --keep.
Needs: the build's nielsd, nielsd-bench, niels-quantize, nielsd-system-prompt-bench (cmake
-DNIELSD_BUILD_BENCH=ON), python3-numpy, node and scripts/install_references.sh's npm prefix.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"  # Debian's, with python3-numpy

FAMILY = {
    "qwen3-0.6b": dict(arch="qwen3", flags=["--hidden", "1024", "--layers", "28", "--heads", "16", "--kv-heads", "8",
                                            "--head-dim", "128", "--ffn", "3072", "--tied", "--max-pos", "40960"],
                       stop_ids=[151645, 151643]),
    "qwen3-mini": dict(arch="qwen3", flags=["--hidden", "512", "--layers", "8", "--heads", "8", "--kv-heads", "4",
                                            "--head-dim", "64", "--ffn", "1536", "--tied", "--max-pos", "40960"],
                       stop_ids=[151645, 151643]),
    "llama3.2-1b": dict(arch="llama", flags=["--hidden", "2048", "--layers", "16", "--heads", "32", "--kv-heads", "8",
                                             "--head-dim", "64", "--ffn", "8192", "--tied", "--max-pos", "131072",
                                             "--rope-original-context", "8192"],
                        stop_ids=[128001, 128008, 128009]),
}
NIELS = ("personal", "base")
NIELS_VOCAB = 1024  # models/niels-demo/tokenizer.model, which nielsd-bench --write-model-dir uses
QUANT = ("q8_0", "q4_0", "q4_k_m")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    log("+ " + " ".join(cmd))
    return subprocess.run(cmd, check=True, **kw)


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Tools:
    def __init__(self, build):
        self.build = os.path.abspath(build)
        self.nielsd = os.path.join(self.build, "daemon", "nielsd")
        self.bench = os.path.join(self.build, "bench", "nielsd-bench")
        self.prompt_bench = os.path.join(self.build, "bench", "nielsd-system-prompt-bench")
        self.tool_loop_bench = os.path.join(self.build, "bench", "nielsd-tool-loop-bench")
        self.http_bench = os.path.join(self.build, "bench", "nielsd-http-bench")
        self.quantize = os.path.join(self.build, "tools", "quantize", "niels-quantize")
        self.llamacpp = os.path.join(ROOT, "bench", "llamacpp_bench.mjs")
        self.make_family = os.path.join(ROOT, "tests", "tools", "make_family_model.py")
        self.export = os.path.join(ROOT, "tools", "export", "niels_export.py")

    def need(self, *paths):
        for p in paths:
            if not os.path.exists(p):
                sys.exit(f"vs_llamacpp: {p} is missing (build it: cmake --build {self.build} --target "
                         f"{os.path.basename(p)})")


def make_gguf(tools, shape, dtype, work, keep=False):
    """Writes work/SHAPE-DTYPE.gguf (random weights) and returns its path; quant types from f16 (an
    existing file is reused; the f16 one is deleted after quantizing unless `keep`)."""
    base_dtype = "f16" if dtype in QUANT else dtype
    path = os.path.join(work, f"{shape}-{base_dtype}.gguf")
    quantized = os.path.join(work, f"{shape}-{dtype}.gguf")
    if dtype in QUANT and os.path.exists(quantized):
        return quantized
    if not os.path.exists(path):
        if shape in FAMILY:
            run([PYTHON, tools.make_family, FAMILY[shape]["arch"], os.path.join(work, "unused-hf-dir"),
                 "--dtype", base_dtype, "--lean", "--gguf", path, "--gguf-only"] + FAMILY[shape]["flags"])
        elif shape in NIELS:
            if base_dtype != "f16":
                sys.exit("vs_llamacpp: the niels shapes are exported in f16 (or quantized from it) only")
            tools.need(tools.bench)
            model_dir = os.path.join(work, f"{shape}-dir")
            run([tools.bench, "--preset", shape, "--dtype", "f16", "--write-model-dir", model_dir])
            run([PYTHON, tools.export, model_dir, "--format", "gguf", "--dtype", "f16", path, "--force"])
            shutil.rmtree(model_dir)
        else:
            sys.exit(f"vs_llamacpp: unknown shape {shape}")
    if dtype not in QUANT:
        return path
    tools.need(tools.quantize)
    out = os.path.join(work, f"{shape}-{dtype}.gguf")
    if not os.path.exists(out):
        run([tools.quantize, path, out, "--type", dtype, "--quiet"])
    if not keep:
        os.remove(path)
    return out


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def nielsd_round(tools, gguf, a):
    # nielsd loads byte-level BPE GGUF files only; niels-export writes the niels shapes' SentencePiece
    # vocabulary into theirs, so nielsd runs the same shape with random weights in the same mix
    # (bench/bench_models.h: niels-quantize's recipe), V of the niels-demo tokenizer.
    model = (["--model", gguf] if a.shape not in NIELS else
             ["--preset", a.shape, "--V", str(NIELS_VOCAB), "--dtype", a.type])
    out = subprocess.run([tools.bench] + model + ["--json", "--threads", str(a.threads), "--kv-dtype", "f16",
                          "--prompt", "512", "--decode-tokens", str(a.tg), "--batch", "0", "--uncached-steps", "0",
                          "--startup-runs", "0", "--kv-delta-prompts", "0", "--repeats", str(a.repeats)],
                         check=True, capture_output=True, text=True).stdout
    m = {x["metric"]: x["value"] for x in json_lines(out)}
    return {"pp": m["prefill_tok_s"], "tg": m["decode_tok_s"], "depth": m["decode_depth"],
            "fraction_of_step_read_bound": m["decode_fraction_of_step_read_bound"],
            "fraction_of_weight_read_bound": m["decode_fraction_of_read_bound"],
            "read_gb_s": m["mem_read_bandwidth_gb_s"]}


def llamacpp_run(tools, gguf, a, pp, depth, tg):
    out = subprocess.run(["node", tools.llamacpp, "--gguf", gguf, "--json", "--threads", str(a.threads), "--kv", "f16",
                          "--pp", str(pp), "--depth", str(depth), "--tg", str(tg), "--batch", "512",
                          "--repeats", str(a.repeats)], check=True, capture_output=True, text=True).stdout
    return {x["test"]: x for x in json_lines(out)}


def compare(a, tools, work):
    tools.need(tools.bench)
    depth = a.depth or (384 if a.shape == "personal" else 512)
    gguf = make_gguf(tools, a.shape, a.type, work, a.keep)
    if a.shape in NIELS:
        print(f"# nielsd: --preset {a.shape} --V {NIELS_VOCAB} --dtype {a.type} (random weights in memory: nielsd reads "
              "no SentencePiece GGUF)")
    print(f"# {a.shape} {a.type}: {gguf} ({os.path.getsize(gguf) / 1e6:.0f} MB); {a.threads} threads, KV f16 on both; "
          f"pp 512, tg {a.tg} at depth {depth}; {a.rounds} rounds x median of {a.repeats}")
    rows = []
    for r in range(a.rounds):
        order = ["nielsd", "llama.cpp"] if r % 2 == 0 else ["llama.cpp", "nielsd"]
        row = {"load_before": load_average()}
        for engine in order:
            if engine == "nielsd":
                row["nielsd"] = nielsd_round(tools, gguf, a)
                if row["nielsd"]["depth"] != depth:
                    sys.exit(f"vs_llamacpp: nielsd decoded at depth {row['nielsd']['depth']}, not {depth}")
            else:
                row["llama.cpp"] = llamacpp_run(tools, gguf, a, 512, depth, a.tg)
        n, l = row["nielsd"], row["llama.cpp"]
        print(f"round {r + 1}: pp512 nielsd {n['pp']:8.1f} llama.cpp {l['pp']['tok_s']:8.1f} tok/s | "
              f"tg{a.tg}@{depth} nielsd {n['tg']:6.1f} llama.cpp {l['tg']['tok_s']:6.1f} tok/s | "
              f"nielsd decode {n['fraction_of_step_read_bound']:.2f} of the read bound | load {row['load_before']}",
              flush=True)
        rows.append(row)
        if r == 0:
            backend = l["pp"]["cpu_backend"]
            print(f"# llama.cpp: node-llama-cpp 3.21.1, ggml CPU backend libggml-cpu-{backend}.so", flush=True)
    med = lambda f: statistics.median(f(x) for x in rows)  # noqa: E731
    n_pp, l_pp = med(lambda x: x["nielsd"]["pp"]), med(lambda x: x["llama.cpp"]["pp"]["tok_s"])
    n_tg, l_tg = med(lambda x: x["nielsd"]["tg"]), med(lambda x: x["llama.cpp"]["tg"]["tok_s"])
    frac = med(lambda x: x["nielsd"]["fraction_of_step_read_bound"])
    l_frac = med(lambda x: x["llama.cpp"]["tg"]["tok_s"] / x["nielsd"]["tg"] * x["nielsd"]["fraction_of_step_read_bound"])
    print(f"median {a.shape} {a.type}: pp512 nielsd {n_pp:.1f} / llama.cpp {l_pp:.1f} tok/s = {n_pp / l_pp:.2f}x; "
          f"tg{a.tg}@d{depth} nielsd {n_tg:.1f} / llama.cpp {l_tg:.1f} tok/s = {n_tg / l_tg:.2f}x; "
          f"decode vs read bound (weights + KV per step): nielsd {frac:.2f}, llama.cpp {l_frac:.2f}; "
          f"load now {load_average()}")
    print(json.dumps({"bench": "vs_llamacpp", "shape": a.shape, "type": a.type, "threads": a.threads, "kv": "f16",
                      "depth": depth, "tg": a.tg, "rounds": a.rounds, "nielsd_pp_tok_s": n_pp,
                      "llamacpp_pp_tok_s": l_pp, "pp_ratio": n_pp / l_pp, "nielsd_tg_tok_s": n_tg,
                      "llamacpp_tg_tok_s": l_tg, "tg_ratio": n_tg / l_tg, "nielsd_tg_fraction_of_read_bound": frac,
                      "llamacpp_backend": backend, "load": load_average()}))


def start_nielsd(tools, model, a, work, extra=()):
    socket = os.path.join(work, "nielsd.sock")
    log_path = os.path.join(work, "nielsd.log")
    cmd = [tools.nielsd, "--model", model, "--socket", socket, "--threads", str(a.threads), "--kv-dtype", "f16",
           "--ephemeral", "--allow-root", "--log-level", "warn"] + list(extra)
    log("+ " + " ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    for _ in range(600):
        if os.path.exists(socket):
            return proc, socket
        if proc.poll() is not None:
            sys.exit(f"vs_llamacpp: nielsd exited ({proc.returncode}); see {log_path}")
        time.sleep(0.1)
    proc.kill()
    sys.exit("vs_llamacpp: nielsd did not open its socket within 60 s")


def client_bench(tools, gguf, a, work, cmd):
    """Runs a socket client bench (`cmd` without --socket) against a real nielsd on the Qwen3-0.6B
    shape's `gguf`, with Qwen3's end-of-turn ids banned; returns its JSON lines."""
    proc, socket = start_nielsd(tools, gguf, a, work)
    try:
        cmd = cmd + ["--socket", socket, "--json"]
        for i in FAMILY["qwen3-0.6b"]["stop_ids"]:
            cmd += ["--ban", str(i)]
        log("+ " + " ".join(cmd))
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
    return json_lines(out)


def system_prompt(a, tools, work):
    tools.need(tools.nielsd, tools.prompt_bench)
    gguf = make_gguf(tools, "qwen3-0.6b", "f16", work)
    lines = client_bench(tools, gguf, a, work,
                         [tools.prompt_bench, "--turns", str(a.turns), "--rounds", str(a.rounds), "--reply-tokens",
                          str(a.reply_tokens), "--system-tokens"] + [str(n) for n in a.system_tokens])
    summary = {x["system_tokens"]: x for x in lines if x["bench"] == "system_prompt_summary"}
    ratio = next(x for x in lines if x["bench"] == "system_prompt_ratio")
    for x in lines:
        if x["bench"] == "system_prompt_create":
            print(f"system {x['system_tokens']:5d} round {x['round']} CreateSession: {x['create_ms']:8.1f} ms for "
                  f"{x['session_length']} tokens")
        if x["bench"] == "system_prompt":
            print(f"system {x['system_tokens']:5d} round {x['round']} turn {x['turn']:2d}: ttft {x['ttft_ms']:8.1f} ms "
                  f"(daemon {x['daemon_ttft_ms']:8.1f}), prefilled {x['prefilled']:5d}, reused {x['reused']:5d}")
    longest = max(summary)
    first = summary[longest]
    pp = int(first["system_prefill_tokens"])
    l = llamacpp_run(tools, gguf, a, pp, 0, 0)["pp"]["tok_s"]
    for n, s in sorted(summary.items()):
        print(f"system {n:5d}: system prompt prefill {s['system_prefill_tok_s']:.1f} tok/s "
              f"({s['system_prefill_tokens']:.0f} tokens, CreateSession); turn 1 ttft {s['first_turn_ttft_ms']:.1f} ms; "
              f"turns 2..{a.turns} ttft median "
              f"{s['later_turns_ttft_ms']:.1f} ms (daemon {s['later_turns_daemon_ttft_ms']:.1f})")
    print(f"turns 2..{a.turns} ttft, {ratio['long']} vs {ratio['short']} system tokens: {ratio['ratio']:.2f}x "
          f"(daemon's count {ratio['daemon_ratio']:.2f}x; target <= 1.5x)")
    print(f"system prompt prefill of {pp} tokens: nielsd {first['system_prefill_tok_s']:.1f} tok/s, llama.cpp pp{pp} "
          f"{l:.1f} tok/s = {first['system_prefill_tok_s'] / l:.2f}x (target >= 0.8x); load {load_average()}")


def tool_loop(a, tools, work):
    tools.need(tools.nielsd, tools.tool_loop_bench)
    gguf = make_gguf(tools, "qwen3-0.6b", a.type, work)
    lines = client_bench(tools, gguf, a, work,
                         [tools.tool_loop_bench, "--turns", str(a.turns), "--reply-tokens", str(a.reply_tokens),
                          "--result-tokens", str(a.result_tokens)] + (["--thinking"] if a.thinking else []))
    for x in lines:
        if x["bench"] == "tool_loop":
            print(f"turn {x['turn']:2d} {x['kind']:6s}: ttft {x['ttft_ms']:8.1f} ms (daemon {x['daemon_ttft_ms']:8.1f}), "
                  f"prefilled {x['prefilled']:5d}, reused {x['reused']:5d}, prompt {x['prompt_tokens']:5d}, "
                  f"new contents {x['content_tokens']:5d}")
    s = next(x for x in lines if x["bench"] == "tool_loop_summary")
    print(f"qwen3-0.6b {a.type}{' thinking' if s['thinking'] else ''}: median ttft of a tool-result turn {s['result_ttft_ms']:.1f} ms vs a plain turn "
          f"{s['plain_ttft_ms']:.1f} ms of the same new tokens ({s['result_prefilled']:.0f} vs "
          f"{s['plain_prefilled']:.0f} prefilled): {s['ratio']:.2f}x (daemon's count {s['daemon_ratio']:.2f}x; "
          f"target <= 1.2x); load {load_average()}")


def http(a, tools, work):
    tools.need(tools.nielsd, tools.http_bench)
    for shape in a.shapes:
        gguf = make_gguf(tools, shape, a.type, work)
        http_socket = os.path.join(work, "http.sock")
        proc, socket = start_nielsd(tools, gguf, a, work, ["--http-socket", http_socket, "--max-batch",
                                                            str(a.clients), "--max-running-per-uid", str(a.clients)])
        try:
            for _ in range(600):
                if os.path.exists(http_socket):
                    break
                time.sleep(0.1)
            small = shape != "qwen3-0.6b"
            tokens = a.tokens if small else a.tokens_06b
            cmd = [tools.http_bench, "--socket", socket, "--http-socket", http_socket, "--tokens", str(tokens),
                   "--runs", str(a.runs), "--clients", str(a.clients), "--client-tokens",
                   str(tokens // 2), "--turns", str(a.turns), "--turn-tokens", str(a.turn_tokens),
                   "--label", f"{shape} {a.type}, {a.threads} threads, KV f16 ({os.path.getsize(gguf) / 1e6:.0f} MB)"]
            for i in FAMILY[shape]["stop_ids"]:
                cmd += ["--ban", str(i)]
            log("+ " + " ".join(cmd))
            start = time.time()
            subprocess.run(cmd, check=True)
            print(f"# {shape}: {time.time() - start:.0f} s; load {load_average()}", flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait()


def startup(a, tools, work):
    tools.need(tools.nielsd, tools.bench)
    if a.format == "gguf":
        model = make_gguf(tools, "qwen3-0.6b", a.type, work)
    else:
        model = os.path.join(work, f"qwen3-0.6b-{a.type}-hf")
        run([PYTHON, tools.make_family, "qwen3", model, "--dtype", a.type, "--lean"] + FAMILY["qwen3-0.6b"]["flags"])
    run(["cat", model] if os.path.isfile(model) else ["true"], stdout=subprocess.DEVNULL)  # warm the page cache
    out = subprocess.run([tools.bench, "--model", model, "--startup-only", "--startup-runs", str(a.runs), "--threads",
                          str(a.threads), "--kv-dtype", "f16", "--json"], check=True, capture_output=True,
                         text=True).stdout
    m = {x["metric"]: x["value"] for x in json_lines(out)}
    print(f"nielsd start-up on qwen3-0.6b {a.type} ({a.format}, warm page cache), median of {a.runs}: "
          f"READY {m['startup_ready_ms']:.0f} ms, first Info answered {m['startup_info_ms']:.0f} ms "
          f"(target 300 ms); load {load_average()}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--work", help="directory for the model files (default: a new one under $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the model files")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="runs per figure inside each engine's run (median)")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--shape", required=True, choices=list(FAMILY) + list(NIELS))
    c.add_argument("--type", required=True, choices=["f16", "bf16"] + list(QUANT))
    c.add_argument("--rounds", type=int, default=3)
    c.add_argument("--tg", type=int, default=128)
    c.add_argument("--depth", type=int, help="decode depth (default 512; 384 for personal)")
    s = sub.add_parser("system-prompt")
    s.add_argument("--system-tokens", type=int, nargs="+", default=[100, 6000])
    s.add_argument("--turns", type=int, default=6)
    s.add_argument("--rounds", type=int, default=2)
    s.add_argument("--reply-tokens", type=int, default=16)
    t = sub.add_parser("tool-loop")
    t.add_argument("--type", choices=["f16", "bf16"] + list(QUANT), default="q4_k_m")
    t.add_argument("--turns", type=int, default=6)
    t.add_argument("--reply-tokens", type=int, default=16)
    t.add_argument("--result-tokens", type=int, default=60)
    t.add_argument("--thinking", action="store_true", help="every turn with enable_thinking")
    u = sub.add_parser("startup")
    u.add_argument("--format", choices=["gguf", "hf"], default="gguf")
    u.add_argument("--type", choices=["f16", "bf16"], default="f16")
    u.add_argument("--runs", type=int, default=10)
    h = sub.add_parser("http")
    h.add_argument("--shapes", nargs="+", choices=list(FAMILY), default=["qwen3-0.6b", "qwen3-mini"])
    h.add_argument("--type", choices=["f16", "bf16"] + list(QUANT), default="q4_k_m")
    h.add_argument("--tokens", type=int, default=64, help="tokens of a batch-1 reply (concurrent: half)")
    h.add_argument("--tokens-0.6b", dest="tokens_06b", type=int, default=32,
                   help="the same on the Qwen3-0.6B shape")
    h.add_argument("--runs", type=int, default=3)
    h.add_argument("--clients", type=int, default=32)
    h.add_argument("--turns", type=int, default=20)
    h.add_argument("--turn-tokens", type=int, default=8)
    a = p.parse_args()
    # SIGTERM unwinds like an exception, so the finally blocks stop nielsd and delete the files.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tools = Tools(a.build)
    work = a.work or tempfile.mkdtemp(prefix="nielsd-vs-llamacpp-")
    os.makedirs(work, exist_ok=True)
    try:
        {"compare": compare, "system-prompt": system_prompt, "tool-loop": tool_loop,
         "startup": startup, "http": http}[a.command](a, tools, work)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
