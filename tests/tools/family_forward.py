#!/usr/bin/python3
"""A numpy forward pass of the Llama family, read from a Hugging Face directory.

Written from transformers' modeling code (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM),
in float64: RMSNorm x * rsqrt(mean(x^2) + eps) * w; q/k/v projections (with biases for Qwen2);
Qwen3's RMSNorm over each head of q and k before RoPE; rotate-half RoPE with cos/sin of
position * inv_freq, inv_freq = theta^(-2i/D), and for rope_scaling "llama3" the frequency bands
of _compute_llama3_parameters; grouped-query attention (repeat_kv: query head h reads kv head
h // (heads / kv_heads)) with a causal mask and 1/sqrt(D) scaling; SwiGLU down(silu(gate(x)) * up(x));
the output head lm_head, or embed_tokens when tie_word_embeddings.

    from family_forward import load_hf, forward
    model = load_hf("model_dir")            # config + weights (single or sharded safetensors)
    logits = forward(model, [ids...])       # [len(ids), vocab] float64

forward()'s keyword arguments switch one feature off at a time (llama3 rope scaling, the q/k/v
biases, Qwen3's q/k norms, the GQA head mapping): the reference test uses them to show that its
comparison with llama.cpp notices each one.

Debian's python3 and numpy only.
"""

import json
import math
import os
import struct

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = body[begin:end]
        if info["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif info["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        elif info["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        else:
            raise ValueError(f"{path}: {name}: dtype {info['dtype']}")
        out[name] = a.reshape(info["shape"])
    return out


def load_hf(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    weights = {}
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        for name in files:
            weights.update(read_safetensors(os.path.join(model_dir, name)))
    else:
        weights = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    return {"config": config, "weights": weights}


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def inv_freq(config, head_dim, llama3_scaling=True):
    base = config.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    scaling = config.get("rope_scaling") or {}
    if llama3_scaling and scaling.get("rope_type", scaling.get("type")) == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv = np.where(medium, smoothed, scaled)
    return inv


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def forward(model, ids, llama3_scaling=True, qkv_bias=True, qk_norm=True, gqa_repeat=True, round_inputs=None):
    """Logits [T, vocab] of the token ids, every position (teacher forcing), float64. The switches
    are for negative checks: False drops that feature (gqa_repeat=False maps query head h to kv
    head h % kv_heads instead of h // (heads / kv_heads)). round_inputs, a function, is applied to
    the input of every weight matrix product (to model an engine that rounds activations)."""
    r = round_inputs or (lambda a: a)
    c, w = model["config"], model["weights"]
    H, K, C = c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"]
    D = c.get("head_dim") or C // H
    eps = c["rms_norm_eps"]
    T = len(ids)
    x = w["model.embed_tokens.weight"][np.asarray(ids)]  # [T, C]
    angles = np.arange(T, dtype=np.float64)[:, None] * inv_freq(c, D, llama3_scaling)[None, :]  # [T, D/2]
    cos = np.cos(np.concatenate([angles, angles], axis=-1))[:, None, :]  # [T, 1, D]
    sin = np.sin(np.concatenate([angles, angles], axis=-1))[:, None, :]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."

        def linear(h, name):
            y = r(h) @ w[p + name + ".weight"].T
            bias = w.get(p + name + ".bias")
            return y if bias is None or not qkv_bias else y + bias

        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(h, "self_attn.q_proj").reshape(T, H, D)
        k = linear(h, "self_attn.k_proj").reshape(T, K, D)
        v = linear(h, "self_attn.v_proj").reshape(T, K, D)
        if p + "self_attn.q_norm.weight" in w and qk_norm:  # Qwen3: per-head RMSNorm before RoPE
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = H // K
        spread = np.repeat if gqa_repeat else lambda a, n, axis: np.tile(a, (1, n, 1))
        k = spread(k, group, axis=1)  # repeat_kv: [T, H, D]
        v = spread(v, group, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / math.sqrt(D) + mask  # [H, T, T]
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", scores, v).reshape(T, H * D)
        x = x + linear(attn, "self_attn.o_proj")
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = linear(h, "mlp.gate_proj")
        x = x + linear(gate / (1 + np.exp(-gate)) * linear(h, "mlp.up_proj"), "mlp.down_proj")
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight")
    if head is None or c.get("tie_word_embeddings", False):
        head = w["model.embed_tokens.weight"]
    return r(x) @ head.T
