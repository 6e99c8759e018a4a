#!/usr/bin/env python3
"""Independent reference for the grammar tests: a GBNF reader and an Earley recognizer.

Written separately from daemon/grammar (shares no code or design with it): the grammar is read into
plain BNF productions over character sets, and strings are recognized with Earley's algorithm
(with the Aycock-Horspool treatment of nullable symbols), which handles any context-free grammar.

stdin: JSON {"grammar": "<GBNF text>", "strings": ["...", ...]}
stdout: JSON [{"full": bool, "prefix": bool}, ...] -- `full`: the string is a sentence of the
grammar; `prefix`: some sentence starts with it (every rule of the test grammars can end, so a
non-empty Earley set means a viable prefix).
"""
import json
import sys

MAX_CP = 0x10FFFF


class CharSet:
    def __init__(self, ranges, negated):
        self.ranges = ranges
        self.negated = negated

    def matches(self, ch):
        cp = ord(ch)
        inside = any(lo <= cp <= hi for lo, hi in self.ranges)
        return inside != self.negated


class Reader:
    """GBNF text -> productions {nonterminal: [[symbol, ...], ...]}; a symbol is a str (nonterminal)
    or a CharSet."""

    def __init__(self, text):
        self.s = text
        self.i = 0
        self.prods = {}
        self.fresh = 0

    def new_nt(self, alts):
        self.fresh += 1
        name = f" gen{self.fresh}"
        self.prods[name] = alts
        return name

    def peek(self, k=0):
        return self.s[self.i + k] if self.i + k < len(self.s) else ""

    def ws(self, newlines):
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] not in "\r\n":
                    self.i += 1
            else:
                break

    def name(self):
        j = self.i
        while self.i < len(self.s) and (self.s[self.i].isascii() and (self.s[self.i].isalnum() or self.s[self.i] == "-")):
            self.i += 1
        if j == self.i:
            raise ValueError(f"name expected at {self.i}")
        return self.s[j:self.i]

    def char(self):
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return ord(c)
        e = self.s[self.i + 1]
        self.i += 2
        simple = {"n": 10, "r": 13, "t": 9, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}
        if e in simple:
            return simple[e]
        width = {"x": 2, "u": 4, "U": 8}[e]
        v = int(self.s[self.i:self.i + width], 16)
        self.i += width
        return v

    def parse(self):
        self.ws(True)
        while self.i < len(self.s):
            n = self.name()
            self.ws(False)
            assert self.s.startswith("::=", self.i)
            self.i += 3
            self.ws(True)
            self.prods[n] = self.alternatives(False)
            self.ws(True)
        return self.prods

    def alternatives(self, nested):
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.i += 1
            self.ws(True)
            alts.append(self.sequence(nested))
        return alts

    def sequence(self, nested):
        seq = []
        last = None  # index in seq where the last item starts
        while self.i < len(self.s):
            c = self.peek()
            if c == '"':
                self.i += 1
                last = len(seq)
                while self.peek() != '"':
                    cp = self.char()
                    seq.append(CharSet([(cp, cp)], False))
                self.i += 1
            elif c == "[":
                self.i += 1
                neg = self.peek() == "^"
                if neg:
                    self.i += 1
                ranges = []
                while self.peek() != "]":
                    lo = self.char()
                    hi = lo
                    if self.peek() == "-" and self.peek(1) != "]":
                        self.i += 1
                        hi = self.char()
                    ranges.append((lo, hi))
                self.i += 1
                last = len(seq)
                seq.append(CharSet(ranges, neg))
            elif c == ".":
                self.i += 1
                last = len(seq)
                seq.append(CharSet([(0, MAX_CP)], False))
            elif c == "(":
                self.i += 1
                self.ws(True)
                alts = self.alternatives(True)
                assert self.peek() == ")"
                self.i += 1
                last = len(seq)
                seq.append(self.new_nt(alts))
            elif c in "*+?":
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                seq = self.repeat(seq, last, lo, hi)
            elif c == "{":
                self.i += 1
                self.ws(False)
                j = self.i
                while self.peek().isdigit():
                    self.i += 1
                lo = int(self.s[j:self.i])
                self.ws(False)
                hi = lo
                if self.peek() == ",":
                    self.i += 1
                    self.ws(False)
                    j = self.i
                    while self.peek().isdigit():
                        self.i += 1
                    hi = int(self.s[j:self.i]) if self.i > j else None
                    self.ws(False)
                assert self.peek() == "}"
                self.i += 1
                seq = self.repeat(seq, last, lo, hi)
            elif c.isascii() and (c.isalnum() or c == "-"):
                last = len(seq)
                seq.append(self.name())
            else:
                break
            self.ws(nested)
        return seq

    def repeat(self, seq, last, lo, hi):
        item = seq[last:]
        head = seq[:last]
        body = self.new_nt([item])
        out = head + [body] * lo
        if hi is None:
            star = self.new_nt([])
            self.prods[star] = [[body, star], []]
            out.append(star)
        elif hi > lo:
            # optional copies: opt_k -> body opt_(k-1) | empty
            prev = None
            for _ in range(hi - lo):
                alts = [[body] + ([prev] if prev else []), []]
                prev = self.new_nt(alts)
            out.append(prev)
        return out


def nullable_set(prods):
    nullable = set()
    changed = True
    while changed:
        changed = False
        for nt, alts in prods.items():
            if nt in nullable:
                continue
            if any(all(isinstance(s, str) and s in nullable for s in alt) for alt in alts):
                nullable.add(nt)
                changed = True
    return nullable


def recognize(prods, nullable, text):
    """Returns (full, prefix). Items are (nt, alt index, dot, origin)."""
    start = "root"
    sets = [set() for _ in range(len(text) + 1)]

    def add(k, item, agenda):
        if item not in sets[k]:
            sets[k].add(item)
            agenda.append(item)

    agenda = []
    for a in range(len(prods[start])):
        add(0, (start, a, 0, 0), agenda)
    for k in range(len(text) + 1):
        if k > 0:
            agenda = list(sets[k])
        while agenda:
            nt, a, dot, origin = agenda.pop()
            alt = prods[nt][a]
            if dot < len(alt):
                sym = alt[dot]
                if isinstance(sym, str):  # predict
                    for b in range(len(prods[sym])):
                        add(k, (sym, b, 0, k), agenda)
                    if sym in nullable:
                        add(k, (nt, a, dot + 1, origin), agenda)
                elif k < len(text) and sym.matches(text[k]):  # scan
                    sets[k + 1].add((nt, a, dot + 1, origin))
            else:  # complete
                for (pnt, pa, pdot, porigin) in list(sets[origin]):
                    palt = prods[pnt][pa]
                    if pdot < len(palt) and palt[pdot] == nt:
                        add(k, (pnt, pa, pdot + 1, porigin), agenda)
        if k < len(text) and not sets[k + 1]:
            return False, False
    full = any(nt == start and dot == len(prods[nt][a]) and origin == 0
               for (nt, a, dot, origin) in sets[len(text)])
    return full, True


def main():
    req = json.load(sys.stdin)
    prods = Reader(req["grammar"]).parse()
    nullable = nullable_set(prods)
    out = []
    for s in req["strings"]:
        full, prefix = recognize(prods, nullable, s)
        out.append({"full": full, "prefix": prefix})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
