#!/usr/bin/python3
"""How far quantized weights move a model's predictions in nielsd: a markdown table.

For each model -- the shipped demo model (models/niels-demo) and a random-weight niels_gpt model of
the `base` shape (V 16000, T 1024, C 512, L 8, H 8, d_ff 1536) -- niels-export writes the f32 GGUF,
niels-quantize makes each file type of it, and niels_quant_accuracy (quant_accuracy.cc: nielsd's
LoadModel and forward pass) compares every quantized file with the f32 one along the f32 model's
greedy continuation of fixed prompts: max and mean |delta logprob| of the greedy token
(teacher-forced), the tokens the quantized model's own greedy generation shares with the f32 model's
before the first divergence, and the fraction of teacher-forced positions whose argmax agrees.

    /usr/bin/python3 tests/tools/quant_accuracy.py --build build [--work-dir DIR] [--models demo,base]
        [--types q8_0,q4_0,q4_k_m,q5_k_m] [--tokens 512] [--threads 1] [--dequantize]

--dequantize runs the quantized files with their matrices widened to f32 at load: the weights'
rounding alone (float products, no 8-bit activations), to tell the format's error from the kernels'.
--build is the CMake build directory with niels-quantize, niels-inspect and niels_quant_accuracy built.
The demo model's context is 256 tokens: its prompts are 2 chat prompts, each continued to the end
of the context (~490 positions in all) instead of one prompt continued 512 tokens. A file type whose
matrices nielsd has no kernel for (q5_k_m falls back to q5_1 for rows that are not multiples of
256, as llama.cpp's recipe does: the demo model's rows of 160 and 480; q4_k_m's fallback q5_0 runs)
is listed as "cannot run" with the loader's reason.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tools", "python"))
import numpy as np  # noqa: E402
import export_support as es  # noqa: E402
from niels_tools import spm_model  # noqa: E402

BASE = {"V": 16000, "T": 1024, "C": 512, "L": 8, "H": 8, "d_ff": 1536, "rope_theta": 10000.0, "name": "random-base"}
EMBEDDING_STD = 0.15  # logits of std ~3 (0.15 x sqrt(C), tied head): a spread like a trained model's
DEMO_QUESTIONS = ["what exactly is nielsd?", "how can i quit niels-chat?"]
BASE_PROMPT = "nielsd is a local inference daemon: it loads a model once and keeps a kv cache per session."


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:3]))} ... failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def extend_tokenizer(src, dst, vocab):
    """src's tokenizer.model with normal pieces appended up to `vocab` pieces (scores below every
    other piece, so the tokenizer's encodings do not change): a vocabulary of the base shape."""
    with open(src, "rb") as f:
        data = f.read()
    have = len(spm_model.read_spm_model(src).pieces)
    extra = b""
    for i in range(vocab - have):
        piece = f"\u2581zq{i:05d}".encode()
        body = b"\x0a" + es._varint_bytes(len(piece)) + piece + b"\x15" + struct.pack("<f", -1000.0 - i)
        extra += b"\x0a" + es._varint_bytes(len(body)) + body
    with open(dst, "wb") as f:
        f.write(data + extra)


def base_tensors(cfg, seed):
    """niels_gpt state_dict names with weights scaled like a trained model's rather than one std
    for all: each matrix normal(0, 1/sqrt(fan_in)) (unit gain: a perturbation neither grows nor
    shrinks from layer to layer -- one std of 0.15 everywhere multiplies it by ~3.4 per matrix and
    makes the 8 layers chaotic), biases normal(0, 0.02), norms 1 + normal(0, 0.1), the embedding
    normal(0, EMBEDDING_STD)."""
    rng = np.random.default_rng(seed)
    V, C, F = cfg["V"], cfg["C"], cfg["d_ff"]

    def mat(rows, cols):
        return rng.normal(0.0, cols ** -0.5, size=(rows, cols)).astype(np.float32)

    def vec(n, mean=0.0, std=0.02):
        return (mean + rng.normal(0.0, std, size=(n,))).astype(np.float32)

    t = {"tok_emb.weight": rng.normal(0.0, EMBEDDING_STD, size=(V, C)).astype(np.float32),
         "ln_f.weight": vec(C, 1, 0.1)}
    for i in range(cfg["L"]):
        p = f"blocks.{i}."
        t.update({p + "ln1.weight": vec(C, 1, 0.1), p + "ln2.weight": vec(C, 1, 0.1),
                  p + "attn.qkv.weight": mat(3 * C, C), p + "attn.proj.weight": mat(C, C),
                  p + "mlp.fc_a.weight": mat(F, C), p + "mlp.fc_a.bias": vec(F),
                  p + "mlp.fc_g.weight": mat(F, C), p + "mlp.fc_g.bias": vec(F),
                  p + "mlp.fc_out.weight": mat(C, F), p + "mlp.fc_out.bias": vec(C)})
    return t


def make_base_model(model_dir, seed=27):
    os.makedirs(model_dir, exist_ok=True)
    extend_tokenizer(os.path.join(REPO, "models", "niels-demo", "tokenizer.model"),
                     os.path.join(model_dir, "tokenizer.model"), BASE["V"])
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(BASE, f)
    es.write_safetensors(os.path.join(model_dir, "model.safetensors"), base_tensors(BASE, seed))


def encode(inspect, model, texts, work):
    """The ids of `texts` in `model` with special-token text parsed (niels-inspect --tokenize)."""
    src, out = os.path.join(work, "texts.json"), os.path.join(work, "ids.json")
    with open(src, "w") as f:
        json.dump(texts, f)
    run([inspect, model, "--tokenize", src, "--out", out])
    with open(out) as f:
        return json.load(f)["rendered"]


def measure(args, name, source_dir, texts):
    work = os.path.join(args.work_dir, name)
    os.makedirs(work, exist_ok=True)
    f32 = os.path.join(work, "f32.gguf")
    run([sys.executable, os.path.join(REPO, "tools", "export", "niels_export.py"), source_dir, "--format", "gguf",
         f32, "--dtype", "f32", "--force"])
    files, refused = [], {}
    for t in args.types:
        out = os.path.join(work, f"{t}.gguf")
        try:
            run([args.quantize, f32, out, "--type", t, "--threads", str(args.threads), "--quiet"])
            files.append((t, out))
        except RuntimeError as e:
            refused[t] = str(e)
    prompts = os.path.join(work, "prompts.json")
    with open(prompts, "w") as f:
        json.dump(encode(args.inspect, source_dir, texts, work), f)
    result = os.path.join(work, "result.json")
    run([args.accuracy, f32, prompts, *[p for _, p in files], "--tokens", str(args.tokens), "--out", result,
         "--threads", str(args.threads)] + (["--dequantize"] if args.dequantize else []))
    with open(result) as f:
        res = json.load(f)
    rows = [(t, m) for (t, _), m in zip(files, res["models"])] + [(t, {"ok": False, "error": e})
                                                                   for t, e in refused.items()]
    return res["reference"], rows


def table_row(model, t, m):
    if not m["ok"]:
        reason = m["error"].replace("|", "\\|").splitlines()[0]
        return f"| {t} | {model} | cannot run: {reason} | | | |"
    first = ", ".join(f"all {n}" if d == n else f"{d} of {n}" for d, n in zip(m["first_divergence"], m["continued"]))
    return (f"| {t} | {model} | {m['max_abs_dlogprob']:.3g} | {m['mean_abs_dlogprob']:.3g} | "
            f"{first} | {m['agree']}/{m['positions']} "
            f"({100.0 * m['agree'] / m['positions']:.1f}%) |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--work-dir", default=None)
    p.add_argument("--models", default="demo,base")
    p.add_argument("--types", default="q8_0,q4_0,q4_k_m,q5_k_m")
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dequantize", action="store_true")
    args = p.parse_args()
    args.types = args.types.split(",")
    args.quantize = os.path.join(args.build, "tools", "quantize", "niels-quantize")
    args.inspect = os.path.join(args.build, "tools", "inspect", "niels-inspect")
    args.accuracy = os.path.join(args.build, "tests", "tools", "niels_quant_accuracy")
    args.work_dir = args.work_dir or os.path.join(args.build, "quant_accuracy")
    for tool in (args.quantize, args.inspect, args.accuracy):
        if not os.access(tool, os.X_OK):
            print(f"{tool} is not built (cmake --build {args.build} --target niels-quantize niels-inspect "
                  f"niels_quant_accuracy)")
            return 1
    start = time.monotonic()
    lines = ["| type | model | max \\|Δ logprob\\| | mean \\|Δ logprob\\| | greedy tokens before the first divergence "
             "| teacher-forced argmax agreement |", "|---|---|---|---|---|---|"]
    notes = []
    special = spm_model.SPECIAL_TOKENS
    for name in args.models.split(","):
        if name == "demo":
            label, source = "niels-demo (trained; V 1024, C 160, T 256)", os.path.join(REPO, "models", "niels-demo")
            texts = [special["usr"] + q + special["eot"] + special["asst"] for q in DEMO_QUESTIONS]
        elif name == "base":
            label = "random base (V 16000, C 512, L 8, d_ff 1536)"
            source = os.path.join(args.work_dir, "base-model")
            make_base_model(source)
            texts = [BASE_PROMPT]
        else:
            print(f"unknown model {name} (demo, base)")
            return 1
        ref, rows = measure(args, name, source, texts)
        lines += [table_row(label, t, m) for t, m in rows]
        notes.append(f"{label}: {ref['positions']} teacher-forced positions; f32 top-1 probability median "
                     f"{ref['top1_probability_median']:.2f}; f32 teacher-forced argmax = its greedy tokens at all "
                     f"but {ref['reference_mismatches']}")
    print("\n".join(lines))
    print()
    print("\n".join(notes))
    print(f"({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
