#!/usr/bin/python3
"""niels-export: hand a nielsd model directory to an engine built for many GPUs or machines.

Usage:
  niels_export.py MODEL_DIR --format gguf OUT.gguf [--dtype f32|f16] [--force]
  niels_export.py MODEL_DIR --format hf-llama OUT_DIR [--dtype f32|f16] [--force]

A niels_gpt model is a Llama (docs in tools/export/README.md): RMSNorm (eps 1e-5), RoPE, SwiGLU
with biases, a fused bias-free qkv projection, an output head tied to the embedding.

gguf      a "llama"-architecture GGUF v3 file for llama.cpp (llama-server, llama-cli, node-llama-cpp
          and everything else built on libllama). llama.cpp's normal RoPE rotates ADJACENT pairs,
          as niels_gpt does, so q and k are stored unpermuted. The output head is left out (llama.cpp
          falls back to token_embd). The SentencePiece vocabulary goes in with scores and token
          types (the four special tokens as CONTROL, so text never turns into them), eos = eot, no
          BOS added, and a Jinja tokenizer.chat_template rendering nielsd's token-native template.
          A BPE tokenizer becomes llama.cpp's "llama" vocabulary, a unigram one its "t5" vocabulary
          (with SentencePiece's precompiled normalization map); unigram settings llama.cpp cannot
          reproduce are refused (see unigram_refusal).
hf-llama  a Hugging Face directory for LlamaForCausalLM (transformers, vLLM, TGI): config.json,
          model.safetensors (q/k rows permuted for transformers' rotate-half RoPE),
          tokenizer.model, tokenizer_config.json (chat template, special tokens),
          special_tokens_map.json, generation_config.json (nielsd's sampling defaults).

Needs Python 3 and numpy only (Debian: python3-numpy). Exit status 0 on success; 1 with one
"niels-export: error: ..." line on stderr when the model cannot be exported faithfully or an input is
bad; nothing is left half-written (files go to a temporary name first and are renamed).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

# The shared tools module: beside this file in the source tree, in dist-packages once installed.
_SOURCE_TREE_MODULES = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python")
if os.path.isdir(os.path.join(_SOURCE_TREE_MODULES, "niels_tools")):
    sys.path.insert(0, _SOURCE_TREE_MODULES)
from niels_tools import gguf_file, hf_gguf, spm_model  # noqa: E402

PROG = "niels-export"

ROLES = spm_model.ROLES
SPECIAL = spm_model.SPECIAL_TOKENS
RMS_EPS = 1e-5  # niels_gpt's RMSNorm epsilon (fixed by the architecture, not in config.json)
# nielsd's sampling defaults (common/defaults.h; the export_hf test checks they agree).
SAMPLING_DEFAULTS = {"temperature": 0.9, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.0,
                     "max_new_tokens": 256}


class ExportError(Exception):
    """A problem with the inputs or a model we cannot represent; printed as one line."""


# ----------------------------------------------------------------------------------------------
# Reading a model directory (the checks nielsd's loader makes, see daemon/model/model_dir.h)


def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except OSError as e:
        raise ExportError(f"{path}: cannot read: {e.strerror}") from e
    except ValueError as e:
        raise ExportError(f"{path}: invalid JSON: {e}") from e
    if not isinstance(raw, dict):
        raise ExportError(f"{path}: invalid JSON: expected an object")
    cfg = {}
    for key in ("V", "T", "C", "L", "H", "d_ff"):
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ExportError(f"{path}: key \"{key}\" must be a positive integer, found {value!r}")
        cfg[key] = value
    theta = raw.get("rope_theta")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise ExportError(f"{path}: key \"rope_theta\" must be a positive number, found {theta!r}")
    cfg["rope_theta"] = float(theta)
    if cfg["C"] % cfg["H"] or (cfg["C"] // cfg["H"]) % 2:
        raise ExportError(f"{path}: C={cfg['C']} must split into H={cfg['H']} heads of even size")
    name = raw.get("name")
    cfg["name"] = name if isinstance(name, str) and name else os.path.basename(os.path.abspath(model_dir))
    return cfg


SAFETENSORS_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}


def read_safetensors(path):
    """name -> float32 array. Only F32/F16/BF16 (what nielsd loads)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ExportError(f"{path}: cannot read: {e.strerror}") from e
    if len(data) < 8:
        raise ExportError(f"{path}: too short for a safetensors file")
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        raise ExportError(f"{path}: header length {n} runs past the end of the file")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise ExportError(f"{path}: invalid header JSON: {e}") from e
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise ExportError(f"{path}: tensor '{name}' has dtype {info.get('dtype')}; "
                              "expected F32, F16 or BF16")
        shape = tuple(info["shape"])
        begin, end = info["data_offsets"]
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(body) or end - begin != count * dtype.itemsize:
            raise ExportError(f"{path}: tensor '{name}' has a byte range that does not fit its shape "
                              "or the file")
        a = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape)
        if info["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = a.astype(np.float32)
    return tensors


def expected_shapes(cfg):
    V, C, F = cfg["V"], cfg["C"], cfg["d_ff"]
    shapes = {"tok_emb.weight": (V, C), "ln_f.weight": (C,)}
    for i in range(cfg["L"]):
        p = f"blocks.{i}."
        shapes.update({p + "ln1.weight": (C,), p + "ln2.weight": (C,),
                       p + "attn.qkv.weight": (3 * C, C), p + "attn.proj.weight": (C, C),
                       p + "mlp.fc_a.weight": (F, C), p + "mlp.fc_a.bias": (F,),
                       p + "mlp.fc_g.weight": (F, C), p + "mlp.fc_g.bias": (F,),
                       p + "mlp.fc_out.weight": (C, F), p + "mlp.fc_out.bias": (C,)})
    return shapes


def read_weights(model_dir, cfg):
    path = os.path.join(model_dir, "model.safetensors")
    tensors = read_safetensors(path)
    lm_head = tensors.pop("lm_head.weight", None)
    shapes = expected_shapes(cfg)
    for name in sorted(tensors):
        if name not in shapes:
            # e.g. a qkv or proj bias: neither format's Llama would apply it the way we do.
            raise ExportError(f"{path}: tensor '{name}' is not part of the niels_gpt architecture; "
                              "it cannot be exported faithfully")
    for name, shape in shapes.items():
        if name not in tensors:
            raise ExportError(f"{path}: missing tensor '{name}'")
        if tensors[name].shape != shape:
            raise ExportError(f"{path}: tensor '{name}' has shape {list(tensors[name].shape)}, "
                              f"expected {list(shape)}")
        if not np.isfinite(tensors[name]).all():
            raise ExportError(f"{path}: tensor '{name}' contains NaN or Inf values")
    if lm_head is not None and not np.array_equal(lm_head, tensors["tok_emb.weight"]):
        raise ExportError(f"{path}: lm_head.weight differs from tok_emb.weight (untied head)")
    return tensors


# The tokenizer: tokenizer.model read by the shared niels_tools.spm_model.
SPM_NORMAL, SPM_UNKNOWN, SPM_CONTROL = spm_model.NORMAL, spm_model.UNKNOWN, spm_model.CONTROL
SPM_USER_DEFINED, SPM_UNUSED, SPM_BYTE = spm_model.USER_DEFINED, spm_model.UNUSED, spm_model.BYTE
SPM_UNIGRAM, SPM_BPE = spm_model.UNIGRAM, spm_model.BPE


def read_tokenizer(model_dir, vocab_size):
    """The SentencePiece model: pieces, scores, types, special ids and the options engines need."""
    path = os.path.join(model_dir, "tokenizer.model")
    try:
        model = spm_model.read_spm_model(path)
        special = model.special_ids()
    except spm_model.SpmModelError as e:
        raise ExportError(str(e)) from e
    if len(model.pieces) != vocab_size:
        raise ExportError(f"{path}: {len(model.pieces)} pieces but config.json V={vocab_size}")
    tok = {"path": path, "pieces": model.pieces, "scores": model.scores, "types": model.types,
           "model_type": model.model_type, "byte_fallback": model.byte_fallback,
           "add_dummy_prefix": model.add_dummy_prefix, "normalizer": model.normalizer,
           "precompiled_charsmap": model.precompiled_charsmap,
           "remove_extra_whitespaces": model.remove_extra_whitespaces,
           "escape_whitespaces": model.escape_whitespaces,
           "treat_whitespace_as_suffix": model.treat_whitespace_as_suffix, "special": special}
    tok["unk"] = tok["types"].index(SPM_UNKNOWN) if SPM_UNKNOWN in tok["types"] else 0
    tok["bos"] = tok["pieces"].index("<s>") if "<s>" in tok["pieces"] else None
    return tok


def load_model(model_dir):
    if not os.path.isdir(model_dir):
        raise ExportError(f"{model_dir}: not a directory")
    cfg = read_config(model_dir)
    tensors = read_weights(model_dir, cfg)
    tok = read_tokenizer(model_dir, cfg["V"])
    return cfg, tensors, tok


# ----------------------------------------------------------------------------------------------
# Shared by both formats


def chat_template():
    """Jinja rendering of nielsd's template: [role] + content + [eot] per message, then [asst]."""
    s = SPECIAL
    return ("{%- for message in messages -%}"
            "{%- if message['role'] == 'system' -%}" + s["sys"] +
            "{%- elif message['role'] == 'user' -%}" + s["usr"] +
            "{%- elif message['role'] == 'assistant' -%}" + s["asst"] +
            "{%- else -%}{{- raise_exception('roles are system, user and assistant') -}}"
            "{%- endif -%}"
            "{{- message['content'] -}}" + s["eot"] +
            "{%- endfor -%}"
            "{%- if add_generation_prompt -%}" + s["asst"] + "{%- endif -%}")


def split_qkv(qkv, C):
    return qkv[:C], qkv[C:2 * C], qkv[2 * C:]


def rotate_half_permutation(w, H):
    """Rows of a q or k projection reordered from adjacent-pair RoPE to rotate-half RoPE.

    niels_gpt rotates (x[2i], x[2i+1]) within each head; transformers' Llama rotates
    (x[i], x[i + D/2]). Putting row 2i of a head at i and row 2i+1 at D/2 + i makes the two agree
    (attention scores are invariant under the same permutation of q and k dims).
    """
    out_dim, in_dim = w.shape
    D = out_dim // H
    return w.reshape(H, D // 2, 2, in_dim).transpose(0, 2, 1, 3).reshape(out_dim, in_dim)


def cast(a, dtype, name):
    if dtype == "f32":
        return np.ascontiguousarray(a, dtype="<f4")
    with np.errstate(over="ignore"):
        b = np.ascontiguousarray(a, dtype="<f2")
    if not np.isfinite(b).all():
        raise ExportError(f"tensor '{name}' overflows f16 (values beyond +-65504); use --dtype f32")
    return b


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


class AtomicFile:
    """Opens a temporary file next to `path`; commit() renames it into place, else it is removed."""

    def __init__(self, path):
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        fd, self.tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; use what open() would
        self.file = os.fdopen(fd, "wb")

    def commit(self):
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.tmp, self.path)

    def abort(self):
        if not self.file.closed:
            self.file.close()
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)


# ----------------------------------------------------------------------------------------------
# GGUF (written by niels_tools.gguf_file, the writer the Hugging Face export uses too)

GGUF_ALIGNMENT = gguf_file.ALIGNMENT
GGUF_U8, GGUF_U32, GGUF_I32, GGUF_F32 = gguf_file.U8, gguf_file.U32, gguf_file.I32, gguf_file.F32
GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = gguf_file.BOOL, gguf_file.STRING, gguf_file.ARRAY
LLAMA_FTYPE_ALL_F32, LLAMA_FTYPE_MOSTLY_F16 = 0, 1
# llama.cpp's token types (llama_token_type): the same numbers as SentencePiece's piece types.
GGUF_TOKEN_TYPE = {SPM_NORMAL: 1, SPM_UNKNOWN: 2, SPM_CONTROL: 3, SPM_USER_DEFINED: 4,
                   SPM_UNUSED: 5, SPM_BYTE: 6}


def gguf_tensors(cfg, tensors, dtype):
    """(name, array) in llama.cpp's names. Matrices in `dtype`; norms and biases stay f32."""
    C = cfg["C"]
    out = [("token_embd.weight", cast(tensors["tok_emb.weight"], dtype, "tok_emb.weight"))]
    for i in range(cfg["L"]):
        p, b = f"blocks.{i}.", f"blk.{i}."
        q, k, v = split_qkv(tensors[p + "attn.qkv.weight"], C)
        out += [
            (b + "attn_norm.weight", cast(tensors[p + "ln1.weight"], "f32", p + "ln1.weight")),
            (b + "attn_q.weight", cast(q, dtype, p + "attn.qkv.weight")),  # adjacent-pair RoPE:
            (b + "attn_k.weight", cast(k, dtype, p + "attn.qkv.weight")),  # no permutation
            (b + "attn_v.weight", cast(v, dtype, p + "attn.qkv.weight")),
            (b + "attn_output.weight", cast(tensors[p + "attn.proj.weight"], dtype, p + "attn.proj.weight")),
            (b + "ffn_norm.weight", cast(tensors[p + "ln2.weight"], "f32", p + "ln2.weight")),
            # fc_out(silu(fc_g(x)) * fc_a(x)): gate = fc_g, up = fc_a, down = fc_out
            (b + "ffn_gate.weight", cast(tensors[p + "mlp.fc_g.weight"], dtype, p + "mlp.fc_g.weight")),
            (b + "ffn_gate.bias", cast(tensors[p + "mlp.fc_g.bias"], "f32", p + "mlp.fc_g.bias")),
            (b + "ffn_up.weight", cast(tensors[p + "mlp.fc_a.weight"], dtype, p + "mlp.fc_a.weight")),
            (b + "ffn_up.bias", cast(tensors[p + "mlp.fc_a.bias"], "f32", p + "mlp.fc_a.bias")),
            (b + "ffn_down.weight", cast(tensors[p + "mlp.fc_out.weight"], dtype, p + "mlp.fc_out.weight")),
            (b + "ffn_down.bias", cast(tensors[p + "mlp.fc_out.bias"], "f32", p + "mlp.fc_out.bias")),
        ]
    out.append(("output_norm.weight", cast(tensors["ln_f.weight"], "f32", "ln_f.weight")))
    # No output.weight: llama.cpp uses token_embd for a missing output head (tied).
    return out


def unigram_refusal(tok):
    """Why llama.cpp's unigram tokenizer would not give SentencePiece's ids for this unigram model,
    or None. Each reason was measured (tools/export/README.md, "Unigram tokenizers")."""
    extra = [p for p, t in zip(tok["pieces"], tok["types"]) if t == SPM_USER_DEFINED and p not in SPECIAL.values()]
    if extra:
        return (f"user-defined pieces besides the special tokens ({extra[0]!r}, ...): llama.cpp scores them 0 "
                "and moves the whitespace around them, SentencePiece scores them by length")
    if SPM_UNUSED in tok["types"]:
        return "UNUSED pieces: SentencePiece never produces them from text, llama.cpp does"
    if not tok["add_dummy_prefix"] and tok["remove_extra_whitespaces"]:
        return ("add_dummy_prefix is off: llama.cpp's unigram tokenizer still puts a space before the first "
                "word when remove_extra_whitespaces is on")
    if tok["treat_whitespace_as_suffix"]:
        return "treat_whitespace_as_suffix: llama.cpp puts whitespace before words, never after"
    if not tok["escape_whitespaces"]:
        return "escape_whitespaces is off: llama.cpp always escapes spaces as U+2581"
    return None


def gguf_vocabulary(tok):
    """tokenizer.ggml.model and the keys only that vocabulary type has."""
    if tok["model_type"] == SPM_BPE:
        # llama.cpp's "llama" (SPM) tokenizer merges pieces by score: SentencePiece BPE, without
        # SentencePiece's normalizer.
        return "llama", []
    if tok["model_type"] == SPM_UNIGRAM:
        # llama.cpp's "t5" (UGM) tokenizer: SentencePiece's unigram Viterbi segmentation after its
        # normalizer (the precompiled character map and the whitespace options), but no byte
        # fallback: a character without a piece becomes <unk> (a run of them one <unk>).
        reason = unigram_refusal(tok)
        if reason is not None:
            raise ExportError(f"{tok['path']}: this SentencePiece unigram model cannot be exported to GGUF "
                              f"faithfully ({reason}); use --format hf-llama")
        keys = [("tokenizer.ggml.remove_extra_whitespaces", GGUF_BOOL, tok["remove_extra_whitespaces"])]
        if tok["precompiled_charsmap"]:  # none for the "identity" rule (llama.cpp wants none then)
            keys.append(("tokenizer.ggml.precompiled_charsmap", GGUF_ARRAY,
                         (GGUF_U8, tok["precompiled_charsmap"])))
        return "t5", keys
    raise ExportError(f"{tok['path']}: a SentencePiece model of type {tok['model_type']} (word or char); "
                      "only BPE and unigram models can be exported to GGUF (use --format hf-llama)")


def gguf_metadata(cfg, tok, dtype):
    vocabulary, vocabulary_keys = gguf_vocabulary(tok)
    types = []
    for i, t in enumerate(tok["types"]):
        if i in tok["special"].values():
            t = SPM_CONTROL  # never matched in plain text, as in nielsd (daemon/text/tokenizer.cc)
        types.append(GGUF_TOKEN_TYPE.get(t, 1))
    s = tok["special"]
    kv = [
        ("general.architecture", GGUF_STRING, "llama"),
        ("general.name", GGUF_STRING, cfg["name"]),
        ("general.alignment", GGUF_U32, GGUF_ALIGNMENT),
        ("general.file_type", GGUF_U32, LLAMA_FTYPE_ALL_F32 if dtype == "f32" else LLAMA_FTYPE_MOSTLY_F16),
        ("general.sampling.temp", GGUF_F32, SAMPLING_DEFAULTS["temperature"]),
        ("general.sampling.top_k", GGUF_I32, SAMPLING_DEFAULTS["top_k"]),
        ("general.sampling.top_p", GGUF_F32, SAMPLING_DEFAULTS["top_p"]),
        ("general.sampling.penalty_repeat", GGUF_F32, SAMPLING_DEFAULTS["repetition_penalty"]),
        ("llama.vocab_size", GGUF_U32, cfg["V"]),
        ("llama.context_length", GGUF_U32, cfg["T"]),
        ("llama.embedding_length", GGUF_U32, cfg["C"]),
        ("llama.block_count", GGUF_U32, cfg["L"]),
        ("llama.feed_forward_length", GGUF_U32, cfg["d_ff"]),
        ("llama.attention.head_count", GGUF_U32, cfg["H"]),
        ("llama.attention.head_count_kv", GGUF_U32, cfg["H"]),
        ("llama.attention.layer_norm_rms_epsilon", GGUF_F32, RMS_EPS),
        ("llama.rope.dimension_count", GGUF_U32, cfg["C"] // cfg["H"]),
        ("llama.rope.freq_base", GGUF_F32, cfg["rope_theta"]),
        ("tokenizer.ggml.model", GGUF_STRING, vocabulary),
        ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, tok["pieces"])),
        ("tokenizer.ggml.scores", GGUF_ARRAY, (GGUF_F32, tok["scores"])),
        ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, types)),
        ("tokenizer.ggml.unknown_token_id", GGUF_U32, tok["unk"]),
        ("tokenizer.ggml.eos_token_id", GGUF_U32, s["eot"]),
        ("tokenizer.ggml.eot_token_id", GGUF_U32, s["eot"]),
        ("tokenizer.ggml.add_bos_token", GGUF_BOOL, False),
        ("tokenizer.ggml.add_eos_token", GGUF_BOOL, False),
        ("tokenizer.ggml.add_space_prefix", GGUF_BOOL, tok["add_dummy_prefix"]),
        ("tokenizer.chat_template", GGUF_STRING, chat_template()),
    ] + vocabulary_keys
    if tok["bos"] is not None:
        kv.append(("tokenizer.ggml.bos_token_id", GGUF_U32, tok["bos"]))
    return kv


def write_gguf_file(kv, tensors, out_path):
    """kv and gguf_file.Tensor items -> out_path, atomically; returns the file's size."""
    out = AtomicFile(out_path)
    try:
        size = gguf_file.write(out.file, kv, tensors)
        out.commit()
    except ValueError as e:
        out.abort()
        raise ExportError(f"{out_path}: {e}") from e
    except BaseException:
        out.abort()
        raise
    return size


def write_gguf(cfg, tensors, tok, out_path, dtype):
    kv = gguf_metadata(cfg, tok, dtype)
    items = [gguf_file.Tensor(name, a.shape, gguf_file.GGML_F32 if a.dtype == np.float32 else gguf_file.GGML_F16,
                              lambda a=a: a) for name, a in gguf_tensors(cfg, tensors, dtype)]
    return write_gguf_file(kv, items, out_path)


# ----------------------------------------------------------------------------------------------
# Hugging Face Llama


def hf_tensors(cfg, tensors, dtype):
    C, H = cfg["C"], cfg["H"]
    out = {"model.embed_tokens.weight": cast(tensors["tok_emb.weight"], dtype, "tok_emb.weight"),
           "model.norm.weight": cast(tensors["ln_f.weight"], dtype, "ln_f.weight")}
    for i in range(cfg["L"]):
        p, b = f"blocks.{i}.", f"model.layers.{i}."
        q, k, v = split_qkv(tensors[p + "attn.qkv.weight"], C)
        names = {
            "input_layernorm.weight": tensors[p + "ln1.weight"],
            "self_attn.q_proj.weight": rotate_half_permutation(q, H),
            "self_attn.k_proj.weight": rotate_half_permutation(k, H),
            "self_attn.v_proj.weight": v,
            "self_attn.o_proj.weight": tensors[p + "attn.proj.weight"],
            "post_attention_layernorm.weight": tensors[p + "ln2.weight"],
            "mlp.gate_proj.weight": tensors[p + "mlp.fc_g.weight"],
            "mlp.gate_proj.bias": tensors[p + "mlp.fc_g.bias"],
            "mlp.up_proj.weight": tensors[p + "mlp.fc_a.weight"],
            "mlp.up_proj.bias": tensors[p + "mlp.fc_a.bias"],
            "mlp.down_proj.weight": tensors[p + "mlp.fc_out.weight"],
            "mlp.down_proj.bias": tensors[p + "mlp.fc_out.bias"],
        }
        for name, a in names.items():
            out[b + name] = cast(a, dtype, b + name)
    # No lm_head.weight: tie_word_embeddings makes transformers and vLLM reuse embed_tokens.
    return out


def safetensors_bytes(tensors):
    header = {"__metadata__": {"format": "pt", "exporter": PROG}}
    offset = 0
    for name in sorted(tensors):
        a = tensors[name]
        header[name] = {"dtype": "F32" if a.dtype == np.float32 else "F16", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return [len(text).to_bytes(8, "little"), text] + [tensors[n].tobytes() for n in sorted(tensors)]


def hf_files(cfg, tok, dtype):
    """The JSON files of the directory, name -> object."""
    s = tok["special"]
    C, H = cfg["C"], cfg["H"]
    bos = tok["bos"]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg["V"],
        "hidden_size": C,
        "intermediate_size": cfg["d_ff"],
        "num_hidden_layers": cfg["L"],
        "num_attention_heads": H,
        "num_key_value_heads": H,
        "head_dim": C // H,
        "hidden_act": "silu",
        "max_position_embeddings": cfg["T"],
        "rms_norm_eps": RMS_EPS,
        "rope_theta": cfg["rope_theta"],
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": True,
        "tie_word_embeddings": True,
        "pretraining_tp": 1,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": bos,
        "eos_token_id": s["eot"],
        "torch_dtype": "float32" if dtype == "f32" else "float16",
        "transformers_version": "4.45.0",
    }
    generation = {
        "bos_token_id": bos,
        "eos_token_id": [s["eot"]],
        "do_sample": True,
        "temperature": SAMPLING_DEFAULTS["temperature"],
        "top_k": SAMPLING_DEFAULTS["top_k"],
        "top_p": SAMPLING_DEFAULTS["top_p"],
        "repetition_penalty": SAMPLING_DEFAULTS["repetition_penalty"],
        "max_new_tokens": SAMPLING_DEFAULTS["max_new_tokens"],
        "suppress_tokens": [s["sys"], s["usr"], s["asst"]],  # nielsd bans role tokens in chat
        "transformers_version": "4.45.0",
    }

    def added(i):
        return {"content": tok["pieces"][i], "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True}

    decoder_ids = sorted({tok["unk"], *s.values()} | ({bos} if bos is not None else set())
                         | {i for i, t in enumerate(tok["types"]) if t == SPM_CONTROL})
    specials = [SPECIAL[r] for r in ROLES]
    tokenizer_config = {
        "tokenizer_class": "LlamaTokenizer",
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": None,
        "legacy": True,
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg["T"],
        "bos_token": tok["pieces"][bos] if bos is not None else None,
        "eos_token": SPECIAL["eot"],
        "unk_token": tok["pieces"][tok["unk"]],
        "pad_token": None,
        "additional_special_tokens": specials,
        "added_tokens_decoder": {str(i): added(i) for i in decoder_ids},
        "chat_template": chat_template(),
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
    }
    special_map = {"bos_token": tokenizer_config["bos_token"], "eos_token": SPECIAL["eot"],
                   "unk_token": tokenizer_config["unk_token"], "additional_special_tokens": specials}
    return {"config.json": config, "generation_config.json": generation,
            "tokenizer_config.json": tokenizer_config, "special_tokens_map.json": special_map}


HF_FILES = ("config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
            "tokenizer.model", "tokenizer_config.json")


def write_hf(cfg, tensors, tok, out_dir, dtype, force):
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ExportError(f"{out_dir}: exists and is not a directory")
    existing = [n for n in HF_FILES if os.path.exists(os.path.join(out_dir, n))]
    if existing and not force:
        raise ExportError(f"{out_dir} already holds {', '.join(existing)}; pass --force to overwrite")
    weights = hf_tensors(cfg, tensors, dtype)
    files = hf_files(cfg, tok, dtype)
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix="." + os.path.basename(os.path.abspath(out_dir)) + ".", dir=parent)
    try:
        os.chmod(staging, 0o777 & ~current_umask())  # mkdtemp makes 0700; use what mkdir would
        for name, obj in files.items():
            with open(os.path.join(staging, name), "w", encoding="utf-8") as f:
                json.dump(obj, f, indent=2, ensure_ascii=False)
                f.write("\n")
        with open(os.path.join(staging, "model.safetensors"), "wb") as f:
            for chunk in safetensors_bytes(weights):
                f.write(chunk)
        shutil.copyfile(tok["path"], os.path.join(staging, "tokenizer.model"))
        if not os.path.exists(out_dir):
            os.rename(staging, out_dir)  # the whole directory appears at once
        else:
            for name in HF_FILES:
                os.replace(os.path.join(staging, name), os.path.join(out_dir, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sum(a.nbytes for a in weights.values())


# ----------------------------------------------------------------------------------------------


QUANT_TYPES = ("q8_0", "q4_0", "q4_k_m", "q5_k_m")  # niels-quantize's file types


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one "niels-export: error: ..." line and exit status 1 for a bad command line."""

    def error(self, message):
        self.exit(1, f"{PROG}: error: {message}\n")


def parse_args(argv):
    p = ArgumentParser(prog=PROG, description="Export a nielsd model directory for llama.cpp (GGUF) or "
                       "Hugging Face Llama engines (vLLM, TGI); convert a Hugging Face directory to GGUF; "
                       "either GGUF quantized with --quant.")
    p.add_argument("model_dir", metavar="MODEL_DIR", help="nielsd model directory, or (--format gguf) a "
                   "Hugging Face directory (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)")
    p.add_argument("--format", required=True, choices=("gguf", "hf-llama"))
    p.add_argument("out", metavar="OUT", help="OUT.gguf (gguf) or OUT_DIR (hf-llama)")
    p.add_argument("--dtype", choices=("f32", "f16"), default="f32",
                   help="stored dtype of the weight matrices (default f32; GGUF keeps norms and "
                   "biases in f32); with --quant, the dtype niels-quantize reads")
    p.add_argument("--quant", choices=QUANT_TYPES, help="gguf: quantize to this file type with niels-quantize")
    p.add_argument("--quantizer", metavar="PATH", help="the niels-quantize binary (default: next to this "
                   "program, else on PATH)")
    p.add_argument("--threads", type=int, help="--quant: niels-quantize's threads (default: one per core)")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    args = p.parse_args(argv)
    if args.format != "gguf" and (args.quant or args.quantizer or args.threads):
        p.error("--quant, --quantizer and --threads need --format gguf")
    if args.threads is not None and not 1 <= args.threads <= 1024:
        p.error(f"--threads {args.threads}: use 1..1024")
    return args


def find_quantizer(args):
    """--quantizer, else niels-quantize next to this program (an install's bin/), else on PATH."""
    if args.quantizer:
        candidates = [args.quantizer]
    else:
        here = os.path.dirname(os.path.realpath(__file__))
        candidates = [os.path.join(here, "niels-quantize"), shutil.which("niels-quantize")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    if args.quantizer:
        raise ExportError(f"--quantizer {args.quantizer}: not an executable file")
    raise ExportError("--quant needs niels-quantize: not found next to niels-export or on PATH "
                      "(give it with --quantizer PATH)")


def quantize(args, write_input):
    """write_input(path) writes the f32/f16 GGUF; niels-quantize turns it into args.out. The
    intermediate file is a hidden temporary next to OUT (as large as the --dtype export) and is
    always removed; OUT appears only when niels-quantize has written it completely."""
    quantizer = find_quantizer(args)
    directory = os.path.dirname(os.path.abspath(args.out))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(args.out) + ".", suffix=f".{args.dtype}.gguf",
                               dir=directory)
    os.close(fd)
    try:
        write_input(tmp)
        cmd = [quantizer, tmp, args.out, "--type", args.quant, "--quiet"]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            reason = lines[-1] if lines else f"exit status {proc.returncode}"
            raise ExportError(f"niels-quantize failed: {reason}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return os.path.getsize(args.out)


def check_gguf_output(args):
    if os.path.isdir(args.out):
        raise ExportError(f"{args.out}: is a directory; --format gguf writes one file")
    if os.path.exists(args.out) and not args.force:
        raise ExportError(f"{args.out} exists; pass --force to overwrite")


def export_hf_dir(args):
    """A Hugging Face directory: the GGUF convert_hf_to_gguf.py would write (niels_tools.hf_gguf)."""
    if args.format != "gguf":
        raise ExportError(f"{args.model_dir} is a Hugging Face directory already; it exports to --format gguf only")
    check_gguf_output(args)
    cfg, kv, items = hf_gguf.convert(args.model_dir, args.dtype)
    write = lambda path: write_gguf_file(kv, items, path)  # noqa: E731
    size = quantize(args, write) if args.quant else write(args.out)
    print(f"{PROG}: wrote {args.out} (gguf, {args.quant or args.dtype}): {cfg['hf_arch']} "
          f"V={cfg['vocab']} C={cfg['hidden']} L={cfg['layers']} H={cfg['heads']}/{cfg['kv_heads']} "
          f"d_ff={cfg['ffn']}, {size} bytes")


def export(args):
    if hf_gguf.is_hf_dir(args.model_dir):
        return export_hf_dir(args)
    cfg, tensors, tok = load_model(args.model_dir)
    if args.format == "gguf":
        check_gguf_output(args)
        write = lambda path: write_gguf(cfg, tensors, tok, path, args.dtype)  # noqa: E731
        size = quantize(args, write) if args.quant else write(args.out)
    else:
        size = write_hf(cfg, tensors, tok, args.out, args.dtype, args.force)
    print(f"{PROG}: wrote {args.out} ({args.format}, {args.quant or args.dtype}): {cfg['name']} V={cfg['V']} "
          f"T={cfg['T']} C={cfg['C']} L={cfg['L']} H={cfg['H']} d_ff={cfg['d_ff']}, {size} bytes")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        export(args)
    except (ExportError, hf_gguf.HfError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{PROG}: error: {e.filename or args.out}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
