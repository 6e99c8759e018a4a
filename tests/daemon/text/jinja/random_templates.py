"""Random templates for the reference test, from a fixed seed: whitespace control above all.

Jinja2's whitespace rules (trim_blocks, lstrip_blocks, `-` and `+` on either side of a tag, comments,
raw blocks, the dropped final newline) interact in many ways; chat templates lean on them for every
byte between turns. generate(n) builds n templates from random text (spaces, tabs, newlines, CRLF,
Unicode whitespace) around random tags with random modifiers, nested if/for/set/macro blocks and
outputs; jinja_reference.py renders them with Jinja2 and the C++ test requires the same bytes (or a
failure where Jinja2 fails). Deterministic for a given n.
"""

import random

SEED = 1126

SPACES = ["", "", " ", "  ", "\t", "\n", "\n", " \n", "\n  ", "\n\n", "\r\n", " \r\n\t", "\u3000", "\u00a0\n", "\x0b"]
WORDS = ["a", "bc", "你好", "😀", "x y", "{", "}", "%", "#", "-", "+", "{ {", "% }"]


class Gen:
    def __init__(self, rng):
        self.rng = rng
        self.depth = 0

    def ws(self):
        return "".join(self.rng.choice(SPACES) for _ in range(self.rng.randint(0, 3)))

    def text(self):
        return self.ws() + self.rng.choice(WORDS) + self.ws()

    def open_mod(self):
        return self.rng.choice(["", "", "-", "+"])

    def close_mod(self):
        return self.rng.choice(["", "", "-", "+"])

    def inner_ws(self):
        return self.rng.choice([" ", " ", "", "  ", "\n"])

    def tag(self, body):
        return "{%" + self.open_mod() + self.inner_ws() + body + self.inner_ws() + self.close_mod() + "%}"

    def expr(self):
        return self.rng.choice(["1", "'s'", "x", "x ~ '|'", "' a '", "'\\n'", "n + 1", "loop is defined",
                                "[1, 2]|length", "'x' if n else 'y'", "{'k': 1}"])

    def output(self):
        close = self.rng.choice(["", "", "-"])
        return "{{" + self.open_mod() + self.inner_ws() + self.expr() + self.inner_ws() + close + "}}"

    def comment(self):
        return "{#" + self.open_mod() + self.rng.choice([" c ", "", "\n", " {{ x }} "]) + self.close_mod() + "#}"

    def raw(self):
        return self.tag("raw") + self.text() + "{{ x }}" + self.text() + self.tag("endraw")

    def block(self):
        kind = self.rng.randrange(5)
        if kind == 0:
            return (self.tag("if n") + self.body() + self.tag("elif x") + self.body() + self.tag("else") + self.body() +
                    self.tag("endif"))
        if kind == 1:
            return self.tag("for i in [1, 2]") + self.body() + self.tag("endfor")
        if kind == 2:
            return self.tag("set y = " + self.expr())
        if kind == 3:
            return self.tag("set z") + self.body() + self.tag("endset") + "{{ z }}"
        return self.tag("macro m(a)") + self.body() + self.tag("endmacro") + "{{ m(1) }}"

    def item(self):
        r = self.rng.random()
        if r < 0.3:
            return self.text()
        if r < 0.55:
            return self.output()
        if r < 0.65:
            return self.comment()
        if r < 0.7:
            return self.raw()
        if self.depth >= 3:
            return self.text()
        self.depth += 1
        out = self.block()
        self.depth -= 1
        return out

    def body(self):
        return "".join(self.item() for _ in range(self.rng.randint(0, 4)))


def generate(n):
    rng = random.Random(SEED)
    out = []
    for i in range(n):
        gen = Gen(rng)
        template = gen.body() + gen.ws()
        out.append({"name": f"random{i:04d}", "template": template,
                    "context": {"x": "X", "n": i % 3}})
    return out
