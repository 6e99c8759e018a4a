#!/usr/bin/env python3
"""export_hf ctest: niels-export --format hf-llama against an independent Llama forward, plus the
exporter's refusals.

transformers cannot be installed here, so hf_llama_logits() below implements LlamaForCausalLM's
forward from transformers' documented semantics, reading only the exported directory (config.json,
model.safetensors with transformers' tensor names):
  h = embed_tokens[ids]
  per layer: h += o_proj(attn(RMSNorm_in(h))); h += down(silu(gate(x)) * up(x)), x = RMSNorm_post(h)
  RMSNorm(x) = weight * x / sqrt(mean(x^2) + rms_norm_eps)
  RoPE "rotate half": inv_freq = 1 / rope_theta^(arange(0, D, 2) / D), emb = cat(freqs, freqs),
     q' = q * cos(emb) + rotate_half(q) * sin(emb), rotate_half(x) = cat(-x[D/2:], x[:D/2])
  attention: softmax(q k^T / sqrt(D) + causal mask) v per head
  logits = RMSNorm_final(h) @ embed_tokens^T (tie_word_embeddings)
in float64 with numpy. nielsd's logits for the same ids come from its own model code (niels-inspect:
LoadModelDir + full forward). They must agree within 1e-4, for a random model with a large init
scale and for the shipped demo model. An unpermuted q/k (niels_gpt rotates adjacent pairs) fails.
"""

import argparse
import json
import os
import shutil
import stat
import sys

import numpy as np

import export_support as es

HF_TOL = 1e-4


def read_hf_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    dtypes = {"F32": "<f4", "F16": "<f2"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        a = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=dtypes[info["dtype"]])
        out[name] = a.reshape(info["shape"]).astype(np.float64)
    return out


def hf_llama_logits(hf_dir, ids):
    """LlamaForCausalLM.forward(ids).logits, [n, vocab], from the exported files only."""
    with open(os.path.join(hf_dir, "config.json")) as f:
        config = json.load(f)
    w = read_hf_safetensors(os.path.join(hf_dir, "model.safetensors"))
    H = config["num_attention_heads"]
    D = config.get("head_dim") or config["hidden_size"] // H
    eps = config["rms_norm_eps"]
    n = len(ids)

    def rms_norm(x, weight):
        return weight * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))

    def linear(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    def rotate_half(x):
        return np.concatenate([-x[..., D // 2:], x[..., :D // 2]], axis=-1)

    inv_freq = 1.0 / (config["rope_theta"] ** (np.arange(0, D, 2, dtype=np.float64) / D))
    freqs = np.outer(np.arange(n, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)  # [n, D]
    cos, sin = np.cos(emb)[None], np.sin(emb)[None]
    mask = np.triu(np.full((n, n), -np.inf), k=1)

    h = w["model.embed_tokens.weight"][ids]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"])
        q, k, v = (linear(x, p + f"self_attn.{m}_proj").reshape(n, H, D).transpose(1, 0, 2)
                   for m in ("q", "k", "v"))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(D) + mask
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attn = (scores / scores.sum(axis=-1, keepdims=True)) @ v  # [H, n, D]
        h = h + linear(attn.transpose(1, 0, 2).reshape(n, H * D), p + "self_attn.o_proj")
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"])
        gate = linear(x, p + "mlp.gate_proj")
        h = h + linear(gate / (1.0 + np.exp(-gate)) * linear(x, p + "mlp.up_proj"), p + "mlp.down_proj")
    h = rms_norm(h, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if config["tie_word_embeddings"] else w["lm_head.weight"]
    return h @ head.T


class Failures:
    def __init__(self):
        self.items = []

    def check(self, ok, message):
        if not ok:
            self.items.append(message)
            print("FAIL:", message)


def check_hf_export(args, label, model_dir, ids_list, failures):
    import niels_export  # noqa: E402
    out = os.path.join(args.work_dir, f"{label}-hf")
    code, stdout, stderr = es.run_export(args.exporter, model_dir, "--format", "hf-llama", out)
    failures.check(code == 0, f"[{label}] export failed: {stderr.strip()}")
    if code != 0:
        return
    print(stdout.strip())
    cfg = niels_export.read_config(model_dir)
    tok = niels_export.read_tokenizer(model_dir, cfg["V"])
    sp = tok["special"]
    files = sorted(os.listdir(out))
    failures.check(files == sorted(niels_export.HF_FILES), f"[{label}] files {files}")
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    want = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": cfg["V"],
            "hidden_size": cfg["C"], "intermediate_size": cfg["d_ff"], "num_hidden_layers": cfg["L"],
            "num_attention_heads": cfg["H"], "num_key_value_heads": cfg["H"],
            "max_position_embeddings": cfg["T"], "rope_theta": cfg["rope_theta"], "rms_norm_eps": 1e-5,
            "mlp_bias": True, "attention_bias": False, "tie_word_embeddings": True,
            "hidden_act": "silu", "eos_token_id": sp["eot"]}
    for key, value in want.items():
        failures.check(config.get(key) == value, f"[{label}] config.json {key} = {config.get(key)!r}, "
                       f"expected {value!r}")
    with open(os.path.join(out, "tokenizer_config.json")) as f:
        tcfg = json.load(f)
    with open(os.path.join(out, "generation_config.json")) as f:
        gen = json.load(f)
    failures.check(tcfg["eos_token"] == niels_export.SPECIAL["eot"] and not tcfg["add_bos_token"],
                   f"[{label}] tokenizer_config eos/bos: {tcfg['eos_token']}, {tcfg['add_bos_token']}")
    for role in niels_export.ROLES:
        entry = tcfg["added_tokens_decoder"].get(str(sp[role]), {})
        failures.check(entry.get("content") == niels_export.SPECIAL[role] and entry.get("special"),
                       f"[{label}] added_tokens_decoder[{sp[role]}] = {entry}")
    failures.check(gen["eos_token_id"] == [sp["eot"]] and gen["temperature"] == 0.9
                   and gen["top_k"] == 50 and gen["suppress_tokens"] == [sp["sys"], sp["usr"], sp["asst"]],
                   f"[{label}] generation_config {gen}")
    with open(os.path.join(out, "tokenizer.model"), "rb") as a, \
            open(os.path.join(model_dir, "tokenizer.model"), "rb") as b:
        failures.check(a.read() == b.read(), f"[{label}] tokenizer.model is not a byte copy")

    worst = 0.0
    for ids in ids_list:
        ref = es.inspect_logits(args.inspect, model_dir, ids, os.path.join(args.work_dir, "logits.bin"))
        got = hf_llama_logits(out, ids)
        worst = max(worst, float(np.abs(got - ref).max()))
    print(f"[{label}] max |logit diff| HF-Llama reference vs nielsd over {len(ids_list)} sequences "
          f"({sum(map(len, ids_list))} positions): {worst:.3g} (tolerance {HF_TOL:g})")
    failures.check(worst <= HF_TOL, f"[{label}] HF-Llama logits differ from nielsd's by {worst:.3g}")

    # The reference is sensitive to the RoPE layout: the same export without the q/k permutation
    # (what a naive exporter would write) must be far off.
    permute = niels_export.rotate_half_permutation
    niels_export.rotate_half_permutation = lambda w, H: w
    try:
        cfg_, tensors, tok_ = niels_export.load_model(model_dir)
        naive = os.path.join(args.work_dir, f"{label}-hf-unpermuted")
        niels_export.write_hf(cfg_, tensors, tok_, naive, "f32", True)
    finally:
        niels_export.rotate_half_permutation = permute
    ids = max(ids_list, key=len)
    ref = es.inspect_logits(args.inspect, model_dir, ids, os.path.join(args.work_dir, "logits.bin"))
    naive_diff = float(np.abs(hf_llama_logits(naive, ids) - ref).max())
    print(f"[{label}] without the q/k permutation: max |logit diff| {naive_diff:.3g}")
    failures.check(naive_diff > 100 * HF_TOL, f"[{label}] the reference does not notice an "
                   f"unpermuted q/k ({naive_diff:.3g})")


def check_refusals(args, model_dir, failures):
    """Each bad input: exit 1, one 'niels-export: error:' line, and no file or temp file left."""
    work = os.path.join(args.work_dir, "refusals")
    os.makedirs(work)

    def variant(name, edit):
        d = os.path.join(work, name)
        shutil.copytree(model_dir, d)
        edit(d)
        return d

    def add_tensor(name, value):
        def edit(d):
            t = es.read_model_tensors(d)
            t[name] = value(t)
            es.write_safetensors(os.path.join(d, "model.safetensors"), t)
        return edit

    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    C = cfg["C"]
    cases = [
        ("qkv-bias", add_tensor("blocks.0.attn.qkv.bias", lambda t: np.zeros(3 * C, np.float32)),
         "blocks.0.attn.qkv.bias"),
        ("untied-head", add_tensor("lm_head.weight", lambda t: t["tok_emb.weight"] + 1.0), "untied"),
        ("huge-for-f16", add_tensor("tok_emb.weight", lambda t: t["tok_emb.weight"] * 1e6), "overflows f16"),
        ("no-tokenizer", lambda d: os.unlink(os.path.join(d, "tokenizer.model")), "tokenizer.model"),
        ("broken-charsmap", lambda d: es.edit_tokenizer(d, normalizer={2: b"\xff\xff\x00\x00abcd"}),
         "precompiled_charsmap"),
    ]
    for name, edit, expect in cases:
        d = variant(name, edit)
        for fmt, out in (("gguf", os.path.join(work, name + ".gguf")), ("hf-llama", os.path.join(work, name + "-hf"))):
            dtype = "f16" if name == "huge-for-f16" else "f32"
            code, _, err = es.run_export(args.exporter, d, "--format", fmt, out, "--dtype", dtype)
            lines = err.strip().splitlines()
            failures.check(code == 1 and len(lines) == 1 and lines[0].startswith("niels-export: error:")
                           and expect in lines[0], f"refusal {name} ({fmt}): exit {code}, stderr {err!r}")
            failures.check(not os.path.exists(out), f"refusal {name} ({fmt}) left {out}")
    # A unigram tokenizer (the tiny BPE model retyped): exported to both formats (GGUF: llama.cpp's
    # "t5" vocabulary). The unigram settings llama.cpp's tokenizer does not reproduce (export_gguf
    # measures each) and word/char models: GGUF refused, the Hugging Face export keeps the
    # SentencePiece model itself (accepted).
    import niels_export  # noqa: E402
    unigram = {3: 1}  # trainer_spec.model_type = UNIGRAM
    code, _, err = es.run_export(args.exporter, variant("unigram", lambda d: es.edit_tokenizer(d, trainer=unigram)),
                                 "--format", "gguf", os.path.join(work, "unigram.gguf"))
    failures.check(code == 0, f"unigram gguf: exit {code}, {err!r}")
    pieces = niels_export.read_tokenizer(model_dir, cfg["V"])["pieces"]
    piece = next(p for p in pieces[::-1] if p.startswith("\u2581") and len(p) > 2)  # a normal piece
    gguf_refusals = [
        ("unigram-user-defined", {"piece_types": {piece: 4}}, "user-defined pieces"),
        ("unigram-unused", {"piece_types": {piece: 5}}, "UNUSED pieces"),
        ("unigram-no-dummy-prefix", {"normalizer": {3: 0}}, "add_dummy_prefix"),
        ("unigram-whitespace-suffix", {"trainer": {3: 1, 24: 1}}, "treat_whitespace_as_suffix"),
        ("unigram-unescaped", {"normalizer": {5: 0}}, "escape_whitespaces"),
        ("word-model", {"trainer": {3: 3}}, "word or char"),
    ]
    for name, edit, expect in gguf_refusals:
        edit.setdefault("trainer", unigram)
        d = variant(name, lambda d, edit=edit: es.edit_tokenizer(d, **edit))
        gguf = os.path.join(work, name + ".gguf")
        code, _, err = es.run_export(args.exporter, d, "--format", "gguf", gguf)
        lines = err.strip().splitlines()
        failures.check(code == 1 and len(lines) == 1 and lines[0].startswith("niels-export: error:")
                       and expect in lines[0] and "hf-llama" in lines[0] and not os.path.exists(gguf),
                       f"refusal {name} (gguf): exit {code}, stderr {err!r}")
        code, _, err = es.run_export(args.exporter, d, "--format", "hf-llama", os.path.join(work, name + "-hf"))
        failures.check(code == 0, f"{name} hf-llama: exit {code}, {err!r}")

    leftovers = [f for f in os.listdir(work) if f.startswith(".")]
    failures.check(not leftovers, f"temporary files left behind: {leftovers}")

    # An existing output is kept unless --force; the file written is readable by others (umask).
    gguf = os.path.join(work, "exists.gguf")
    with open(gguf, "w") as f:
        f.write("keep me")
    code, _, err = es.run_export(args.exporter, model_dir, "--format", "gguf", gguf)
    failures.check(code == 1 and "--force" in err and open(gguf).read() == "keep me",
                   f"existing output: exit {code}, {err!r}")
    code, _, err = es.run_export(args.exporter, model_dir, "--format", "gguf", gguf, "--force")
    mode = stat.S_IMODE(os.stat(gguf).st_mode)
    failures.check(code == 0 and open(gguf, "rb").read(4) == b"GGUF" and mode & 0o044 == 0o044,
                   f"--force: exit {code}, {err!r}, mode {oct(mode)}")


def check_sampling_defaults(args, failures):
    """The exporter's sampling defaults are nielsd's, defined in common/defaults.h."""
    import re
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.exporter)))
    import niels_export  # noqa: E402
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.exporter))))
    with open(os.path.join(root, "common", "defaults.h")) as f:
        text = f.read()

    def constant(name):
        match = re.search(r"k%s = ([0-9.]+)f?;" % name, text)
        return float(match.group(1)) if match else None

    expected = {"temperature": constant("DefaultTemperature"), "top_k": constant("DefaultTopK"),
                "repetition_penalty": constant("DefaultRepetitionPenalty"),
                "max_new_tokens": constant("DefaultMaxNewTokens"),
                # nielsd's top-p 0 means off, which is top_p 1.0 for llama.cpp and transformers.
                "top_p": 1.0 if constant("DefaultTopP") == 0 else constant("DefaultTopP")}
    for key, value in expected.items():
        failures.check(value is not None and niels_export.SAMPLING_DEFAULTS.get(key) == value,
                       f"SAMPLING_DEFAULTS[{key!r}] = {niels_export.SAMPLING_DEFAULTS.get(key)!r}, "
                       f"common/defaults.h says {value!r}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--inspect", required=True)
    p.add_argument("--make-tokenizer", required=True)
    p.add_argument("--exporter", required=True)
    p.add_argument("--demo-model", required=True)
    p.add_argument("--work-dir", required=True)
    args = p.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    os.umask(0o022)
    failures = Failures()

    random_dir = os.path.join(args.work_dir, "random-model")
    # std 0.2 (10x the usual init): peaked attention, logits up to ~7; nielsd computes in f32, and
    # its own rounding against this f64 reference grows with the scale (~7e-5 at std 0.3).
    cfg = es.make_random_model(random_dir, args.make_tokenizer, seed=11, std=0.2)
    rng = np.random.default_rng(3)
    ids = [rng.integers(0, cfg["V"], size=n).tolist() for n in (1, 9, 40, cfg["T"])]
    check_hf_export(args, "random", random_dir, ids, failures)
    demo_ids = [[3, 10, 20, 30, 6, 4, 300, 301, 302, 6, 5], list(range(7, 7 + 64))]
    check_hf_export(args, "demo", args.demo_model, demo_ids, failures)
    check_refusals(args, random_dir, failures)
    check_sampling_defaults(args, failures)
    if failures.items:
        print(f"{len(failures.items)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
