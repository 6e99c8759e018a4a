#!/usr/bin/env python3
"""Writes the text corpus of the byte-level BPE reference test (tests/daemon/text/bpe_reference_test.cc).

Usage: make_bpe_corpus.py OUT_FILE [--seed N] [--every K]

--every K keeps every K-th case only (the first, the K+1-th, ...): the sanitizer builds run a
quarter of the corpus.

One test case per line of OUT_FILE, as the base64 of the case's raw bytes (a case may hold newlines,
carriage returns and invalid UTF-8). Deterministic for a given seed. The cases cover prose, code in
several languages, CJK, Arabic, Hebrew, Hindi, Thai and other scripts, emoji with ZWJ sequences,
digit runs of every length (Llama 3 splits digits in threes, Qwen one by one), runs of spaces, tabs
and newlines (leading, trailing, CRLF), English contractions in any case, special-token literals
inside text, decomposed (NFD) text that NFC changes, invalid UTF-8, and a few long lines.

Left out on purpose, because the reference encoder (transformers.js regexes) and Hugging Face
tokenizers (Oniguruma regexes, which nielsd follows) disagree on them: U+0085 (whitespace for
Oniguruma, not for JavaScript), U+FEFF (whitespace for JavaScript only) and U+017F LONG S (matched
by the case-insensitive contraction `(?i:'s)` in Oniguruma, not by transformers.js's rewrite of it).
nielsd's unit tests cover those three separately. Characters newer than Unicode 14 (PCRE2 10.42's
tables) are not used either.
"""

import argparse
import base64
import random

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from "
         "or one had by word but not what all were we when your can said there use an each which she "
         "do how their if will up other about out many then them these so some her would make like "
         "him into time has look two more write go see number no way could people my than first water "
         "been call who oil its now find long down day did get come made may part tokenizer daemon "
         "session cache model kernel byte pair encoding merge rank vocabulary Unicode normalization "
         "llama qwen socket request response stream prefill decode sampler temperature").split()
NAMES = ["Alice", "Bob", "O'Neil", "McDonald", "ÉCOLE", "Zoë", "Ångström", "São Paulo", "Kraków",
         "Nguyễn", "Müller", "Đorđe", "İstanbul", "ıi", "straße", "STRASSE", "ǅemal", "Ǆ"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Re", "'rE", "'VE",
                "'vE", "'M", "'LL", "'lL", "'Ll", "'D"]
CONTRACTION_WORDS = ["I'm", "don't", "can't", "WON'T", "It's", "IT'S", "they're", "THEY'RE",
                     "we've", "We'VE", "you'll", "YOU'LL", "she'd", "SHE'D", "rock 'n' roll",
                     "'tis", "'Twas", "y'all", "ma'am", "o'clock", "'''", "''s", "'s's", "’s",
                     "it’s", "‘quoted’", "'", "''", "' s", "'sss", "'ttt", "'lll", "'dd"]
CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "for i in range(10):\n\tprint(f\"{i:>3}\")\n",
    "int main(int argc, char** argv) {\n  std::vector<int> v{1, 2, 3};\n  return v.size() > 2 ? 0 : 1;\n}\n",
    "template <typename T> struct Box { T value_; };",
    "const add = (a, b) => a + b; // arrow\nconsole.log(add(2, 40));",
    "fn main() { let s: &str = \"hé\"; println!(\"{s:?}\"); }",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "<html>\n  <body class=\"x\">&nbsp;&lt;tag&gt;</body>\n</html>",
    "#!/bin/sh\nset -euo pipefail\nfor f in *.txt; do wc -l \"$f\"; done",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\\n\"}}",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "    if (x != y && z <= 0x1F) { return -1; }\r\n",
    "a=[i*i for i in range(1_000_000) if i%7==0]",
    "x += 1; y -= 2; z *= 3; w /= 4; v %= 5; u <<= 6; t >>= 7;",
    "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "```python\nimport numpy as np\nnp.zeros((3, 4), dtype=np.float32)\n```",
    "| col1 | col2 |\n|------|------|\n| 1    | 2    |",
    "https://example.com/path?query=a%20b&x=1#frag",
    "user@example.org; C:\\Users\\name\\file.txt; /usr/local/bin",
    "$ cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2",
    "\t\tcase 'a': return \"\\t\";\n\t\tdefault: break;",
    "λx.λy.x y  ∀x∈ℝ: x² ≥ 0  ∑_{i=1}^{n} i = n(n+1)/2",
]
SCRIPTS = {
    "zh": "我们的模型在本地运行，每个会话保留自己的缓存。今天天气很好，我们去公园散步吧！分词器把文本切成词元。",
    "ja": "東京は日本の首都です。ひらがなとカタカナ、そして漢字を使います。トークナイザーのテストをしています。",
    "ko": "안녕하세요. 저는 한국어를 조금 할 수 있습니다. 토크나이저가 잘 작동하나요?",
    "ar": "مرحبا بالعالم. هذه جملة عربية للاختبار، وفيها أرقام ١٢٣٤٥ وعلامات ترقيم؟",
    "he": "שלום עולם! זהו משפט בעברית עם ניקוד: בְּרֵאשִׁית בָּרָא.",
    "hi": "नमस्ते दुनिया। यह हिंदी का एक वाक्य है, जिसमें संख्याएँ १२३ भी हैं।",
    "th": "สวัสดีครับ ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ ทดสอบตัวตัดคำ",
    "ru": "Привет, мир! Это предложение на русском языке. Ёжик в тумане.",
    "el": "Γειά σου Κόσμε! Αυτή είναι μια ελληνική πρόταση με τόνους: άέήίόύώ ΐΰ.",
    "vi": "Tiếng Việt có rất nhiều dấu: ắ ằ ẳ ẵ ặ ấ ầ ẩ ẫ ậ ố ồ ổ ỗ ộ.",
    "bn": "আমি বাংলায় গান গাই। এটি একটি পরীক্ষা বাক্য।",
    "ta": "வணக்கம் உலகம். இது ஒரு தமிழ் வாக்கியம்.",
    "am": "ሰላም ለዓለም። ይህ የአማርኛ ዓረፍተ ነገር ነው።",
    "ka": "გამარჯობა მსოფლიო! ეს ქართული წინადადებაა.",
    "hy": "Բարեւ աշխարհ։ Սա հայերեն նախադասություն է։",
    "fa": "سلام دنیا. این یک جملهٔ فارسی است با ارقام ۱۲۳۴.",
    "ur": "ہیلو دنیا۔ یہ اردو کا جملہ ہے۔",
    "my": "မင်္ဂလာပါ ကမ္ဘာလောက။",
    "km": "សួស្តី​ពិភពលោក។",
    "mixed": "Mixed: English, 中文, العربية, हिन्दी, ไทย, Русский — all in one line…",
}
EMOJI = ["😀", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇩🇪", "🇯🇵🇺🇸", "1️⃣", "#️⃣", "❤️", "❤", "🧑🏿‍💻",
         "👩‍❤️‍💋‍👨", "🤷‍♀️", "🐈‍⬛", "☕", "🎉🎉🎉", "🙂‍↔️", "©️", "™", "🔥", "💯", "🫶🏻", "🏴‍☠️",
         "😶‍🌫️", "👁️‍🗨️", "🧔‍♂️", "🦶🏾", "🈯", "🆗"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|begin_of_text|>",
            "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
            "<|python_tag|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_0|>",
            "<|reserved_special_token_5|>", "<|reserved_special_token_247|>", "<think>", "</think>",
            "<tool_call>", "</tool_call>", "<tool_response>", "<|fim_prefix|>", "<|fim_middle|>",
            "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<|vision_start|>",
            "<|image_pad|>", "<|object_ref_start|>", "<|box_end|>", "<|quad_start|>",
            "<|im_", "<|eot_id", "|>", "<|", "<think", "</think", "<|im_start|", "< |im_start|>",
            "<|IM_START|>", "<<|eot_id|>>", "<|im_start|><|im_start|>", "<|eot_id|><|eot_id|>"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ",
              " \t\n", "\u00a0", "\u3000", "\u2028", "\u2029", "\u2003", "\u200a", "\u202f",
              "\u205f", "\u1680", "\x0b", "\x0c", "\u200b", "\u200d", " \u00a0 "]
OTHER_DIGITS = ["٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "²³¹", "½¼¾", "ⅠⅡⅢⅫ", "①②③",
                "𝟘𝟙𝟚", "߀߁߂", "๑๒๓", "一二三"]
NFD = ["e\u0301", "E\u0301cole", "a\u0308", "o\u0302\u0301", "n\u0303", "Ä", "A\u030a",
       "\u212b", "\u2126", "\u1100\u1161", "\u1100\u1161\u11a8", "가\u11a8", "ﬁ", "ﬃ", "x\u0327\u0301",
       "a\u0301\u0327", "a\u0327\u0301", "\u0958", "\u09cb", "\u0b48", "\u1e9b\u0323", "\u0344",
       "\u0f73", "ῷ", "\u03d3", "Å", "Ω", "K", "\u0340", "\u0341\u0301", "é"]
FORBIDDEN = {"\u0085", "\ufeff", "\u017f"}


def prose(rng):
    n = rng.randint(3, 30)
    words = [rng.choice(WORDS) for _ in range(n)]
    if rng.random() < 0.3:
        words[rng.randrange(n)] = rng.choice(NAMES)
    if rng.random() < 0.3:
        i = rng.randrange(n)
        words[i] = words[i].upper() if rng.random() < 0.5 else words[i].capitalize()
    text = " ".join(words)
    text = text[0].upper() + text[1:]
    return text + rng.choice([".", "!", "?", "...", ";", ":", ",", " -- ", "…", "?!", ""])


def contraction(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.4:
            parts.append(rng.choice(CONTRACTION_WORDS))
        elif r < 0.7:
            parts.append(rng.choice(WORDS) + rng.choice(CONTRACTIONS))
        else:
            parts.append(rng.choice(CONTRACTIONS) + rng.choice(["", " ", "x", "1", "!", "\n", "é"]))
    return rng.choice([" ", "", "  ", "\n"]).join(parts)


def code(rng):
    text = rng.choice(CODE)
    if rng.random() < 0.3:
        text = text + rng.choice(CODE)
    if rng.random() < 0.2:
        text = text.replace("    ", "\t")
    if rng.random() < 0.2:
        text = text.replace("\n", "\r\n")
    return text


def script_text(rng):
    key = rng.choice(list(SCRIPTS))
    text = SCRIPTS[key]
    a = rng.randrange(len(text))
    b = rng.randrange(a, len(text) + 1)
    piece = text[a:b] if rng.random() < 0.6 else text
    if rng.random() < 0.3:
        piece = rng.choice([" ", "", "\n"]).join([piece, prose(rng)])
    return piece


def emoji(rng):
    parts = [rng.choice(EMOJI) for _ in range(rng.randint(1, 6))]
    sep = rng.choice(["", " ", "  ", "\n", "a", "1", "!"])
    text = sep.join(parts)
    if rng.random() < 0.4:
        text = prose(rng) + rng.choice([" ", ""]) + text
    return text


def digits(rng, length):
    run = "".join(rng.choice("0123456789") for _ in range(length))
    r = rng.random()
    if r < 0.3:
        return run
    if r < 0.5:
        return rng.choice([" ", "x", "abc", "$", "-", "(", "\n", "a "]) + run + rng.choice(["", " ", "%", "px", "k", ".", ")", "\n"])
    if r < 0.6:
        return run[: length // 2] + rng.choice([".", ",", "_", " ", "'", "e", "/"]) + run[length // 2:]
    if r < 0.75:
        return rng.choice(OTHER_DIGITS) + rng.choice(["", " "]) + run
    return prose(rng) + " " + run + " " + prose(rng)


def whitespace(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.5:
            parts.append(rng.choice(WHITESPACE) * rng.randint(1, 5))
        elif r < 0.8:
            parts.append(rng.choice(WORDS))
        else:
            parts.append(rng.choice(["!", "?", "...", "-", "#", "1", "22", "é", "中", "😀"]))
    text = "".join(parts)
    if rng.random() < 0.3:
        text = rng.choice(WHITESPACE) * rng.randint(1, 4) + text
    if rng.random() < 0.3:
        text = text + rng.choice(WHITESPACE) * rng.randint(1, 4)
    return text


def special(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.45:
            parts.append(rng.choice(SPECIALS))
        elif r < 0.75:
            parts.append(prose(rng))
        else:
            parts.append(rng.choice(WHITESPACE))
    text = rng.choice(["", " ", "\n"]).join(parts)
    if rng.random() < 0.2:
        role = rng.choice(["system", "user", "assistant"])
        text = f"<|im_start|>{role}\n{text}<|im_end|>\n"
    elif rng.random() < 0.2:
        role = rng.choice(["system", "user", "assistant"])
        text = f"<|start_header_id|>{role}<|end_header_id|>\n\n{text}<|eot_id|>"
    return text


def invalid(rng):
    bad = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xc2", b"\xe0\x80\xaf", b"\xe0\xa0",
           b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xef\xbf", b"\xf0\x80\x80\xaf", b"\xf0\x90\x80",
           b"\xf4\x90\x80\x80", b"\xf5\x80", b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff",
           b"\xf1\x80\x80\xe1\x80\xc2", b"\xe1\x80\xe2\xf0\x91\x92\xf1\xbf"]
    out = bytearray()
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.4:
            out += rng.choice(bad)
        elif r < 0.6:
            out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif r < 0.8:
            out += prose(rng).encode()
        else:
            s = rng.choice(list(SCRIPTS.values()))
            raw = s.encode()
            a = rng.randrange(len(raw))
            out += raw[a:a + rng.randint(1, 20)]  # cuts through multi-byte sequences
    return bytes(out)


def nfd(rng):
    parts = [rng.choice(NFD) for _ in range(rng.randint(1, 5))]
    sep = rng.choice(["", " ", "x", "\n"])
    text = sep.join(parts)
    if rng.random() < 0.5:
        text = prose(rng) + " " + text
    return text


def long_line(rng):
    r = rng.random()
    if r < 0.25:
        return rng.choice(["a", " ", "\n", "1", "中", "😀", "é", "!", "\t", "ab", " a", "'s"]) * rng.randint(500, 5000)
    if r < 0.5:
        return "".join(prose(rng) + " " for _ in range(rng.randint(50, 200)))
    generators = [prose, contraction, code, script_text, emoji, whitespace, special, nfd]
    return "".join(rng.choice(generators)(rng) for _ in range(rng.randint(20, 80)))


def cases(rng):
    makers = [(prose, 2000), (contraction, 800), (code, 1500), (script_text, 1500), (emoji, 800),
              (whitespace, 1200), (special, 1000), (nfd, 400), (long_line, 150)]
    for maker, count in makers:
        for _ in range(count):
            yield maker(rng)
    for length in range(1, 41):  # every digit-run length, 25 variants each
        for _ in range(25):
            yield digits(rng, length)
    for _ in range(800):
        yield invalid(rng)
    yield from ["", " ", "\n", "\r\n", "a", "'", "0", "00", "000", "0000", " 1", "\t\n \r\n", "é", "e\u0301"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=20240926)
    parser.add_argument("--every", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    count = 0
    seen = 0
    with open(args.out, "w", encoding="ascii") as f:
        for case in cases(rng):
            raw = case if isinstance(case, bytes) else case.encode("utf-8")
            text = raw.decode("utf-8", errors="replace")
            if any(c in text for c in FORBIDDEN):
                continue
            seen += 1
            if (seen - 1) % args.every:
                continue
            f.write(base64.b64encode(raw).decode("ascii") + "\n")
            count += 1
    print(f"{count} cases written to {args.out}")


if __name__ == "__main__":
    main()
