"""Random expressions for the reference test, from a fixed seed: Python semantics across types.

generate(n) builds n templates `{{ EXPR }}` where EXPR combines values of every kind a template
meets (ints, floats, strings with Unicode and whitespace, lists, tuples, dicts, None, booleans,
undefined names) with operators, comparisons, filters, tests, methods, subscripts and slices, mostly
well-typed and sometimes not. jinja_reference.py renders them with Jinja2; the C++ test requires
the same bytes, or a failure where Jinja2 fails. Deterministic for a given n.
"""

import random

SEED = 2611

ATOMS = [
    "0", "1", "-3", "7", "2.5", "-0.5", "1e20", "1e-7", "0.1", "true", "false", "none",
    "'abc'", "''", "' pad '", "'Hello World'", "'héllo'", "'你好😀'", "'a,b,,c'", "'\\n x \\t'", "'ß'",
    "'123'", "'4.5'", "'ǆ title-case x'", "[]", "[1, 2, 3]", "[3, 1, 2]", "['b', 'A', 'c']", "(1, 'x')",
    "{}", "{'k': 1, 'a': [2]}", "d", "l", "s", "n", "f", "missing", "d.k", "d['a']", "l[0]", "s[1:3]",
    "(range(3)|list)", "dict(a=1, b='x')", "namespace(a=1).a", "[[1], [2, 3]]", "['a', 1, none]", "(1,)", "'it\\'s'",
    "'\"q\"'", "1.5e15", "-0.0", "'%s|%d'", "'{}-{}'", "'\u3000x\u00a0'", "'Σ'", "[1.5, 2]", "{'b': 2, 'a': 1}",
]

BINARY = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or"]

# Filters Jinja2 implements as generators (items, map, select, reject, unique, batch, reverse) are
# followed by |list, as templates use them: a generator prints as "<generator object ... at 0x...>"
# and fails only when iterated.
FILTERS = ["length", "trim", "upper", "lower", "title", "capitalize", "first", "last", "list", "sort",
           "unique|list", "reverse|list", "join", "join(', ')", "tojson", "tojson(indent=2)", "string", "int",
           "float", "abs", "round", "round(1)", "default('D')", "default('D', true)", "items|list", "dictsort",
           "sum", "min", "max", "replace('a', 'Z')", "center(9)", "indent(2)", "wordcount", "batch(2)|list",
           "map('string')|list", "select|list", "reject('none')|list", "tojson(sort_keys=true)",
           "tojson(indent=1)", "dictsort(by='value')", "dictsort(reverse=true)", "sort(reverse=true)",
           "join('-', attribute='0')", "selectattr('0')|list", "map(attribute='a')|list", "string|length",
           "first|string", "list|length", "sum(start=10)", "round(2, 'floor')", "int('x', 16)", "float(1.5)"]

# Not here: printing range() itself (Python shows "range(0, 3)"), `e` (Jinja2's Markup strings
# print their methods' results as Markup('...')), ints beyond 64 bits (1e20|int).

# Slices apply to variables only: Jinja2 folds constant expressions at compile time, and a folded
# slice gets getitem's fallbacks (Undefined) where a run-time slice raises.
SLICED = ["d", "l", "s", "n", "f", "missing", "d.k", "d['a']", "l[1]", "(s ~ l[1])", "(l + [s])"]

TESTS = ["defined", "undefined", "none", "string", "number", "mapping", "iterable", "sequence", "integer",
         "float", "odd", "even", "lower", "upper", "boolean", "true", "false", "in [1, 'abc']", "eq 1",
         "divisibleby 3"]

METHODS = ["strip()", "strip('a')", "lstrip()", "rstrip(' ')", "split()", "split(',')", "split(',', 1)",
           "rsplit(',', 1)", "startswith('a')", "endswith(('c', 'd'))", "find('b')", "rfind('l')", "replace('l', '')",
           "upper()", "lower()", "title()", "capitalize()", "count('a')", "splitlines()", "isdigit()",
           "isalpha()", "isspace()", "center(7, '*')", "partition(',')", "removeprefix('a')", "format(1)",
           "get('k')", "get('z', 0)", "keys()|list", "values()|list", "items()|list", "index(1)", "count(1)",
           "join(['x', 'y'])", "format('a', 2)", "zfill(3)", "title()", "rstrip('\\n')", "lstrip('\\n')",
           "startswith(('a', 'H'))", "split('l')", "rsplit()", "count('')", "index('x')", "find('')",
           "get(1)", "copy()", "keys()|list|length"]


def _expr(rng, depth):
    if depth <= 0 or rng.random() < 0.3:
        return rng.choice(ATOMS)
    r = rng.random()
    sub = lambda: _expr(rng, depth - 1)  # noqa: E731
    if r < 0.3:
        return f"({sub()} {rng.choice(BINARY)} {sub()})"
    if r < 0.5:
        return f"({sub()} | {rng.choice(FILTERS)})"
    if r < 0.6:
        neg = rng.choice(["", "not "])
        return f"({sub()} is {neg}{rng.choice(TESTS)})"
    if r < 0.75:
        return f"({sub()}).{rng.choice(METHODS)}"
    if r < 0.85:
        return f"({sub()})[{rng.randint(-3, 3)}]"
    if r < 0.9:
        a, b = rng.choice(["", "1", "-1", "-2"]), rng.choice(["", "2", "-1", "5"])
        step = rng.choice(["", ":-1", ":2"])
        return f"{rng.choice(SLICED)}[{a}:{b}{step}]"
    if r < 0.95:
        return f"(not {sub()})"
    return f"({sub()} if {sub()} else {sub()})"


def generate(n):
    rng = random.Random(SEED)
    context = {"d": {"k": "v", "a": [1, 2.5, None]}, "l": [1, "two", 3.0], "s": "Mixed Case 文字", "n": None,
               "f": 0.1}
    return [{"name": f"expr{i:04d}", "template": "{{ " + _expr(rng, 3) + " }}", "context": context}
            for i in range(n)]
