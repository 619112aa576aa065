"""A few hundred mixed strings for tokenizer parity tests: code, prose, whitespace runs, other scripts, digits,
emoji and special-token text, built deterministically (a seeded mix of pools plus real code and help text)."""
from __future__ import annotations

import inspect
import random

SCRIPTS = ["hello", "World", "naïve", "façade", "Ünïcödé", "Привет", "мир", "Γειά σου", "κόσμε", "مرحبا", "بالعالم",
           "שלום", "नमस्ते", "दुनिया", "สวัสดี", "你好", "世界", "こんにちは", "カタカナ", "안녕하세요", "ǅemal", "ﬁne",
           "Ⅻ", "straße", "İstanbul", "ΣΊΣΥΦΟΣ", "ю́", "e\u0301", "ẞ"]
DIGITS = ["0", "7", "42", "123", "2024", "12345", "3.14159", "1e-9", "-17", "١٢٣", "٤٥٦٧", "１２３", "½", "²",
          "1,000,000", "0x1F", "v2.5.1"]
PUNCT = [".", ",", "!", "?", "...", "—", "–", "(", ")", "[]", "{}", "<>", "\"", "'", "`", "~", "@#$%^&*",
         "==", "->", "=>", "::", ";", "//", "/*", "*/", "«", "»", "“", "”", "¿", "¡", "·", "§", "€", "£", "¥"]
SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", " \n ", "\u00a0", "\u2003",
          "\u3000", "\u200b", "\u2028", " \t \n"]
EMOJI = ["😀", "🎉", "👍🏽", "🏳️‍🌈", "👨‍👩‍👧‍👦", "🇫🇷", "✨", "❤️", "🤖", "☕", "🔥🔥🔥"]
CONTRACTIONS = ["I'm", "you're", "they'll", "we've", "he'd", "it's", "don't", "DON'T", "O'Neil", "'s", "'t", "'ll"]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\n", "<|im_end|>\n", "<|im_start",
           "im_end|>", "<repo_name>", "<file_sep>"]


def fixed() -> list[str]:
    return ["", " ", "\n", "Hello world", "x = 12345 + 6", "<|im_start|>user\nhi<|im_end|>",
            "  spaces   here\n\n\ttab", "emoji 😀 日本語", "def f(x):\n    return x**2  # comment\n\n\n",
            "I'm you're they'll we've he'd", "a  b   c    d", "tab\tsep\tvalues\r\nwindows\r\n",
            "$100.00 + 5% = ?!", "https://example.com/a?b=c&d=e#f", '{"json": [1, 2.5e-3, null, true]}',
            "\u00a0nbsp\u2003em space\u3000ideo", "x\u200by zero width", "CAPS LOCK'S ON", "2024-01-15T10:30:00Z",
            "<|endoftext|>foo<|im_end|><|im_start|>", "     leading", "trailing     ", "\n\n\n\n\n", "\t\t\t",
            "mixed 中文 and English 123 ٤٥٦", "😀😀😀 😀", "a\u0301\u0302\u0303", "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ",
            "<|im_start|><|im_start|><|im_end|>", "<<|im_start|>>", "<|im_start|>system\nYou are helpful.<|im_end|>\n"]


def code() -> list[str]:
    import json.decoder
    import textwrap
    src = inspect.getsource(json.decoder) + inspect.getsource(textwrap)
    lines = src.splitlines(keepends=True)
    return ["".join(lines[i:i + 4]) for i in range(0, min(len(lines), 600), 6)]


def prose() -> list[str]:
    from pydoc_data.topics import topics
    text = "\n".join(topics[k] for k in sorted(topics)[:40])
    return [text[i:i + 200] for i in range(0, 40 * 200, 200)]


def mixed(n: int = 160, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    pools = [SCRIPTS, DIGITS, PUNCT, SPACES, EMOJI, CONTRACTIONS, SPECIAL]
    weights = [5, 3, 3, 4, 2, 2, 1]
    out = []
    for _ in range(n):
        parts = [rng.choice(rng.choices(pools, weights)[0]) for _ in range(rng.randint(2, 10))]
        out.append("".join(p + (rng.choice(["", " ", ""]) if i % 2 else "") for i, p in enumerate(parts)))
    return out


def corpus() -> list[str]:
    return fixed() + code() + prose() + mixed()
