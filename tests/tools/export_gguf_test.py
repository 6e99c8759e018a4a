#!/usr/bin/env python3
"""export_gguf ctest: niels-export --format gguf, checked by real llama.cpp against a real nielsd.

For two models, (a) random weights with a large init scale (std 0.3, so greedy tokens vary and
position handling matters) on the tests' tiny tokenizer and (b) the shipped models/niels-demo:
  1. export to GGUF (f32, and f16 for the demo model);
  2. run llama.cpp (node-llama-cpp's prebuilt libllama, installed with npm into a cache directory)
     through tests/tools/llamacpp_run.mjs: greedy continuations of raw token-id prompts, and of chat
     prompts rendered from the GGUF's own tokenizer.chat_template and tokenized by llama.cpp;
  3. check: llama.cpp's greedy tokens equal a real nielsd's (generate / chat over its socket);
     the template renders and tokenizes to exactly the ids nielsd's template makes; plain text
     tokenizes the same; every generated step's logits agree with nielsd's model code
     (niels-inspect, full forward) within LOGIT_TOL (f32) and LOGIT_TOL_F16 (f16 export).

Skipped (exit 77, the ctest SKIP_RETURN_CODE) with a message when node/npm are missing or the npm
registry cannot be reached. The install is cached in $XDG_CACHE_HOME/nielsd-test (or
~/.cache/nielsd-test), so later runs need no network.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import export_support as es

NODE_LLAMA_CPP_VERSION = "3.22.1"  # pinned: the llama.cpp build under test
SKIP = 77
# Tolerances on |logit_llama.cpp - logit_nielsd|, relative to the step's largest |logit| (at
# least 1), worst over every generated step. f32 export, f32 attention: llama.cpp's CPU kernels
# sum in another order and compute RoPE angles in f32 (nielsd: f64); measured 8e-6 (random model)
# and 8e-7 (demo), so LOGIT_TOL has >10x headroom, while a wrong RoPE layout, a missing bias or a
# wrong norm shows up as O(1). f16 export under llama.cpp's defaults: every weight and cached
# key/value is rounded to 11 significant bits and the large-init random model amplifies that;
# measured 1e-2 (random) and 1e-3 (demo).
LOGIT_TOL = 1e-4
LOGIT_TOL_F16 = 5e-2

RANDOM_PROMPTS = [[10, 20, 30, 40], [7], [100, 101, 102, 103, 104, 105, 106, 107, 108], [55, 200, 55, 200, 55]]
TEXTS = ["how do i start nielsd?", "The quick brown fox jumps over the lazy dog.",
         "what does --no-kv-cache do?", "Numbers 12345 and 3.14, symbols: #@!", "hello world"]
CHATS = [("You are a helpful assistant.", "how do i start nielsd?"),
         ("Answer briefly.", "what is a kv cache?"),
         ("You are nielsd's demo model.", "which socket does niels-chat use by default?")]


def skip(message):
    print(f"SKIPPED: {message}")
    sys.exit(SKIP)


def install_node_llama_cpp(cache_root):
    """node_modules with node-llama-cpp and its linux-x64 CPU binaries; installed once, atomically."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        skip("node and npm are needed to run llama.cpp through node-llama-cpp (not found on PATH)")
    target = os.path.join(cache_root, f"node-llama-cpp-{NODE_LLAMA_CPP_VERSION}")
    modules = os.path.join(target, "node_modules")
    marker = os.path.join(modules, "@node-llama-cpp", "linux-x64", "package.json")
    if os.path.exists(marker):
        return modules
    os.makedirs(cache_root, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".install-", dir=cache_root)
    try:
        cmd = ["npm", "install", "--prefix", staging, "--no-audit", "--no-fund", "--ignore-scripts",
               "--omit=optional", "--no-save", "--fetch-timeout=60000", "--fetch-retries=1",
               f"node-llama-cpp@{NODE_LLAMA_CPP_VERSION}",
               f"@node-llama-cpp/linux-x64@{NODE_LLAMA_CPP_VERSION}"]
        print("installing llama.cpp binaries:", " ".join(cmd), flush=True)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            skip("npm install node-llama-cpp timed out (is the npm registry reachable?)")
        if p.returncode != 0:
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            skip("npm install node-llama-cpp failed (is the npm registry reachable?): " + " | ".join(tail))
        if os.path.exists(target):
            shutil.rmtree(target)
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return modules


def run_llamacpp(args, modules, request, work):
    req_path = os.path.join(work, "request.json")
    res_path = os.path.join(work, "result.json")
    with open(req_path, "w") as f:
        json.dump(request, f)
    subprocess.run(["node", os.path.join(es.HERE, "llamacpp_run.mjs"), modules, req_path, res_path],
                   check=True, timeout=300)
    with open(res_path) as f:
        return json.load(f)


def max_rel_diff(llama_logits, nielsd_logits, banned=()):
    """(relative, absolute): the largest |difference| over a step's vocabulary, over max(1, largest
    |logit|), worst step; and the largest absolute difference. `banned` ids are left out (llama.cpp's
    "never" bias removes them from its logits)."""
    worst, worst_abs = 0.0, 0.0
    keep = np.ones(len(nielsd_logits[0]), dtype=bool)
    keep[list(banned)] = False
    for got, want in zip(llama_logits, nielsd_logits):
        got = np.array([np.nan if g is None else g for g in got], dtype=np.float64)[keep]
        want = want[keep]
        if np.isnan(got).any():
            raise AssertionError("llama.cpp returned logits for only part of the vocabulary")
        worst = max(worst, float(np.abs(got - want).max() / max(1.0, np.abs(want).max())))
        worst_abs = max(worst_abs, float(np.abs(got - want).max()))
    return worst, worst_abs


class Failures:
    def __init__(self):
        self.items = []

    def check(self, ok, message):
        if not ok:
            self.items.append(message)
            print("FAIL:", message)


def check_model(args, modules, label, model_dir, prompts, failures, dtypes):
    work = os.path.join(args.work_dir, label)
    os.makedirs(work, exist_ok=True)
    import niels_export  # noqa: E402
    cfg = niels_export.read_config(model_dir)
    tok = niels_export.read_tokenizer(model_dir, cfg["V"])
    sp = tok["special"]
    banned = [sp["sys"], sp["usr"], sp["asst"]]
    max_new = 16

    with es.Nielsd(args.nielsd, model_dir, work) as daemon:
        if prompts is None:  # the demo model: its own tokenization of real text, raw and as a turn
            encoded = [list(daemon.client.tokenize(t).ids) for t in TEXTS[:3]]
            prompts = [encoded[0]] + [[sp["usr"]] + e + [sp["eot"], sp["asst"]] for e in encoded]
        raw_ref = [daemon.greedy(p, max_new) for p in prompts]
        chat_ref = [daemon.chat(system, user, 24, sp["eot"]) for system, user in CHATS]
        text_ref = [list(daemon.client.tokenize(t).ids) for t in TEXTS]

    distinct = {t for r in raw_ref for t in r} | {t for _, r in chat_ref for t in r}
    print(f"[{label}] nielsd greedy: {len(distinct)} distinct tokens, e.g. raw {raw_ref[0]}")
    failures.check(len(distinct) >= 4, f"[{label}] greedy outputs hardly vary ({sorted(distinct)}); "
                   "the comparison would prove little")

    for dtype in dtypes:
        gguf = os.path.join(work, f"model-{dtype}.gguf")
        code, out, err = es.run_export(args.exporter, model_dir, "--format", "gguf", gguf,
                                       "--dtype", dtype, "--force")
        if code != 0:
            failures.check(False, f"[{label}] export failed: {err.strip()}")
            continue
        print(out.strip())
        request = {
            "gguf": gguf,
            # f32 export: f32 attention (f32 KV cache, no flash attention), so only the export and
            # the kernels' summation order are measured; f16 export: llama.cpp's defaults (f16 KV
            # cache, flash attention "auto"), what a plain `llama-server -m` runs.
            "kv_type": "F32" if dtype == "f32" else "F16",
            "flash_attention": False if dtype == "f32" else "auto",
            "raw": [{"prompt": p, "max_new": max_new} for p in prompts],
            "chat": [{"messages": [{"role": "system", "content": s}, {"role": "user", "content": u}],
                      "max_new": 24, "banned": banned, "stop": sp["eot"]} for s, u in CHATS],
            "texts": TEXTS,
        }
        res = run_llamacpp(args, modules, request, work)
        meta = res["metadata"]
        sampling = meta["sampling"] or {}
        failures.check(meta["architecture"] == "llama" and meta["context_length"] == cfg["T"]
                       and meta["eos"] == sp["eot"] and meta["vocab_size"] == cfg["V"]
                       and abs(sampling.get("temp", 0) - 0.9) < 1e-6 and sampling.get("top_k") == 50,
                       f"[{label}] GGUF metadata as llama.cpp reads it: {meta}")
        tol = LOGIT_TOL if dtype == "f32" else LOGIT_TOL_F16
        diffs = []
        same = 0
        for prompt, want, got in zip(prompts, raw_ref, res["raw"]):
            tokens = got["tokens"][:len(want)]
            same += tokens == want
            if dtype == "f32":  # f16 rounding may legitimately flip a near-tie
                failures.check(tokens == want, f"[{label}/{dtype}] raw prompt {prompt}: llama.cpp greedy "
                               f"{tokens} != nielsd {want}")
            seq = prompt + got["tokens"][:-1]
            ref = es.inspect_logits(args.inspect, model_dir, seq, os.path.join(work, "logits.bin"))
            diffs.append(max_rel_diff(got["logits"], ref[len(prompt) - 1:]))
        for (system, user), (want_prompt, want), got in zip(CHATS, chat_ref, res["chat"]):
            failures.check(got["prompt"] == want_prompt,
                           f"[{label}/{dtype}] chat template: llama.cpp renders and tokenizes "
                           f"{got['prompt']}, nielsd {want_prompt}")
            same += got["tokens"] == want
            if dtype == "f32":
                failures.check(got["tokens"] == want, f"[{label}/{dtype}] chat reply to {user!r}: "
                               f"llama.cpp {got['tokens']} != nielsd {want}")
            seq = got["prompt"] + got["tokens"][:-1]
            ref = es.inspect_logits(args.inspect, model_dir, seq, os.path.join(work, "logits.bin"))
            diffs.append(max_rel_diff(got["logits"], ref[len(got["prompt"]) - 1:], banned))
        for text, want, got in zip(TEXTS, text_ref, res["texts"]):
            failures.check(got == want, f"[{label}] tokenize {text!r}: llama.cpp {got}, nielsd {want}")
        worst = max(d[0] for d in diffs)
        print(f"[{label}/{dtype}] {same}/{len(diffs)} greedy continuations equal nielsd's; "
              f"max |logit diff| / max(1, max|logit|): {worst:.3g} (tolerance {tol:g}), "
              f"max |logit diff|: {max(d[1] for d in diffs):.3g}")
        failures.check(worst <= tol, f"[{label}/{dtype}] logits differ by {worst:.3g} > {tol:g}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nielsd", required=True)
    p.add_argument("--inspect", required=True)
    p.add_argument("--make-tokenizer", required=True)
    p.add_argument("--exporter", required=True)
    p.add_argument("--demo-model", required=True)
    p.add_argument("--work-dir", required=True)
    args = p.parse_args()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    modules = install_node_llama_cpp(os.path.join(cache, "nielsd-test"))

    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    failures = Failures()
    random_dir = os.path.join(args.work_dir, "random-model")
    es.make_random_model(random_dir, args.make_tokenizer, seed=7, std=0.3)
    check_model(args, modules, "random", random_dir, RANDOM_PROMPTS, failures, ["f32", "f16"])
    check_model(args, modules, "demo", args.demo_model, None, failures, ["f32", "f16"])
    if failures.items:
        print(f"{len(failures.items)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
