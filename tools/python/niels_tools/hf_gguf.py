"""A Hugging Face model directory of the Llama family as the GGUF file llama.cpp's convert_hf_to_gguf.py
makes of it (--outtype f32 or f16), for niels-export (tools/export/README.md, "Hugging Face input").

Read: config.json (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM; what nielsd's loader
accepts, daemon/loaders/hf_config.h), model.safetensors or the shards model.safetensors.index.json
names (F32, F16, BF16), tokenizer.json (byte-level BPE with Llama 3's or Qwen2's pre-tokenizer),
tokenizer_config.json (special tokens, add_*_token, chat template; or chat_template.jinja) and
generation_config.json (sampling defaults), each optional but config.json, the weights and
tokenizer.json.

Written as convert does for these architectures: tensor names blk.N.attn_q.weight ..., llama's q/k
rows (and biases) permuted from rotate-half to ggml's adjacent pairs, a rope_freqs.weight tensor for
rope_scaling "llama3", matrices in the chosen dtype and 1-D tensors in f32, tensors in convert's order
(generated ones, then each shard's in file order, shards sorted by name); the hyperparameter keys,
general.sampling.* from generation_config.json, and the "gpt2" vocabulary: tokens and token types for
ids 0..vocab_size-1 ([PADn] UNUSED for holes), merges, tokenizer.ggml.pre named from the
pre-tokenizer ("llama-bpe", "qwen2"; convert hashes the tokenizer's encoding of a fixed text, which
needs the tokenizers library -- the two pre-tokenizers it tells apart for these models differ in their
split regex and normalizer, which are compared here instead), special ids and add_bos/add_sep as
gguf-py's SpecialVocab derives them, the chat template. general.name is the directory's name
(convert's heuristics also add basename, size label, ... from the name and model card).

Every error is an HfError naming the file and the key or tensor. Python 3 and numpy only.
"""

import json
import math
import mmap
import os

import numpy as np

from niels_tools import gguf_file as gf
from niels_tools import hf_vocab
from niels_tools.hf_common import HfError, read_json  # noqa: F401 (HfError: niels_export catches it here)

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
LLAMA_FTYPE = {"f32": 0, "f16": 1}  # LLAMA_FTYPE_ALL_F32, LLAMA_FTYPE_MOSTLY_F16
ST_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
MAX_HEADER = 100 << 20  # a safetensors header larger than this is refused
MAX_SIZE = 1 << 24      # any size in config.json (vocabulary, width, layers, ...)
LAYER_NAMES = {  # transformers name (after "model.layers.N.") -> llama.cpp's (after "blk.N.")
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}




def is_hf_dir(path):
    """True when path/config.json is a JSON object with an "architectures" key (a niels model
    directory's config.json has none)."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            return "architectures" in json.load(f)
    except (OSError, ValueError, TypeError):
        return False




# ------------------------------------------------------------------------------------------------
# config.json


def _size(raw, path, key, default=None):
    value = raw.get(key)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIZE:
        raise HfError(f"{path}: key \"{key}\" must be a positive integer (at most {MAX_SIZE}), found {value!r}")
    return value


def _rope(raw, path):
    """(rope parameters as convert merges them, llama3 scaling or None)."""
    params = raw.get("rope_parameters", raw.get("rope_scaling")) or {}
    if not isinstance(params, dict):
        raise HfError(f"{path}: key \"rope_scaling\" must be an object or null, found {params!r}")
    params = dict(params)
    if "rope_theta" not in params and raw.get("rope_theta") is not None:
        params["rope_theta"] = raw["rope_theta"]
    rope_type = params.get("rope_type", params.get("type"))
    if not isinstance(rope_type, (str, type(None))) or rope_type not in (None, "default", "llama3"):
        raise HfError(f"{path}: rope type {rope_type!r} is not supported (default, llama3)")
    theta = params.get("rope_theta")
    if theta is not None and (isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0):
        raise HfError(f"{path}: key \"rope_theta\" must be a positive number, found {theta!r}")
    if rope_type == "llama3":  # the keys nielsd's loader requires too (daemon/loaders/hf_config.cc)
        for key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            value = params.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
                raise HfError(f"{path}: rope scaling key \"{key}\" must be a positive number, found {value!r}")
        if params["low_freq_factor"] == params["high_freq_factor"]:
            raise HfError(f"{path}: rope scaling: low_freq_factor equals high_freq_factor")
    return params, rope_type == "llama3"


def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    raw = read_json(path)
    archs = raw.get("architectures")
    if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str) or archs[0] not in ARCHITECTURES:
        raise HfError(f"{path}: architectures {json.dumps(archs)} is not one niels-export converts "
                      f"({', '.join(ARCHITECTURES)})")
    if raw.get("hidden_act", "silu") != "silu":
        raise HfError(f"{path}: key \"hidden_act\" must be \"silu\", found {raw['hidden_act']!r}")
    if raw.get("quantization_config") is not None:
        raise HfError(f"{path}: key \"quantization_config\": quantized checkpoints are not supported")
    if raw.get("use_sliding_window"):
        raise HfError(f"{path}: key \"use_sliding_window\" is true: sliding-window attention is not supported")
    if raw.get("partial_rotary_factor", 1) != 1:
        raise HfError(f"{path}: key \"partial_rotary_factor\" must be 1, found {raw['partial_rotary_factor']!r}")
    cfg = {"path": path, "raw": raw, "hf_arch": archs[0], "arch": ARCHITECTURES[archs[0]]}
    for key, name in (("hidden", "hidden_size"), ("layers", "num_hidden_layers"), ("heads", "num_attention_heads"),
                      ("ffn", "intermediate_size"), ("vocab", "vocab_size")):
        cfg[key] = _size(raw, path, name)
    cfg["kv_heads"] = _size(raw, path, "num_key_value_heads", cfg["heads"])
    cfg["head_dim"] = _size(raw, path, "head_dim", cfg["hidden"] // cfg["heads"])
    if cfg["heads"] % cfg["kv_heads"] or cfg["head_dim"] % 2:
        raise HfError(f"{path}: {cfg['heads']} heads, {cfg['kv_heads']} key/value heads and head_dim "
                      f"{cfg['head_dim']} do not fit (heads a multiple of kv heads, head_dim even)")
    for key in ("max_position_embeddings",):
        if raw.get(key) is not None:
            _size(raw, path, key)
    cfg["rope"], cfg["llama3_rope"] = _rope(raw, path)
    cfg["tied"] = raw.get("tie_word_embeddings", False) is True
    cfg["attention_bias"] = cfg["arch"] == "qwen2" or raw.get("attention_bias") is True
    cfg["mlp_bias"] = cfg["arch"] == "llama" and raw.get("mlp_bias") is True
    return cfg


def expected_shapes(cfg):
    """transformers name -> shape of every tensor the architecture has (lm_head only when untied)."""
    C, F, V, D = cfg["hidden"], cfg["ffn"], cfg["vocab"], cfg["head_dim"]
    H, K = cfg["heads"], cfg["kv_heads"]
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not cfg["tied"]:
        shapes["lm_head.weight"] = (V, C)
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                       p + "self_attn.q_proj.weight": (H * D, C), p + "self_attn.k_proj.weight": (K * D, C),
                       p + "self_attn.v_proj.weight": (K * D, C), p + "self_attn.o_proj.weight": (C, H * D),
                       p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                       p + "mlp.down_proj.weight": (C, F)})
        if cfg["attention_bias"]:
            shapes.update({p + "self_attn.q_proj.bias": (H * D,), p + "self_attn.k_proj.bias": (K * D,),
                           p + "self_attn.v_proj.bias": (K * D,)})
            if cfg["arch"] != "qwen2":
                shapes[p + "self_attn.o_proj.bias"] = (C,)
        if cfg["mlp_bias"]:
            shapes.update({p + "mlp.gate_proj.bias": (F,), p + "mlp.up_proj.bias": (F,),
                           p + "mlp.down_proj.bias": (C,)})
        if cfg["arch"] == "qwen3":
            shapes.update({p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,)})
    return shapes


# ------------------------------------------------------------------------------------------------
# Weights


class SafetensorsFile:
    """One safetensors file, mapped: names in file order and each tensor's (dtype, shape, offset)."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except OSError as e:
            raise HfError(f"{path}: cannot read: {e.strerror}") from e
        if size < 8:
            raise HfError(f"{path}: too short for a safetensors file")
        n = int.from_bytes(self.map[:8], "little")
        if n > min(size - 8, MAX_HEADER):
            raise HfError(f"{path}: header length {n} runs past the end of the file")
        try:
            header = json.loads(bytes(self.map[8:8 + n]))
        except ValueError as e:
            raise HfError(f"{path}: invalid header JSON: {e}") from e
        if not isinstance(header, dict):
            raise HfError(f"{path}: invalid header JSON: expected an object")
        self.tensors = {}
        for name, info in header.items():
            if name != "__metadata__":
                self.tensors[name] = self._entry(name, info, size - 8 - n, 8 + n)

    def _entry(self, name, info, body, base):
        try:
            dtype, shape, (begin, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
            count = int(np.prod(shape, dtype=np.int64)) if all(isinstance(d, int) and d >= 0 for d in shape) else -1
        except (KeyError, TypeError, ValueError):
            raise HfError(f"{self.path}: tensor '{name}' has a malformed header entry") from None
        if dtype not in ST_DTYPES:
            raise HfError(f"{self.path}: tensor '{name}' has dtype {dtype}; expected F32, F16 or BF16")
        if (count < 0 or not isinstance(begin, int) or not isinstance(end, int) or not 0 <= begin <= end <= body
                or end - begin != count * ST_DTYPES[dtype].itemsize):
            raise HfError(f"{self.path}: tensor '{name}' has a byte range that does not fit its shape or the file")
        return dtype, shape, base + begin

    def read(self, name):
        """The tensor as float32 (bf16 widened exactly)."""
        dtype, shape, offset = self.tensors[name]
        a = np.frombuffer(self.map, dtype=ST_DTYPES[dtype], count=int(np.prod(shape, dtype=np.int64)), offset=offset)
        if dtype == "BF16":
            return (a.astype(np.uint32) << 16).view(np.float32).reshape(shape)
        return a.astype(np.float32).reshape(shape)


def weight_files(model_dir):
    """The safetensors files in convert's order: model.safetensors, else the shards the index names,
    sorted by name. Returns (paths, the index's name -> shard map or None)."""
    single = os.path.join(model_dir, "model.safetensors")
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single) and not os.path.exists(index_path):
        return [single], None
    if not os.path.exists(index_path):
        raise HfError(f"{model_dir}: no model.safetensors and no model.safetensors.index.json")
    weight_map = read_json(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise HfError(f"{index_path}: key \"weight_map\" must be an object of file names")
    for shard in weight_map.values():
        if os.path.basename(shard) != shard or shard in ("", ".", ".."):
            raise HfError(f"{index_path}: shard {shard!r} is not a file name of this directory")
    return [os.path.join(model_dir, s) for s in sorted(set(weight_map.values()))], weight_map


def read_weights(model_dir, cfg):
    """[(transformers name, SafetensorsFile)] in convert's order, every tensor checked against the
    architecture (missing, unexpected, misshapen, in two shards, not where the index says)."""
    paths, weight_map = weight_files(model_dir)
    order, where = [], {}
    for path in paths:
        st = SafetensorsFile(path)
        for name in st.tensors:
            if name.endswith("rotary_emb.inv_freq"):
                continue  # a buffer some checkpoints carry; convert skips it too
            if name in where:
                raise HfError(f"{path}: tensor '{name}' is also in {where[name].path}")
            if weight_map is not None and weight_map.get(name) != os.path.basename(path):
                raise HfError(f"{path}: tensor '{name}' is not where model.safetensors.index.json puts it")
            where[name] = st
            order.append((name, st))
    if weight_map is not None:
        for name, shard in weight_map.items():
            if name not in where and not name.endswith("rotary_emb.inv_freq"):
                raise HfError(f"{os.path.join(model_dir, shard)}: missing tensor '{name}' (named by the index)")
    shapes = expected_shapes(cfg)
    for name, st in order:
        if name == "lm_head.weight" and cfg["tied"]:
            shapes[name] = (cfg["vocab"], cfg["hidden"])  # a tied head some files still carry: written as convert does
        if name not in shapes:
            raise HfError(f"{st.path}: tensor '{name}' is not part of {cfg['hf_arch']} as config.json describes it")
        if st.tensors[name][1] != shapes[name]:
            raise HfError(f"{st.path}: tensor '{name}' has shape {list(st.tensors[name][1])}, "
                          f"expected {list(shapes[name])}")
    for name in shapes:
        if name not in where:
            raise HfError(f"{model_dir}: missing tensor '{name}'")
    return order


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, layer, rest = hf.split(".", 3)
    stem, suffix = rest.rsplit(".", 1)
    return f"blk.{layer}.{LAYER_NAMES[stem]}.{suffix}"


def llama_permute(w, heads):
    """convert's LlamaModel.permute: each head's rows from rotate-half order to adjacent pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg):
    """rope_freqs.weight for rope_scaling "llama3": one factor per rotated pair, in float32 as convert
    computes it (torch float32 arithmetic)."""
    p, D = cfg["rope"], cfg["head_dim"]
    f32 = np.float32
    freqs = f32(1.0) / (f32(p.get("rope_theta", 10000.0)) ** (np.arange(0, D, 2, dtype=f32) / f32(D)))
    factor, low = f32(p.get("factor", 8.0)), f32(p.get("low_freq_factor", 1.0))
    high, old_len = f32(p.get("high_freq_factor", 4.0)), f32(p.get("original_max_position_embeddings", 8192))
    low_wavelen, high_wavelen = old_len / low, old_len / high
    out = []
    for freq in freqs:
        wavelen = f32(2 * math.pi) / freq
        if wavelen < high_wavelen:
            out.append(f32(1))
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            out.append(f32(1) / ((f32(1) - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def _loader(cfg, name, st, dtype):
    def load():
        a = st.read(name)
        if cfg["arch"] == "llama" and name.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
            a = llama_permute(a, cfg["heads"])
        elif cfg["arch"] == "llama" and name.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
            a = llama_permute(a, cfg["kv_heads"])
        if not np.isfinite(a).all():
            raise HfError(f"{st.path}: tensor '{name}' contains NaN or Inf values")
        if a.ndim == 1 or dtype == "f32":
            return np.ascontiguousarray(a, dtype="<f4")
        with np.errstate(over="ignore"):
            b = np.ascontiguousarray(a, dtype="<f2")
        if not np.isfinite(b).all():
            raise HfError(f"{st.path}: tensor '{name}' overflows f16 (values beyond +-65504); use --dtype f32")
        return b
    return load


def gguf_tensors(cfg, weights, dtype):
    out = []
    if cfg["arch"] == "llama" and cfg["llama3_rope"]:
        factors = llama3_rope_factors(cfg)
        out.append(gf.Tensor("rope_freqs.weight", factors.shape, gf.GGML_F32, lambda: factors))
    for name, st in weights:
        shape = st.tensors[name][1]
        ggml_type = gf.GGML_F16 if dtype == "f16" and len(shape) == 2 else gf.GGML_F32
        out.append(gf.Tensor(gguf_name(name), shape, ggml_type, _loader(cfg, name, st, dtype)))
    return out


# ------------------------------------------------------------------------------------------------
# Metadata

# generation_config.json key -> (general.sampling.* key, value type), in gguf-py's order.
SAMPLING = (("top_k", "top_k", gf.I32), ("top_p", "top_p", gf.F32), ("min_p", "min_p", gf.F32),
            ("temperature", "temp", gf.F32), ("repetition_penalty", "penalty_repeat", gf.F32))


def sampling_keys(model_dir):
    generation = read_json(os.path.join(model_dir, "generation_config.json"), required=False) or {}
    kv = []
    for hf_key, key, vtype in SAMPLING:
        value = generation.get(hf_key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if vtype == gf.I32 and (not isinstance(value, int) or not -2**31 <= value < 2**31):
            continue
        kv.append((f"general.sampling.{key}", vtype, value))
    return kv


def model_metadata(cfg, model_dir, dtype):
    """general.* and the architecture's keys, in convert's order (hf_vocab adds the tokenizer's)."""
    arch, raw = cfg["arch"], cfg["raw"]
    kv = [("general.architecture", gf.STRING, arch), ("general.type", gf.STRING, "model"),
          ("general.name", gf.STRING, os.path.basename(os.path.abspath(model_dir)))]
    kv += sampling_keys(model_dir)
    kv.append((f"{arch}.block_count", gf.U32, cfg["layers"]))
    if raw.get("max_position_embeddings") is not None:
        kv.append((f"{arch}.context_length", gf.U32, raw["max_position_embeddings"]))
    kv += [(f"{arch}.embedding_length", gf.U32, cfg["hidden"]), (f"{arch}.feed_forward_length", gf.U32, cfg["ffn"]),
           (f"{arch}.attention.head_count", gf.U32, cfg["heads"])]
    if raw.get("num_key_value_heads") is not None:
        kv.append((f"{arch}.attention.head_count_kv", gf.U32, cfg["kv_heads"]))
    if cfg["rope"].get("rope_theta") is not None:
        kv.append((f"{arch}.rope.freq_base", gf.F32, float(cfg["rope"]["rope_theta"])))
    if isinstance(raw.get("rms_norm_eps"), (int, float)) and not isinstance(raw["rms_norm_eps"], bool):
        kv.append((f"{arch}.attention.layer_norm_rms_epsilon", gf.F32, float(raw["rms_norm_eps"])))
    if raw.get("head_dim") is not None:
        kv += [(f"{arch}.attention.key_length", gf.U32, cfg["head_dim"]),
               (f"{arch}.attention.value_length", gf.U32, cfg["head_dim"])]
    kv.append(("general.file_type", gf.U32, LLAMA_FTYPE[dtype]))
    if arch == "llama":
        kv += [("llama.vocab_size", gf.U32, cfg["vocab"]), ("llama.rope.dimension_count", gf.U32, cfg["head_dim"])]
    kv.append(("general.quantization_version", gf.U32, 2))
    return kv


def convert(model_dir, dtype):
    """(metadata, tensors) of the GGUF file convert_hf_to_gguf.py makes of model_dir with --outtype
    dtype ("f32" or "f16"). The tensors load when written. HfError for anything bad or unsupported."""
    if not os.path.isdir(model_dir):
        raise HfError(f"{model_dir}: not a directory")
    cfg = read_config(model_dir)
    weights = read_weights(model_dir, cfg)
    tok = hf_vocab.read_tokenizer(model_dir)
    try:
        vocab = hf_vocab.metadata(tok, cfg["raw"], cfg["vocab"], cfg["arch"])
    except (AttributeError, KeyError, TypeError, ValueError) as e:  # a value of an unexpected JSON type
        raise HfError(f"{tok['path']} (or tokenizer_config.json): unexpected structure: {type(e).__name__}: {e}") from e
    kv = model_metadata(cfg, model_dir, dtype) + vocab
    return cfg, kv, gguf_tensors(cfg, weights, dtype)
