"""What the Hugging Face side of niels_tools shares (hf_gguf.py, the directory and its weights;
hf_vocab.py, the tokenizer): the error type, the JSON reader, and the vocabulary's constants."""

import json

# tokenizer.json's Split regex and normalizer -> tokenizer.ggml.pre (the models' tokenizer.json;
# the same regexes as daemon/text/bpe_spec.h).
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = {(LLAMA3_SPLIT, None): "llama-bpe", (QWEN2_SPLIT, "NFC"): "qwen2"}
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5
SPECIAL_TYPES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
SPECIAL_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "sep": "seperator_token_id",
                "pad": "padding_token_id", "cls": "cls_token_id", "mask": "mask_token_id"}


class HfError(Exception):
    """A bad or unsupported Hugging Face directory; the message names the file and what is wrong."""


def read_json(path, required=True):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except FileNotFoundError:
        if required:
            raise HfError(f"{path}: missing") from None
        return None
    except OSError as e:
        raise HfError(f"{path}: cannot read: {e.strerror}") from e
    except ValueError as e:
        raise HfError(f"{path}: invalid JSON: {e}") from e
    if not isinstance(value, dict):
        raise HfError(f"{path}: invalid JSON: expected an object")
    return value
