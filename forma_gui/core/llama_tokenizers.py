"""The GGUF tokenizer families as llama.cpp runs them (llama-vocab.cpp sessions).

* `LlamaBPETokenizer` (``gpt2``): the pre-tokenizer of `llama_pre` cuts each raw fragment
  into words, each word is byte-level BPE'd. Words are encoded by forma's
  `ByteLevelBPETokenizer` (HF's merge order, which is llama.cpp's: lowest rank, leftmost),
  built on the first encode so that opening a file stays cheap. One llama.cpp behaviour
  differs from HF's: a byte whose symbol is not in the vocabulary (SmolLM2 lacks 21) stays
  in the symbol list as a barrier that nothing merges across, and is then dropped (its UTF-8
  bytes looked up one by one as single-byte tokens, which byte-level vocabularies never
  have). HF drops it first and lets its neighbours merge. Words holding such a byte go
  through `llama_bpe_word`, a direct transcription of llm_tokenizer_bpe_session.
* `LlamaSPMTokenizer` (``llama``): spaces -> ``▁`` (a space prepended after BOS or a special
  token), then score-ordered merges over characters with the whole vocabulary as merge
  table; a final symbol that is no token falls back to ``<0xNN>`` byte tokens.
* `LlamaUGMTokenizer` (``t5``): llama.cpp's unigram: its own normalizer (charsmap, user-
  defined prefixes, space handling), Viterbi in double precision with user-defined pieces
  scored 0 and unknown characters ``min_score - 10``; runs of unknown tokens collapse.
  Encoding segments each distinct word once (`core.unigram_fast` in its float64 mode,
  proven per occurrence to be `ugm_viterbi_from`'s result); `_viterbi` is the reference.
  The normalizer copies runs of characters that no key or user-defined token touches
  whole (`plain_run_regex`) and handles the spaces in numpy; `_normalize_reference` is
  the loop.
* WordPiece (``bert``) lives in `forma_gui.core.wordpiece`.
"""
from __future__ import annotations

import math
import re
import threading
from array import array
from collections.abc import Iterator
from itertools import chain
from operator import attrgetter
from typing import Any, NamedTuple

import regex

from forma_gui.core.charsmap import CharsMap
from forma_gui.core.llama_pre import LlamaPreTokenizer, count_undefined
from forma_gui.core.llama_vocab import (ATTR_NORMAL, ATTR_UNUSED, ATTR_USER_DEFINED,
                                        LlamaTokenizer, LlamaVocab, char_spans)
from forma_gui.core.sentencepiece import (FLT_MAX, ONE_CHAR_LEN, SHORT_WORD, SPACE, _alternation,
                                          _byte_class, _char_columns, adjacent_pairs, backtrack, f32,
                                          merge_adjacent, lattice_steps, merge_by_score)
from forma_gui.core.slices import cut_slices, pause, sliced_dict, sliced_map
from forma_gui.core.tokenizer import Alternative, MergeStep
from forma_gui.core.unigram_paths import ranked_cuts


def byte_token(vocab: LlamaVocab, byte: int) -> int | None:
    """llama_vocab::byte_to_token for SPM/UGM: ``<0xNN>``, else the one-byte text.

    With neither, llama.cpp throws (std::out_of_range) and the tokenization fails; a text
    inspector cannot stop there, so the unknown token stands in (None if there is none).
    """
    token = vocab.text_to_token(f"<0x{byte:02X}>")
    if token is None:
        token = vocab.text_to_token(bytes([byte]).decode("utf-8", "surrogateescape"))
    return vocab.specials.get("unk") if token is None else token


# ---- SPM ---------------------------------------------------------------------------------

class LlamaSPMTokenizer(LlamaTokenizer):
    """``tokenizer.ggml.model == "llama"``: llm_tokenizer_spm_session.

    The session merges over the whole fragment, but a merge only joins two symbols whose
    text together is a token. When no token holds a ``▁`` right after another character
    (`_words`), no merge can join a character to a ``▁`` after it: the fragment falls apart
    into words (``▁*[^▁]*``) that never interact. A pair's place in the queue is its score,
    then its left symbol's position, so within one word the merges come in the same order
    with or without the other words, and the final symbols, their tokens and their byte
    fallback are the word's own. Each word is then merged once and cached, exactly.
    """

    kind = "SentencePiece BPE (llama.cpp)"
    piece_style = "sentencepiece"
    WORD_CACHE_LIMIT = 1 << 16

    def __init__(self, vocab: LlamaVocab, *, name: str = "", path: str | None = None) -> None:
        super().__init__(vocab, name=name, path=path)
        self._word_tables: dict | None = None
        self._word_cache: dict[str, WordTokens] = {}
        self._joinable: frozenset[str] | None = None
        self._lock = threading.Lock()

    def _normal_bytes(self, token_id: int) -> bytes:
        return self.vocab.tokens[token_id].replace(SPACE, " ").encode("utf-8", "surrogateescape")

    def clear_cache(self) -> None:
        """Forget the cached words (benchmarks measure cold starts with it)."""
        self._word_cache.clear()

    def _score_table(self) -> list[float]:
        scores = getattr(self, "_scores_list", None)
        if scores is None:
            raw = self.vocab.scores
            scores = [0.0] * len(self.vocab) if raw is None else list(map(float, raw))
            self._scores_list = scores
        return scores

    def _escaped(self, text: str, start: int, end: int, after_special: bool) -> tuple[str, int]:
        """The fragment as the session sees it (spaces -> ▁, maybe one prepended), and the
        number of prepended characters."""
        prefix = 1 if self.vocab.flags.get("add_space_prefix") and after_special else 0
        return (" " * prefix + text[start:end]).replace(" ", SPACE), prefix

    def _fragment_spans(self, text: str, start: int, end: int,
                        after_special: bool) -> list[tuple[int, int, int]]:
        tables = self._words()
        if tables is None:
            return self._fragment_spans_reference(text, start, end, after_special)
        escaped, prefix = self._escaped(text, start, end, after_special)
        out: list[tuple[int, int, int]] = []
        base = start - prefix  # escaped position -> text position
        for word in _split_words(escaped):
            ids, starts, ends, _ = self._word_cache.get(word) or self._encode_word(word, tables)
            out += [(t, base + b, base + e) for t, b, e in zip(ids, starts, ends)]
            base += len(word)
        if prefix:  # the prepended ▁ has no character: its spans start (or end) at `start`
            k = 0
            while k < len(out) and out[k][1] < start:
                out[k] = (out[k][0], start, max(start, out[k][2]))
                k += 1
        return out

    def _fragment_ids(self, text: str, start: int, end: int, after_special: bool) -> list[int]:
        """The ids of `_fragment_spans` without making the spans."""
        tables = self._words()
        if tables is None:
            spans = self._fragment_spans_reference(text, start, end, after_special)
            return [t for t, _, _ in spans]
        escaped, _ = self._escaped(text, start, end, after_special)
        ids: list[int] = []
        cache = self._word_cache
        for word in _split_words(escaped):
            ids += (cache.get(word) or self._encode_word(word, tables))[0]
        return ids

    def _fragment_columns(self, text: str, start: int, end: int, after_special: bool):
        """`_fragment_spans` as (ids, starts, ends) arrays, from each word's packed columns
        (`WordTokens.packed`) joined as bytes: no Python work per token.

        The words tile the escaped fragment, so a token's end is the fragment's base plus
        the sum of the advances up to it, and its start that end minus its width (its
        advance, or one character for a byte-fallback token after the first of its
        character), clamped to `start` as `_fragment_spans` clamps the prepended ``▁``.
        """
        tables = self._words()
        if tables is None:
            return super()._fragment_columns(text, start, end, after_special)
        import numpy as np

        escaped, prefix = self._escaped(text, start, end, after_special)
        words = _split_words(escaped)
        packed = []
        for lo in range(0, len(words), WORDS_PER_PASS):  # C-speed passes, the GIL free between
            pause()
            entries = self._word_entries(words[lo:lo + WORDS_PER_PASS], tables)
            if not all(map(_PACKED, entries)):  # a word with a character no token covers
                return super()._fragment_columns(text, start, end, after_special)
            packed.append(b"".join(map(_PACKED, entries)))
        pairs = np.frombuffer(b"".join(packed), dtype=np.int32).reshape(-1, 2)  # (tokens, 2)
        advance = pairs[:, 1].astype(np.int64)
        ends = np.cumsum(advance) + (start - prefix)
        starts = ends - np.maximum(advance, 1)
        return pairs[:, 0], np.maximum(starts, start), np.maximum(ends, start)

    def _word_entries(self, words: list[str], tables: dict) -> list[WordTokens]:
        """The cached WordTokens of each word, merging the words not cached yet."""
        entries = list(map(self._word_cache.get, words))
        if None in entries:
            for k in [k for k, e in enumerate(entries) if e is None]:
                entries[k] = self._encode_word(words[k], tables)
        return entries

    def _words(self) -> dict | None:
        """{token text: score} when the vocabulary lets fragments be cut into words (no
        token has a ``▁`` after another character, every score is a number), else None."""
        with self._lock:
            if self._word_tables is None:
                self._word_tables = self._build_word_tables()
            return self._word_tables or None

    def _build_word_tables(self) -> dict:
        import numpy as np

        ids, scores = self.vocab.token_to_id, self._score_table()
        if not np.isfinite(np.asarray(scores, dtype=np.float64)).all():
            return {}  # NaN orders nothing and -inf is the "no merge" mark: keep the reference
        texts = list(ids)
        # one search over all texts; "\0" joins them, so texts holding "\0" are checked alone
        if _SPM_SEAM.search("\0".join(texts)) or any("\0" + SPACE in t for t in texts if "\0" in t):
            return {}
        return {"score": dict(zip(texts, [scores[i] for i in ids.values()]))}

    def _encode_word(self, word: str, tables: dict) -> WordTokens:
        """A word's tokens as (ids, starts, ends) in ``word`` characters, merged and cached."""
        if len(word) <= SHORT_WORD:
            final = merge_adjacent(list(word), tables["score"], -math.inf)
        else:
            ids, scores = self.vocab.token_to_id, self._score_table()
            final, _ = merge_by_score(list(word), lambda a, b: _score(ids, scores, a + b))
        spans = self._symbol_spans(final, 0, 0)
        columns = WordTokens(*map(tuple, zip(*spans)), _pack(spans, len(word))) if spans else \
            WordTokens((), (), (), b"")
        cache = self._word_cache
        if len(cache) >= self.WORD_CACHE_LIMIT:
            cache.clear()
        cache[word] = columns
        return columns

    def _symbol_spans(self, final: list[str], base: int,
                      prefix: int) -> list[tuple[int, int, int]]:
        """resegment: each final symbol's token, else its bytes' tokens (all spanning it);
        positions are escaped ones shifted by `base`, the first `prefix` clamped away."""
        ids = self.vocab.token_to_id
        out: list[tuple[int, int, int]] = []
        pos = 0
        for sym in final:
            b = base + max(0, pos - prefix)
            e = base + max(0, pos + len(sym) - prefix)
            token = ids.get(sym)
            if token is not None:
                out.append((token, b, e))
            else:
                tokens = (byte_token(self.vocab, x) for x in sym.encode("utf-8", "surrogatepass"))
                out.extend((t, b, e) for t in tokens if t is not None)
            pos += len(sym)
        return out

    def _fragment_spans_reference(self, text: str, start: int, end: int,
                                  after_special: bool) -> list[tuple[int, int, int]]:
        """The session over the whole fragment, as llama.cpp runs it (the readable path)."""
        escaped, prefix = self._escaped(text, start, end, after_special)
        ids, scores = self.vocab.token_to_id, self._score_table()
        final, _ = merge_by_score(list(escaped), lambda a, b: _score(ids, scores, a + b))
        return self._symbol_spans(final, start, prefix)

    # ---- cuts, for core.incremental (edits re-encode the text between two of them) -------
    def words_independent(self) -> bool:
        """Whether every fragment falls apart into words that never interact (`_words`)."""
        return self._words() is not None

    def joinable_pairs(self) -> frozenset[str]:
        """Every two characters that stand side by side in some token text (▁ for a space).

        A merge only makes a token, so no symbol ever holds two adjacent characters that are
        not listed: the session never merges across them, and the characters on either side
        fall apart into parts that never interact (the argument of the class docstring, which
        is the case of a ▁ after another character). One vectorized pass over the texts
        joined by NUL: the pairs that adds only hide places where the text could be cut.
        """
        with self._lock:
            if self._joinable is None:
                self._joinable = adjacent_pairs(self.vocab.token_to_id)
            return self._joinable

    def edit_cuts(self):
        """The rule core.incremental cuts by, on two adjacent characters ``pair`` (a 2-character
        str): True where they, spaces escaped to ``▁``, are no `joinable_pairs` pair, so that no
        merge crosses between them.

        >>> from forma_gui.core.llama_vocab import LlamaVocab
        >>> tok = LlamaSPMTokenizer(LlamaVocab(["<unk>", "ab", SPACE + "a"], [2, 1, 1], [0.0] * 3,
        ...                                    specials={"unk": 0}, flags={}))
        >>> [tok.edit_cuts()(pair) for pair in ("ab", " a", "b ", "ba")]
        [False, False, True, True]
        """
        joinable = self.joinable_pairs()

        def is_cut(pair: str) -> bool:
            return pair.replace(" ", SPACE) not in joinable
        return is_cut

    def fragment_spans(self, text: str, start: int, end: int,
                       after_special: bool) -> list[tuple[int, int, int]]:
        """The raw fragment ``text[start:end]``'s tokens as (id, start, end) in `text`, before
        `segment` tiles them; after_special: llama.cpp's is_prev_special (true for every
        fragment of a text, none follows another), which prepends a ``▁`` with
        add_space_prefix. With it false, the tokens of a fragment's tail that starts where no
        merge crosses (a word start, or any two characters `joinable_pairs` lacks)."""
        return self._fragment_spans(text, start, end, after_special)


class WordTokens(NamedTuple):
    """One SPM word's tokens as columns, positions in the word's characters (cached per word).

    `packed`: (id, advance) per token as native int32 pairs, where the advances sum up to
    each token's end; b"" when the spans are not that simple (a character no token covers).
    """

    ids: tuple[int, ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    packed: bytes


def _pack(spans: list[tuple[int, int, int]], length: int) -> bytes:
    """`WordTokens.packed` of a word's (id, start, end) spans, b"" unless they cover its
    `length` characters in order, each token starting where the one before ends except the
    second and later byte-fallback tokens of one character, which share its span."""
    pairs = array("i")
    prev = (0, 0)
    for token, b, e in spans:
        if b == prev[1] and e > b:
            pairs += array("i", (token, e - b))
        elif (b, e) == prev and e - b == 1:
            pairs += array("i", (token, 0))
        else:
            return b""
        prev = (b, e)
    return pairs.tobytes() if prev[1] == length and length > 0 else b""


#: a word of the SPM session: spaces, then what follows up to the next space
_SPM_WORD = re.compile(f"{SPACE}+[^{SPACE}]*|[^{SPACE}]+")
#: where a word starts after another character: a ▁ after a character that is not one
_SPM_WORD_START = re.compile(f"[^{SPACE}]{SPACE}")
#: characters handed to one findall: a 1 MB fragment's findall held the GIL ~20 ms
WORD_SLICE = 1 << 16


#: words per C-speed pass when joining their cached columns
WORDS_PER_PASS = 1 << 14
_PACKED = attrgetter("packed")


def _split_words(escaped: str) -> list[str]:
    """``_SPM_WORD.findall(escaped)``, cut before a ``▁`` that follows another character
    every `WORD_SLICE` or so characters: every match ends there, so the slices' matches are
    the whole string's (the GIL is free in between)."""
    words: list[str] = []
    for lo, hi in cut_slices(escaped, _SPM_WORD_START, WORD_SLICE, shift=1):
        words += _SPM_WORD.findall(escaped, lo, hi)
    return words
#: a token text with ▁ after another character could merge across a word start
_SPM_SEAM = re.compile(f"[^{SPACE}\0]{SPACE}")


def _score(ids: dict[str, int], scores: list[float], text: str) -> float | None:
    """try_add_bigram: the score of the token spelled `text`, None if there is none."""
    token = ids.get(text)
    return None if token is None else scores[token]


# ---- UGM ---------------------------------------------------------------------------------

class LlamaUGMTokenizer(LlamaTokenizer):
    """``tokenizer.ggml.model == "t5"``: llm_tokenizer_ugm_session."""

    kind = "SentencePiece unigram (llama.cpp)"
    piece_style = "sentencepiece"
    explains = "cuts"
    UNK_PENALTY = 10.0

    def __init__(self, vocab: LlamaVocab, charsmap: CharsMap | None = None, *, name: str = "",
                 path: str | None = None) -> None:
        super().__init__(vocab, name=name, path=path)
        self.charsmap = charsmap if charsmap else None
        self._tables: dict | None = None
        self._plain_run: re.Pattern | None = None
        self._opens: dict[str, bool] = {}  # `opens_word`
        self._alone: dict[str, bytes | None] = {}  # `alone`
        self._small_words: dict[bytes, tuple] = {}  # `_small_fragment_spans`
        self._lock = threading.Lock()

    def _normal_bytes(self, token_id: int) -> bytes:
        return self.vocab.tokens[token_id].replace(SPACE, " ").encode("utf-8", "surrogateescape")

    def clear_cache(self) -> None:
        """Forget the cached words (benchmarks measure cold starts with it)."""
        if self._tables is not None:
            self._tables["unigram"].clear_cache()
        self._small_words.clear()

    def tables(self) -> dict:
        """The token trie (as a prefix dict), the user-defined trie paths, the scores and the
        per-word encoder (`unigram`)."""
        with self._lock:
            if self._tables is None:
                self._tables = self._build_tables()
            return self._tables

    def _build_tables(self) -> dict:
        vocab = self.vocab
        prefixes: dict[bytes, int] = {}
        user_paths: set[bytes] = set()
        normal = []
        for i, (text, attr) in enumerate(zip(vocab.tokens, vocab.attrs)):
            key = text.encode("utf-8", "surrogateescape")
            if attr & ATTR_NORMAL:
                normal.append(f32(vocab.score(i)))
            if attr & (ATTR_NORMAL | ATTR_USER_DEFINED | ATTR_UNUSED):
                for k in range(1, len(key)):
                    prefixes.setdefault(key[:k], -1)
                prefixes[key] = i
            if attr & ATTR_USER_DEFINED:
                user_paths.update(key[:k] for k in range(1, len(key) + 1))
        min_score = min(normal, default=FLT_MAX)
        scores = [0.0 if a & ATTR_USER_DEFINED else vocab.score(i)
                  for i, a in enumerate(vocab.attrs)]
        unk_score = f32(min_score - self.UNK_PENALTY)
        from forma_gui.core.unigram_fast import UnigramEncoder, float64_arithmetic

        encoder = UnigramEncoder(prefixes, scores, self._unk_id(), unk_score,
                                 float64_arithmetic(ugm_viterbi_from))
        return {"prefixes": prefixes, "user_paths": user_paths, "scores": scores,
                "unk_score": unk_score, "user_max": max(map(len, user_paths), default=0),
                "unigram": encoder}

    def _unk_id(self) -> int:
        """The unknown token's id, -1 when the vocabulary has none."""
        unk = self.vocab.specials.get("unk")
        return -1 if unk is None else unk

    def _fragment_spans(self, text: str, start: int, end: int, after_special: bool,
                        inside: bool = False) -> list[tuple[int, int, int]]:
        """Tokens of the raw fragment ``text[start:end]`` with spans in `text`; with `inside`,
        of the part of a fragment that starts inside a word (`edit_cuts`: no space opens it)."""
        if end - start <= SMALL_FRAGMENT and self._words_apart() and end - start <= self.exact_chars():
            return self._small_fragment_spans(text, start, end, inside)
        ids, starts, ends = self._numpy_columns(text, start, end, inside)
        return list(zip(ids.tolist(), starts.tolist(), ends.tolist()))

    def _fragment_columns(self, text: str, start: int, end: int, after_special: bool):
        """`_fragment_spans` as (ids, starts, ends) columns: numpy all the way for a long
        fragment (a 1 MB document's 390k tokens spent ~1 s as tuples and a per-character
        byte-to-character table in Python)."""
        if end - start <= SMALL_FRAGMENT:
            return super()._fragment_columns(text, start, end, after_special)
        return self._numpy_columns(text, start, end)

    def _numpy_columns(self, text: str, start: int, end: int, inside: bool = False):
        """(ids, starts, ends) int64 arrays of ``text[start:end]``: the numpy normalizer, the
        cached words (`_segments`), byte offsets mapped back through the normalizer's and then
        to characters by a cumulative count of UTF-8 lead bytes (`char_spans`' rule: a span
        starts at its first byte's character and ends after its last byte's)."""
        import numpy as np

        fragment = text[start:end]
        data = fragment.encode("utf-8", "surrogatepass")
        normalized, n2o = self.normalize_columns(data, inside)
        if not normalized:
            none = np.zeros(0, dtype=np.int64)
            return none, none, none
        ids, starts, ends = self._segments(normalized)
        keep = ids >= 0  # no unknown token to stand for an unknown character
        ids, starts, ends = ids[keep], starts[keep], ends[keep]
        offsets = np.append(n2o, len(data))  # (n + 1,): the end maps past
        ob = offsets[starts]
        first, last = _char_columns(fragment, ob, np.maximum(ob, offsets[ends]))
        return ids, first + start, np.maximum(first, last) + start

    def _small_fragment_spans(self, text: str, start: int, end: int,
                              inside: bool = False) -> list[tuple[int, int, int]]:
        """`_fragment_spans` of a short fragment (an edit's region) in plain Python, each
        word (from one ▁ to the next) segmented alone and cached: no piece crosses a ▁ and
        every sum is exact (`edit_reason`), so a word's cut is the same wherever it stands."""
        data = text[start:end].encode("utf-8", "surrogatepass")
        normalized, n2o = self._normalize_small(data, inside)
        if not normalized:
            return []
        n2o.append(len(data))  # (the end maps past)
        cache, unk = self._small_words, self._unk_id()
        byte_spans = []
        at = 0
        for word in _SPACE_BYTES.split(normalized):  # (▁ splits: each word but the first starts with one)
            if not word:
                continue
            found = cache.get(word)
            if found is None:
                if len(cache) >= SMALL_WORDS:
                    cache.clear()
                found = cache[word] = self._word_tokens(word, unk)
            for token_id, a, b in found:
                ob, oe = n2o[at + a], n2o[at + b]
                byte_spans.append((token_id, ob, max(ob, oe)))
            at += len(word)
        return char_spans(text, start, byte_spans, data)

    def _word_tokens(self, word: bytes, unk: int) -> tuple[tuple[int, int, int], ...]:
        """(id, start, end) of a normalized word's tokens from score 0, unknown runs collapsed
        (`_viterbi`), without the unknown ones when there is no unknown token."""
        tables = self.tables()
        path = ugm_viterbi_from(word, tables["prefixes"], tables["scores"], unk, tables["unk_score"], 0.0)[0]
        out: list[list[int]] = []
        at = 0
        for token_id, length in path:
            if token_id == unk and out and out[-1][0] == unk:
                out[-1][2] += length
            else:
                out.append([token_id, at, at + length])
            at += length
        return tuple((t, a, b) for t, a, b in out if t >= 0)

    def _words_apart(self) -> bool:
        """Whether the Viterbi never crosses a ▁ of a text whose spaces are escaped to ▁
        (`_apart_reason`)."""
        found = getattr(self, "_apart", None)
        if found is None:
            found = self._apart = self.vocab.flags.get("escape_whitespaces", True) and not self._apart_reason()
        return found

    def _apart_reason(self) -> str:
        """Why the Viterbi may cross a ▁ ("" when it never does: no piece holds one after
        another character, and ▁ is a piece, so no unknown run goes on across one)."""
        if self.tables()["prefixes"].get(SPACE.encode(), -1) < 0:
            return "no ▁ piece: an unknown run could go on across a word's start"
        spaced = next((text for text, attr in zip(self.vocab.tokens, self.vocab.attrs)
                       if attr & (ATTR_NORMAL | ATTR_USER_DEFINED | ATTR_UNUSED) and SPACE in text[1:]), None)
        if spaced is not None:
            return f"a piece holds ▁ after another character ({spaced!r}): the Viterbi crosses word starts"
        return ""

    def _normalize_small(self, data: bytes, inside: bool = False) -> tuple[bytes, list[int]]:
        """`normalize` of a short input in plain Python: the pieces as `_mapped` cuts them (a
        run's bytes at their character's start, another piece's at the piece's), then the
        spaces as `_spaced` places them (`inside`: after a word's first byte, see there)."""
        run = self.plain_run()
        mapped, offsets = bytearray(), []
        pos, n = 0, len(data)
        while pos < n:
            found = run.match(data, pos)
            end = found.end() if found is not None else pos
            if end > pos:
                mapped += data[pos:end]
                first = pos
                for k in range(pos, end):
                    if data[k] & 0xC0 != 0x80:
                        first = k
                    offsets.append(first)
                pos = end
            else:
                part, consumed = self._normalize_prefix(data, pos)
                mapped += part
                offsets += [pos] * len(part)
                pos += consumed
        flags = self.vocab.flags
        space = SPACE.encode() if flags.get("escape_whitespaces", True) else b" "
        suffix = flags.get("treat_whitespace_as_suffix", False)
        merge = flags.get("remove_extra_whitespaces", False)
        prepend = not suffix and flags.get("add_space_prefix", False)
        out, n2o = bytearray(), []
        blank_before, opened = not inside, inside
        for byte, offset in zip(mapped, offsets):
            if byte == 0x20:
                if not merge:
                    out += space
                    n2o += [offset] * len(space)
                blank_before = True
                continue
            if blank_before and (merge or (prepend and not opened)):
                out += space
                n2o += [offset] * len(space)
            opened = opened or blank_before
            blank_before = False
            out.append(byte)
            n2o.append(offset)
        if suffix and flags.get("add_space_prefix", False):
            out += space
            n2o += [n] * len(space)
        return bytes(out), n2o

    def _fragment_ids(self, text: str, start: int, end: int, after_special: bool) -> list[int]:
        normalized = self.normalize_columns(text[start:end].encode("utf-8", "surrogatepass"))[0]
        if not normalized:
            return []
        ids = self._segments(normalized)[0]
        return ids[ids >= 0].tolist()

    def segmentations(self, word: str, k: int = 5) -> list[Alternative]:
        """The cut of `word` (normalized as the text would be) that encoding picks, then the
        next best of its k best cuts (`unigram_paths`); scores are the vocabulary's, a
        user-defined piece 0 and the unknown piece the lowest score minus UNK_PENALTY, as the
        session's Viterbi adds them (in double)."""
        normalized = self.normalize_columns(word.encode("utf-8", "surrogatepass"))[0]
        tables = self.tables()
        return ranked_cuts(normalized, lattice_steps(normalized, tables["prefixes"]), tables["scores"],
                           self._unk_id(), tables["unk_score"], tables["unigram"].encode(normalized),
                           self.piece, k)

    # ---- cuts, for core.incremental (edits re-encode the text between two of them) -------
    def edit_reason(self) -> str:
        """Why edits re-encode the whole text ("" when the text falls apart at `edit_cuts` into
        parts that are encoded alone, each as in the whole text).

        At a cut the normalized text holds a ▁ that opens a word whatever came before: spaces
        merge (remove_extra_whitespaces), so a run of whitespace before a word becomes one ▁,
        as at a fragment's start. The Viterbi cannot cross that ▁: no piece holds ▁ after
        another character, and ▁ alone is a piece, so no unknown run joins across it. What
        follows it then depends on the text before only through the path score there, and
        not at all while every sum is exact in double (`exact_chars`): each comparison is the
        same from any start score. The caller checks the text's length against that.
        """
        flags = self.vocab.flags
        if not flags.get("remove_extra_whitespaces", False):
            return "llama.cpp's unigram without remove_extra_whitespaces: spaces do not merge into one ▁ per word"
        if flags.get("treat_whitespace_as_suffix", False) or not flags.get("escape_whitespaces", True):
            return "llama.cpp's unigram with spaces as a suffix or not escaped to ▁"
        if not self.exact_chars():
            return "a score that is not a finite number, or too fine for exact sums in double"
        return self._apart_reason()

    def exact_chars(self) -> int:
        """The longest text, in characters, over which every Viterbi sum is exact in double
        (0: none). Each score (float32, the unknown one too) is a multiple of 2**low, so every
        sum is, and stays exact below 2**(53 + low). A position's best score is at least the
        one before it plus the lowest score (its one-character step, a piece or unknown) and
        at most that plus the highest, so no value leaves (steps + 1) * max|score|. A
        character normalizes to at most `per_char` bytes (a charsmap replacement, a lone
        surrogate's three U+FFFD, and a ▁ before it), a step covers at least one."""
        found = getattr(self, "_exact_chars", None)
        if found is None:
            tables = self.tables()
            values = [*tables["scores"], tables["unk_score"]]
            if not all(map(math.isfinite, values)):
                found = 0
            else:
                low = min((_lowest_bit(v) for v in values if v), default=0)
                top = max(map(abs, values), default=0.0) or 1.0
                blob = self.charsmap.normalized if self.charsmap is not None else b""
                per_char = max(9, *map(len, blob.split(b"\0"))) + 3
                found = max(0, int((2.0 ** (53 + low) / top - 2) / per_char))
            self._exact_chars = found
        return found

    def edit_cuts(self):
        """The rule core.incremental cuts by, on two adjacent characters ``pair`` (a
        2-character str): True where the second opens a word (every piece the normalizer may
        begin there starts with a byte other than a space) and the first normalizes alone
        (ASCII, in no longer charsmap key or user-defined token) to bytes that end either

        * in a space: the normalized text has a ▁ there (`edit_reason`), or
        * in another character x, with x and the first character y of whatever the second
          may become standing side by side in no piece, and one of them a piece: every path
          passes between them and no unknown run joins across (`_joins_apart`). The part
          after such a cut is normalized as going on inside a word (`fragment_spans`'
          `inside`): a run of text without spaces, CJK or a long URL, is cut at its ASCII
          characters, not only at the spaces around it.

        >>> from forma_gui.core.llama_vocab import LlamaVocab
        >>> tok = LlamaUGMTokenizer(LlamaVocab(["<unk>", SPACE, SPACE + "a", "b"], [1, 4, 4, 4],
        ...                                    [0.0, -1.0, -2.0, -3.0], specials={"unk": 0},
        ...                                    flags={"remove_extra_whitespaces": True}))
        >>> [tok.edit_cuts()(pair) for pair in (" a", "a ", "  ", "ab", "ba", "\\ta")]
        [True, False, False, True, True, False]

        ("ab", "ba": b is a piece, so no unknown run goes on across; a tab is no space without
        a charsmap, and neither it nor "a" is a piece.)
        """
        inside: dict[str, bool] = {}
        opens_word, alone = self.opens_word, self.alone

        def is_cut(pair: str) -> bool:
            first = alone(pair[0])
            if first is None or not opens_word(pair[1]):
                return False
            if first.endswith(b" "):
                return True
            found = inside.get(pair)
            if found is None:
                if len(inside) >= SMALL_WORDS:
                    inside.clear()
                found = inside[pair] = self._joins_apart(first, pair[1])
            return found
        return is_cut

    def alone(self, ch: str) -> bytes | None:
        """What `ch` normalizes to when it is a piece of the normalizer on its own wherever it
        stands (ASCII, but NUL, in no longer charsmap key or user-defined token), else None
        (`edit_cuts`). Cached per character."""
        if ch in self._alone:
            return self._alone[ch]
        found = None
        if len(ch) == 1 and 0 < ord(ch) < 0x80:
            data = ch.encode()
            if not any(data in path for path in self.tables()["user_paths"]):
                found = data
                if self.charsmap is not None:
                    length, replacement = self.charsmap.longest_prefix(data, 0)
                    found = None if self.charsmap.in_longer_key(data[0]) else replacement if length else data
        self._alone[ch] = found
        return found

    def _joins_apart(self, mapped: bytes, ch: str) -> bool:
        """Whether the Viterbi passes between `mapped` (what a character normalizes to alone,
        not ending in a space) and whatever `ch` may become: no piece holds the last character
        of one and the first of the other side by side, and one of the two is a piece."""
        try:
            last = mapped.decode("utf-8")[-1:]
        except UnicodeDecodeError:
            return False
        if not last:
            return False
        data = ch.encode("utf-8", "surrogatepass")
        outputs = [data] + (self.charsmap.replacements_from(data) if self.charsmap is not None else [])
        pairs, prefixes = self._lattice_pairs(), self.tables()["prefixes"]
        last_piece = prefixes.get(last.encode(), -1) >= 0
        for output in outputs:
            try:
                first = output.decode("utf-8")[:1]
            except UnicodeDecodeError:
                return False
            if not first or last + first in pairs:
                return False
            if not last_piece and prefixes.get(first.encode(), -1) < 0:
                return False
        return True

    def _lattice_pairs(self) -> frozenset[str]:
        """Every two characters that stand side by side in a piece the Viterbi may take
        (normal, user-defined, unused ones), built once."""
        found = getattr(self, "_pairs", None)
        if found is None:
            found = self._pairs = adjacent_pairs(t for t, a in zip(self.vocab.tokens, self.vocab.attrs)
                                                 if a & (ATTR_NORMAL | ATTR_USER_DEFINED | ATTR_UNUSED))
        return found

    def opens_word(self, ch: str) -> bool:
        """Whether every piece the normalizer may begin at `ch` starts with a byte other than a
        space (`edit_cuts`): a user-defined token's path, copied as it is, or a charsmap
        key's replacement, whatever follows `ch`; else `ch` itself (or U+FFFD). Such a
        character gives a fragment a token, wherever it stands. Cached per character."""
        found = self._opens.get(ch)
        if found is None:
            found = self._opens[ch] = self._opens_word(ch)
        return found

    def _opens_word(self, ch: str) -> bool:
        data = ch.encode("utf-8", "surrogatepass")
        if data[:1] == b" ":
            return False
        if data[:1] in self.tables()["user_paths"] or self.charsmap is None:
            return True
        return all(found[:1] not in (b"", b" ") for found in self.charsmap.replacements_from(data))

    def fragment_spans(self, text: str, start: int, end: int, *, inside: bool = False) -> list[tuple[int, int, int]]:
        """The raw fragment ``text[start:end]``'s tokens as (id, start, end) in `text`: every
        fragment is normalized alike (a ▁ before its first word), so a part from a cut after
        a space is encoded as one (`edit_reason`); one from a cut inside a word (after a
        character `alone` maps to bytes that end in another one) with `inside`."""
        return self._fragment_spans(text, start, end, True, inside)

    def _segments(self, normalized: bytes):
        """`_viterbi(normalized)` as (ids, starts, ends) int64 arrays, from the cached words."""
        pairs = self.tables()["unigram"].encode_columns(normalized)  # (n, 2)
        return collapse_unknown_runs(pairs[:, 0], pairs[:, 1], self._unk_id())

    def normalize(self, data: bytes) -> tuple[bytes, list[int]]:
        """llm_tokenizer_ugm_session::normalize, with the input offset of every output byte.

        Equal to `_normalize_reference`; see `normalize_columns` for how it is fast.
        """
        normalized, n2o = self.normalize_columns(data)
        return normalized, n2o.tolist()

    def normalize_columns(self, data: bytes, inside: bool = False):
        """`normalize` with the offsets as an int64 numpy array. Two steps: the pieces
        (`_mapped`), then the space handling over their bytes, which depends on nothing but
        those bytes and the flags, in numpy (`_spaced`; `inside`: see there)."""
        mapped, offsets = self._mapped(data)
        return _spaced(mapped, offsets, self.vocab.flags, len(data), inside)

    def _mapped(self, data: bytes):
        """The pieces `_normalize_prefix` cuts `data` into, joined, and each byte's input
        offset (int64 numpy array: its piece's start, a character being one piece). Runs of
        characters that are their own piece (`plain_run`) are copied whole; only the
        positions between them go one piece at a time."""
        import numpy as np

        run = self.plain_run()
        parts: list[bytes] = []
        starts, plain = array("q"), bytearray()  # per part: its input start, 1 if a run
        pos, n = 0, len(data)
        while pos < n:
            found = run.match(data, pos)
            end = found.end() if found is not None else pos
            if end > pos:
                part, consumed = data[pos:end], end - pos
            else:
                part, consumed = self._normalize_prefix(data, pos)
            parts.append(part)
            starts.append(pos)
            plain.append(end > pos)
            pos += consumed
        mapped = b"".join(parts)
        sizes = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))  # (parts,)
        is_run = np.repeat(np.frombuffer(plain, dtype=bool), sizes)     # (m,)
        first = np.repeat(np.frombuffer(starts, dtype=np.int64) if starts else sizes, sizes)
        # a run's byte comes from its own input position, another piece's from the piece start
        step = np.arange(len(mapped), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        at = first + np.where(is_run, step, 0)
        raw = np.frombuffer(mapped, dtype=np.uint8)                      # (m,)
        follows = is_run & ((raw & 0xC0) == 0x80)
        if follows.any():  # a run's character: every byte from its first (runs hold whole ones)
            at = np.maximum.accumulate(np.where(follows, -1, at))
        return mapped, at

    def plain_run(self) -> re.Pattern:
        """A regex matching the longest run (at least one) of characters that are each their
        own `_normalize_prefix` piece, whatever follows the run (built once)."""
        with self._lock:
            if self._plain_run is None:
                first = {t.encode("utf-8", "surrogateescape")[:1]
                         for t, a in zip(self.vocab.tokens, self.vocab.attrs)
                         if a & ATTR_USER_DEFINED}
                self._plain_run = plain_run_regex(self.charsmap, b"".join(first))
            return self._plain_run

    def _normalize_reference(self, data: bytes) -> tuple[bytes, list[int]]:
        """llm_tokenizer_ugm_session::normalize, with the input offset of every output byte:
        the readable reference of `normalize`."""
        flags = self.vocab.flags
        space = SPACE.encode() if flags.get("escape_whitespaces", True) else b" "
        suffix = flags.get("treat_whitespace_as_suffix", False)
        prepend = not suffix and flags.get("add_space_prefix", False)
        merge = flags.get("remove_extra_whitespaces", False)
        out, n2o = bytearray(), []
        prepended = non_ws = False
        pos = 0
        while pos < len(data):
            piece, consumed = self._normalize_prefix(data, pos)
            for c in piece:
                if c != 0x20:
                    if not non_ws:
                        non_ws = True
                        if (prepend and not prepended) or merge:
                            out += space
                            n2o.extend([pos] * len(space))
                            prepended = True
                    out.append(c)
                    n2o.append(pos)
                else:
                    non_ws = False
                    if not merge:
                        out += space
                        n2o.extend([pos] * len(space))
            pos += consumed
        if suffix and flags.get("add_space_prefix", False):
            out += space
            n2o.extend([len(data)] * len(space))
        return bytes(out), n2o

    def _normalize_prefix(self, data: bytes, pos: int) -> tuple[bytes, int]:
        tables = self.tables()
        # the user-defined trie: llama.cpp returns the deepest path it can walk, key or not
        length = 0
        paths = tables["user_paths"]
        for k in range(1, min(tables["user_max"], len(data) - pos) + 1):
            if data[pos:pos + k] not in paths:
                break
            length = k
        if length:
            return data[pos:pos + length], length
        if self.charsmap is not None:
            length, replacement = self.charsmap.longest_prefix(data, pos)
            if length:
                return replacement, length
        length = _lax_char_len(data, pos)
        return (data[pos:pos + length], length) if length else ("\ufffd".encode(), 1)

    def _viterbi(self, normalized: bytes) -> list[tuple[int, int, int]]:
        """(id, normalized start, normalized end) of the best path, unknown runs collapsed:
        the readable reference of `_segments`."""
        import numpy as np

        pairs = np.array(self._viterbi_from(normalized, 0.0)[0], dtype=np.int64).reshape(-1, 2)
        ids, starts, ends = collapse_unknown_runs(pairs[:, 0], pairs[:, 1], self._unk_id())
        return list(zip(ids.tolist(), starts.tolist(), ends.tolist()))

    def _viterbi_from(self, normalized: bytes,
                      start_score: float) -> tuple[list[tuple[int, int]], float]:
        """`ugm_viterbi_from` with this vocabulary's tables."""
        tables = self.tables()
        return ugm_viterbi_from(normalized, tables["prefixes"], tables["scores"], self._unk_id(),
                                tables["unk_score"], start_score)


def ugm_viterbi_from(data: bytes, prefixes: dict[bytes, int], scores: list[float], unk: int,
                     unk_score: float, start_score: float) -> tuple[list[tuple[int, int]], float]:
    """llm_tokenizer_ugm_session's Viterbi from the path score `start_score` at position 0:
    the best path's (id, byte length) pairs, unknown runs not yet collapsed, and its score at
    the end. Double additions, no score reset; a candidate replaces the best value at a
    position (-DBL_MAX at first) only when strictly greater, so the first one wins ties.

    >>> ugm_viterbi_from(b"ab", {b"a": 0, b"b": 1, b"ab": 2}, [-1.0, -1.0, -2.0], 3, -20.0, 0.5)
    ([(2, 2)], -1.5)

    (a tie: "ab" reaches the end first, from position 0, and "a" + "b" is not greater.)
    """
    n = len(data)
    best = [-1.7976931348623157e308] * (n + 1)
    best[0] = start_score
    start = [0] * (n + 1)
    ids = [unk] * (n + 1)
    i = 0
    while i < n:
        mblen = min(ONE_CHAR_LEN[data[i] >> 4], n - i)  # unicode_len_utf8
        base = best[i]
        single = False
        j = i + 1
        while j <= n:
            token = prefixes.get(data[i:j])
            if token is None:
                break
            if token >= 0:
                if j - i == mblen:
                    single = True
                candidate = base + scores[token]
                if candidate > best[j]:
                    best[j], start[j], ids[j] = candidate, i, token
            j += 1
        if not single:
            candidate = base + unk_score
            if candidate > best[i + mblen]:
                best[i + mblen], start[i + mblen], ids[i + mblen] = candidate, i, unk
        i += mblen
    return backtrack(ids, start, n), best[n]


#: characters of a fragment `_small_fragment_spans` encodes (an edit's region), and the words it keeps
SMALL_FRAGMENT = 4096
SMALL_WORDS = 1 << 16
_SPACE_BYTES = re.compile(b"(?=" + re.escape(SPACE.encode()) + b")")


def _lowest_bit(value: float) -> int:
    """The exponent of a nonzero finite float's lowest set bit.

    >>> _lowest_bit(-10.0), _lowest_bit(0.75), _lowest_bit(3.0)
    (1, -2, 0)
    """
    numerator, denominator = abs(value).as_integer_ratio()
    return (numerator & -numerator).bit_length() - denominator.bit_length()


def collapse_unknown_runs(ids, lengths, unk: int):
    """(ids, starts, ends) int64 arrays of a path given as its ids and byte lengths, each run
    of adjacent `unk` tokens merged into one (llama.cpp does it while backtracking).

    >>> [a.tolist() for a in collapse_unknown_runs([5, 0, 0, 7, 0], [1, 2, 1, 3, 2], 0)]
    [[5, 0, 7, 0], [0, 1, 4, 7], [1, 4, 7, 9]]
    """
    import numpy as np

    ids, lengths = np.asarray(ids, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)                                          # (n,)
    starts = ends - lengths
    is_unk = ids == unk
    first = np.ones(len(ids), dtype=bool)
    first[1:] = ~(is_unk[1:] & is_unk[:-1])  # a token opens a segment unless it continues a run
    kept = first.nonzero()[0]
    last = np.append(kept[1:] - 1, len(ids) - 1)  # each segment's last token
    return ids[kept], starts[kept], ends[last] if len(ids) else ends


#: unicode_cpt_from_utf8's lead bytes as (first, last, character length); its continuation
#: bytes are any of 80..BF (no overlong or surrogate check). Other leads throw: U+FFFD.
LAX_UTF8_FORMS = ((0x00, 0x7F, 1), (0xC0, 0xDF, 2), (0xE0, 0xEF, 3), (0xF0, 0xF7, 4))


def plain_run_regex(charsmap: CharsMap | None, user_first: bytes) -> re.Pattern:
    """A regex for runs of characters that `LlamaUGMTokenizer._normalize_prefix` gives
    back as they are: lax UTF-8 (see `_lax_char_len`), no user-defined token starting with
    their first byte, no charsmap key ending inside them or at their end, and no key going
    on past them into the byte that follows (a negative lookahead). A character outside
    (a key, or a piece, might start there) just takes the slow path.

    >>> run = plain_run_regex(None, b"<")
    >>> run.match("ab c<d".encode()).end(), run.match(b"\\xc3(") is None
    (4, True)
    """
    groups: dict[tuple[bytes, bytes, bytes], bytearray] = {}
    for first, last, size in LAX_UTF8_FORMS:
        _plain_walk(charsmap, b"", 0 if charsmap else -1, size, range(first, last + 1),
                    user_first, groups)
    body = _alternation(groups)
    if not body:
        return re.compile(b"(?!)")
    return re.compile(b"(?:" + _ascii_block(charsmap, user_first) + body + b")++")


def _ascii_block(charsmap: CharsMap | None, user_first: bytes) -> bytes:
    """A faster first alternative for `plain_run_regex`, ``|``-terminated (or b""): a
    stretch of plain ASCII characters that no key goes on from into an ASCII byte. `re`
    loops over their byte class at C speed; inside the stretch each is followed by an ASCII
    byte, so only the last one's lookahead is checked."""
    last: dict[tuple[bytes, bytes, bytes], bytearray] = {}
    for b in range(0x80):
        node = charsmap.child(0, b) if charsmap is not None else -1
        follow = charsmap.followers(node) if node >= 0 else b""
        if b in user_first or (node >= 0 and charsmap.value(node) is not None) or \
                min(follow, default=0x80) < 0x80:
            continue
        look = _key_lookahead(charsmap, node) if follow else b""
        last.setdefault((b"", b"", look), bytearray()).append(b)
    if not last:
        return b""
    return _byte_class(b"".join(last.values())) + b"*(?:" + _alternation(last) + b")|"


def _plain_walk(charsmap: CharsMap | None, prefix: bytes, node: int, size: int,
                following: range, user_first: bytes,
                groups: dict[tuple[bytes, bytes, bytes], bytearray]) -> None:
    """Add the plain `size`-byte characters that start with `prefix` and then a byte of
    `following` to `groups` ({(prefix, tail, lookahead): last bytes}); `node` is the
    charsmap trie's node after `prefix` (-1: no key goes on)."""
    children = dict(charsmap.children(node)) if node >= 0 else {}
    rest = size - len(prefix) - 1
    free = bytearray()
    for b in following:
        child = children.get(b)
        if (not prefix and b in user_first) or (child is not None
                                                 and charsmap.value(child) is not None):
            continue  # a piece starts here, or a key ends inside or at the end of the character
        if child is None:
            free.append(b)
        elif rest:
            _plain_walk(charsmap, prefix + bytes((b,)), child, size, range(0x80, 0xC0),
                        user_first, groups)
        else:
            look = _key_lookahead(charsmap, child)
            groups.setdefault((prefix, b"", look), bytearray()).append(b)
    if free:
        tail = b"[\\x80-\\xbf]{%d}" % rest if rest else b""
        groups.setdefault((prefix, tail, b""), bytearray()).extend(free)


def _key_lookahead(charsmap: CharsMap, node: int) -> bytes:
    """``(?!...)`` of the ways a charsmap key goes on from `node` to its end (b"" when none
    does), each cut after `KEY_LOOKAHEAD` bytes (then rejecting more than needed: the
    character only takes the slow path)."""
    groups: dict[tuple[bytes, bytes, bytes], bytearray] = {}
    for rest in _key_rests(charsmap, node, b""):
        groups.setdefault((rest[:-1], b"", b""), bytearray()).append(rest[-1])
    return b"(?!" + _alternation(groups) + b")" if groups else b""


#: bytes of a key's rest spelled out in a lookahead
KEY_LOOKAHEAD = 4


def _key_rests(charsmap: CharsMap, node: int, prefix: bytes) -> Iterator[bytes]:
    """The shortest byte strings after `node` that reach a key's end (or `KEY_LOOKAHEAD`
    bytes towards one)."""
    for b, child in charsmap.children(node):
        rest = prefix + bytes((b,))
        if charsmap.value(child) is not None or len(rest) == KEY_LOOKAHEAD:
            yield rest
        else:
            yield from _key_rests(charsmap, child, rest)


def _spaced(mapped: bytes, offsets, flags: dict[str, bool], size: int, inside: bool = False):
    """The space handling of llm_tokenizer_ugm_session::normalize over the joined pieces
    `mapped` (`offsets`: each byte's piece start; `size`: the input length), in numpy.
    A space byte gives an (escaped) space unless spaces merge; a non-space byte after a
    space or at the start opens a word, which gets a space before it when spaces merge,
    or the first one when a space is prepended. `inside`: the bytes go on from a non-space
    byte after the first word's start (the rest of a fragment from a cut inside a word), so
    the start opens nothing and no space is prepended.

    >>> import numpy as np
    >>> flags = {"remove_extra_whitespaces": True, "escape_whitespaces": False}
    >>> out, n2o = _spaced(b" a  b", np.arange(5), flags, 5)
    >>> out, n2o.tolist()
    (b' a b', [1, 1, 4, 4])
    """
    import numpy as np

    space = SPACE.encode() if flags.get("escape_whitespaces", True) else b" "
    suffix = flags.get("treat_whitespace_as_suffix", False)
    merge = flags.get("remove_extra_whitespaces", False)
    raw = np.frombuffer(mapped, dtype=np.uint8)                          # (m,)
    blank = raw == 0x20
    opens = ~blank
    opens[1:] &= blank[:-1]
    if inside:
        opens[:1] = False
    if not merge:
        prepend = not suffix and flags.get("add_space_prefix", False)
        opens[np.flatnonzero(opens)[1 if prepend and not inside else 0:]] = False
    width = len(space)
    count = np.where(blank, 0 if merge else width, 1) + opens * width   # (m,) output bytes
    out = np.repeat(raw, count)
    n2o = np.repeat(offsets, count)
    starts = (np.cumsum(count) - count)[(blank & (not merge)) | opens]  # spaces to write
    for k, b in enumerate(space):
        out[starts + k] = b
    if suffix and flags.get("add_space_prefix", False):
        return out.tobytes() + space, np.append(n2o, [size] * width)
    return out.tobytes(), n2o


def _lax_char_len(data: bytes, pos: int) -> int:
    """unicode_cpt_from_utf8's length, or 0 where it throws (it checks the lead byte and the
    continuation bytes, not overlongs or surrogates)."""
    lead = data[pos]
    if lead < 0x80:
        return 1
    if not lead & 0x40:
        return 0
    length = 2 if not lead & 0x20 else 3 if not lead & 0x10 else 4 if not lead & 0x08 else 0
    if not length or pos + length > len(data):
        return 0
    if any(data[k] & 0xC0 != 0x80 for k in range(pos + 1, pos + length)):
        return 0
    return length


# ---- BPE ---------------------------------------------------------------------------------

def llama_bpe_word(word: str, rank_of: dict[str, int], vocab: LlamaVocab,
                   ignore_merges: bool) -> list[tuple[int | None, int]]:
    """One byte-level word through llm_tokenizer_bpe_session: (id or None, byte-level
    characters covered) per final symbol; a None is a symbol no token spells, whose bytes
    had no single-byte token either (llama.cpp outputs nothing for it)."""
    ids = vocab.token_to_id
    if ignore_merges and word in ids:
        return [(ids[word], len(word))]

    def score_of(left: str, right: str) -> float | None:
        rank = rank_of.get(left + " " + right)
        return None if rank is None else -rank

    final, _ = merge_by_score(list(word), score_of)
    out: list[tuple[int | None, int]] = []
    for sym in final:
        token = ids.get(sym)
        if token is not None:
            out.append((token, len(sym)))
            continue
        singles = [ids.get(bytes([b]).decode("utf-8", "surrogateescape"))
                   for b in sym.encode("utf-8", "surrogatepass")]
        found = [t for t in singles if t is not None]
        out.extend((t, 0) for t in found)
        out.append((None, len(sym)))
    return out


_SURROGATE = regex.compile("[\ud800-\udfff]")
#: longest text handed to the byte-level encoder at once (its passes over 256k characters
#: take a few ms each; over 10 MB, a regex pass alone held the GIL ~250 ms)
INNER_MAX_CHARS = 1 << 18
#: pre-tokenizer stages that match single characters (their splits never span a cut)
ONE_CHARACTER_STAGES = frozenset({r"\p{N}"})


def _space_cuts(text: str, size: int) -> list[tuple[int, int]] | None:
    """text as (start, end) pieces of at most about `size` characters, each cut at a space
    that follows a character that is not whitespace; None if some stretch has no such space."""
    pieces, lo = [], 0
    while len(text) - lo > size:
        cut = text.rfind(" ", lo + 1, lo + size + 1)
        while cut > lo and text[cut - 1].isspace():
            cut = text.rfind(" ", lo + 1, cut)
        if cut <= lo:
            return None
        pieces.append((lo, cut))
        lo = cut
    pieces.append((lo, len(text)))
    return pieces


class LlamaBPETokenizer(LlamaTokenizer):
    """``tokenizer.ggml.model == "gpt2"``: llm_tokenizer_bpe_session over `pre`'s words."""

    kind = "byte-level BPE (llama.cpp)"
    piece_style = "bytelevel"

    def __init__(self, vocab: LlamaVocab, merges: list[str], pre: LlamaPreTokenizer, *,
                 merge_ids: Any = None, name: str = "", path: str | None = None) -> None:
        """`merge_ids`: each merge's (left, right, result) ids if the loader found them
        (a (3, n) array, see ByteLevelBPETokenizer); the first encode then skips that."""
        super().__init__(vocab, name=name, path=path)
        self.merges = merges
        self._merge_ids = merge_ids
        self.pre = pre
        self._inner = None
        self._ranks: dict[str, int] | None = None
        self._missing: frozenset[str] | None = None  # byte symbols the vocabulary lacks
        self._missing_bytes = b""                    # their bytes
        self._lengths = None  # numpy byte length per token, for _inner_spans
        self._lock = threading.Lock()

    def _normal_bytes(self, token_id: int) -> bytes:
        from forma_gui.core.byte_map import unicode_str_to_bytes

        text = self.vocab.tokens[token_id]
        try:
            return unicode_str_to_bytes(text)
        except ValueError:  # llama_decode_text: characters outside the byte map
            return _decode_text_lossy(text)

    @property
    def inner(self):
        """The byte-level BPE encoder, built on first use (the merge table is the costly part)."""
        with self._lock:
            if self._inner is None:
                from forma_gui.core.bytelevel import ByteLevelBPETokenizer

                one = self.pre.one_pattern  # smollm's two stages as one regex: ~5x faster on 1 MB
                self._inner = ByteLevelBPETokenizer(
                    self.vocab.tokens, self.merges,
                    pattern=[one] if one is not None else list(self.pre.patterns),
                    ignore_merges=self.vocab.flags.get("ignore_merges", False), strict=False,
                    merge_ids=self._merge_ids, name=self.name)
                self._merge_ids = None  # the merge table holds them now
                from forma_gui.core.byte_map import BYTE_TO_UNICODE

                id_of = self._inner.id_of  # the same texts as vocab.token_to_id: no second dict
                self._missing = frozenset(c for c in BYTE_TO_UNICODE.values() if id_of(c) is None)
                self._missing_bytes = bytes(b for b, c in BYTE_TO_UNICODE.items()
                                            if c in self._missing)
            return self._inner

    def token_score(self, token_id: int) -> float | None:
        """The vocabulary's score if it has scores, else the rank of the first merge that
        makes the token (None for bytes and special tokens), from the merge ids the encoder
        already holds."""
        if self.vocab.scores is not None:
            return self.vocab.score(token_id)
        return self.inner.token_score(token_id)

    def _rank_table(self) -> dict[str, int]:
        """"left right" -> rank; the first listing wins, as std::unordered_map::emplace."""
        if self._ranks is None:
            merges = sliced_map(str, self.merges)  # a list (LazyStrings decode in chunks)
            merges.reverse()  # the first listing wins: it goes in last
            self._ranks = sliced_dict(merges, range(len(merges) - 1, -1, -1))
        return self._ranks

    def pre_tokenize(self, text: str) -> list[tuple[int, int]]:
        return self.pre.split(text)

    def _fragment_spans(self, text: str, start: int, end: int,
                        after_special: bool) -> list[tuple[int, int, int]]:
        fast = self._inner_spans(text[start:end], start)
        return fast if fast is not None else self._word_spans(text, start, end)

    def _word_spans(self, text: str, start: int, end: int) -> list[tuple[int, int, int]]:
        """llm_tokenizer_bpe_session's way, word by word: the reference for `_inner_spans`."""
        from forma_gui.core.byte_map import bytes_to_unicode_str

        inner = self.inner
        fragment = text[start:end]
        out: list[tuple[int, int, int]] = []
        for ws, we in self.pre.split(fragment):
            word = fragment[ws:we]
            data = word.encode("utf-8", "surrogatepass")
            encoded = bytes_to_unicode_str(data)
            if self._missing and not self._missing.isdisjoint(encoded):
                pieces = llama_bpe_word(encoded, self._rank_table(), self.vocab,
                                        self.vocab.flags.get("ignore_merges", False))
            else:
                pieces = [(t, len(inner.token_bytes(t))) for t in inner.encode_pretoken(word)]
            pos, byte_spans = 0, []
            for token, size in pieces:
                if token is not None:
                    byte_spans.append((token, pos, pos + size))
                pos += size
            out.extend(char_spans(text, start + ws, byte_spans, data))
        return out

    def _fragment_ids(self, text: str, start: int, end: int, after_special: bool) -> list[int]:
        fragment = text[start:end]
        pieces = self._inner_pieces(fragment)
        if pieces is not None:
            found = [self._piece_ids(fragment[a:b]) for a, b in pieces]
            if None not in found:
                return list(chain.from_iterable(found))
        return super()._fragment_ids(text, start, end, after_special)

    def _piece_ids(self, piece: str) -> list[int] | None:
        """The byte-level encoder's ids of a piece, None unless they spell its bytes (then
        the word-by-word path decides)."""
        ids = self.inner.encode(piece)
        if not ids or self._byte_lengths()[ids].sum() != len(piece.encode("utf-8")):
            return None
        return ids

    def _inner_pieces(self, fragment: str) -> list[tuple[int, int]] | None:
        """Where to cut the fragment for the byte-level encoder, whose ids are llama.cpp's
        when no word holds a byte the vocabulary lacks (llama.cpp looks such words up its
        own way), no stage treats some Unicode spaces as plain ones (non-ASCII text only)
        and there are no lone surrogates (llama.cpp encodes them, the byte-level encoder
        replaces them); None where it is not. One encode makes C calls over all of its text,
        which must not hold the GIL long in a window's worker: a fragment over
        INNER_MAX_CHARS is cut at spaces after other characters, where every stage of a
        space-safe pre-tokenizer (core.patterns.SPACE_SAFE) splits anyway."""
        if not fragment or (any(self.pre.wide) and not fragment.isascii()):
            return None
        if not self.words_exact(fragment):
            return None
        if len(fragment) <= INNER_MAX_CHARS:
            return [(0, len(fragment))]
        return _space_cuts(fragment, INNER_MAX_CHARS) if self._cuttable() else None

    def _cuttable(self) -> bool:
        """Every stage either space-safe or matching one character at a time (\\p{N})."""
        from forma_gui.core import patterns as pats

        return all(pats.is_space_safe(p) or p.pattern in ONE_CHARACTER_STAGES
                   for p in self.pre.patterns)

    def _inner_spans(self, fragment: str, start: int) -> list[tuple[int, int, int]] | None:
        """The fragment's tokens from the byte-level encoder's batch paths and caches (several
        times faster than word by word), or None where that could differ from llama.cpp
        (see `_inner_pieces`)."""
        pieces = self._inner_pieces(fragment)
        if pieces is None:
            return None
        out: list[tuple[int, int, int]] = []
        for a, b in pieces:
            spans = self._piece_spans(fragment[a:b], start + a)
            if spans is None:
                return None
            out += spans
        return out

    def _piece_spans(self, piece: str, start: int) -> list[tuple[int, int, int]] | None:
        import numpy as np

        ids = self._piece_ids(piece)
        if ids is None:
            return None
        lengths = self._byte_lengths()[ids]                        # (tokens,) bytes of each
        ends = np.cumsum(lengths)
        begins = ends - lengths
        if piece.isascii():  # characters are bytes
            first, last = begins + start, ends + start
        else:  # char_spans' rule: from the character holding the first byte to past the last one's
            data = np.frombuffer(piece.encode("utf-8"), dtype=np.uint8)
            char_at = np.cumsum(np.append((data & 0xC0) != 0x80, True)) - 1  # (bytes + 1,)
            first = char_at[begins]
            last = np.where(ends > begins, char_at[np.maximum(ends - 1, 0)] + 1, first)
            first, last = first + start, last + start
        return list(zip(ids, first.tolist(), last.tolist()))

    def _byte_lengths(self):
        """(vocabulary,) int64: the byte length of each token as the byte-level encoder spells it."""
        if self._lengths is None:
            import numpy as np

            self._lengths = np.fromiter(map(len, self.inner._bytes), dtype=np.int64,
                                        count=len(self.inner._bytes))
        return self._lengths

    def merge_steps(self, word: str) -> list[MergeStep]:
        return self.inner.merge_steps(word)

    # ---- words, for core.incremental (edits re-encode the words around them) -------------
    @property
    def word_pattern(self) -> regex.Pattern | None:
        """A regex whose matches on the raw text are exactly the pre-tokenizer's words, for
        byte-encoded words: its one stage when that does not run on the wide-space rewrite, or
        the one-regex form of a stage list (llama_pre.ONE_REGEX: smollm's digits, then GPT-2's
        regex); else None."""
        return self.pre.one_pattern if self.pre.byte_encode else None

    @staticmethod
    def count_undefined(text: str) -> int:
        """Characters of `text` whose class differs from llama.cpp's (llama_pre.count_undefined):
        core.incremental re-encodes a text holding any from scratch, like lone surrogates."""
        return count_undefined(text)

    def encode_pretoken(self, word: str) -> tuple[int, ...]:
        """The ids of one word, llama.cpp's when `words_exact(word)` (`_word_spans` encodes
        such a word the same way: the session runs on each word alone)."""
        return self.inner.encode_pretoken(word)

    def words_exact(self, text: str) -> bool:
        """Whether `encode_pretoken` gives llama.cpp's ids for every word of `text` and
        `word_pattern` cuts its words: no byte the vocabulary lacks (llama.cpp keeps it as a
        barrier), no lone surrogate, and no code point llama.cpp's Unicode tables leave
        undefined (`count_undefined`: `pre.split` classes them as llama.cpp does)."""
        self.inner  # noqa: B018 - sets _missing_bytes
        if not text.isascii() and (_SURROGATE.search(text) or count_undefined(text)):
            return False
        if not self._missing_bytes:
            return True
        data = text.encode("utf-8")
        return len(data.translate(None, self._missing_bytes)) == len(data)


def _decode_text_lossy(text: str) -> bytes:
    """llama_decode_text for a token with characters outside GPT-2's byte map."""
    from forma_gui.core.byte_map import UNICODE_TO_BYTE

    out = bytearray()
    for ch in text:
        b = UNICODE_TO_BYTE.get(ch)
        if b is not None:
            out.append(b)
        else:
            utf8 = ch.encode("utf-8", "surrogatepass")
            out += b"[UNK_BYTE_0x" + utf8.hex().encode() + text.encode("utf-8", "surrogateescape") + b"]"
    return bytes(out)


__all__ = ["LlamaBPETokenizer", "LlamaSPMTokenizer", "LlamaUGMTokenizer", "WordTokens",
           "byte_token", "llama_bpe_word"]
