#!/usr/bin/python3
"""Writes data/corpus/niels_corpus.jsonl: the chat corpus the shipped niels-demo model is trained on.

The corpus is about nielsd and niels-chat themselves. It is generated, deterministically, from the
hand-written question/answer tables in corpus_tables.py: every topic has several phrasings and one
short answer; questions about niels' private life or anything outside the corpus get "i don't know.".
Each output line is one conversation:

    {"system": "...", "turns": [{"user": "...", "assistant": "..."}, ...]}

("system" is "" for a conversation without a system message). Standard library only; run with
/usr/bin/python3 tools/train/make_corpus.py [--out PATH] [--conversations N] [--seed S].
"""

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus_tables as tables  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def idk_questions():
    """The out-of-corpus questions: hand-written ones plus the templated private-life and world ones."""
    out = list(tables.IDK_QUESTIONS)
    for thing in tables.NIELS_FAVOURITES:
        out.append(f"what is niels’ favourite {thing}?")
        out.append(f"what's niels' favorite {thing}?")
        out.append(f"does niels have a favourite {thing}?")
    for fact in tables.NIELS_PRIVATE:
        out.append(fact)
    for place in tables.COUNTRIES:
        out.append(f"what is the capital of {place}?")
    for city in tables.CITIES:
        out.append(f"what's the weather in {city}?")
        out.append(f"will it rain in {city} tomorrow?")
    for a, b in tables.SUMS:
        out.append(f"what is {a} plus {b}?")
        out.append(f"what is {a} times {b}?")
    for tool in tables.OTHER_SOFTWARE:
        out.append(f"how do i install {tool}?")
        out.append(f"what is {tool}?")
    return out


def vary(question, rng):
    """Small surface variations a user might type: capital first letter, no question mark."""
    q = question
    r = rng.random()
    if r < 0.25:
        q = q[0].upper() + q[1:]
    if q.endswith("?") and rng.random() < 0.2:
        q = q[:-1]
    return q


class Deck:
    """Draws items in shuffled rounds so that every item appears about equally often."""

    def __init__(self, items, rng):
        self.items = list(items)
        self.rng = rng
        self.pending = []

    def draw(self):
        if not self.pending:
            self.pending = list(self.items)
            self.rng.shuffle(self.pending)
        return self.pending.pop()


def build(conversations, seed):
    rng = random.Random(seed)
    qa = [(q, answer) for phrasings, answer in tables.TOPICS for q in phrasings]
    idk = [(q, tables.IDK_ANSWER) for q in idk_questions()]
    smalltalk = [(q, answer) for phrasings, answer in tables.SMALLTALK for q in phrasings]
    decks = {"qa": Deck(qa, rng), "idk": Deck(idk, rng), "small": Deck(smalltalk, rng)}
    turn_counts = [1, 1, 2, 2, 3, 3, 4, 4, 5, 6]

    out = []
    for _ in range(conversations):
        r = rng.random()
        if r < 0.85:
            system = tables.DEFAULT_SYSTEM
        elif r < 0.96:
            system = rng.choice(tables.OTHER_SYSTEMS)
        else:
            system = ""
        turns = []
        for i in range(rng.choice(turn_counts)):
            r = rng.random()
            kind = "qa" if r < 0.66 else ("idk" if r < 0.93 else "small")
            q, a = decks[kind].draw()
            turns.append({"user": vary(q, rng), "assistant": a})
        out.append({"system": system, "turns": turns})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(REPO, "data", "corpus", "niels_corpus.jsonl"))
    parser.add_argument("--conversations", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    convs = build(args.conversations, args.seed)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    n_topics = len(tables.TOPICS)
    n_phr = sum(len(p) for p, _ in tables.TOPICS)
    n_turns = sum(len(c["turns"]) for c in convs)
    print(f"make_corpus: {len(convs)} conversations, {n_turns} turns, {n_topics} topics "
          f"({n_phr} phrasings), {len(idk_questions())} out-of-corpus questions -> {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
