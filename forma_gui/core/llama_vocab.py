"""What every llama.cpp tokenizer shares: the vocabulary, token attributes, special tokens,
the special-token partition and detokenization (llama-vocab.cpp ``llama_vocab::impl``).

A GGUF vocabulary is a list of token texts with a type each (``tokenizer.ggml.token_type``).
llama.cpp turns the types into attribute bits and then adjusts them by name (end-of-turn and
fill-in-the-middle look-alikes become CONTROL, control tokens named "unused" become UNUSED,
gpt-oss's channel tokens become USER_DEFINED, per-model LSTRIP/RSTRIP flags). `LlamaVocab`
does the same once, at load, with dict look-ups rather than a pass over every token.

Tokenizing starts with ``tokenizer_st_partition``: every CONTROL, USER_DEFINED and UNKNOWN
token text is cut out of the raw text, longest first; USER_DEFINED ones always, the others
only with ``parse_special``. What remains are raw-text fragments that the model's session
(BPE, SPM, WPM, UGM) tokenizes one by one. `LlamaTokenizer` runs that loop and keeps, for
every token, the character span it came from.
"""
from __future__ import annotations

import re
from abc import abstractmethod
from array import array
from typing import Callable, Iterable, Sequence

from forma_gui.core.sentencepiece import byte_to_char_offsets, tile_columns, tile_spans
from forma_gui.core.slices import sliced_dict
from forma_gui.core.tokenizer import AddedToken, Token, Tokenizer, check_id

# llama_token_attr bits (llama.h)
ATTR_UNDEFINED, ATTR_UNKNOWN, ATTR_UNUSED, ATTR_NORMAL = 0, 1 << 0, 1 << 1, 1 << 2
ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_BYTE = 1 << 3, 1 << 4, 1 << 5
ATTR_LSTRIP, ATTR_RSTRIP = 1 << 7, 1 << 8

#: GGUF token type (llama_token_type) -> attribute bits; anything else is UNDEFINED
TYPE_ATTRS = {0: ATTR_UNDEFINED, 1: ATTR_NORMAL, 2: ATTR_UNKNOWN, 3: ATTR_CONTROL,
              4: ATTR_USER_DEFINED, 5: ATTR_UNUSED, 6: ATTR_BYTE}
#: attribute bits -> Tokenizer.token_type names, strongest first
ATTR_NAMES = ((ATTR_CONTROL, "control"), (ATTR_USER_DEFINED, "user-defined"),
              (ATTR_UNKNOWN, "unknown"), (ATTR_BYTE, "byte"), (ATTR_UNUSED, "unused"),
              (ATTR_NORMAL, "normal"))
SPECIAL_ATTRS = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN
C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale

#: token texts llama.cpp marks CONTROL when it finds them (end of turn/generation, FIM)
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
             "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
             "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
             "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[")
FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                "▁<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                "▁<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                "▁<MID>", "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
#: gpt-oss: always rendered, so llama.cpp makes them USER_DEFINED
ALWAYS_USER_DEFINED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")
#: every text the attribute fix-ups look for by name (see `LlamaVocab._fix_attrs`)
NAMED_TEXTS = tuple(dict.fromkeys(
    EOG_TEXTS + sum(FIM_TEXTS.values(), ()) + ALWAYS_USER_DEFINED
    + ("<|end|>", "<|return|>", "<|call|>", "<|calls|>", "<|flush|>", "<|tool_response>", "</s>",
       "<mask>", "<unk>", "<s>", "<|endoftext|>", "[MASK]")))


class LlamaVocab:
    """Token texts, scores and attributes, special ids and flags, as llama.cpp holds them.

    `specials` maps "bos", "eos", "eot", "eom", "unk", "sep", "pad", "mask", "fim_pre", ...
    to ids (None when unset); `flags` holds add_space_prefix, add_bos, add_eos, add_sep,
    ignore_merges, clean_spaces, remove_extra_whitespaces, escape_whitespaces,
    treat_whitespace_as_suffix, lowercase, strip_accents.
    """

    def __init__(self, tokens: Sequence[str], attrs: Sequence[int], scores: Sequence[float] | None,
                 *, specials: dict[str, int | None], flags: dict[str, bool],
                 model_name: str = "", pre: str = "", architecture: str = "",
                 token_to_id: dict[str, int] | None = None,
                 find_texts: Callable[[Sequence[str]], dict[str, int]] | None = None) -> None:
        """`token_to_id` is built from `tokens` when first asked for if not given; until
        then `find_texts` (which texts of a list are tokens: {text: id}), if given, answers
        the look-ups by name made here (a loader that can look texts up without the dict)."""
        # a list, or a sequence decoded on access (a GGUF's LazyStrings): then the list is
        # made when first asked for, and loading reads only the few texts it needs
        self._tokens: list[str] | None = tokens if isinstance(tokens, list) else None
        self._texts: Sequence[str] = tokens
        self.attrs = attrs if isinstance(attrs, array) else array("H", attrs)
        self.scores = scores
        self.specials = specials
        self.flags = flags
        self._token_to_id = token_to_id
        self._find_texts = find_texts
        self._special_cache: list[int] | None = None
        self._finder: tuple | None = None  # _special_finder's, with the cache it was made for
        self._fix_attrs(model_name.lower(), pre, architecture)

    # ---- look-ups --------------------------------------------------------------------------
    @property
    def tokens(self) -> list[str]:
        """The token texts by id (made from an undecoded sequence on first use, in chunks)."""
        if self._tokens is None:
            self._tokens = list(self._texts)
            self._texts = self._tokens
        return self._tokens

    def text(self, token_id: int) -> str:
        """One token's text, without decoding all of them."""
        return self._texts[check_id(token_id, len(self._texts))]

    @property
    def token_to_id(self) -> dict[str, int]:
        """Text -> id (the last id wins for a repeated text, as std::map assignment)."""
        if self._token_to_id is None:  # in slices: a worker building it holds the GIL
            self._token_to_id = sliced_dict(self.tokens, range(len(self._texts)))
        return self._token_to_id

    def text_to_token(self, text: str) -> int | None:
        """llama_vocab::text_to_token: the id of the token spelled `text`, or None."""
        return self.token_to_id.get(text)

    def score(self, token_id: int) -> float:
        """The stored score of `token_id` (0.0 when the file has no scores)."""
        check_id(token_id, len(self._texts))
        return 0.0 if self.scores is None else float(self.scores[token_id])

    def __len__(self) -> int:
        return len(self._texts)

    # ---- attributes (llama_vocab::impl::load) ----------------------------------------------
    def _ids_of(self, texts: Sequence[str]) -> dict[str, int]:
        """{text: id} for those of `texts` that are tokens."""
        if self._token_to_id is None and self._find_texts is not None:
            return self._find_texts(texts)
        ids = self.token_to_id
        return {t: ids[t] for t in texts if t in ids}

    def _set(self, ids: dict[str, int], text: str, bit: int, value: bool = True) -> None:
        i = ids.get(text)
        if i is not None:
            self.attrs[i] = self.attrs[i] | bit if value else self.attrs[i] & ~bit

    def _fix_attrs(self, model_name: str, pre: str, architecture: str) -> None:
        """The by-name attribute changes llama.cpp makes after reading the token types."""
        ids = self._ids_of(NAMED_TEXTS)
        present = [t for t in EOG_TEXTS if t in ids]
        for key, texts in FIM_TEXTS.items():
            if self.specials.get(key) is None:
                present += [t for t in texts if t in ids]
        for text in present:
            self._set(ids, text, ATTR_CONTROL)
        for i in self._with_bits(ATTR_CONTROL):
            if "unused" in self.text(i):
                self.attrs[i] |= ATTR_UNUSED
        for text in ALWAYS_USER_DEFINED:
            if text in ids:
                self.attrs[ids[text]] = ATTR_USER_DEFINED
        self._harmony_workarounds(ids)
        self._special_cache = self._build_special_cache()
        self._strip_flags(ids, model_name, pre, architecture)

    def _harmony_workarounds(self, ids: dict[str, int]) -> None:
        """o200k_harmony / solar-open keep "<|end|>" out of EOG (then USER_DEFINED);
        gemma4 / paddleocr keep "</s>" out (then NORMAL)."""
        if "<|end|>" in ids and (("<|return|>" in ids and "<|call|>" in ids)
                                 or ("<|calls|>" in ids and "<|flush|>" in ids)):
            self.attrs[ids["<|end|>"]] = ATTR_USER_DEFINED
        if "<|tool_response>" in ids and "</s>" in ids:
            self.attrs[ids["</s>"]] = ATTR_NORMAL

    def _with_bits(self, bits: int) -> list[int]:
        """Ids whose attributes have any of `bits` (vectorized: vocabularies run to 262k)."""
        import numpy as np

        attrs = np.frombuffer(self.attrs, dtype=np.uint16)
        return np.flatnonzero(attrs & bits).tolist()

    def _build_special_cache(self) -> list[int]:
        """CONTROL/USER_DEFINED/UNKNOWN ids, longest text first (ties in id order)."""
        special = self._with_bits(SPECIAL_ATTRS)
        special.sort(key=lambda i: -len(self.text(i).encode("utf-8", "surrogateescape")))
        return special

    def _strip_flags(self, ids: dict[str, int], model_name: str, pre: str,
                     architecture: str) -> None:
        """Per-model LSTRIP/RSTRIP, as llama.cpp sets them by name."""
        if (any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code"))
                or any(s in architecture for s in ("nomic-bert-moe", "jina-bert-v3"))):
            self._set(ids, "<mask>", ATTR_LSTRIP)
        elif "phi-3" in model_name or "phi3" in model_name:
            for i in self._special_cache:
                self.attrs[i] |= ATTR_RSTRIP
            self._set(ids, "</s>", ATTR_RSTRIP)
            for text in ("<unk>", "<s>", "<|endoftext|>"):
                self._set(ids, text, ATTR_RSTRIP, False)
        elif "modern-bert" in model_name:
            self._set(ids, "[MASK]", ATTR_LSTRIP)

    def token_type(self, token_id: int) -> str:
        attr = self.attrs[check_id(token_id, len(self._texts))]
        return next((name for bit, name in ATTR_NAMES if attr & bit), "normal")

    # ---- tokenizer_st_partition ------------------------------------------------------------
    def partition(self, text: str, parse_special: bool) -> list[tuple[int | None, int, int]]:
        """Raw-text fragments (None, start, end) and special tokens (id, start, end).

        >>> v = LlamaVocab(["a", "<s>"], [4, 8], None, specials={}, flags={})
        >>> v.partition("x<s>y", True), v.partition("x<s>y", False)
        ([(None, 0, 1), (1, 1, 4), (None, 4, 5)], [(None, 0, 5)])
        """
        parts: list[tuple[int | None, int, int]] = [(None, 0, len(text))] if text else []
        present = self._present_specials(text) if parts else set()
        for token_id in self._special_cache or ():
            if token_id not in present:  # its text is nowhere in `text`: nothing to cut
                continue
            attr = self.attrs[token_id]
            if not parse_special and attr & (ATTR_CONTROL | ATTR_UNKNOWN):
                continue
            needle = self.tokens[token_id]
            if not any(kind is None and text.find(needle, s, e) >= 0 for kind, s, e in parts):
                continue
            out: list[tuple[int | None, int, int]] = []
            for part in parts:
                if part[0] is not None:
                    out.append(part)
                else:
                    out.extend(self._cut(text, part[1], part[2], token_id, needle, attr))
            parts = out
        return parts

    def _present_specials(self, text: str) -> set[int]:
        """Ids of the special tokens whose text occurs somewhere in `text`, in one scan.

        Testing each of a vocabulary's special texts against the whole text costs a pass per
        token (256 for Llama 3, thousands for Gemma). One regex, a trie of the texts, finds
        at each position where some text starts the longest one starting there; every text
        that is a prefix of it starts there too (`_special_finder`). A text occurs iff it is
        one of those at its own start, so the set is exact, overlaps and all.
        """
        finder = self._special_finder()
        if finder is None:
            return set(self._special_cache or ())
        pattern, below = finder
        present: set[int] = set()
        search = pattern.search
        found = search(text)
        while found is not None:
            present.update(below[found.group()])
            found = search(text, found.start() + 1)
        return present

    def _special_finder(self) -> tuple[re.Pattern, dict[str, list[int]]] | None:
        """(the trie regex of the special texts, text -> ids of it and of every special text
        that is a prefix of it), for the current special cache (built on first use); None
        for texts too long or too many to make a regex of (a hostile file): no filter then."""
        cache = self._special_cache or []
        if self._finder is None or self._finder[0] is not cache:
            ids_of: dict[str, list[int]] = {}
            for token_id in cache:
                text = self.tokens[token_id]
                if text:
                    ids_of.setdefault(text, []).append(token_id)
            finder = None
            if (max(map(len, ids_of), default=0) <= MAX_SPECIAL_CHARS
                    and sum(map(len, ids_of)) <= MAX_SPECIAL_TOTAL):
                lengths = sorted({len(t) for t in ids_of})
                below = {t: [i for n in lengths if n <= len(t) for i in ids_of.get(t[:n], ())]
                         for t in ids_of}
                finder = (re.compile(_trie_regex(list(ids_of)) or "(?!)"), below)
            self._finder = (cache, finder)
        return self._finder[1]

    @staticmethod
    def _cut(text: str, start: int, end: int, token_id: int, needle: str,
             attr: int) -> list[tuple[int | None, int, int]]:
        """All occurrences of one special token in one raw fragment, left to right."""
        out: list[tuple[int | None, int, int]] = []
        while True:
            at = text.find(needle, start, end)
            if at < 0:
                if start < end:
                    out.append((None, start, end))
                return out
            left_end = at
            if attr & ATTR_LSTRIP:
                while left_end > start and text[left_end - 1] in C_SPACE:
                    left_end -= 1
            if left_end > start:
                out.append((None, start, left_end))
            out.append((token_id, at, at + len(needle)))
            start = at + len(needle)
            if attr & ATTR_RSTRIP:
                while start < end and text[start] in C_SPACE:
                    start += 1

    # ---- detokenization --------------------------------------------------------------------
    def piece_bytes(self, token_id: int, text_bytes: bytes, special: bool) -> bytes:
        """token_to_piece's bytes for the common cases; `text_bytes` is the family's decoding
        of a NORMAL token."""
        attr = self.attrs[token_id]
        if attr & (ATTR_UNKNOWN | ATTR_CONTROL):
            return self.tokens[token_id].encode("utf-8", "surrogateescape") if special else b""
        if attr & ATTR_USER_DEFINED:
            return self.tokens[token_id].encode("utf-8", "surrogateescape")
        if attr & ATTR_NORMAL:
            return text_bytes
        if attr & ATTR_BYTE:
            return bytes([int(self.tokens[token_id][3:5], 16)])
        return b""


def clean_spaces(text: bytes) -> bytes:
    """llama.cpp's clean_up_tokenization_spaces: three in-place passes over the bytes.

    >>> clean_spaces(b"Hello , world ! I 'm here . ' x ' y")
    b"Hello, world! I'm here.'x'y"
    """
    t = bytearray(text)
    for step in (_pass_punct, _pass_quote, _pass_contraction):
        t = t[:step(t)]
    return bytes(t)


def _pass_punct(t: bytearray) -> int:
    """" ?", " !", " .", " ," lose the space. Returns the new length (t compacted)."""
    total = 1 if t else 0
    for i in range(1, len(t)):
        x = t[i]
        if t[i - 1] == 0x20 and x in b"?!.,":
            total -= 1
        t[total] = x
        total += 1
    return total


def _pass_quote(t: bytearray) -> int:
    """A lone apostrophe between spaces loses both spaces (the C code NULs the next one)."""
    n, total, i = len(t), (1 if t else 0), 1
    while i < n:
        x = t[i]
        if x == 0x27 and i + 1 < n and t[i - 1] == 0x20 and t[i + 1] == 0x20:
            total -= 1
            i += 1
            t[i] = 0
        t[total] = x
        total += 1
        i += 1
    return total


def _pass_contraction(t: bytearray) -> int:
    """" 's", " 'm", " 're", " 've" lose the space (" 't", " 'd", " 'll" keep it)."""
    n, total = len(t), (1 if t else 0)
    for i in range(1, n):
        x = t[i]
        if t[i - 1] == 0x20 and x == 0x27 and i + 1 < n:
            x1 = t[i + 1]
            if x1 in b"sm" or (x1 not in b"td" and i + 2 < n
                               and (x1, t[i + 2]) in ((0x72, 0x65), (0x76, 0x65))):
                total -= 1
        t[total] = x
        total += 1
    return total


class LlamaTokenizer(Tokenizer):
    """Base of the GGUF tokenizers: partition, per-fragment sessions, spans, detokenize.

    Subclasses implement `_fragment_spans(text, start, end, after_special)`: the tokens of
    one raw fragment as (id, char start, char end) in `text`, and `_normal_bytes(id)`.
    """

    kind = "llama.cpp tokenizer"

    def __init__(self, vocab: LlamaVocab, *, name: str = "", path: str | None = None) -> None:
        added = [AddedToken(vocab.text(i), i, special=not vocab.attrs[i] & ATTR_USER_DEFINED)
                 for i in vocab._special_cache or ()]
        super().__init__(name=name, path=path, added_tokens=added)
        self.vocab = vocab
        self._token_bytes: dict[int, bytes] = {}
        specials = vocab.specials
        self.bos_id, self.eos_id = specials.get("bos"), specials.get("eos")
        self.unk_id, self.pad_id = specials.get("unk"), specials.get("pad")

    # ---- vocabulary ----------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def piece(self, token_id: int) -> str:
        return self.vocab.text(token_id)

    def id_of(self, piece: str) -> int | None:
        return self.vocab.text_to_token(piece)

    def token_type(self, token_id: int) -> str:
        return self.vocab.token_type(token_id)

    def token_score(self, token_id: int) -> float | None:
        return None if self.vocab.scores is None else self.vocab.score(token_id)

    def token_bytes(self, token_id: int) -> bytes:
        """llama_token_to_piece(special=true): what the token prints as, remembered per id
        (`segment`, `decode_bytes` and the live encoder ask once per token: ~8 us uncached)."""
        data = self._token_bytes.get(token_id)
        if data is None:
            check_id(token_id, len(self.vocab))
            data = self.vocab.piece_bytes(token_id, self._normal_bytes(token_id), True)
            self._token_bytes[token_id] = data
        return data

    @abstractmethod
    def _normal_bytes(self, token_id: int) -> bytes:
        """The bytes a NORMAL token decodes to."""

    # ---- tokenizing ----------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = False,
                 parse_special: bool = False) -> list[int]:
        """llama_tokenize(text, add_special, parse_special), id for id."""
        ids: list[int] = []
        for special, part in self._parts(text, parse_special, self._fragment_ids):
            if special:
                ids.append(part[0])
            else:
                ids += part
        if add_special:
            head, tail = self._bos_eos()
            return head + ids + tail
        return ids

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        """llama.cpp with add_special=False (no BOS/EOS) and parse_special=`special`."""
        return self.tokenize(text, parse_special=special)

    def _encode_ordinary(self, text: str) -> list[int]:
        return self.tokenize(text)

    def _spans(self, text: str, add_special: bool,
               parse_special: bool) -> list[tuple[int, int, int, bool]]:
        """(id, char start, char end, special) for every token."""
        out: list[tuple[int, int, int, bool]] = []
        for special, part in self._parts(text, parse_special, self._fragment_spans):
            if special:
                out.append((*part, True))
            else:
                out.extend((i, s, e, False) for i, s, e in part)
        if add_special:  # BOS/EOS, zero-width
            head, tail = self._bos_eos()
            n = len(text)
            out = [(i, 0, 0, True) for i in head] + out + [(i, n, n, True) for i in tail]
        return out

    def _parts(self, text: str, parse_special: bool, fragment: Callable):
        """(True, (id, start, end)) per special token and (False, fragment(text, start, end,
        after_special)) per raw fragment, in order; after_special is llama.cpp's
        is_prev_special (a space prefix for the first text)."""
        after_special = True
        for kind, start, end in self.vocab.partition(text, parse_special):
            if kind is None:
                yield False, fragment(text, start, end, after_special)
            else:
                yield True, (kind, start, end)
            after_special = kind is not None

    def _bos_eos(self) -> tuple[list[int], list[int]]:
        """The BOS and EOS ids llama.cpp adds for this family (each list empty or one id)."""
        flags, specials = self.vocab.flags, self.vocab.specials
        head = [specials["bos"]] if flags.get("add_bos") and specials.get("bos") is not None else []
        tail = [specials["eos"]] if flags.get("add_eos") and specials.get("eos") is not None else []
        return head, tail

    @abstractmethod
    def _fragment_spans(self, text: str, start: int, end: int,
                        after_special: bool) -> list[tuple[int, int, int]]:
        """Tokens of the raw fragment ``text[start:end]`` with spans in `text`."""

    def _fragment_ids(self, text: str, start: int, end: int, after_special: bool) -> list[int]:
        """The ids of `_fragment_spans` (a subclass may find them without the spans)."""
        return [i for i, _, _ in self._fragment_spans(text, start, end, after_special)]

    def _fragment_columns(self, text: str, start: int, end: int, after_special: bool):
        """`_fragment_spans` as (ids, starts, ends) sequences (a subclass may find them
        without a tuple per token)."""
        spans = self._fragment_spans(text, start, end, after_special)
        if not spans:
            return [], [], []
        ids, starts, ends = zip(*spans)
        return list(ids), starts, ends

    def segment_columns(self, text: str, *, special: bool = False):
        """`segment(text, special=special)` as numpy columns (ids, starts, ends, flags: 1
        partial, 2 special), token for token, without a Token object per token (a 1 MB
        document has ~300k tokens); None when the spans need `tile_spans_reference`."""
        import numpy as np

        columns: list[tuple] = []  # (ids, starts, ends) per part
        special_at: list[int] = []  # token indices of the partition's tokens
        n = 0
        for is_special, part in self._parts(text, special, self._fragment_columns):
            if is_special:
                special_at.append(n)
                part = ((part[0],), (part[1],), (part[2],))
            columns.append(part)
            n += len(part[0])
        ids, starts, ends = ([np.asarray(c[k], dtype=np.int64) for c in columns] for k in range(3))
        none = np.zeros(0, dtype=np.int64)
        tiled = tile_columns(np.concatenate(starts) if columns else none,
                             np.concatenate(ends) if columns else none, len(text))
        if tiled is None:
            return None
        first, last, partial = tiled
        flags = partial.astype(np.uint8)
        flags[special_at] |= 2
        ids = np.concatenate(ids).astype(np.int32) if columns else none.astype(np.int32)
        return ids, first.astype(np.int32), last.astype(np.int32), flags

    def segment(self, text: str, *, special: bool = False) -> list[Token]:
        spans = self._spans(text, False, special)
        tiled = tile_spans([(s, e) for _, s, e, _ in spans], len(text))
        return [Token(i, self.vocab.tokens[i], self.token_bytes(i), s, e, partial, sp)
                for (i, _, _, sp), (s, e, partial) in zip(spans, tiled)]

    # ---- decoding ------------------------------------------------------------------------
    def detokenize_bytes(self, ids: Iterable[int], *, remove_special: bool = False,
                         unparse_special: bool = False) -> bytes:
        """llama_detokenize's bytes, clean-up of spaces included."""
        ids = list(ids)
        vocab, flags = self.vocab, self.vocab.flags
        remove_space = flags.get("add_space_prefix", False)
        if remove_special and flags.get("add_bos") and ids and ids[0] == vocab.specials.get("bos"):
            remove_space = False
            ids = ids[1:]
        if remove_special and flags.get("add_eos") and ids and ids[-1] == vocab.specials.get("eos"):
            ids = ids[:-1]
        parts = []
        for i in ids:
            piece = vocab.piece_bytes(i, self._normal_bytes(i), unparse_special)
            if remove_space and piece.startswith(b" "):
                piece = piece[1:]
            remove_space = False
            parts.append(piece)
        data = b"".join(parts)
        return clean_spaces(data) if flags.get("clean_spaces") else data

    def detokenize(self, ids: Iterable[int], *, remove_special: bool = False,
                   unparse_special: bool = False) -> str:
        """llama_detokenize(ids, remove_special, unparse_special) as text."""
        return self.detokenize_bytes(ids, remove_special=remove_special,
                                     unparse_special=unparse_special).decode("utf-8", "replace")

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """Special tokens printed, the prefix space removed, no clean-up (a round trip)."""
        ids = list(ids)
        data = b"".join(map(self.token_bytes, ids))
        if self.vocab.flags.get("add_space_prefix") and data.startswith(b" "):
            data = data[1:]
        return data


def char_spans(text: str, start: int, byte_spans: list[tuple[int, int, int]],
               data: bytes) -> list[tuple[int, int, int]]:
    """(id, byte start, byte end) inside ``text[start:...]``'s UTF-8 -> character spans."""
    to_char = byte_to_char_offsets(data.decode("utf-8", "surrogatepass")) if not data.isascii() else None
    out = []
    for token_id, b, e in byte_spans:
        if to_char is None:
            out.append((token_id, start + b, start + e))
        else:
            cs = to_char[b] if b < len(to_char) - 1 else to_char[-1]
            ce = to_char[e - 1] + 1 if e > 0 else 0
            out.append((token_id, start + cs, start + max(cs, ce)))
    return out


#: special texts a regex is made of (`_special_finder`): the longest (each character a level
#: of recursion) and all together; past them partition tests each text on its own
MAX_SPECIAL_CHARS = 256
MAX_SPECIAL_TOTAL = 1 << 20


def _trie_regex(texts: list[str]) -> str:
    """A regex matching exactly `texts`, the longest one where several match at a position:
    a trie, each node's continuations tried before ending there (`?` is greedy).

    >>> import re
    >>> rx = re.compile(_trie_regex(["<s>", "<s", "</s>", "a+"]))
    >>> [m.group() for m in rx.finditer("<s> <s </s> a+")]
    ['<s>', '<s', '</s>', 'a+']
    """
    trie: dict = {}
    for text in texts:
        node = trie
        for ch in text:
            node = node.setdefault(ch, {})
        node[""] = True  # a text ends here
    return _node_regex(trie)


def _node_regex(node: dict) -> str:
    ends = "" in node
    branches = [re.escape(ch) + _node_regex(child) for ch, child in node.items() if ch != ""]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if ends else body

