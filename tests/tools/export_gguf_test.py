#!/usr/bin/env python3
"""export_gguf ctest: niels-export --format gguf, checked by real llama.cpp against a real nielsd.

For three models, (a) random weights with a large init scale (std 0.3, so greedy tokens vary and
position handling matters) on the tests' tiny BPE tokenizer, (b) the shipped models/niels-demo (BPE)
and (c) random weights on a SentencePiece UNIGRAM tokenizer trained here (niels_make_test_tokenizer
--unigram, niels-train's settings, on the chat corpus and the repository's docs; exported as
llama.cpp's "t5" vocabulary):
  1. export to GGUF (f32 and f16);
  2. run llama.cpp (node-llama-cpp 3.21.1's prebuilt libllama, the pinned npm packages of
     scripts/install_references.sh) through tests/tools/llamacpp_run.mjs: greedy continuations of raw
     token-id prompts, and of chat prompts rendered from the GGUF's own tokenizer.chat_template and
     tokenized by llama.cpp;
  3. check: llama.cpp's greedy tokens equal a real nielsd's (generate / chat over its socket);
     the template renders and tokenizes to exactly the ids nielsd's template makes; plain text
     tokenizes the same; every generated step's logits agree with nielsd's model code
     (niels-inspect, full forward) within LOGIT_TOL (f32) and LOGIT_TOL_F16 (f16 export).
     node-llama-cpp 3.21.1 gives probabilities, not logits, so both sides are compared as
     logit - max(logit) (the shift no softmax sees).
Then nielsd's loader on the demo model's GGUF (its SentencePiece "llama" vocabulary, read by
daemon/loaders/gguf_sentencepiece.h; niels-inspect --tokenize): 5000 lines (tokenizer_corpus.py)
tokenize to exactly llama.cpp's ids on the same file, every line. Then, for the unigram tokenizer (tokenizer_corpus.py makes the lines):
  4. 5000 lines (prose, and prose with whitespace runs, digits, punctuation, characters NFKC changes,
     characters outside the vocabulary, controls, piece literals) tokenized by nielsd and by
     llama.cpp: identical, except that llama.cpp has no byte fallback, so each run of byte pieces
     in nielsd's ids is one <unk> in llama.cpp's; any other difference fails;
  5. variants of the tokenizer, 1500 lines each: those niels-export accepts (no byte fallback, no
     extra-whitespace removal with and without the dummy prefix) tokenize identically; those it
     refuses (no dummy prefix, user-defined pieces, UNUSED pieces, whitespace as suffix, unescaped
     whitespace), exported anyway, differ.

Fails (exit 1) naming scripts/install_references.sh when the npm packages are missing; never skips.

    export_gguf_test.py --nielsd NIELSD --inspect NIELS_INSPECT --make-tokenizer MAKE_TOKENIZER
        --exporter niels_export.py --demo-model models/niels-demo --work-dir DIR [--npm NODE_MODULES]
        [--corpus data/corpus/niels_corpus.jsonl] [--prose README.md docs/ARCHITECTURE.md]
(the nielsd_client package on PYTHONPATH: the build's staged client/python)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

import export_support as es
import tokenizer_corpus as tc
from make_family_model import default_npm

NODE_LLAMA_CPP_VERSION = "3.21.1"  # pinned by scripts/install_references.sh: the llama.cpp under test
# Tolerances on |logit_llama.cpp - logit_nielsd| (both as logit - max(logit)), relative to the
# step's largest |logit| (at least 1), worst over every generated step. f32 export, f32 attention:
# llama.cpp's CPU kernels sum in another order and compute RoPE angles in f32 (nielsd: f64);
# measured 5.6e-6 (random model) and 9.8e-7 (demo), so LOGIT_TOL has >10x headroom, while a wrong
# RoPE layout, a missing bias or a wrong norm shows up as O(1) (gate and up swapped: 1.3). f16
# export under llama.cpp's defaults: every weight and cached key/value is rounded to 11 significant
# bits and the large-init random model amplifies that; measured 1.1e-2 (random) and 6e-4 (demo).
LOGIT_TOL = 1e-4
LOGIT_TOL_F16 = 5e-2
# Below this logit - max(logit), float32 softmax probabilities are subnormal or 0 (exp(-87.3) is
# float32's smallest normal), so llama.cpp's shifted logits lose precision there: not compared.
UNDERFLOW = 80.0

# Lines tokenized by both with the unigram tokenizer; with each variant of it; by nielsd serving the
# demo model's GGUF and by llama.cpp.
UNIGRAM_LINES = 5000
DEMO_GGUF_LINES = 5000
VARIANT_LINES = 1500

RANDOM_PROMPTS = [[10, 20, 30, 40], [7], [100, 101, 102, 103, 104, 105, 106, 107, 108], [55, 200, 55, 200, 55]]
TEXTS = ["how do i start nielsd?", "The quick brown fox jumps over the lazy dog.",
         "what does --no-kv-cache do?", "Numbers 12345 and 3.14, symbols: #@!", "hello world"]
CHATS = [("You are a helpful assistant.", "how do i start nielsd?"),
         ("Answer briefly.", "what is a kv cache?"),
         ("You are nielsd's demo model.", "which socket does niels-chat use by default?")]


def node_modules(npm):
    """The node_modules of scripts/install_references.sh; exits 1 naming the script when missing."""
    for pkg in ("node-llama-cpp", os.path.join("@node-llama-cpp", "linux-x64"), os.path.join("@huggingface", "jinja")):
        if not os.path.exists(os.path.join(npm, pkg, "package.json")):
            print(f"FAIL: {npm} lacks {pkg}: run scripts/install_references.sh (installs the pinned "
                  "node-llama-cpp 3.21.1 and its CPU binaries)")
            sys.exit(1)
    with open(os.path.join(npm, "node-llama-cpp", "package.json")) as f:
        version = json.load(f)["version"]
    if version != NODE_LLAMA_CPP_VERSION:
        print(f"FAIL: {npm} holds node-llama-cpp {version}, not the pinned {NODE_LLAMA_CPP_VERSION}: "
              "run scripts/install_references.sh")
        sys.exit(1)
    return npm


def run_llamacpp(args, modules, request, work):
    req_path = os.path.join(work, "request.json")
    res_path = os.path.join(work, "result.json")
    with open(req_path, "w") as f:
        json.dump(request, f)
    subprocess.run(["node", os.path.join(es.HERE, "llamacpp_run.mjs"), modules, req_path, res_path],
                   check=True, timeout=300)
    with open(res_path) as f:
        return json.load(f)


def max_rel_diff(llama_shifted, nielsd_logits, banned=()):
    """(relative, absolute, left out): the largest |difference| of logit - max(logit) over a step's
    vocabulary, over max(1, largest |logit|), worst step; the largest absolute difference; how many
    logits were not compared. `banned` ids are left out (llama.cpp's "never" bias gives them
    probability 0), and so are tokens more than UNDERFLOW below the step's maximum; a probability of
    0 above that is an error."""
    worst, worst_abs, left_out = 0.0, 0.0, 0
    keep = np.ones(len(nielsd_logits[0]), dtype=bool)
    keep[list(banned)] = False
    for got, want in zip(llama_shifted, nielsd_logits):
        got = np.array([np.nan if g is None else g for g in got], dtype=np.float64)[keep]
        want = want[keep].astype(np.float64)
        shifted = want - want.max()
        compared = shifted > -UNDERFLOW
        if np.isnan(got[compared]).any():
            raise AssertionError("llama.cpp gave probability 0 to a token within "
                                 f"{UNDERFLOW:g} of the largest logit")
        diff = float(np.abs(got[compared] - shifted[compared]).max())
        worst = max(worst, diff / max(1.0, float(np.abs(want).max())))
        worst_abs = max(worst_abs, diff)
        left_out += int((~compared).sum())
    return worst, worst_abs, left_out


class Failures:
    def __init__(self):
        self.items = []

    def check(self, ok, message):
        if not ok:
            self.items.append(message)
            print("FAIL:", message)


def check_model(args, modules, label, model_dir, prompts, failures, dtypes, vocabulary="llama"):
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
        failures.check(meta["architecture"] == "llama" and meta["tokenizer_model"] == vocabulary
                       and meta["context_length"] == cfg["T"]
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
              f"max |logit diff|: {max(d[1] for d in diffs):.3g}; "
              f"{sum(d[2] for d in diffs)} logits more than {UNDERFLOW:g} below the maximum not compared")
        failures.check(worst <= tol, f"[{label}/{dtype}] logits differ by {worst:.3g} > {tol:g}")


def check_demo_gguf_tokenization(args, modules, failures):
    """nielsd's loader on the demo model's f32 GGUF (its SentencePiece vocabulary as nielsd reads it
    from the file; niels-inspect --tokenize) against llama.cpp on the same file: identical ids on
    every line."""
    lines = tc.test_lines(args.corpus, args.prose, DEMO_GGUF_LINES, seed=4)
    texts = [t for _, t in lines]
    work = os.path.join(args.work_dir, "demo")
    gguf = os.path.join(work, "model-f32.gguf")
    texts_path, ids_path = os.path.join(work, "gguf-texts.json"), os.path.join(work, "gguf-ids.json")
    with open(texts_path, "w") as f:
        json.dump(texts, f)
    subprocess.run([args.inspect, gguf, "--tokenize", texts_path, "--out", ids_path], check=True,
                   stdout=subprocess.DEVNULL)
    with open(ids_path) as f:
        ours = json.load(f)["plain"]
    theirs = run_llamacpp(args, modules, {"gguf": gguf, "texts": texts}, work)["texts"]
    differ = [(t, a, b) for t, a, b in zip(texts, ours, theirs) if a != b]
    print(f"[demo GGUF] nielsd's loader vs llama.cpp on the GGUF, {len(texts)} lines: "
          f"{len(texts) - len(differ)} identical, {len(differ)} different")
    for t, a, b in differ[:5]:
        print(f"  {t!r}\n    nielsd    {a}\n    llama.cpp {b}")
    failures.check(len(ours) == len(texts) and not differ,
                   f"[demo GGUF] {len(differ)} lines tokenize differently in nielsd and llama.cpp")


# ----------------------------------------------------------------------------------------------
# Unigram tokenizers: llama.cpp's "t5" (UGM) vocabulary against SentencePiece (nielsd's Tokenize)


def bytes_to_unk(ids, byte_ids, unk):
    """SentencePiece's ids with every run of byte-fallback pieces replaced by one <unk>: what
    llama.cpp's unigram tokenizer, which has no byte fallback, gives for the same text."""
    out, prev_byte = [], False
    for i in ids:
        is_byte = i in byte_ids
        if not (is_byte and prev_byte):
            out.append(unk if is_byte else i)
        prev_byte = is_byte
    return out


def tokenize_both(args, modules, model_dir, gguf, lines, work):
    """[(edit, text, nielsd ids, llama.cpp ids)] for (edit, text) lines."""
    texts = [t for _, t in lines]
    with es.Nielsd(args.nielsd, model_dir, work) as daemon:
        ours = [list(daemon.client.tokenize(t).ids) for t in texts]
    theirs = run_llamacpp(args, modules, {"gguf": gguf, "texts": texts}, work)["texts"]
    return [(e, t, a, b) for (e, t), a, b in zip(lines, ours, theirs)]


def equal_score_tie(tok, ours, theirs):
    """Two segmentations of the same text whose pieces' scores sum to the same value: the unigram
    lattice has two best paths (e.g. the same pieces in another order), and SentencePiece and
    llama.cpp break such a tie differently; which path wins is left to float rounding."""
    if "".join(tok["pieces"][i] for i in ours) != "".join(tok["pieces"][i] for i in theirs):
        return False
    a, b = (sum(float(tok["scores"][i]) for i in ids) for ids in (ours, theirs))
    return abs(a - b) <= 1e-6 * max(1.0, abs(a))


def agreement(model_dir, results):
    """{edit: [identical, identical but for byte fallback, equal-score tie, other]} and the
    non-identical cases as (text, nielsd's pieces, llama.cpp's pieces, kind)."""
    import niels_export  # noqa: E402
    tok = niels_export.read_tokenizer(model_dir, niels_export.read_config(model_dir)["V"])
    byte_ids = {i for i, t in enumerate(tok["types"]) if t == niels_export.SPM_BYTE}
    counts, other = {}, []
    for edit, text, ours, theirs in results:
        row = counts.setdefault(edit, [0, 0, 0, 0])
        if ours == theirs:
            row[0] += 1
            continue
        if bytes_to_unk(ours, byte_ids, tok["unk"]) == theirs:
            row[1] += 1
            continue
        kind = 2 if equal_score_tie(tok, ours, theirs) else 3
        row[kind] += 1
        other.append((text, [tok["pieces"][i] for i in ours], [tok["pieces"][i] for i in theirs],
                      "equal-score tie" if kind == 2 else "other"))
    return counts, other


def summary(counts):
    total = [sum(c[k] for c in counts.values()) for k in range(4)]
    per_edit = ", ".join(f"{e} {c[0]}/{c[1]}/{c[2]}/{c[3]}" for e, c in sorted(counts.items()))
    return total, f"{total[0]} identical, {total[1]} identical but for byte fallback, " \
                  f"{total[2]} equal-score ties, {total[3]} other " \
                  f"(per edit: {per_edit})"


def unigram_model(args, name, seed, *tokenizer_args):
    model_dir = os.path.join(args.work_dir, name + "-model")
    es.make_random_model(model_dir, args.make_tokenizer, seed=seed, std=0.3, tokenizer_args=[
        "--unigram", os.path.join(args.work_dir, "unigram-train.txt"), "--vocab-size", "1024", *tokenizer_args])
    return model_dir


def forced_gguf(model_dir, gguf):
    """The GGUF export of a model niels-export refuses, written with the refusal switched off."""
    import niels_export  # noqa: E402
    refusal = niels_export.unigram_refusal
    niels_export.unigram_refusal = lambda tok: None
    try:
        cfg, tensors, tok = niels_export.load_model(model_dir)
        niels_export.write_gguf(cfg, tensors, tok, gguf, "f32")
    finally:
        niels_export.unigram_refusal = refusal


def check_unigram_tokenization(args, modules, model_dir, failures):
    """The trained unigram tokenizer on UNIGRAM_LINES lines: llama.cpp's ids are SentencePiece's,
    but for byte fallback (a run of byte pieces is one <unk> there), and for nothing else."""
    lines = tc.test_lines(args.corpus, args.prose, UNIGRAM_LINES, seed=1)
    work = os.path.join(args.work_dir, "unigram")
    counts, other = agreement(model_dir, tokenize_both(args, modules, model_dir,
                                                       os.path.join(work, "model-f32.gguf"), lines, work))
    total, text = summary(counts)
    print(f"[unigram] tokenization of {len(lines)} lines, llama.cpp vs nielsd: {text}")
    for t, ours, theirs, kind in other[:5]:
        print(f"  {kind}: {t!r}\n    nielsd    {ours}\n    llama.cpp {theirs}")
    failures.check(total[3] == 0, f"[unigram] {total[3]} lines tokenize differently beyond byte fallback "
                                  "and equal-score ties")
    failures.check(total[2] <= len(lines) // 100, f"[unigram] more than 1% equal-score ties: {text}")
    failures.check(total[0] >= len(lines) // 2 and total[1] > 0 and counts["none"][0] > 1000,
                   f"[unigram] the lines exercise too little: {text}")


def check_unigram_variants(args, modules, failures):
    """Variants of the tokenizer: those niels-export accepts tokenize identically (no byte fallback:
    no <unk> either), those it refuses differ in llama.cpp when exported anyway."""
    lines = tc.test_lines(args.corpus, args.prose, VARIANT_LINES, seed=2)
    no_fallback = unigram_model(args, "unigram-no-byte-fallback", 21, "--no-byte-fallback")

    def copy(name, **edit):
        d = os.path.join(args.work_dir, name + "-model")
        shutil.copytree(no_fallback, d)
        es.edit_tokenizer(d, **edit)
        return d

    variants = [  # (name, model directory, accepted by niels-export)
        ("no-byte-fallback", no_fallback, True),
        ("no-extra-whitespace-removal", copy("unigram-keep-whitespace", normalizer={4: 0}), True),
        ("no-removal-no-dummy-prefix", copy("unigram-keep-all", normalizer={3: 0, 4: 0}), True),
        ("no-dummy-prefix", unigram_model(args, "unigram-no-dummy", 22, "--no-dummy-prefix"), False),
        ("user-defined", unigram_model(args, "unigram-user-defined", 23, "--user-defined", "nielsd,session"), False),
        ("unused", copy("unigram-unused", piece_types={"\u2581the": 5, "s": 5}), False),
        ("whitespace-suffix", copy("unigram-suffix", trainer={24: 1}), False),
        ("unescaped", copy("unigram-unescaped", normalizer={5: 0}), False),
    ]
    for name, model_dir, accepted in variants:
        work = os.path.join(args.work_dir, "unigram-" + name)
        os.makedirs(work, exist_ok=True)
        gguf = os.path.join(work, "model.gguf")
        code, _, err = es.run_export(args.exporter, model_dir, "--format", "gguf", gguf)
        failures.check(code == (0 if accepted else 1), f"[unigram {name}] niels-export exit {code} ({err.strip()})")
        if not accepted:
            forced_gguf(model_dir, gguf)
        counts, other = agreement(model_dir, tokenize_both(args, modules, model_dir, gguf, lines, work))
        total, text = summary(counts)
        print(f"[unigram {name}] {'accepted' if accepted else 'refused'}; {len(lines)} lines: {text}")
        if accepted:
            for t, ours, theirs, kind in other[:5]:
                print(f"  {kind}: {t!r}\n    nielsd    {ours}\n    llama.cpp {theirs}")
        if accepted:
            failures.check(total[0] + total[2] == len(lines) and total[2] <= len(lines) // 100,
                           f"[unigram {name}] llama.cpp differs beyond equal-score ties: {text}")
        else:
            failures.check(total[3] > 0, f"[unigram {name}] refused, yet llama.cpp agrees: {text}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nielsd", required=True)
    p.add_argument("--inspect", required=True)
    p.add_argument("--make-tokenizer", required=True)
    p.add_argument("--exporter", required=True)
    p.add_argument("--demo-model", required=True)
    p.add_argument("--work-dir", required=True)
    p.add_argument("--npm", default=default_npm(), help="node_modules of scripts/install_references.sh")
    p.add_argument("--corpus", default=os.path.join(es.REPO, "data", "corpus", "niels_corpus.jsonl"),
                   help="chat corpus the unigram tokenizer is trained on")
    p.add_argument("--prose", nargs="*", default=[os.path.join(es.REPO, "README.md"),
                                                  os.path.join(es.REPO, "docs", "ARCHITECTURE.md")],
                   help="text files it is also trained on (and whose lines are tokenized)")
    args = p.parse_args()
    modules = node_modules(args.npm)

    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    failures = Failures()
    random_dir = os.path.join(args.work_dir, "random-model")
    es.make_random_model(random_dir, args.make_tokenizer, seed=7, std=0.3)
    check_model(args, modules, "random", random_dir, RANDOM_PROMPTS, failures, ["f32", "f16"])
    check_model(args, modules, "demo", args.demo_model, None, failures, ["f32", "f16"])
    check_demo_gguf_tokenization(args, modules, failures)
    with open(os.path.join(args.work_dir, "unigram-train.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(tc.training_sentences(args.corpus, args.prose)) + "\n")
    unigram_dir = unigram_model(args, "unigram", 9)
    check_model(args, modules, "unigram", unigram_dir, RANDOM_PROMPTS, failures, ["f32", "f16"], vocabulary="t5")
    check_unigram_tokenization(args, modules, unigram_dir, failures)
    check_unigram_variants(args, modules, failures)
    if failures.items:
        print(f"{len(failures.items)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
