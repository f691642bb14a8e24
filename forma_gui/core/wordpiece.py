"""WordPiece (BERT) as llama.cpp runs it for GGUF ``tokenizer.ggml.model == "bert"``
(llama-vocab.cpp ``llm_tokenizer_wpm_session``).

llama.cpp's converter stores BERT's vocabulary with word-start pieces prefixed by ``▁`` and
``##`` continuation pieces stripped (``##ing`` -> ``ing``). Tokenizing:

1. `preprocess` splits the text into words: optional accent stripping maps every character
   to the FIRST character of its NFD form (so ``é`` -> ``e``, and a Hangul syllable -> its
   leading jamo, as llama.cpp's one-codepoint NFD table does) and drops combining marks;
   whitespace ends a word; NUL, U+FFFD and control characters vanish; punctuation, ASCII
   symbols and CJK ideographs become one-character words; lowercasing maps each character to
   the first character of its lowercase form.
2. Each word, with ``▁`` prepended, is cut greedily into the longest vocabulary entries
   (byte-wise, at most the longest token's length); a word with any position that matches
   nothing becomes a single ``[UNK]``.

Character classes follow llama.cpp's tables (unicode-data.cpp, Unicode 15.1) with its mapping
(general category N/L/Z/M/P/S, C* except Cn = control): Python's `unicodedata` gives the
category (Unicode 14.0 on Python 3.11); a code point it leaves unassigned gets `regex`'s
(pinned to Unicode 16.0, whose categories of 15.1's code points are 15.1's), and the code
points 16.0 added are unassigned (`llama_category`).
"""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import regex

from forma_gui.core.llama_pre import count_undefined
from forma_gui.core.llama_vocab import LlamaTokenizer, LlamaVocab
from forma_gui.core.sentencepiece import SPACE
from forma_gui.core.tokenizer import MatchStep

#: unicode-data.cpp unicode_set_whitespace
WHITESPACE = frozenset([9, 10, 11, 12, 13, 32, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                        0x2028, 0x2029, 0x202F, 0x205F, 0x3000])
#: llm_tokenizer_wpm_session::is_chinese_char (0x2B920 as in HF's Rust code)
CHINESE_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
                  (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
CONTROL_CATEGORIES = frozenset(("Cc", "Cf", "Co", "Cs"))
#: ASCII characters `preprocess` drops (category Cc, not whitespace)
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
#: the words `preprocess` makes of ASCII text: letters and digits run on, every other
#: printable character (all are punctuation or symbols) is a word of its own
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]")
#: a run of characters between ASCII whitespace: `preprocess` ends a word at each side
_CHUNK = re.compile(r"[^\t\n\x0b\x0c\r ]+")
#: words whose tokens are remembered before the cache starts again
WORD_CACHE_LIMIT = 1 << 16


#: general categories `regex` can name (Cn: none of them)
_CATEGORIES = [(name, regex.compile(rf"\p{{gc={name}}}")) for name in (
    "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi",
    "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co")]
#: Python's tables are newer than llama.cpp's (Python 3.14: Unicode 16.0)
_PYTHON_NEWER = tuple(map(int, unicodedata.unidata_version.split("."))) > (15, 1)


def llama_category(ch: str) -> str:
    """The general category of `ch` in llama.cpp's tables (Unicode 15.1).

    >>> llama_category("a"), llama_category("\U00011f43"), llama_category("\u1c89")
    ('Ll', 'Po', 'Cn')
    """
    found = unicodedata.category(ch)
    return _late_category(ch) if found == "Cn" or _PYTHON_NEWER else found


@lru_cache(maxsize=1 << 14)
def _late_category(ch: str) -> str:
    """`llama_category` of a code point Python's tables leave unassigned (or, in a Python
    newer than 15.1, of any: the 16.0 ones are unassigned for llama.cpp)."""
    if count_undefined(ch):
        return "Cn"
    return next((name for name, pattern in _CATEGORIES if pattern.match(ch)), "Cn")


def is_chinese_char(cp: int) -> bool:
    """Whether BERT treats the code point as a CJK ideograph.

    >>> is_chinese_char(ord("中")), is_chinese_char(ord("a"))
    (True, False)
    """
    return any(lo <= cp <= hi for lo, hi in CHINESE_RANGES)


def first_nfd(ch: str) -> str:
    """llama.cpp's NFD: the first code point of the decomposition.

    >>> first_nfd("é"), first_nfd("한")
    ('e', 'ᄒ')
    """
    if ch.isascii() or (_PYTHON_NEWER and count_undefined(ch)):  # (no mapping in llama.cpp's tables)
        return ch
    return unicodedata.normalize("NFD", ch)[0]


def first_lower(ch: str) -> str:
    """unicode_tolower: the first code point of the lowercase form (İ -> i).

    >>> first_lower("İ"), first_lower("A")
    ('i', 'a')
    """
    return ch if _PYTHON_NEWER and count_undefined(ch) else ch.lower()[0]


#: what `preprocess` makes of one character (`char_kind`)
WORD, SINGLE, SPACE_KIND, DROPPED = "word", "single", "space", "dropped"


def char_kind(ch: str, *, strip_accents: bool = True) -> str:
    r"""What `preprocess` does with one character, whatever surrounds it: WORD (kept, continues
    a word), SINGLE (kept, a one-character word), SPACE_KIND (ends a word, kept nowhere) or
    DROPPED (vanishes: the words around it run on). Lowercasing never changes the kind.

    >>> [char_kind(c) for c in "a,\u3000\x00\u0301中é"]
    ['word', 'single', 'space', 'dropped', 'dropped', 'single', 'word']
    """
    if strip_accents:
        ch = first_nfd(ch)
    cp = ord(ch)
    if cp in WHITESPACE:
        return SPACE_KIND
    category = llama_category(ch)
    if cp == 0 or cp == 0xFFFD or category in CONTROL_CATEGORIES or (strip_accents and category[0] == "M"):
        return DROPPED
    if category[0] == "P" or (cp < 0x7F and category[0] == "S") or is_chinese_char(cp):
        return SINGLE
    return WORD


def preprocess(text: str, *, lowercase: bool = True,
               strip_accents: bool = True) -> list[tuple[str, list[int]]]:
    """Words, each with the index in `text` of every character it kept.

    >>> [w for w, _ in preprocess("Héllo, WORLD!  中文")]
    ['hello', ',', 'world', '!', '中', '文']
    """
    words: list[tuple[str, list[int]]] = []
    chars: list[str] = []
    where: list[int] = []

    def finish() -> None:
        if chars:
            words.append(("".join(chars), list(where)))
            chars.clear()
            where.clear()

    newer = _PYTHON_NEWER
    for index, ch in enumerate(text):
        if strip_accents:
            ch = first_nfd(ch)
        cp = ord(ch)
        if cp in WHITESPACE:
            finish()
            continue
        category = unicodedata.category(ch)  # (llama_category, inline: the loop is per character)
        if category == "Cn" or newer:
            category = _late_category(ch)
        if cp == 0 or cp == 0xFFFD or category in CONTROL_CATEGORIES:
            continue
        if strip_accents and category[0] == "M":
            continue
        out = first_lower(ch) if lowercase else ch
        if category[0] == "P" or (cp < 0x7F and category[0] == "S") or is_chinese_char(cp):
            finish()
            words.append((out, [index]))
        else:
            chars.append(out)
            where.append(index)
    finish()
    return words


class WordPieceTokenizer(LlamaTokenizer):
    """``tokenizer.ggml.model == "bert"``: greedy longest-match WordPiece.

    Pieces are stored as llama.cpp converts them (``▁word`` starts a word, ``ing``
    continues one), so they render like SentencePiece pieces.
    """

    kind = "WordPiece (llama.cpp)"
    piece_style = "sentencepiece"
    explains = "matches"

    def __init__(self, vocab: LlamaVocab, *, name: str = "", path: str | None = None) -> None:
        super().__init__(vocab, name=name, path=path)
        self._bytes_to_id: dict[bytes, int] | None = None
        self._max_len = 0
        self._word_cache: dict[str, tuple[tuple[int, int, int], ...]] = {}
        self._chunk_cache: dict[str, tuple[tuple[int, int, int], ...]] = {}  # `_chunk_spans`

    def _normal_bytes(self, token_id: int) -> bytes:
        return self.vocab.tokens[token_id].replace(SPACE, " ").encode("utf-8", "surrogateescape")

    def clear_cache(self) -> None:
        """Forget the tokens of the words seen so far (for cold-cache measurements)."""
        self._word_cache.clear()
        self._chunk_cache.clear()

    def _bos_eos(self) -> tuple[list[int], list[int]]:
        """llama.cpp's WPM session always adds BOS ([CLS]) and SEP, whatever add_bos says."""
        specials = self.vocab.specials
        head = [specials["bos"]] if specials.get("bos") is not None else []
        tail = [specials["sep"]] if specials.get("sep") is not None else []
        return head, tail

    def _table(self) -> dict[bytes, int]:
        if self._bytes_to_id is None:
            keys = [t.encode("utf-8", "surrogateescape") for t in self.vocab.tokens]
            self._max_len = max(map(len, keys), default=0)
            self._bytes_to_id = dict(zip(keys, range(len(keys))))
        return self._bytes_to_id

    def _fragment_spans(self, text: str, start: int, end: int,
                        after_special: bool) -> list[tuple[int, int, int]]:
        """Cut at ASCII whitespace, where `preprocess` only ends a word: each chunk between
        alone (`_fragment_columns`)."""
        return list(zip(*self._fragment_columns(text, start, end, after_special)))

    def _fragment_columns(self, text: str, start: int, end: int, after_special: bool):
        """`_fragment_spans` as (ids, starts, ends) lists, without a tuple per token: each
        chunk between ASCII whitespace from `_chunk_spans` (cached per chunk)."""
        ids: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        cache = self._chunk_cache
        for found in _CHUNK.finditer(text, start, end):
            chunk = found.group()
            spans = cache.get(chunk)
            if spans is None:
                spans = self._chunk_spans(chunk)
            at = found.start()
            for token, a, b in spans:
                ids.append(token)
                starts.append(at + a)
                ends.append(at + b)
        return ids, starts, ends

    def _chunk_spans(self, chunk: str) -> tuple[tuple[int, int, int], ...]:
        """The tokens of a chunk between ASCII whitespace, spans from its start (kept): an
        ASCII one without control characters a word at a time (`_ascii_spans`), any other
        through `preprocess` (`_fragment_spans_reference`)."""
        cache = self._chunk_cache
        if len(cache) >= WORD_CACHE_LIMIT:
            cache.clear()
        if chunk.isascii() and _ASCII_CONTROL.search(chunk) is None:
            spans = tuple(self._ascii_spans(chunk, 0))
        else:
            spans = tuple(self._fragment_spans_reference(chunk, 0, len(chunk)))
        cache[chunk] = spans
        return spans

    def _fragment_spans_reference(self, text: str, start: int, end: int) -> list[tuple[int, int, int]]:
        """`preprocess` character by character, then each word: the reference for
        `_fragment_spans`."""
        flags = self.vocab.flags
        out: list[tuple[int, int, int]] = []
        words = preprocess(text[start:end], lowercase=flags.get("lowercase", True),
                           strip_accents=flags.get("strip_accents", True))
        for word, where in words:
            out.extend(self._word_spans(word, [start + i for i in where]))
        return out

    def _cached(self, key: str, at: int, spans_of) -> list[tuple[int, int, int]]:
        """`spans_of(key, 0, len(key))` shifted to `at`, remembered per key."""
        spans = self._word_cache.get(key)
        if spans is None:
            if len(self._word_cache) >= WORD_CACHE_LIMIT:
                self._word_cache.clear()
            spans = self._word_cache[key] = tuple(spans_of(key, 0, len(key)))
        return [(token, at + a, at + b) for token, a, b in spans]

    def _ascii_spans(self, fragment: str, start: int) -> list[tuple[int, int, int]]:
        """`_fragment_spans` of ASCII text without control characters, a word at a time.

        There `preprocess` keeps every character where it is (no accents, nothing dropped,
        ASCII lowercasing is one character for one), so its words are the runs of letters
        and digits and the single punctuation or symbol characters (every printable ASCII
        character that is neither), each spanning its characters; a word's tokens depend on
        the word alone, so they are cached per word.
        """
        if self.vocab.flags.get("lowercase", True):
            fragment = fragment.lower()
        out: list[tuple[int, int, int]] = []
        for found in _ASCII_WORD.finditer(fragment):
            out += self._cached(found.group(), start + found.start(), self._ascii_word_spans)
        return out

    # ---- cuts, for core.incremental ---------------------------------------------------------
    def fragment_spans(self, text: str, start: int, end: int) -> list[tuple[int, int, int]]:
        """The raw fragment ``text[start:end]``'s tokens as (id, start, end) in `text`, before
        `segment` tiles them (the WPM session has no is_prev_special: every fragment alike)."""
        return self._fragment_spans(text, start, end, True)

    def edit_cuts(self):
        r"""A rule on two adjacent characters ``pair`` (a 2-character str): True where the text
        falls apart into parts tokenized on their own, the last token before the place ending
        exactly there.

        `preprocess` decides each character's fate alone (`char_kind`) and carries only the
        word being built from one character to the next. After a SINGLE character, or before a
        SPACE_KIND or SINGLE one, no word is being built, so the words (and their greedy
        tokens) on each side are their own; the first character being kept (WORD or SINGLE)
        makes it the last character of a word, whose last token (or [UNK], when the vocabulary
        has one) ends right after it.

        >>> rule = WordPieceTokenizer(LlamaVocab(["[UNK]"], [1], None, specials={"unk": 0}, flags={})).edit_cuts()
        >>> [rule(p) for p in ("a ", " a", "a,", ",a", "ab", "a\x00", ",\x00")]
        [True, False, True, True, False, False, True]
        """
        strip = self.vocab.flags.get("strip_accents", True)
        kinds: dict[str, str] = {}

        def kind(ch: str) -> str:
            found = kinds.get(ch)
            if found is None:
                found = kinds[ch] = char_kind(ch, strip_accents=strip)
            return found

        def is_cut(pair: str) -> bool:
            before = kind(pair[0])
            return before == SINGLE or (before == WORD and kind(pair[1]) in (SPACE_KIND, SINGLE))

        return is_cut

    def _ascii_word_spans(self, word: str, start: int, end: int) -> list[tuple[int, int, int]]:
        return self._word_spans(word, list(range(start, end)))

    def _greedy(self, data: bytes) -> tuple[list[tuple[int, int, int]], int | None]:
        """Greedy longest match over a word's bytes: (token, start, end) of each piece taken,
        and the byte where no piece starts (None when the pieces cover the word)."""
        table = self._table()
        n, i = len(data), 0
        byte_spans: list[tuple[int, int, int]] = []
        while i < n:
            for j in range(min(n, i + self._max_len + 1), i, -1):
                token = table.get(data[i:j])
                if token is not None:
                    byte_spans.append((token, i, j))
                    i = j
                    break
            else:
                return byte_spans, i
        return byte_spans, None

    def longest_matches(self, word: str) -> list[MatchStep]:
        """Each piece greedy longest-match takes in each word `preprocess` makes of `word`
        (lowercased, accents stripped as the vocabulary says), matched as ``▁`` + word."""
        flags = self.vocab.flags
        steps: list[MatchStep] = []
        for text, _ in preprocess(word, lowercase=flags.get("lowercase", True),
                                  strip_accents=flags.get("strip_accents", True)):
            shown = SPACE + text
            data = shown.encode("utf-8", "surrogatepass")
            byte_spans, stuck = self._greedy(data)
            steps += [MatchStep(shown, self.vocab.tokens[t], t, a, b) for t, a, b in byte_spans]
            if stuck is not None:
                unk = self.vocab.specials.get("unk")
                steps.append(MatchStep(shown, shown if unk is None else self.vocab.tokens[unk],
                                       -1, stuck, len(data)))
        return steps

    def _word_spans(self, word: str, where: list[int]) -> list[tuple[int, int, int]]:
        """Greedy longest match over ``▁`` + word; [UNK] over the whole word if it fails."""
        data = (SPACE + word).encode("utf-8", "surrogatepass")
        byte_spans, stuck = self._greedy(data)
        if stuck is not None:
            unk = self.vocab.specials.get("unk")
            return [] if unk is None else [(unk, where[0], where[-1] + 1)]
        # map bytes of "▁" + word back to the original characters (▁ is the 3 prefix bytes)
        offsets = [0, 0, 0]
        for k, ch in enumerate(word):
            offsets.extend([k] * len(ch.encode("utf-8", "surrogatepass")))
        out = []
        for token, b, e in byte_spans:
            cs, ce = offsets[b], offsets[e - 1] + 1
            out.append((token, where[cs], where[ce - 1] + 1))
        return out


__all__ = ["WordPieceTokenizer", "char_kind", "preprocess"]
