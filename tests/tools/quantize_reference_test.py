#!/usr/bin/python3
"""quantize_reference ctest: niels-quantize's files against llama.cpp, and nielsd against llama.cpp on them.

Inputs (f16 GGUFs): a random-weight Llama 3.2 with its real tokenizer (make_family_model.py; rows of
256/512, 4 layers, so use_more_bits gives layers 0 and 3 q6_K and every tensor type is one nielsd
runs), a random-weight Qwen2.5 with rows of 128 and 9 layers (q/k/v biases, untied head; the K
types fall back to q5_0/q5_1/q8_0) and the trained niels-demo model exported by niels-export (rows
of 160/480: fallbacks too). For each input and file type (q8_0, q4_0, q4_k_m, q5_k_m):
  1. niels_quantize_check (nielsd's GGUF reader): metadata = the input's plus the two changed keys;
     tensors = the input's, in order; the file equals llama.cpp's own llama_model_quantize of the same
     input (libllama of node-llama-cpp through ctypes) key for key and tensor for tensor, byte for
     byte; nielsd's dequantization equals ggml's bit for bit and lies within each type's error bound.
  2. On every file nielsd has kernels for (not the q5_1 fallbacks of q5_k_m), teacher-forced logits at
     every position of PROMPTS x SEQ tokens from llama.cpp (node-llama-cpp, quantize_compare.mjs)
     and from nielsd (niels_gguf_logits: model::Transformer on daemon/kernels, the weights read
     straight from the file), compared as logit - max(logit) (node-llama-cpp hands out probabilities
     only): max |delta| over the whole vocabulary within NIELSD_TOL; and nielsd's rows must be
     clearly closest to llama.cpp's on the same file (rms distance at most IDENTIFY_SHARE of that to
     llama.cpp on the input or any other type of the model). The f16 input is compared the same way.
  3. niels-demo (trained weights), all four types in llama.cpp against its f16 input: the quantized
     model's log-probability of the input's top token (max |delta|), top-1 agreement, mean KL --
     within QUALITY_TOL.
(An 80-layer qwen2 against llama_model_quantize, llama.cpp's "70B" rule: quantize_test, on a
synthetic file with a small vocabulary.)
Prints every number, the quantization speed and the CPU seconds per stage.

    quantize_reference_test.py --quantize BIN --check BIN --logits BIN --lib-dir DIR --work-dir DIR
        [--npm DIR] [--only NAME...]

Needs node and the packages of scripts/install_references.sh (fails, naming it, when missing).
"""

import argparse
import ctypes
import json
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import make_family_model as mfm  # noqa: E402

FILE_TYPES = {"q8_0": 7, "q4_0": 2, "q4_k_m": 15, "q5_k_m": 17}
# name -> (make_family_model arguments, token ids drawn from [low, high) for the prompts).
MODELS = {
    "llama": (["llama", "--hidden", "256", "--layers", "4", "--ffn", "512", "--head-dim", "64"], (0, 128000)),
    "qwen2-128": (["qwen2", "--layers", "9"], (0, 151643)),
    "niels-demo": (None, (4, 1024)),
}
# nielsd against llama.cpp on the same file: the largest |delta| of logit - max(logit) over the
# whole vocabulary at every position. The same weights, the same block formats; for block-type
# weights both round each activation block to 8 bits (quant_activations.h) -- the same levels, but
# for q8_0/q4_0/q5_0 ggml keeps the block's scale in f16 where nielsd keeps it in f32 (the K types'
# q8_K scale is f32 in both: the llama model's all-K files agree to 0.0000) -- and they sum in other
# orders. The random-weight models (sharp attention, logits of std ~4) amplify that: a float
# difference that moves one activation across a rounding boundary changes its 8-bit level. Bounds
# at ~2x the largest value measured (tools/quantize/README.md); qwen2-128's q4_k_m, 50 of its 65
# matrices q5_0 fallbacks, measured 2.59 (niels-demo's 0.30).
NIELSD_TOL = {
    "random": {"q8_0": 3.0, "q4_0": 3.2, "q4_k_m": 5.0, "q5_k_m": 1.5},
    "trained": {"q8_0": 0.75, "q4_0": 0.7, "q4_k_m": 0.6},
}
# f16: how llama.cpp computes an f16 matrix depends on the ggml CPU variant node-llama-cpp loads
# here (the best-scoring libggml-cpu-NAME.so for this CPU; quantize_compare.mjs reports which one
# this process mapped), not on the CPU's flags as such. From the ggml source node-llama-cpp 3.21.1
# builds (node-llama-cpp/llama/gitRelease.bundle, llama.cpp "v0.4.0"):
# - every x86 variant converts the activations to F16 before an f16 product: type_traits_cpu[F16]
#   .vec_dot_type is GGML_TYPE_F16 (ggml-cpu.c), and the tinyBLAS kernels llamafile_sgemm runs for
#   f16 weights take only an F16 right-hand side (llamafile/sgemm.cpp, AVX-512 and AVX2 alike), as
#   does ggml_vec_dot_f16 otherwise. So each activation is rounded to f16 first;
# - except the variants built with AMX-INT8 (sapphirerapids): their AMX extra buffer type takes f16
#   matrices with f32 activations (amx/amx.cpp supports_op: F16 with an F32 src1) and multiplies them
#   in tinygemm_kernel_avx<float, ggml_fp16_t, float> (amx/mmq.cpp), without rounding them.
# nielsd widens the f16 weights and keeps the activations in f32 on every ISA (its products equal
# its naive references; its f32 files agree with llama.cpp to 1e-3: family_llamacpp_test).
# Measured nielsd against llama.cpp on the f16 files, max |d logit| (random / niels-demo):
#   sapphirerapids (Xeon, Emerald Rapids)  0.0000 / 0.0000
#   haswell (Zen 3)                        0.033-0.059, 0.016 already at position 0 / 0.012
#   zen4 (Zen 4, AVX-512 VNNI+BF16)        0.048-0.053 (export_quant's hf-llama 0.030) / 0.011
# Bounds: 0.01 where llama.cpp keeps f32 activations; about 2x the largest measured where it rounds.
F16_TOL_F32_ACTIVATIONS = {"random": 0.01, "trained": 0.01}
F16_TOL_F16_ACTIVATIONS = {"random": 0.12, "trained": 0.03}
GGML_VARIANTS_WITH_F32_F16_PRODUCTS = {"sapphirerapids"}


def f16_tolerance(kind, ggml_cpu_variant):
    """The f16 bound for llama.cpp's ggml CPU variant (quantize_compare.mjs's report)."""
    if ggml_cpu_variant in GGML_VARIANTS_WITH_F32_F16_PRODUCTS:
        return F16_TOL_F32_ACTIVATIONS[kind]
    return F16_TOL_F16_ACTIVATIONS[kind]


def nielsd_tolerances(kind, ggml_cpu_variant):
    """NIELSD_TOL[kind], with the f16 bound of the ggml CPU variant llama.cpp ran on."""
    tol = dict(NIELSD_TOL[kind])
    tol["f16"] = f16_tolerance(kind, ggml_cpu_variant)
    return tol


# And nielsd's logits must be clearly closest to llama.cpp's on the same file: their rms distance at
# most IDENTIFY_SHARE of the distance to llama.cpp's on any other file of the model (the f16 input
# and the other types; measured: 0.47-0.57 for q8_0, whose nearest other file is the f16 input and
# whose difference to llama.cpp is mostly its f16 activation scale; 0.06 or less for the others).
IDENTIFY_SHARE = 0.75
# niels-demo (trained), llama.cpp on the quantized file against llama.cpp on the f16 input: the
# largest |log p_q(t) - log p_f16(t)| for the input's top token t, the smallest top-1 agreement,
# the largest mean KL(f16 || q). Bounds at about 2x the measured values (top-1 agreement: 20
# positions, steps of 0.05).
QUALITY_TOL = {
    "q8_0": {"max_delta": 0.3, "top1": 0.8, "kl": 0.005},
    "q5_k_m": {"max_delta": 1.3, "top1": 0.7, "kl": 0.05},
    "q4_k_m": {"max_delta": 1.5, "top1": 0.7, "kl": 0.07},
    "q4_0": {"max_delta": 2.5, "top1": 0.7, "kl": 0.3},
}
PROMPTS, SEQ = 2, 10
NIELSD_TYPES = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", "q5_K", "q6_K", "q5_0"}


CPU = {}  # stage -> CPU seconds (this process and its children)


def cpu_now():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class Stage:
    """with Stage("name"): ... adds the CPU time spent inside to CPU["name"]."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.start = cpu_now()

    def __exit__(self, *exc):
        CPU[self.name] = CPU.get(self.name, 0.0) + cpu_now() - self.start


class Failures:
    def __init__(self):
        self.items = []

    def check(self, ok, message):
        if not ok:
            self.items.append(message)
            print("FAIL:", message, flush=True)


class LlamaQuantizer:
    """llama.cpp's llama_model_quantize (libllama of node-llama-cpp) with llama-quantize's defaults."""

    class Params(ctypes.Structure):  # llama.h's llama_model_quantize_params of that version
        _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int32), ("output_tensor_type", ctypes.c_int32),
                    ("token_embedding_type", ctypes.c_int32), ("allow_requantize", ctypes.c_bool),
                    ("quantize_output_tensor", ctypes.c_bool), ("only_copy", ctypes.c_bool),
                    ("pure", ctypes.c_bool), ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool),
                    ("imatrix", ctypes.c_void_p), ("kv_overrides", ctypes.c_void_p),
                    ("tt_overrides", ctypes.c_void_p), ("prune_layers", ctypes.c_void_p),
                    ("max_buf_size", ctypes.c_size_t)]

    def __init__(self, lib_dir):
        self.lib = ctypes.CDLL(os.path.join(lib_dir, "libllama.v0.4.0.so"))
        self.lib.llama_model_quantize_default_params.restype = self.Params
        self.lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(self.Params)]
        self.lib.llama_model_quantize.restype = ctypes.c_uint32
        log = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
        self._silence = log(lambda level, text, data: None)  # kept alive: libllama holds the pointer
        self.lib.llama_log_set(self._silence, None)
        self.lib.llama_backend_init()

    def quantize(self, src, dst, file_type):
        params = self.lib.llama_model_quantize_default_params()
        params.ftype = FILE_TYPES[file_type]
        params.nthread = 1
        start = time.monotonic()
        code = self.lib.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
        return code, time.monotonic() - start


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1200, **kw)


def make_input(name, work, dtype="f16"):
    gguf = os.path.join(work, f"{name}-{dtype}.gguf")
    if name == "niels-demo":
        with Stage("make inputs"):
            run(["/usr/bin/python3", os.path.join(SOURCE, "tools", "export", "niels_export.py"),
                 os.path.join(SOURCE, "models", "niels-demo"), "--format", "gguf", gguf, "--dtype", dtype, "--force"])
    else:
        args, hf = MODELS[name][0], os.path.join(work, f"{name}-{dtype}-hf")
        with Stage("make inputs"):
            mfm.main([args[0], hf, "--dtype", dtype, "--gguf", gguf, *args[1:]])
        shutil.rmtree(hf)
    return gguf


def prompts(name):
    rng = np.random.default_rng(len(name))
    low, high = MODELS[name][1]
    ps = [rng.integers(low, high, SEQ).tolist() for _ in range(PROMPTS)]
    ps[-1] = (ps[-1][:5] * 4)[:SEQ]  # repeats: attention over earlier tokens matters
    return ps


def quantize_case(args, llama, label, src, file_type, work, failures, stats):
    """Ours and llama.cpp's quantization of src, compared by niels_quantize_check. Returns (ours, check)."""
    ours, ref = os.path.join(work, f"ours-{file_type}.gguf"), os.path.join(work, f"ref-{file_type}.gguf")
    start = time.monotonic()
    with Stage("niels-quantize"):
        run([args.quantize, src, ours, "--type", file_type, "--threads", "1", "--quiet"])
    stats["ours_s"] += time.monotonic() - start
    stats["bytes"] += os.path.getsize(src)
    with Stage("llama_model_quantize"):
        code, seconds = llama.quantize(src, ref, file_type)
    stats["llama_s"] += seconds
    failures.check(code == 0, f"[{label} {file_type}] llama_model_quantize failed")
    result = os.path.join(work, "check.json")
    with Stage("niels_quantize_check"):
        proc = subprocess.run([args.check, "--input", src, "--output", ours, "--reference", ref, "--ggml",
                               os.path.join(args.lib_dir, "libggml-base.so"), "--type", file_type, "--json", result],
                              capture_output=True, text=True, timeout=600)
    with open(result) as f:
        check = json.load(f)
    failures.check(proc.returncode == 0, f"[{label} {file_type}] niels_quantize_check: {check['failures'][:5]}")
    reference = check["reference"]
    errors = " ".join(f"{t} {e['max_block_rel']:.4f}/{e['rms_rel']:.4f}" for t, e in sorted(check["errors"].items()))
    types = {}
    for t in check["tensors"]:
        types[t["type"]] = types.get(t["type"], 0) + 1
    print(f"{label} {file_type}: llama.cpp's tensors byte-equal {reference['equal']}/{reference['compared']}, "
          f"dequantized {check['dequantized_values']} values ({check['dequant_mismatches']} differ from ggml), "
          f"types {types}, block error max/rms {errors}", flush=True)
    os.unlink(ref)
    return ours, check


def read_rows(path, vocab):
    rows = np.fromfile(path, dtype="<f4")
    return rows.reshape(-1, vocab)


def quality(ref, got):
    """llama.cpp's quantized rows `got` against its input's rows `ref` (both logit - max)."""
    top = ref.argmax(axis=1)
    logp = lambda r: r - np.log(np.exp(r.astype(np.float64)).sum(axis=1, keepdims=True))  # noqa: E731
    lr, lg = logp(ref), logp(got)
    idx = np.arange(len(top))
    delta = np.abs(lg[idx, top] - lr[idx, top])
    kl = float(np.mean(np.sum(np.exp(lr) * (lr - lg), axis=1)))
    return {"max_delta": float(delta.max()), "top1": float(np.mean(got.argmax(axis=1) == top)), "kl": kl}


def rms(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)))


def compare_logits(args, label, name, files, work, failures, summary):
    """files: [(kind, path, runs_in_nielsd)]: llama.cpp and nielsd on each; the quality of the
    quantized files in llama.cpp against the input (niels-demo)."""
    ps = prompts(name)
    req = os.path.join(work, "prompts.json")
    with open(req, "w") as f:
        json.dump(ps, f)
    report = os.path.join(work, "llama_report.json")
    request = {"files": [[path, path + ".llama.bin"] for _, path, _ in files], "prompts": ps, "context_size": 256,
               "report": report}
    compare = os.path.join(work, "compare.json")
    with open(compare, "w") as f:
        json.dump(request, f)
    start = time.monotonic()
    with Stage("llama.cpp logits (node)"):
        run(["node", os.path.join(HERE, "quantize_compare.mjs"), args.npm, compare])
    llama_s = time.monotonic() - start
    vocab = os.path.getsize(files[0][1] + ".llama.bin") // 4 // (PROMPTS * SEQ)
    theirs = {kind: read_rows(path + ".llama.bin", vocab) for kind, path, _ in files}
    with open(report) as f:
        variant = json.load(f)["ggml_cpu_variant"]
    tol = nielsd_tolerances("trained" if name == "niels-demo" else "random", variant)
    print(f"{label}: llama.cpp ran on ggml's {variant} CPU variant: f16 tolerance {tol['f16']}", flush=True)
    nielsd_s = 0.0
    for kind, path, runs in files:
        failures.check(np.isfinite(theirs[kind]).all(), f"[{label} {kind}] llama.cpp's logits are not finite")
        if not runs:
            summary.append(f"{label} {kind}: llama.cpp runs it; nielsd has no kernel for its q5_1 tensors")
            print(summary[-1], flush=True)
            continue
        start = time.monotonic()
        with Stage("nielsd logits"):
            run([args.logits, path, req, path + ".nielsd.bin"])
        nielsd_s += time.monotonic() - start
        ours = read_rows(path + ".nielsd.bin", vocab)
        if ours.shape != theirs[kind].shape:
            failures.check(False, f"[{label} {kind}] nielsd gave {ours.shape} logits, llama.cpp {theirs[kind].shape}")
            continue
        delta = np.abs(ours.astype(np.float64) - theirs[kind])
        first = float(delta[0::SEQ].max())  # position 0 of each prompt: no attention in play
        same, others = rms(ours, theirs[kind]), {k: rms(ours, r) for k, r in theirs.items() if k != kind}
        nearest = min(others, key=others.get)
        top1 = float(np.mean(ours.argmax(axis=1) == theirs[kind].argmax(axis=1)))
        summary.append(f"{label} {kind}: nielsd vs llama.cpp on the same file: max |d logit| {delta.max():.4f} "
                       f"(tolerance {tol[kind]}; at position 0 {first:.4f}), rms {same:.4f}, top-1 agreement "
                       f"{top1:.3f}; rms to llama.cpp on the nearest other file ({nearest}) {others[nearest]:.4f}")
        print(summary[-1], flush=True)
        failures.check(delta.max() <= tol[kind], f"[{label} {kind}] nielsd vs llama.cpp max |d logit| "
                       f"{delta.max():.4f} > {tol[kind]}")
        failures.check(same <= IDENTIFY_SHARE * others[nearest],
                       f"[{label} {kind}] nielsd's logits are not clearly closest to llama.cpp's on the same file: "
                       f"rms {same:.4f} vs {others[nearest]:.4f} on {nearest}")
    print(f"{label}: llama.cpp {llama_s:.1f} s for {len(files)} files, nielsd {nielsd_s:.1f} s", flush=True)
    if name == "niels-demo":
        for file_type in FILE_TYPES:
            m, q = quality(theirs["f16"], theirs[file_type]), QUALITY_TOL[file_type]
            summary.append(f"{label} {file_type} vs f16 in llama.cpp: max |d logprob| of the top token "
                           f"{m['max_delta']:.4f}, top-1 agreement {m['top1']:.3f}, mean KL {m['kl']:.5f}")
            print(summary[-1], flush=True)
            failures.check(m["max_delta"] <= q["max_delta"], f"[{label} {file_type}] max |d logprob| {m['max_delta']:.4f}")
            failures.check(m["top1"] >= q["top1"], f"[{label} {file_type}] top-1 agreement {m['top1']:.3f}")
            failures.check(m["kl"] <= q["kl"], f"[{label} {file_type}] mean KL {m['kl']:.5f}")


def check_model(args, llama, name, failures, summary, stats):
    label = f"{name}/f16"
    work = os.path.join(args.work_dir, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    src = make_input(name, work)
    files = [("f16", src, True)]
    for file_type in FILE_TYPES:
        out, check = quantize_case(args, llama, label, src, file_type, work, failures, stats)
        runs = all(t["type"] in NIELSD_TYPES for t in check["tensors"])
        # qwen2-128's q5_k_m (q5_1 fallbacks): byte-equal to llama.cpp's own; niels-demo's is one
        # llama.cpp runs (it is cheap to run).
        if runs or name == "niels-demo":
            files.append((file_type, out, runs))
    failures.check(name in ("qwen2-128", "niels-demo") or all(runs for _, _, runs in files),
                   f"[{label}] a file nielsd cannot run: {[k for k, _, runs in files if not runs]}")
    compare_logits(args, label, name, files, work, failures, summary)
    shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quantize", required=True)
    p.add_argument("--check", required=True)
    p.add_argument("--logits", required=True)
    p.add_argument("--lib-dir", required=True)
    p.add_argument("--work-dir", required=True)
    p.add_argument("--npm", default=mfm.default_npm())
    p.add_argument("--only", nargs="*", choices=sorted(MODELS), help="these models only (default: all)")
    args = p.parse_args()
    if not os.path.exists(os.path.join(args.npm, "node-llama-cpp", "package.json")):
        print(f"{args.npm} lacks node-llama-cpp: run scripts/install_references.sh")
        return 1
    os.makedirs(args.work_dir, exist_ok=True)
    llama = LlamaQuantizer(args.lib_dir)
    failures, summary = Failures(), []
    stats = {"ours_s": 0.0, "llama_s": 0.0, "bytes": 0}
    for name in args.only or MODELS:
        check_model(args, llama, name, failures, summary, stats)
    summary.append(f"speed (1 thread, whole process incl. start and fsync): niels-quantize "
                   f"{stats['bytes'] / 1e6 / stats['ours_s']:.1f} MB/s of input, llama_model_quantize "
                   f"{stats['bytes'] / 1e6 / stats['llama_s']:.1f} MB/s")
    summary.append("CPU seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(CPU.items())) +
                   f"; total {cpu_now():.1f}")
    print("\n".join(["summary:"] + summary))
    if failures.items:
        print(f"{len(failures.items)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
