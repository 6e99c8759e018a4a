"""The tokenizer of a Hugging Face directory (tokenizer.json, tokenizer_config.json, config.json) as
the tokenizer.* keys of the GGUF convert_hf_to_gguf.py writes for a byte-level BPE ("gpt2") model:
get_vocab_base() for the tokens and types, gguf-py's SpecialVocab for merges, special ids, add_*_token
and the chat template. hf_gguf.py documents what is read and how the pre-tokenizer is named.
"""

import json
import os

from niels_tools import gguf_file as gf
from niels_tools.hf_common import (PRE_TOKENIZERS, SPECIAL_KEYS, SPECIAL_TYPES, TOKEN_CONTROL, TOKEN_NORMAL,
                                 TOKEN_UNUSED, TOKEN_USER_DEFINED, HfError, read_json)


def read_tokenizer(model_dir):
    path = os.path.join(model_dir, "tokenizer.json")
    tok = read_json(path)
    model = tok.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise HfError(f"{path}: key \"model\" is not a BPE model with a vocab (only byte-level BPE tokenizers "
                      "are converted)")
    if not isinstance(tok.get("added_tokens", []), list):
        raise HfError(f"{path}: key \"added_tokens\" must be a list")
    config = read_json(os.path.join(model_dir, "tokenizer_config.json"), required=False) or {}
    return {"path": path, "json": tok, "config": config, "dir": model_dir}


def pre_tokenizer_name(t):
    """tokenizer.ggml.pre for tokenizer.json's normalizer and pre_tokenizer, or HfError."""
    tok, path = t["json"], t["path"]
    normalizer = (tok.get("normalizer") or {}).get("type")
    pre = tok.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    ok = (len(steps) == 2 and steps[0].get("type") == "Split" and steps[0].get("behavior") == "Isolated"
          and not steps[0].get("invert") and steps[1].get("type") == "ByteLevel" and not steps[1].get("use_regex"))
    regex = (steps[0].get("pattern") or {}).get("Regex") if ok else None
    name = PRE_TOKENIZERS.get((regex, normalizer))
    if name is None:
        raise HfError(f"{path}: a pre-tokenizer niels-export does not know (normalizer {normalizer!r}, "
                      f"pre_tokenizer {json.dumps(pre)[:120]}...); known: Llama 3's (\"llama-bpe\") and "
                      "Qwen2's (\"qwen2\")")
    return name


def looks_special(text):
    """convert's does_token_look_special: added tokens not marked special that still are control."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def tokens_and_types(t, vocab_size):
    """get_vocab_base(): ids 0..vocab_size-1 -> (token, type); holes are [PADi], UNUSED."""
    path = t["path"]
    by_id, added = {}, {}
    for text, i in t["json"]["model"]["vocab"].items():
        by_id.setdefault(i, text)
    for a in t["json"].get("added_tokens", []):
        if not isinstance(a, dict) or not isinstance(a.get("id"), int) or not isinstance(a.get("content"), str):
            raise HfError(f"{path}: an added token without an integer id and a content string: {a!r}")
        by_id[a["id"]] = a["content"]
        added[a["id"]] = a
    bad = [i for i in by_id if not isinstance(i, int) or not 0 <= i < vocab_size]
    if bad:
        raise HfError(f"{path}: token id {bad[0]!r} is outside config.json's vocab_size {vocab_size}")
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(TOKEN_UNUSED)
        elif i in added:
            text = by_id[i]
            if added[i].get("special") or looks_special(text):
                types.append(TOKEN_CONTROL)
            else:
                text = text.replace("\u2581", " ")  # convert pre-normalizes user-defined spaces
                types.append(TOKEN_USER_DEFINED)
            tokens.append(text)
        else:
            tokens.append(by_id[i])
            types.append(TOKEN_NORMAL)
    return tokens, types


def merges(t):
    m = t["json"]["model"].get("merges")
    if not isinstance(m, list) or not m:
        raise HfError(f"{t['path']}: the BPE model has no merges")
    if all(isinstance(x, str) for x in m):
        return list(m)
    if all(isinstance(x, list) and len(x) == 2 and all(isinstance(s, str) for s in x) for x in m):
        # transformers >= 4.45 writes pairs; a space inside a piece becomes U+0120 as gguf-py writes it
        return [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair) for pair in m]
    raise HfError(f"{t['path']}: key \"model.merges\" is neither strings \"a b\" nor pairs [a, b]")


def _template_adds(t):
    """add_bos / add_sep from the post-processor's TemplateProcessing (gguf-py's crude parse)."""
    add, config = {}, t["config"]
    post = t["json"].get("post_processor") or {}
    for proc in post.get("processors", [post]):
        if not isinstance(proc, dict) or proc.get("type") != "TemplateProcessing":
            continue
        single, pair = proc.get("single", []), proc.get("pair", [])
        first = single[0].get("SpecialToken", {}).get("id") if len(single) > 1 else None
        if first:
            add["bos"] = first == _content(config.get("bos_token"))
        if len(single) > 1 and single[-1].get("SpecialToken", {}).get("id"):
            raise HfError(f"{t['path']}: a trailing special token in the post-processor's TemplateProcessing "
                          "(an EOS added to every text) is not supported")
        middle = pair[1 if first and pair and pair[0].get("SpecialToken", {}).get("id") == first else 0:]
        if len(middle) > 2 and middle[0].get("Sequence", {}).get("id") == "A" \
                and middle[-1].get("Sequence", {}).get("id") == "B":
            entry = middle[1].get("SpecialToken", {}).get("id")
            add["sep"] = entry is not None and entry in (_content(config.get("sep_token")),
                                                         _content(config.get("eos_token")))
    return add


def _content(entry):
    return entry.get("content") if isinstance(entry, dict) else entry


def special_vocab(t, model_config, vocab_size):
    """gguf-py's SpecialVocab: ({type: id}, {type: add}) in its insertion order."""
    ids, add = {}, _template_adds(t)
    config = t["config"]
    by_content = {}
    for a in t["json"].get("added_tokens", []):
        by_content.setdefault(a["content"], a["id"])
    for typ in SPECIAL_TYPES:
        if isinstance(config.get(f"add_{typ}_token"), bool):
            add[typ] = config[f"add_{typ}_token"]
        content = _content(config.get(f"{typ}_token"))
        if isinstance(content, str) and content in by_content:
            ids.setdefault(typ, by_content[content])
    for typ in SPECIAL_TYPES:  # config.json's *_token_id: single ids only (a list of eos ids is skipped)
        value = model_config.get(f"{typ}_token_id")
        if isinstance(value, int) and not isinstance(value, bool):
            ids.setdefault(typ, value)
    for typ, i in ids.items():
        if not 0 <= i < vocab_size:
            raise HfError(f"{t['dir']}: the {typ} token id {i} is outside the vocabulary (vocab_size {vocab_size})")
    return ids, add


def chat_template(t):
    """tokenizer_config.json's chat_template (a string, or the "default" one of a list), else
    chat_template.jinja, else chat_template.json's; None when there is none."""
    template = t["config"].get("chat_template")
    if template is None:
        jinja = os.path.join(t["dir"], "chat_template.jinja")
        if os.path.exists(jinja):
            with open(jinja, encoding="utf-8") as f:
                return f.read()
        alt = read_json(os.path.join(t["dir"], "chat_template.json"), required=False)
        template = (alt or {}).get("chat_template")
    if isinstance(template, list):
        named = {e.get("name"): e.get("template") for e in template if isinstance(e, dict)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise HfError(f"{t['dir']}: the chat template is not a string")
    return template


def metadata(t, model_config, vocab_size, arch):
    """The tokenizer.* keys, in convert's order."""
    kv = []
    if arch == "llama" and isinstance(t["config"].get("add_prefix_space"), bool):
        kv.append(("tokenizer.ggml.add_space_prefix", gf.BOOL, t["config"]["add_prefix_space"]))
    tokens, types = tokens_and_types(t, vocab_size)
    kv += [("tokenizer.ggml.model", gf.STRING, "gpt2"), ("tokenizer.ggml.pre", gf.STRING, pre_tokenizer_name(t)),
           ("tokenizer.ggml.tokens", gf.ARRAY, (gf.STRING, tokens)),
           ("tokenizer.ggml.token_type", gf.ARRAY, (gf.I32, types)),
           ("tokenizer.ggml.merges", gf.ARRAY, (gf.STRING, merges(t)))]
    ids, add = special_vocab(t, model_config, vocab_size)
    kv += [(f"tokenizer.ggml.{SPECIAL_KEYS[typ]}", gf.U32, i) for typ, i in ids.items()]
    kv += [(f"tokenizer.ggml.add_{typ}_token", gf.BOOL, value) for typ, value in add.items()]
    template = chat_template(t)
    if template is not None:
        kv.append(("tokenizer.chat_template", gf.STRING, template))
    return kv
