"""Texts for the unigram export check (export_gguf_test.py): what a SentencePiece unigram tokenizer
is trained on, and the lines whose tokenization llama.cpp must reproduce.

training_sentences(corpus_jsonl, prose_files): every text of the chat corpus (niels-train's
    sentences: system prompts, user and assistant turns), the lines of `prose_files` (the
    repository's documentation: all of ASCII, code, tables) and MULTILINGUAL, so the vocabulary
    holds some accented, Greek, Cyrillic and CJK characters and lacks most others (emoji, Thai, ...).
test_lines(corpus_jsonl, prose_files, count, seed): `count` lines, deterministic for a seed:
    the corpus texts and lines of `prose_files` as they are, and the same with edits that exercise
    one tokenizer feature each (EDITS: whitespace runs and kinds, leading and trailing space, digits,
    punctuation runs, characters NFKC changes, characters outside the vocabulary, controls and
    format characters, literals of special and byte pieces).
"""

import json
import random
import unicodedata

MULTILINGUAL = [
    "Grüße aus Köln: Straße, Mädchen, Käse und Übermut.",
    "Ça va? Très bien, merci. Où est la gare? À côté du café.",
    "¿Dónde está la biblioteca? Mañana, señor, en el niño.",
    "Ελληνικά: καλημέρα, ευχαριστώ, παρακαλώ.",
    "Русский: привет, спасибо, пожалуйста, до свидания.",
    "日本語のテキスト、東京と京都。",
    "中文文本，北京和上海。",
    "Dansk: rødgrød med fløde, æble, ø og å.",
    "Polski: zażółć gęślą jaźń.",
    "Čeština: příliš žluťoučký kůň úpěl ďábelské ódy.",
]

# Characters whose NFKC form differs (fullwidth, ligatures, super/subscripts, fractions, compatibility
# letters and symbols, composed/decomposed accents, halfwidth katakana, math alphanumerics).
NFKC_CHANGED = ("ＡＢＣｘｙｚ０１２３！？（）　ﬁﬂﬀﬃﬆ²³¹⁴₂½¼¾℃℉№™℡㎞㎏①⑫ⅫⅣｶﾀｶﾅﾞ"
                "ÅKµſǆǄ𝔸𝐁𝟗ℌℍℕ…‥︙ｰ﹏﹖\u00a8\u00af\u00b4\u00b8\u2002\u2003\u2009\u3000"
                "e\u0301a\u0308o\u0302\u212b")
# Characters no test tokenizer has a piece for (byte fallback, or <unk> without it).
OUTSIDE = "😀🎉👍🏽🤖🇩🇰ไทยहिन्दीעבריתالعربية한국어ᚠᛇᚻ∀∂∈ℝ≥≠→⇒─│┼█░€£¥₿§¶†‡※⁂\U0001f600\U00010348"
CONTROLS = "\x07\x1b\x7f\u0085\u2028\u2029\u200b\u200c\u200d\ufeff\u00ad\u2060\ufe0f\u0301"
WHITESPACE = [" ", "  ", "   ", "      ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000",
              "\u2003", " \t \u00a0 "]
PUNCTUATION = ["...", "!!!", "?!", "--", "—", "–", "“", "”", "‘", "’", "«", "»", "(", ")", "[", "]",
               "{}", "<>", "#", "@", "$", "%", "&", "*", "/", "\\", "|", "~", "^", "`", "'", '"', ";",
               ":", ",", ".", "_", "=", "+", "-"]
LITERALS = ["<unk>", "<s>", "</s>", "<0x41>", "<0xE2>", "\u2581", "\u2581\u2581", "<|ngpt_usr_", "<pad>",
            "<|ngpt_eot_84a5023f67d74cf29cc4001becde983c|>", "<|ngpt_sys_84a5023f67d74cf29cc4001becde983c|>"]


def corpus_texts(corpus_jsonl):
    """The corpus's texts in niels-train's order (tools/train/chat_corpus.cc CorpusSentences)."""
    out = []
    with open(corpus_jsonl, encoding="utf-8") as f:
        for line in f:
            conversation = json.loads(line)
            if conversation.get("system"):
                out.append(conversation["system"])
            for turn in conversation["turns"]:
                out += [turn["user"], turn["assistant"]]
    return out


def prose_lines(prose_files):
    lines = []
    for path in prose_files:
        with open(path, encoding="utf-8") as f:
            lines += [line.rstrip("\n") for line in f if line.strip()]
    return lines


def training_sentences(corpus_jsonl, prose_files):
    """One sentence per line (newlines inside a text become spaces)."""
    texts = corpus_texts(corpus_jsonl) + prose_lines(prose_files) + MULTILINGUAL * 3
    return [t.replace("\n", " ") for t in texts if t.strip()]


def _digits(rng):
    return rng.choice([str(rng.randrange(10 ** rng.randrange(1, 12))), f"{rng.uniform(-1e4, 1e4):.{rng.randrange(6)}f}",
                       f"{rng.randrange(1, 10**7):,}", f"+45 {rng.randrange(10**8):08d}", "2026-07-04T12:30:00Z",
                       "0x" + format(rng.randrange(1 << 32), "x"), "1e-5", "3.14159", "v0.4.0"])


def _insert(rng, text, piece):
    i = rng.randrange(len(text) + 1)
    return text[:i] + piece + text[i:]


def _replace_spaces(rng, text):
    return "".join(rng.choice(WHITESPACE) if c == " " and rng.random() < 0.5 else c for c in text)


def _sprinkle(rng, text, chars, n):
    for _ in range(n):
        text = _insert(rng, text, rng.choice(chars))
    return text


EDITS = {
    "whitespace": _replace_spaces,
    "edges": lambda rng, t: rng.choice(WHITESPACE) + t + rng.choice(WHITESPACE + [""]),
    "digits": lambda rng, t: _insert(rng, _insert(rng, t, " " + _digits(rng) + " "), _digits(rng)),
    "punctuation": lambda rng, t: _sprinkle(rng, t, PUNCTUATION, rng.randrange(1, 6)),
    "nfkc": lambda rng, t: _sprinkle(rng, t, NFKC_CHANGED, rng.randrange(1, 8)),
    "outside": lambda rng, t: _sprinkle(rng, t, OUTSIDE, rng.randrange(1, 5)),
    "controls": lambda rng, t: _sprinkle(rng, t, CONTROLS, rng.randrange(1, 4)),
    "literals": lambda rng, t: _insert(rng, t, rng.choice(LITERALS)),
    "case": lambda rng, t: t.upper() if rng.random() < 0.5 else t.title(),
    "nfd": lambda rng, t: unicodedata.normalize("NFD", t + " " + rng.choice(MULTILINGUAL)),
    "mixed": lambda rng, t: EDITS["outside"](rng, EDITS["nfkc"](rng, EDITS["whitespace"](rng, t))),
}


def test_lines(corpus_jsonl, prose_files, count, seed):
    """(edit name, text) pairs; edit "none" for unedited texts. Distinct texts, `count` in all."""
    rng = random.Random(seed)
    base = list(dict.fromkeys(corpus_texts(corpus_jsonl) + MULTILINGUAL + prose_lines(prose_files)))
    rng.shuffle(base)
    plain = base[:count // 3]
    out = [("none", t) for t in plain] + [("none", "")]
    seen = {t for _, t in out}
    names = sorted(EDITS)
    while len(out) < count:
        name = names[len(out) % len(names)]
        text = EDITS[name](rng, rng.choice(base))
        if text not in seen:
            seen.add(text)
            out.append((name, text))
    return out
