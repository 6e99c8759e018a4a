#!/usr/bin/python3
"""Writes the seed corpus of the tokenizer_json fuzz target (tests/fuzz/tokenizer_json/corpus/):
small tokenizer.json files of our own (Llama 3 style, Qwen style with NFC, GPT-2 style with every
added-token flag, and broken ones) followed by text, and texts for the target's built-in
tokenizers. Deterministic; rerun after changing it and commit the result.

    /usr/bin/python3 tests/fuzz/make_bpe_seeds.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")


def write(name, data):
    d = os.path.join(HERE, "tokenizer_json", "corpus")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def byte_alphabet():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


def tokenizer(merges, pair_form, pre, normalizer=None, added=(), ignore_merges=False, unk=None):
    alphabet = byte_alphabet()
    vocab = {alphabet[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    added_tokens = []
    for i, (content, special, flags) in enumerate(added):
        token = {"id": len(vocab) + i, "content": content, "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": special}
        token.update(flags)
        added_tokens.append(token)
    model = {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": ignore_merges, "vocab": vocab,
             "merges": [[a, b] for a, b in merges] if pair_form else [a + " " + b for a, b in merges]}
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
           "normalizer": normalizer, "pre_tokenizer": pre,
           "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": model}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def with_text(doc, text):
    assert len(doc) < 65536
    return b"\x00" + struct.pack("<H", len(doc)) + doc + text


def split_pre(pattern):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("a", "n"), ("Ġ", "Ġ"),
          ("1", "1"), ("11", "1"), ("Ã", "©"), ("ä", "¸"), ("ä¸", "Ń"), ("'", "s"), ("in", "g")]
TEXT = "The cat's in the hat, isn't it? 1234567 café 中文 😀\n\n  <|im_start|>user\nhi<|im_end|> <think>x</think>".encode()


def main():
    llama = tokenizer(MERGES, False, split_pre(LLAMA3), added=[("<|eot_id|>", True, {}), ("<|begin_of_text|>", True, {})],
                      ignore_merges=True)
    write("llama_style", with_text(llama, TEXT))
    qwen = tokenizer(MERGES, True, split_pre(QWEN), normalizer={"type": "NFC"},
                     added=[("<|im_start|>", True, {}), ("<|im_end|>", True, {}), ("<think>", False, {}),
                            ("</think>", False, {})])
    write("qwen_style", with_text(qwen, TEXT + "e\u0301 A\u030a".encode()))
    gpt2 = tokenizer(MERGES, False, {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
                     added=[("[L]", True, {"lstrip": True}), ("[R]", False, {"rstrip": True}),
                            ("[W]", False, {"single_word": True}), ("é", False, {"normalized": True})],
                     normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}]}, unk="a")
    write("gpt2_flags", with_text(gpt2, b"a [L] b [R]  c [W] dd[W]e e\xcc\x81 [W]"))
    write("bad_merge", with_text(tokenizer([("x", "nope")], False, split_pre(LLAMA3)), b"text"))
    write("bad_regex", with_text(tokenizer(MERGES, False, split_pre("(unclosed")), b"text"))
    write("unsupported_normalizer", with_text(tokenizer(MERGES, False, split_pre(LLAMA3), normalizer={"type": "NFKC"}), b"x"))
    write("broken_json", with_text(llama[: len(llama) // 2], b"x"))
    for i, text in enumerate([TEXT, b"don't WE'LL they'RE 'S 12345678901 \t\t\n\r\n  x  ", "日本語のテキスト、한국어 텍스트".encode(),
                              b"abc\xff\xfe\xc3(\xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80", b"a [L] b [R]  c [W] dd[W]e \xc3\xa9x e\xcc\x81x",
                              b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", b" " * 100 + b"x",
                              "Ġspaced out <|im_start|><|im_end|><|im_start|".encode()]):
        write(f"llama_text_{i}", b"\x01" + text)
        write(f"qwen_text_{i}", b"\x03" + text)


if __name__ == "__main__":
    main()
