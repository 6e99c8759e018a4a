#!/usr/bin/env python3
"""niels-convert: turn a niels_gpt training checkpoint into a nielsd model directory.

Usage: convert_checkpoint.py CKPT SPM_MODEL OUT_DIR [--dtype f32|f16|bf16] [--name NAME]

CKPT is a `torch.save` of a dict with keys model_cfg (dict; an extra `_raw` key is dropped),
train_cfg, model_state (the GPT state_dict), step and optionally optimizer_state and
best_val_loss. SPM_MODEL is the SentencePiece model the checkpoint was trained with.

OUT_DIR receives (docs/ARCHITECTURE.md "Model math"):
  config.json        {"V","T","C","L","H","d_ff","rope_theta","name"} (+ "dropout" and other
                     scalar keys of model_cfg, which nielsd keeps and ignores)
  model.safetensors  the state_dict tensors, written by hand (no safetensors package): an 8-byte
                     little-endian header length, a JSON header (names sorted, padded with
                     spaces to a multiple of 8 bytes), then the raw little-endian tensor bytes.
                     lm_head.weight is dropped: it must equal tok_emb.weight (tied).
  tokenizer.model    a byte copy of SPM_MODEL, checked to contain the four special tokens.

Needs only the standard library and torch. Exit status 0 on success, 1 with one
"niels-convert: error: ..." line on stderr for any problem (nothing is left half-written:
every file is written to a temporary name and renamed).
"""

import argparse
import ctypes
import json
import math
import os
import re
import shutil
import sys
import tempfile

import torch

# The shared tools module: beside this file in the source tree, in dist-packages once installed.
_SOURCE_TREE_MODULES = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python")
if os.path.isdir(os.path.join(_SOURCE_TREE_MODULES, "niels_tools")):
    sys.path.insert(0, _SOURCE_TREE_MODULES)
from niels_tools import spm_model  # noqa: E402

PROG = "niels-convert"

REQUIRED_KEYS = ("V", "T", "C", "L", "H", "d_ff", "rope_theta")
# Other spellings accepted for a key only when the canonical key is absent.
KEY_ALIASES = {
    "V": ("vocab_size",),
    "T": ("block_size", "n_ctx", "max_seq_len"),
    "C": ("n_embd", "d_model"),
    "L": ("n_layer", "n_layers"),
    "H": ("n_head", "n_heads"),
}
DTYPES = {  # --dtype -> (torch dtype, safetensors dtype name)
    "f32": (torch.float32, "F32"),
    "f16": (torch.float16, "F16"),
    "bf16": (torch.bfloat16, "BF16"),
}
OUTPUT_FILES = ("config.json", "model.safetensors", "tokenizer.model")


class ConvertError(Exception):
    """A problem with the inputs; the message is printed as is."""


# ----------------------------------------------------------------------------------------------
# Checkpoint and config


def load_checkpoint(path):
    """Returns the checkpoint dict. Tries the safe tensor-only unpickler first."""
    if not os.path.isfile(path):
        raise ConvertError(f"checkpoint {path}: no such file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # a torch without weights_only
        ckpt = None
    except Exception:  # pylint: disable=broad-except
        ckpt = None  # e.g. model_cfg holds a custom class: fall back to full pickle below
    if ckpt is None:
        try:
            ckpt = torch.load(path, map_location="cpu")
        except Exception as e:  # pylint: disable=broad-except
            raise ConvertError(f"checkpoint {path}: cannot be read by torch.load: {e}") from e
    if not isinstance(ckpt, dict):
        raise ConvertError(f"checkpoint {path}: expected a dict, found {type(ckpt).__name__}")
    for key in ("model_cfg", "model_state"):
        if key not in ckpt:
            raise ConvertError(f"checkpoint {path}: missing key '{key}' (keys: {sorted(ckpt)})")
    if not isinstance(ckpt["model_cfg"], dict):
        raise ConvertError(f"checkpoint {path}: 'model_cfg' is a {type(ckpt['model_cfg']).__name__},"
                           " expected a dict")
    if not isinstance(ckpt["model_state"], dict):
        raise ConvertError(f"checkpoint {path}: 'model_state' is a "
                           f"{type(ckpt['model_state']).__name__}, expected a state_dict")
    return ckpt


def _as_int(key, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConvertError(f"model_cfg: '{key}' must be an integer, found {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ConvertError(f"model_cfg: '{key}' must be an integer, found {value!r}")
    if value <= 0:
        raise ConvertError(f"model_cfg: '{key}' must be positive, found {value!r}")
    return int(value)


def read_model_config(model_cfg):
    """model_cfg dict -> (canonical config dict, extra scalar keys kept for config.json)."""
    src = {k: v for k, v in model_cfg.items() if k != "_raw"}
    used = set()
    cfg = {}
    for key in REQUIRED_KEYS:
        spelling = key if key in src else next((a for a in KEY_ALIASES.get(key, ()) if a in src), None)
        if spelling is None:
            raise ConvertError(f"model_cfg: missing key '{key}' (keys: {sorted(src)})")
        used.add(spelling)
        value = src[spelling]
        if key == "rope_theta":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConvertError(f"model_cfg: 'rope_theta' must be a positive number, found {value!r}")
            cfg[key] = float(value)
        else:
            cfg[key] = _as_int(key, value)
    if cfg["C"] % cfg["H"] != 0:
        raise ConvertError(f"model_cfg: C={cfg['C']} is not divisible by H={cfg['H']}")
    if (cfg["C"] // cfg["H"]) % 2 != 0:
        raise ConvertError(f"model_cfg: head dim C/H={cfg['C'] // cfg['H']} must be even (RoPE pairs)")
    extra = {k: v for k, v in src.items()
             if k not in used and k not in REQUIRED_KEYS
             and (v is None or isinstance(v, (bool, int, float, str)))}
    return cfg, extra


# ----------------------------------------------------------------------------------------------
# Tensors


def expected_shapes(cfg):
    """state_dict name -> shape, as docs/ARCHITECTURE.md "Model math" (lm_head.weight excluded)."""
    V, C, d_ff = cfg["V"], cfg["C"], cfg["d_ff"]
    shapes = {"tok_emb.weight": (V, C), "ln_f.weight": (C,)}
    for i in range(cfg["L"]):
        p = f"blocks.{i}."
        shapes[p + "ln1.weight"] = (C,)
        shapes[p + "ln2.weight"] = (C,)
        shapes[p + "attn.qkv.weight"] = (3 * C, C)
        shapes[p + "attn.proj.weight"] = (C, C)
        for fc in ("fc_a", "fc_g"):
            shapes[p + f"mlp.{fc}.weight"] = (d_ff, C)
            shapes[p + f"mlp.{fc}.bias"] = (d_ff,)
        shapes[p + "mlp.fc_out.weight"] = (C, d_ff)
        shapes[p + "mlp.fc_out.bias"] = (C,)
    return shapes


def _strip_wrapper_prefix(state):
    """Removes a prefix every key shares from torch.compile ('_orig_mod.') or DDP ('module.')."""
    for prefix in ("_orig_mod.", "module."):
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items()}
    return state


def collect_tensors(model_state, cfg, drop_patterns):
    """Checks the state_dict against cfg; returns name -> float32 tensor (no lm_head)."""
    state = _strip_wrapper_prefix(dict(model_state))
    for pattern in drop_patterns:
        state = {k: v for k, v in state.items() if not re.fullmatch(pattern, k)}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise ConvertError(f"model_state: '{name}' is a {type(value).__name__}, not a tensor")
    shapes = expected_shapes(cfg)

    lm_head = state.pop("lm_head.weight", None)
    missing = [n for n in shapes if n not in state]
    if missing:
        raise ConvertError(f"model_state: missing tensor '{missing[0]}'"
                           + (f" (and {len(missing) - 1} more: {', '.join(missing[1:4])}...)"
                              if len(missing) > 1 else "")
                           + f" for L={cfg['L']}")
    extra = sorted(n for n in state if n not in shapes)
    if extra:
        raise ConvertError(f"model_state: unexpected tensor '{extra[0]}'"
                           + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else "")
                           + f" for L={cfg['L']}; use --drop REGEX to leave out non-weight buffers")
    tensors = {}
    for name, shape in shapes.items():
        t = state[name].detach()
        if tuple(t.shape) != shape:
            raise ConvertError(f"model_state: tensor '{name}' has shape {list(t.shape)}, expected "
                               f"{list(shape)} from model_cfg (V={cfg['V']}, C={cfg['C']}, "
                               f"d_ff={cfg['d_ff']})")
        if not t.is_floating_point():
            raise ConvertError(f"model_state: tensor '{name}' has dtype {t.dtype}, expected a float")
        t = t.to(torch.float32).contiguous()
        if not bool(torch.isfinite(t).all()):
            raise ConvertError(f"model_state: tensor '{name}' contains NaN or Inf values")
        tensors[name] = t
    if lm_head is not None:
        check_tied(lm_head.detach(), tensors["tok_emb.weight"])
    return tensors


def check_tied(lm_head, tok_emb):
    if tuple(lm_head.shape) != tuple(tok_emb.shape):
        raise ConvertError(f"model_state: 'lm_head.weight' has shape {list(lm_head.shape)} but "
                           f"'tok_emb.weight' has {list(tok_emb.shape)}; the output head must be "
                           "tied to the embedding")
    lm_head = lm_head.to(torch.float32)
    if not torch.equal(lm_head, tok_emb):
        diff = (lm_head - tok_emb).abs().max().item()
        raise ConvertError("model_state: 'lm_head.weight' differs from 'tok_emb.weight' (max abs "
                           f"diff {diff:.6g}); nielsd models use a tied output head "
                           "(logits = RMSNorm_f(h) @ tok_emb^T), so this checkpoint cannot be "
                           "converted")


# ----------------------------------------------------------------------------------------------
# Tokenizer (read by the shared niels_tools.spm_model: no sentencepiece package needed)


def check_tokenizer(path, vocab_size):
    try:
        model = spm_model.read_spm_model(path)
        model.special_ids()
    except spm_model.SpmModelError as e:
        raise ConvertError(str(e)) from e
    if len(model.pieces) != vocab_size:
        raise ConvertError(f"tokenizer {path} has {len(model.pieces)} pieces but model_cfg V={vocab_size}"
                           " (and tok_emb.weight has that many rows)")


# ----------------------------------------------------------------------------------------------
# Writers


def safetensors_bytes_header(tensors, dtype_name, metadata):
    """The 8-byte length + padded JSON header for tensors (name-sorted, contiguous data)."""
    header = {"__metadata__": metadata}
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        size = t.numel() * t.element_size()
        header[name] = {"dtype": dtype_name, "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def write_safetensors(path, tensors, dtype):
    """Writes tensors (name -> f32 tensor) converted to dtype; returns the data byte count."""
    if sys.byteorder != "little":
        raise ConvertError("this converter writes raw tensor bytes and needs a little-endian machine")
    torch_dtype, dtype_name = DTYPES[dtype]
    converted = {}
    for name, t in tensors.items():
        c = t.to(torch_dtype).contiguous()
        if not bool(torch.isfinite(c).all()):
            raise ConvertError(f"tensor '{name}' overflows {dtype} (values beyond its range); "
                               "use --dtype f32 or bf16")
        converted[name] = c
    metadata = {"format": "pt", "converter": PROG}
    total = 0
    with open(path, "wb") as f:
        f.write(safetensors_bytes_header(converted, dtype_name, metadata))
        for name in sorted(converted):
            t = converted[name]
            size = t.numel() * t.element_size()
            f.write(ctypes.string_at(t.data_ptr(), size))
            total += size
    return total


def write_outputs(out_dir, config, tensors, spm_path, dtype, force):
    os.makedirs(out_dir, exist_ok=True)
    existing = [n for n in OUTPUT_FILES if os.path.exists(os.path.join(out_dir, n))]
    if existing and not force:
        raise ConvertError(f"{out_dir} already holds {', '.join(existing)}; pass --force to overwrite")
    staging = tempfile.mkdtemp(prefix=".niels-convert-", dir=out_dir)
    try:
        with open(os.path.join(staging, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        data_bytes = write_safetensors(os.path.join(staging, "model.safetensors"), tensors, dtype)
        shutil.copyfile(spm_path, os.path.join(staging, "tokenizer.model"))
        for name in OUTPUT_FILES:
            os.replace(os.path.join(staging, name), os.path.join(out_dir, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return data_bytes


# ----------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description="Convert a niels_gpt training checkpoint and "
                                "its spm.model into a nielsd model directory.")
    p.add_argument("ckpt", metavar="CKPT", help="training checkpoint (torch.save dict)")
    p.add_argument("spm_model", metavar="SPM_MODEL", help="SentencePiece model (spm.model)")
    p.add_argument("out_dir", metavar="OUT_DIR", help="model directory to write")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="f32", help="stored dtype (default f32)")
    p.add_argument("--name", help="model name in config.json (default: model_cfg's name, else "
                   "the OUT_DIR folder name)")
    p.add_argument("--drop", action="append", default=[], metavar="REGEX",
                   help="leave out state_dict entries whose full name matches REGEX (repeatable)")
    p.add_argument("--force", action="store_true", help="overwrite an existing model directory")
    return p.parse_args(argv)


def convert(args):
    ckpt = load_checkpoint(args.ckpt)
    cfg, extra = read_model_config(ckpt["model_cfg"])
    tensors = collect_tensors(ckpt["model_state"], cfg, args.drop)
    check_tokenizer(args.spm_model, cfg["V"])
    cfg_name = extra.pop("name", None)
    name = args.name or cfg_name or os.path.basename(os.path.abspath(args.out_dir))
    config = dict(cfg, name=str(name), **extra)
    data_bytes = write_outputs(args.out_dir, config, tensors, args.spm_model, args.dtype, args.force)
    params = sum(t.numel() for t in tensors.values())
    step = ckpt.get("step")
    val = ckpt.get("best_val_loss")
    print(f"{PROG}: wrote {args.out_dir}: {config['name']} V={cfg['V']} T={cfg['T']} C={cfg['C']} "
          f"L={cfg['L']} H={cfg['H']} d_ff={cfg['d_ff']}, {params} parameters, "
          f"{data_bytes} bytes ({args.dtype})"
          + (f", step {step}" if step is not None else "")
          + (f", best val loss {val:.4f}" if isinstance(val, (int, float)) and math.isfinite(val) else ""))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        convert(args)
    except ConvertError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
