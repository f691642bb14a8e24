"""A varied text corpus for comparing token ids against the reference libraries."""
from __future__ import annotations

from hypothesis import strategies as st

CORPUS: list[str] = [
    "",
    " ",
    "a",
    "Hello world",
    "Hello, world! How are you doing today?",
    # contractions, upper case ones too (cl100k matches them case-insensitively)
    "I'll tell you it's what they'd've done; we're sure you've seen 'em. WE'LL GO. Y'ALL'S 's 'LL",
    "don't won't can't shouldn't O'Neil rock'n'roll ''quoted'' '",
    # code
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n",
    'if (a && b) { printf("%d\\n", a[i]); }\n    }\n}\n',
    '{"key": [1, 2.5e-3, null, true], "nested": {"a": "b"}}',
    "https://example.com/path?q=1&r=two#frag user@example.org",
    # CJK, Korean, Japanese
    "日本語のテキストです。中文文本，包括标点符号！한국어 텍스트도 있습니다.",
    "漢字" * 150,  # one long pre-token
    # emoji with ZWJ sequences, skin tones, flags, variation selectors
    "👩‍👩‍👧‍👦 family 👨🏽‍💻 coder 🏳️‍🌈 flag 🇺🇸🇯🇵 ❤️ 1️⃣",
    # Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai, Khmer
    "Съешь же ещё этих мягких французских булок, да выпей чаю. ПРИВЕТ мир",
    "Ελληνικά κείμενα. مرحبا بالعالم שלום עולם नमस्ते दुनिया สวัสดีชาวโลก សួស្តីពិភពលោក",
    # whitespace runs
    "   ",
    "trailing spaces   ",
    "\n\n  \n",
    "\t\tTabs\tinside\t",
    "a \n b \r\n c\r\n\r\n",
    "  leading and   multiple    spaces  ",
    " \u00a0\u2003\u3000 odd spaces \u2028 \u2029 \u0085 ",
    "\x0b\x0c\x1c\x1d\x1e\x1f separators",
    # digits
    "1234567890123456789 3.14159 1,000,000 ٣٤٥ ௧௨",
    "9" * 600,  # a long digit run is one pre-token for GPT-2's pattern
    "a" * 1000,
    # invalid-looking text, escaped
    "\\ud800 lone surrogate, escaped \\xff\\xfe \\u0000",
    "\ufffd replacement \u200b zero width \u200d joiner e\u0301 combining \u0000\u0001 controls",
    "<|endoftext|> <|im_start|>user\nhi<|im_end|> <|fim_prefix|>",
    "x" + "\u0301" * 30,
    "ﬁ ﬂ Å Ω ＡＢＣ ① ㎏",  # compatibility characters (NFKC changes them)
    "e\u0301 Å A\u030a ḕ",  # decomposed letters (NFC composes them)
]

#: text with lone surrogates: tiktoken replaces them (HF tokenizers cannot take them at all)
SURROGATE_CORPUS: list[str] = ["a\ud800b", "\udfff", "x\ud83d\ude00y", "\ud83d", "end\udc00 "]

#: random text for hypothesis: everything st.text() produces, plus text biased to the
#: characters pre-tokenizers care about
TEXT = st.text() | st.lists(st.sampled_from(list("aZé1'sLL .-/ \t\n\r\xa0漢😀\u200d")), max_size=60).map("".join)
