#!/usr/bin/python3
"""family_reference ctest: the Llama-family reference models agree with llama.cpp.

For Llama 3.2 (llama, rope_scaling "llama3"), Qwen2.5 (qwen2, q/k/v biases, untied head) and Qwen3
(qwen3, q/k norms, head_dim 64 != hidden/heads 32), each with GQA (4 query heads, 2 kv heads):
tests/tools/make_family_model.py writes a random-weight Hugging Face directory and the GGUF file
convert_hf_to_gguf.py would make of it; then
  1. teacher-forced logits of every position of 8 prompts x 64 tokens: the numpy forward
     (tests/tools/family_forward.py, written from transformers' modeling code) on the HF directory
     against llama.cpp (node-llama-cpp 3.21.1, f32 KV cache, no flash attention) on the GGUF,
     compared as logit - max(logit) (node-llama-cpp hands out probabilities only):
     max |diff| <= 1e-3 for f32 weights; f16 and bf16 (2 prompts each) within F16_TOL;
  2. the same comparison with one feature of the numpy forward switched off (llama3 scaling, the
     q/k/v biases, the q/k norms, the GQA head mapping) must differ by > 100x the tolerance, so the
     agreement above is not luck;
  3. greedy continuations (f32): llama.cpp's equal the numpy forward's argmax;
  4. a sharded HF directory (model.safetensors.index.json) gives the single file's logits exactly;
  5. tokenization of texts: llama.cpp on the GGUF's vocabulary and merges equals transformers.js
     (@lenml) on tokenizer.json; the chat template renders the same in llama.cpp's own Jinja engine
     and in @huggingface/jinja, its special tokens parse to single ids; llama.cpp reads the bos,
     eos and eot ids the real models have.
Prints the max |diff| per architecture and dtype, the typical top-1 probability and logit spread.

    family_reference_test.py --work-dir DIR [--npm NODE_MODULES]

Needs node and the packages of scripts/install_references.sh (fails, naming it, when missing).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import family_forward as ff  # noqa: E402
import make_family_model as mfm  # noqa: E402

TOL_F32 = 1e-3
# f16 weights: llama.cpp's CPU kernels keep the activations in f32 here (measured 4e-5 to 8e-5, as
# for f32). bf16 weights: it rounds the activations to bf16 before each weight product (measured
# 0.37-0.58 against the plain float64 forward); compared against the numpy forward that rounds the
# inputs of its weight products the same way (measured ~0.09; the rest is how its bf16 dot products
# accumulate).
TOL_LOW = {"f16": 5e-3, "bf16": 0.25}
MUTATION_FACTOR = 100
SEQ = 64
TEXTS = ["Hello world, how are you?", "  leading spaces and\ttabs\nnew lines\n\n", "numbers 1234567 and 3.14159",
         "Grüße, 日本語のテキスト, emoji 😀 and Ελληνικά", "code: def f(x):\n    return x ** 2  # ok",
         "<|im_start|> and <|begin_of_text|> as plain text"]
CHATS = [[{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is 2+2?"}],
         [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
          {"role": "user", "content": "Tell me a joke about GGUF files."}]]
# What the real models' files say (config.json, tokenizer_config.json) and llama.cpp must read.
SPECIAL = {"llama": {"bos": 128000, "eos": 128009, "eot": 128009, "marker": 128006, "first": 128000},
           "qwen2": {"bos": 151643, "eos": 151645, "eot": 151645, "marker": 151644, "first": 151644},
           "qwen3": {"bos": 151643, "eos": 151645, "eot": 151645, "marker": 151644, "first": 151644}}
NORMAL_VOCAB = {"llama": 128000, "qwen2": 151643, "qwen3": 151643}
MUTATIONS = {"llama": ["llama3_scaling", "gqa_repeat"], "qwen2": ["qkv_bias", "gqa_repeat"],
             "qwen3": ["qk_norm", "gqa_repeat"]}


class Failures:
    def __init__(self):
        self.items = []

    def check(self, ok, message):
        if not ok:
            self.items.append(message)
            print("FAIL:", message, flush=True)


def prompts(arch, count, seed):
    """`count` prompts of SEQ ids: a start marker, then random ordinary tokens; the last one repeats
    a 16-token phrase (attention over repeats)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        ids = rng.integers(0, NORMAL_VOCAB[arch], SEQ - 1).tolist()
        if i == count - 1:
            ids = (ids[:16] * 4)[:SEQ - 1]
        out.append([SPECIAL[arch]["first"]] + ids)
    return out


def run_reference(npm, request, work):
    req_path, res_path = os.path.join(work, "request.json"), os.path.join(work, "result.json")
    with open(req_path, "w") as f:
        json.dump(request, f)
    subprocess.run(["node", os.path.join(HERE, "llamacpp_reference.mjs"), npm, req_path, res_path], check=True,
                   timeout=900)
    with open(res_path) as f:
        return json.load(f)


def shifted(logits):
    return logits - logits.max(axis=-1, keepdims=True)


def make_model(arch, dtype, work, extra=()):
    model_dir, gguf = os.path.join(work, "hf"), os.path.join(work, "model.gguf")
    mfm.main([arch, model_dir, "--dtype", dtype, "--gguf", gguf, *extra])
    return model_dir, gguf


def check_case(args, arch, dtype, n_prompts, failures, summary):
    label = f"{arch}/{dtype}"
    work = os.path.join(args.work_dir, f"{arch}-{dtype}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model_dir, gguf = make_model(arch, dtype, work)
    model = ff.load_hf(model_dir)
    ps = prompts(arch, n_prompts, seed=zlib.crc32(label.encode()))
    logits_file = os.path.join(work, "logits.f32")
    request = {"gguf": gguf, "context_size": 256, "logits": ps, "logits_file": logits_file}
    if dtype == "f32":
        request.update({"greedy": [{"prompt": p[:8], "max_new": 10} for p in ps[:2]], "texts": TEXTS,
                        "hf_tokenizer": mfm.ARCHS[arch]["package"],
                        "chats": [{"messages": m, "add_generation_prompt": True,
                                   "vars": {"bos_token": "<|begin_of_text|>", "date_string": "26 Jul 2024"}}
                                  for m in CHATS]})
    res = run_reference(args.npm, request, work)
    vocab = res["vocab"]
    failures.check(vocab == mfm.ARCHS[arch]["vocab_size"], f"[{label}] llama.cpp vocabulary {vocab}")
    got = np.memmap(logits_file, dtype="<f4", mode="r").reshape(len(ps), SEQ, vocab)
    tol = TOL_F32 if dtype == "f32" else TOL_LOW[dtype]
    worst, top1, spread = 0.0, [], []
    refs = []
    plain = 0.0
    rounding = (lambda a: mfm.round_to(a, "bf16")) if dtype == "bf16" else None
    for i, p in enumerate(ps):
        ref = ff.forward(model, p)
        refs.append(ref)
        plain = max(plain, float(np.abs(shifted(ref) - got[i]).max()))
        if rounding is not None:
            ref = ff.forward(model, p, round_inputs=rounding)
        worst = max(worst, float(np.abs(shifted(ref) - got[i]).max()))
        probs = np.exp(shifted(ref))
        top1 += list(probs.max(axis=1) / probs.sum(axis=1))
        spread += list(ref.std(axis=1))
    rounded = f" with bf16-rounded activations ({plain:.3g} without)" if rounding else ""
    summary.append(f"{label}: max |logit diff| numpy{rounded} vs llama.cpp {worst:.3g} (tolerance {tol:g}); "
                   f"top-1 probability median {np.median(top1):.2f} (range {min(top1):.2f}-{max(top1):.2f}), "
                   f"logit std {np.mean(spread):.2f}")
    print(summary[-1], flush=True)
    failures.check(worst <= tol, f"[{label}] logits differ by {worst:.3g} > {tol:g}")
    if dtype == "f32":
        for switch in MUTATIONS[arch]:
            diff = float(np.abs(shifted(ff.forward(model, ps[0], **{switch: False})) - got[0]).max())
            print(f"  {label} without {switch}: max |diff| {diff:.3g}", flush=True)
            failures.check(diff > MUTATION_FACTOR * tol, f"[{label}] dropping {switch} changes the logits by only "
                           f"{diff:.3g}: the comparison would not notice it")
        check_greedy(model, ps, res, label, failures)
        check_text(arch, res, label, failures)
    del got
    os.unlink(logits_file)
    return model_dir, refs, ps


def check_greedy(model, ps, res, label, failures):
    for p, got in zip(ps[:2], res["greedy"]):
        seq = list(p[:8])
        for _ in range(10):
            seq.append(int(np.argmax(ff.forward(model, seq)[-1])))
        failures.check(seq[8:] == got, f"[{label}] greedy: llama.cpp {got}, numpy {seq[8:]}")


def check_text(arch, res, label, failures):
    special = SPECIAL[arch]
    meta = res["metadata"]
    failures.check((meta["bos"], meta["eos"], meta["eot"]) == (special["bos"], special["eos"], special["eot"]),
                   f"[{label}] llama.cpp reads bos/eos/eot {meta['bos']}/{meta['eos']}/{meta['eot']}, expected "
                   f"{special['bos']}/{special['eos']}/{special['eot']}")
    for text, ours, theirs in zip(TEXTS, res["texts_special"], res["hf_texts"]):
        failures.check(ours == theirs, f"[{label}] tokenize {text!r}: llama.cpp {ours}, transformers.js {theirs}")
    for messages, chat in zip(CHATS, res["chats"]):
        failures.check(chat["native"] is not None and chat["native"] == chat["js"],
                       f"[{label}] chat template: llama.cpp {chat['native']!r} ({chat['native_error']}), "
                       f"@huggingface/jinja {chat['js']!r} ({chat['js_error']})")
        prompt, rendered = chat["prompt"] or [], chat["native"] or ""
        # Every role marker of the rendering is one special id in the prompt (at least one per
        # message and one for the generation prompt; templates may add a default system message).
        marker = {128006: "<|start_header_id|>", 151644: "<|im_start|>"}[special["marker"]]
        failures.check(prompt.count(special["marker"]) == rendered.count(marker) >= len(messages) + 1,
                       f"[{label}] chat prompt ids {prompt[:24]}...: {prompt.count(special['marker'])} role markers, "
                       f"{rendered.count(marker)} in the text")
    print(f"  {label}: {len(TEXTS)} texts tokenize alike; chat template rendered: {res['chats'][0]['native']!r}",
          flush=True)


def check_sharded(args, arch, model_dir, refs, ps, failures):
    work = os.path.join(args.work_dir, f"{arch}-sharded")
    shutil.rmtree(work, ignore_errors=True)
    sharded = os.path.join(work, "hf")
    mfm.main([arch, sharded, "--dtype", "f32", "--shards", "3"])
    failures.check(os.path.exists(os.path.join(sharded, "model.safetensors.index.json"))
                   and not os.path.exists(os.path.join(sharded, "model.safetensors")),
                   f"[{arch}] sharded directory layout")
    model = ff.load_hf(sharded)
    same = all(np.array_equal(ff.forward(model, p), r) for p, r in zip(ps[:2], refs[:2]))
    failures.check(same, f"[{arch}] the sharded directory's logits differ from the single file's")
    print(f"  {arch} sharded (3 files + index): logits identical to the single file: {same}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work-dir", required=True)
    p.add_argument("--npm", default=mfm.default_npm())
    args = p.parse_args()
    if not os.path.exists(os.path.join(args.npm, "node-llama-cpp", "package.json")):
        print(f"{args.npm} lacks node-llama-cpp: run scripts/install_references.sh")
        return 1
    os.makedirs(args.work_dir, exist_ok=True)
    failures, summary = Failures(), []
    for arch in ("llama", "qwen2", "qwen3"):
        model_dir, refs, ps = check_case(args, arch, "f32", 8, failures, summary)
        if arch == "qwen3":
            check_sharded(args, arch, model_dir, refs, ps, failures)
        for dtype in ("f16", "bf16"):
            check_case(args, arch, dtype, 2, failures, summary)
        for d in os.listdir(args.work_dir):
            if d.startswith(arch):
                shutil.rmtree(os.path.join(args.work_dir, d), ignore_errors=True)
    print("\n".join(["summary:"] + summary))
    if failures.items:
        print(f"{len(failures.items)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
