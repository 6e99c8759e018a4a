#!/usr/bin/python3
"""Reference prompts for nielsd's chat formats (tests/daemon/text/chat_format_test.cc).

What Hugging Face transformers' apply_chat_template(messages, add_generation_prompt=True,
tokenize=True) gives for a model, written from independent parts: the model's real chat template
rendered by Python Jinja2 in transformers' environment (jinja_reference.py's make_environment and
chat_context, Debian python3-jinja2), then the text encoded by transformers.js (@lenml/tokenizers
through ../reference/encode_reference.mjs) with special-token literals parsed and no special
tokens added, as apply_chat_template's tokenize step does.

Usage: chat_format_reference.py NPM_DIR REQUEST.json OUT.json
  NPM_DIR   the npm prefix of scripts/install_references.sh (holding node_modules/)
  REQUEST   [{"template": "qwen3" | "qwen2_5" | "llama3_1" | ... | "niels", "messages": [{"role", "content",
              "reasoning_content"?}, ...], "add_generation_prompt": bool, "extra": {...}}, ...]
  OUT       one entry per request: {"output": text, "ids": [...]} or {"error": "Type: message"}
            ("niels", niels_gpt's template from tools/export/niels_export.py: no "ids"; its SentencePiece
            tokenizer is a C++ test fixture)
bos_token and eos_token come from the package's tokenizer_config.json, as transformers passes them.
"""

import base64
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "jinja"))
import jinja_reference  # noqa: E402


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    npm_dir, request_path, out_path = argv
    with open(request_path, encoding="utf-8") as f:
        requests = json.load(f)
    env = jinja_reference.make_environment()
    templates = {name: (source, config)
                 for name, source, config in jinja_reference.real_templates(npm_dir)}
    results = []
    for request in requests:
        source, config = templates[request["template"]]
        inputs = {"messages": request["messages"], "add_generation_prompt": request["add_generation_prompt"],
                  "extra": request.get("extra", {}),
                  "bos_token": jinja_reference.special_token(config, "bos_token"),
                  "eos_token": jinja_reference.special_token(config, "eos_token")}
        results.append(jinja_reference.render(env, source, jinja_reference.chat_context(inputs)))
    # Encode every rendering with its model's tokenizer, one node run per tokenizer.
    by_template = {}
    for i, (request, result) in enumerate(zip(requests, results)):
        if "output" in result and request["template"] != "niels":  # niels_gpt: SentencePiece, encoded in C++
            by_template.setdefault(request["template"], []).append(i)
    with tempfile.TemporaryDirectory(prefix="niels_chat_ref_") as work:
        for name, indices in by_template.items():
            corpus = os.path.join(work, f"{name}.b64")
            with open(corpus, "w", encoding="ascii") as f:
                for i in indices:
                    f.write(base64.b64encode(results[i]["output"].encode("utf-8")).decode("ascii") + "\n")
            subprocess.run(["node", os.path.join(HERE, "reference", "encode_reference.mjs"), npm_dir, corpus, work,
                            name], check=True, stdout=subprocess.DEVNULL, timeout=600)
            with open(os.path.join(work, f"{name}.jsonl"), encoding="utf-8") as f:
                lines = [json.loads(line) for line in f if line.strip()]
            for i, line in zip(indices, lines):
                results[i]["ids"] = line["special"]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1:])
