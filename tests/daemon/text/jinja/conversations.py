"""Conversations for the chat-template reference test, generated from a fixed seed.

generate(template_name, n) returns n inputs {"messages", "tools", "add_generation_prompt",
"extra"} for that template: with and without a system message, 1-10 turns, text in many scripts
(CJK, emoji with ZWJ and skin tones, combining marks, right-to-left), empty and whitespace-only
messages, Unicode whitespace (which trim/strip must treat as Python does), text that looks like
template syntax or special tokens, assistant turns with reasoning_content or <think>...</think>
in the content, tool definitions, tool calls and tool results where the template has them, Qwen3's
enable_thinking true/false/absent, and a few deliberately malformed conversations (content None or
missing or a list, several tool calls for Llama 3.2, a role the template rejects) on which Jinja2
raises, so the test also checks that nielsd fails where Jinja2 fails.

Deterministic: the same (template_name, n) gives the same conversations on every machine.
"""

import json
import random

SEED = 20261126

TEXTS = [
    "Hello!",
    "What is the capital of France?",
    "Can you explain how a KV cache works, step by step?",
    "",
    " ",
    "   padded on both sides   ",
    "\n\nleading newlines",
    "trailing newlines\n\n",
    "multi\nline\n\ntext with a blank line",
    "tabs\tbetween\twords\t",
    "carriage\r\nreturn and\rcr",
    "你好，世界！今天天气怎么样？",
    "日本語のテキストです。カタカナも。",
    "한국어 문장입니다.",
    "Привет, как дела?",
    "مرحبا بالعالم",
    "שלום עולם",
    "emoji 😀🎉👍🏽 and more 🚀",
    "family 👨\u200d👩\u200d👧\u200d👦 with zwj",
    "flags 🇫🇷🇯🇵",
    "combining e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937",
    "\u3000ideographic spaces\u3000",
    "\u00a0non-breaking spaces\u00a0",
    "\u2003em space and thin\u2009space\u2003",
    "quotes \"double\" and 'single' and `back`",
    "backslash \\ and a literal \\n and \\u0041",
    "{{ not_a_variable }}",
    "{% if true %}not a tag{% endif %}",
    "{# not a comment #}",
    "{{- strip -}} {%- raw -%}",
    "<|im_end|> a fake end",
    "<|im_start|>user\na fake turn",
    "<|eot_id|><|start_header_id|>system<|end_header_id|>",
    "<|begin_of_text|>",
    "</think> a stray close tag",
    "<think>an unclosed think",
    "<tool_call>\n{\"name\": \"x\"}\n</tool_call>",
    "<tool_response>not really</tool_response>",
    "control \x01\x07\x1b chars",
    "right-to-left \u202e override",
    "zero width \u200b space and \ufeff BOM",
    "line separator \u2028 and paragraph \u2029",
    "vertical\x0btab and form\x0cfeed",
    "file sep \x1c group \x1d record \x1e unit \x1f",
    "next line \x85 character",
    "mixed 中文 and English with emoji 🚀 and math ∑∫√",
    "math: 3 < 4 && 5 > 2, 10 % 3 == 1",
    "json {\"a\": [1, 2.5, null, true]}",
    "a very long message " + "lorem ipsum dolor sit amet " * 40,
    "🙂" * 30,
    "ends with a backslash \\",
    "None",
    "true",
]

THOUGHTS = [
    "Let me think about this.",
    "\nThe user wants a short answer.\n",
    "思考：先算一下。",
    "",
    "step 1\nstep 2\n\nstep 3",
]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. 東京"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web. Quotes \"work\" and backslashes \\ too.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            "threshold": {"type": "number", "default": 0.75},
            "safe": {"type": "boolean", "default": True},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
            "filters": {"type": "object", "properties": {}, "default": None}},
            "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "calc",
        "description": "Evaluate 1e-05 * 2.5e+30 and friends 😀",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}},
    {"name": "bare_tool", "description": "a tool without the function wrapper",
     "parameters": {"type": "object", "properties": {"x": {"type": "number"}}}},
]

ARGUMENTS = [
    {"city": "Paris"},
    {"city": "東京", "unit": "celsius"},
    {"query": "nielsd \"jinja\"", "limit": 3, "threshold": 0.5, "safe": False, "tags": ["a", "b"]},
    {},
    {"expr": "1/3", "nested": {"list": [1, 2.0, None, True, "x"], "empty": {}}},
]

# Templates that render tool definitions and tool calls.
TOOL_TEMPLATES = {"qwen3", "qwen2_5", "llama3_2", "deepseek_v3"}


def _text(rng):
    if rng.random() < 0.25:
        return " ".join(rng.choice(TEXTS) for _ in range(rng.randint(2, 4)))
    return rng.choice(TEXTS)


def _tool_call(rng, template_name=""):
    name = rng.choice(["get_weather", "search", "calc"])
    arguments = rng.choice(ARGUMENTS)
    if rng.random() < (0.8 if template_name == "deepseek_v3" else 0.3):
        arguments = json.dumps(arguments, ensure_ascii=rng.random() < 0.5)
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if rng.random() < 0.3:
        call["id"] = f"call_{rng.randint(0, 99999)}"
    if rng.random() < 0.1:
        call = {"name": name, "arguments": arguments}  # without the function wrapper
    return call


def _assistant(rng, template_name, with_tools):
    message = {"role": "assistant", "content": _text(rng)}
    r = rng.random()
    if r < 0.2:
        message["content"] = f"<think>{rng.choice(THOUGHTS)}</think>{rng.choice(['', chr(10), chr(10) * 2])}{_text(rng)}"
    elif r < 0.35:
        message["reasoning_content"] = rng.choice(THOUGHTS)
    elif r < 0.4:
        message["reasoning_content"] = None
    if with_tools and rng.random() < 0.35:
        n = 1 if template_name == "llama3_2" and rng.random() < 0.9 else rng.randint(1, 3)
        message["tool_calls"] = [_tool_call(rng, template_name) for _ in range(n)]
        message["content"] = rng.choice(["", _text(rng), ""])
        if template_name == "deepseek_v3" and rng.random() < 0.8:
            message["content"] = None  # DeepSeek V3 renders tool calls only without content
    return message


def _tool_results(rng):
    out = []
    for _ in range(rng.randint(1, 3)):
        content = _text(rng)
        if rng.random() < 0.3:
            content = json.dumps({"temperature": 21.5, "unit": "celsius", "note": "晴れ"}, ensure_ascii=False)
        out.append({"role": "tool", "content": content})
    return out


def _conversation(rng, template_name):
    with_tools = template_name in TOOL_TEMPLATES and rng.random() < 0.35
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": _text(rng)})
    turns = rng.randint(1, 10)
    for turn in range(turns):
        user = {"role": "user", "content": _text(rng)}
        if template_name == "gemma3" and rng.random() < 0.2:  # multimodal parts
            user["content"] = [{"type": "image"}, {"type": "text", "text": _text(rng)}][rng.randrange(2):]
        messages.append(user)
        last = turn == turns - 1
        if last and rng.random() < 0.5:
            break  # ends on the user's message
        assistant = _assistant(rng, template_name, with_tools)
        messages.append(assistant)
        if "tool_calls" in assistant and (not last or rng.random() < 0.5):
            messages.extend(_tool_results(rng))
            if rng.random() < 0.7:
                messages.append(_assistant(rng, template_name, False))
    inputs = {
        "messages": messages,
        "tools": [rng.choice(TOOLS) for _ in range(rng.randint(1, 3))] if with_tools else None,
        "add_generation_prompt": rng.random() < 0.6,
        "extra": {},
    }
    r = rng.random()
    if r < 0.35:
        inputs["extra"]["enable_thinking"] = False
    elif r < 0.7:
        inputs["extra"]["enable_thinking"] = True
    if template_name == "llama3_2":
        if rng.random() < 0.2:
            inputs["extra"]["date_string"] = "01 Jan 2025"
        if with_tools and rng.random() < 0.3:
            inputs["extra"]["tools_in_user_message"] = False
    return inputs


def _malform(rng, inputs, template_name):
    """Breaks a conversation in a way at least one template rejects."""
    messages = inputs["messages"]
    target = rng.choice(messages)
    kind = rng.randrange(5)
    if kind == 0:
        target["content"] = None
    elif kind == 1:
        target.pop("content", None)
    elif kind == 2:
        target["content"] = [{"type": "text", "text": "a list of parts"}]
    elif kind == 3:
        target["role"] = rng.choice(["tool", "ipython", "developer"])
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [_tool_call(rng), _tool_call(rng)]})


def generate(template_name, n):
    rng = random.Random(f"{SEED}:{template_name}")
    out = []
    for i in range(n):
        inputs = _conversation(rng, template_name)
        if i % 10 == 9:  # one in ten malformed
            _malform(rng, inputs, template_name)
        out.append(inputs)
    return out
