"""SentencePiece tokenization, exactly as the `sentencepiece` library does it.

The pipeline (sentencepiece_processor.cc ``Encode``):

1. **normalize** (normalizer.cc): per input prefix, a user-defined piece is kept verbatim,
   else the precompiled charsmap's longest match is substituted (NFKC and friends), else one
   UTF-8 character is kept (a malformed byte becomes U+FFFD). Leading, trailing and repeated
   spaces are dropped (``remove_extra_whitespaces``), a space is prepended
   (``add_dummy_prefix``) and spaces become ``▁`` (``escape_whitespaces``). Every normalized
   byte remembers the original byte it came from (``norm_to_orig``).
2. **segment** the normalized bytes with the model:
   *unigram* (unigram_model.cc ``EncodeOptimized``): Viterbi over the pieces that prefix each
   position; a character with no single-character piece costs ``min_score - 10``; a
   user-defined piece scores ``len * max_score - 0.1``; scores add in float32 like the C++.
   *BPE* (bpe_model.cc ``Encode``): start from characters (user-defined pieces whole and
   frozen), repeatedly merge the adjacent pair whose concatenation is the piece with the
   highest score (leftmost on ties); merged UNUSED pieces are split back.
3. **populate**: an unknown piece becomes its UTF-8 bytes as ``<0xNN>`` pieces when
   ``byte_fallback`` is on, otherwise runs of unknown pieces collapse into one ``<unk>``.

All positions are byte offsets into UTF-8, as in the C++; `segment` maps them back to
character offsets of the caller's string.
"""
from __future__ import annotations

import codecs
import heapq
import math
import re
import struct
import weakref
from array import array
from itertools import accumulate, chain, repeat
from operator import ge, itemgetter
from typing import Callable, Hashable, Iterable, Iterator, Sequence

from forma_gui.core.charsmap import CharsMap
from forma_gui.core.slices import cut_slices, sliced_array
from forma_gui.core.tokenizer import AddedToken, Alternative, MergeStep, Token, Tokenizer, check_id
from forma_gui.core.unigram_paths import ranked_cuts

SPACE = "\u2581"                     # ▁ LOWER ONE EIGHTH BLOCK, the whitespace meta symbol
SPACE_BYTES = SPACE.encode("utf-8")  # b"\xe2\x96\x81"
REPLACEMENT = "\ufffd".encode("utf-8")
DEFAULT_UNK_SURFACE = " \u2047 "     # " ⁇ ", TrainerSpec.unk_surface's default
UNK_PENALTY = 10.0                   # unigram_model.cc kUnkPenalty
FLT_MAX = 3.4028234663852886e38

#: ModelProto.SentencePiece.Type -> the name Tokenizer.token_type uses
PIECE_TYPES = {1: "normal", 2: "unknown", 3: "control", 4: "user-defined", 5: "unused",
               6: "byte"}
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
#: piece types that the models may produce (ModelInterface::InitializePieces `pieces_`)
MODEL_PIECE_TYPES = (NORMAL, USER_DEFINED, UNUSED)

#: UTF-8 sequence length by the lead byte's high nibble (string_util.h OneCharLen)
ONE_CHAR_LEN = bytes((1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4))

_f32 = array("f", [0.0])


def f32(x: float) -> float:
    """Round a double to the nearest float32, as a C++ `float` assignment does.

    >>> f32(0.1)
    0.10000000149011612
    """
    _f32[0] = x
    return _f32[0]


def byte_piece(byte: int) -> str:
    """The byte-fallback piece of a byte.

    >>> byte_piece(10)
    '<0x0A>'
    """
    return f"<0x{byte:02X}>"


def piece_to_byte(piece: str) -> int | None:
    """The byte a ``<0xNN>`` piece stands for, or None (sentencepiece's PieceToByte).

    >>> piece_to_byte("<0xE2>"), piece_to_byte("<0xe2>"), piece_to_byte("e2")
    (226, None, None)
    """
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        hexpart = piece[3:5]
        if all(c in "0123456789ABCDEF" for c in hexpart):
            return int(hexpart, 16)
    return None


def indices_of(types: bytes | bytearray, value: int) -> list[int]:
    """Positions of `value` in a byte string of piece types (fast when there are few).

    >>> indices_of(bytes([1, 3, 1, 3]), 3)
    [1, 3]
    """
    out, i = [], types.find(value)
    while i >= 0:
        out.append(i)
        i = types.find(value, i + 1)
    return out


def _sp_replace(error: UnicodeDecodeError) -> tuple[str, int]:
    """One U+FFFD per malformed byte, as sentencepiece's decoder does (Python's 'replace'
    folds a truncated sequence into one U+FFFD)."""
    return "\ufffd", error.start + 1


codecs.register_error("forma-sentencepiece", _sp_replace)


def decode_utf8_per_byte(data: bytes) -> str:
    """UTF-8 -> str with one U+FFFD per malformed byte.

    >>> decode_utf8_per_byte(b"\\xe2\\x82 \\xe2\\x82\\xac")
    '\\ufffd\\ufffd €'
    """
    return data.decode("utf-8", "forma-sentencepiece")


# ---- normalization ------------------------------------------------------------------------

class PrefixMatcher:
    """Longest match of user-defined pieces at a position (normalizer.cc PrefixMatcher).

    >>> PrefixMatcher([b"<a>", b"<ab>"]).match(b"x<ab>", 1)
    4
    """

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self.pieces = {p for p in pieces if p}
        self.lengths = sorted({len(p) for p in self.pieces}, reverse=True)
        self.first = frozenset(p[0] for p in self.pieces)

    def match(self, data: bytes, pos: int) -> int:
        """Length of the longest piece that starts at `pos`, or 0."""
        if data[pos] not in self.first:
            return 0
        for length in self.lengths:
            if data[pos:pos + length] in self.pieces:
                return length
        return 0

    def __bool__(self) -> bool:
        return bool(self.pieces)


class Normalizer:
    """sentencepiece's Normalizer: charsmap, whitespace handling and the byte alignment."""

    def __init__(self, charsmap: CharsMap | None = None, *, name: str = "",
                 add_dummy_prefix: bool = True, remove_extra_whitespaces: bool = True,
                 escape_whitespaces: bool = True, treat_whitespace_as_suffix: bool = False,
                 matcher: PrefixMatcher | None = None) -> None:
        self.charsmap = charsmap if charsmap else None
        self.name = name
        self.add_dummy_prefix = add_dummy_prefix
        self.remove_extra_whitespaces = remove_extra_whitespaces
        self.escape_whitespaces = escape_whitespaces
        self.treat_whitespace_as_suffix = treat_whitespace_as_suffix
        self.matcher = matcher if matcher else None

    def normalize_prefix(self, data: bytes, pos: int) -> tuple[bytes, int]:
        """(normalized bytes, input bytes consumed) for the prefix of ``data[pos:]``."""
        if self.matcher is not None:
            length = self.matcher.match(data, pos)
            if length:
                return data[pos:pos + length], length
        if self.charsmap is not None and self.charsmap.can_start(data[pos]):
            length, replacement = self.charsmap.longest_prefix(data, pos)
            if length:
                return replacement, length
        length = _valid_char_len(data, pos)
        if not length:
            return REPLACEMENT, 1
        return data[pos:pos + length], length

    def normalize(self, data: bytes, *, fast: bool = True) -> tuple[bytes, list[int]]:
        """(normalized, norm_to_orig): byte i of the result comes from input byte
        ``norm_to_orig[i]``; the list has one extra entry for the end. ``fast=False`` is
        the plain transcription of the C++ loop (the reference the fast path is tested on).

        >>> Normalizer().normalize(b"  a  b ")
        (b'\\xe2\\x96\\x81a\\xe2\\x96\\x81b', [2, 2, 2, 2, 3, 3, 3, 5, 6])
        """
        normalized, n2o = self.normalize_offsets(data, fast=fast)
        return normalized, n2o.tolist()

    def normalize_offsets(self, data: bytes, *, fast: bool = True, head: bool = True,
                          tail: bool = True) -> tuple[bytes, array]:
        """`normalize` with norm_to_orig as an ``array("q")``: the tokenizer only looks up
        the offsets of token boundaries, so a megabyte of text needs no million int
        objects.

        ``head=False`` / ``tail=False`` normalize `data` as a middle part of a longer text
        (core.incremental re-normalizes a window around an edit): no leading blanks dropped
        and no dummy prefix, the loop starting after a character that was no blank; no
        trailing blanks dropped and no dummy suffix, the alignment ending at ``len(data)``.
        Where the text splits into two parts that no normalizer step crosses (see
        `EditCuts`), its result is the two parts' results joined.

        >>> Normalizer().normalize_offsets(b" a  ", head=False, tail=False)[0].decode()
        '▁a▁'
        """
        n = len(data)
        pos = 0
        if head and self.remove_extra_whitespaces:
            while pos < n:
                piece, length = self.normalize_prefix(data, pos)
                if piece != b" ":
                    break
                pos += length
        if pos == n:
            return b"", array("q", [pos])
        out = bytearray()
        n2o = array("q")
        space = SPACE_BYTES if self.escape_whitespaces else b" "
        if head and self.add_dummy_prefix and not self.treat_whitespace_as_suffix:
            out += space
            n2o.extend([pos] * len(space))
        self._body(data, pos, out, n2o, fast, head and self.remove_extra_whitespaces)
        consumed = n
        if tail and self.remove_extra_whitespaces:
            while out.endswith(space):
                cut = len(out) - len(space)
                consumed = n2o[cut]
                del out[cut:], n2o[cut:]
        if tail and self.add_dummy_prefix and self.treat_whitespace_as_suffix:
            out += space
            n2o.extend([consumed] * len(space))
        n2o.append(consumed)
        return bytes(out), n2o

    def _body(self, data: bytes, pos: int, out: bytearray, n2o: array, fast: bool,
              is_prev_space: bool) -> None:
        """The main loop of Normalizer::Normalize after the leading spaces (is_prev_space:
        its state there, true at a text's start when extra whitespace is removed). The fast
        path copies whole runs of characters whose normalization needs no look behind them
        (`runs`) in C-level steps; the rest goes one prefix at a time."""
        n = len(data)
        remove = self.remove_extra_whitespaces
        escape = self.escape_whitespaces
        runs = self.runs() if fast else None
        while pos < n:
            if runs is not None:
                end = runs.match(data, pos)
                if end > pos:
                    is_prev_space = runs.copy(data, pos, end, out, n2o, is_prev_space)
                    pos = end
                    continue
            piece, length = self.normalize_prefix(data, pos)
            if is_prev_space:
                piece = piece.lstrip(b" ")
            if piece:
                is_prev_space = piece.endswith(b" ")
                if escape:
                    piece = piece.replace(b" ", SPACE_BYTES)
                out += piece
                n2o.extend([pos] * len(piece))
            pos += length
            if not remove:
                is_prev_space = False

    def runs(self) -> RunTables:
        """The fast path's tables for the current charsmap, matcher and space options."""
        key = (self.charsmap, self.matcher, self.remove_extra_whitespaces,
               self.escape_whitespaces)
        cached = getattr(self, "_runs", None)
        if cached is None or cached[0] != key:  # compares the charsmap and matcher by identity
            cached = self._runs = (key, RunTables(self))
        return cached[1]


PLAIN, BLANK, MAPPED = 0, 1, 2  # how a run copies a character: as is, as a space, replaced

#: UTF-8's well-formed sequences (Unicode Table 3-7): lead bytes, the second byte's range,
#: length; later bytes are 80..BF. Overlongs, surrogates and code points past U+10FFFF are
#: outside, so a run never holds a byte that normalizes to U+FFFD.
UTF8_FORMS = ((0x00, 0x7F, 0, 0, 1), (0xC2, 0xDF, 0x80, 0xBF, 2), (0xE0, 0xE0, 0xA0, 0xBF, 3),
              (0xE1, 0xEC, 0x80, 0xBF, 3), (0xED, 0xED, 0x80, 0x9F, 3),
              (0xEE, 0xEF, 0x80, 0xBF, 3), (0xF0, 0xF0, 0x90, 0xBF, 4),
              (0xF1, 0xF3, 0x80, 0xBF, 4), (0xF4, 0xF4, 0x80, 0x8F, 4))
_SECOND = {lead: (lo, hi) for first, last, lo, hi, size in UTF8_FORMS if size > 1
           for lead in range(first, last + 1)}


class CharKinds:
    """Every well-formed character sorted by what `normalize_prefix` makes of it, walking
    the charsmap trie and the user-defined pieces along UTF-8's forms: PLAIN (itself),
    BLANK (one space) or MAPPED (a replacement). Characters that a piece or a key ending
    inside them starts, and, when extra whitespace is removed, those mapped to nothing or
    to text with a space at either end (which depends on the character before), are left
    out: they stay on the slow path. A character that starts a user-defined piece is only
    in a run where the piece does not follow (a lookahead).

    A charsmap key longer than one character (a letter and a combining mark, two Hangul
    jamo) starts with a character `extends` holds. Such keys are kept out of runs by their
    second character, which gets a lookbehind on the characters it may continue
    (`before`); a run's last character is given back when a key from it reaches past the
    run (`RunTables.match`). So a common letter costs a run nothing, and only the rare
    combining marks are checked. A character from which a key ends inside the next
    character (`hard`; none in the real charsmaps) keeps a lookahead on the bytes that
    may follow it instead.

    `entries` are ``(prefix, last bytes, tail regex, look-around, kind)``: the characters
    ``prefix + [last] + tail``; `replace` maps a MAPPED (or multi-byte BLANK) character to
    its output bytes (spaces escaped) and whether it is a blank.
    """

    def __init__(self, normalizer: Normalizer) -> None:
        self.charsmap = normalizer.charsmap
        matcher = normalizer.matcher
        self.pieces: set[bytes] = matcher.pieces if matcher is not None else set()
        self.heads = _next_bytes(self.pieces)  # a proper prefix of a piece -> bytes after it
        self.remove = normalizer.remove_extra_whitespaces
        self.escape = normalizer.escape_whitespaces
        self.space = SPACE_BYTES if self.escape else b" "
        self.entries: list[tuple[bytes, bytes, bytes, bytes, int]] = []
        self.replace: dict[bytes, tuple[bytes, bool]] = {}
        extensions = _extensions(self.charsmap) if self.charsmap is not None else ({}, {}, set())
        self.extends, self.before, self.hard = extensions
        self.forced = _next_bytes(self.before)  # prefixes of characters with a lookbehind
        root = 0 if self.charsmap is not None else -1
        for first, last, _, _, size in UTF8_FORMS:
            self._walk(b"", root, size, first, last)

    def _walk(self, prefix: bytes, node: int, size: int, lo: int, hi: int) -> None:
        """Sort the `size`-byte characters that start with `prefix` and then a byte in
        lo..hi; `node` is the charsmap trie's node after `prefix` (-1: none)."""
        children = dict(self.charsmap.children(node)) if node >= 0 else {}
        special = (*children, *self.heads.get(prefix, b""), *self.forced.get(prefix, b""),
                   *(b" " if not prefix else b""))
        starts = {b for b in special if lo <= b <= hi}
        free = bytes(b for b in range(lo, hi + 1) if b not in starts)
        if free:  # nothing starts here: every character below is plain, in any context
            self.entries.append((prefix, free, _tail(prefix, free[0], size), b"", PLAIN))
        for b in sorted(starts):
            key = prefix + bytes((b,))
            child = children.get(b, -1)
            if len(key) == size:
                self._char(key, child)
            elif key not in self.pieces and (child < 0 or self.charsmap.value(child) is None):
                self._walk(key, child, size, *_SECOND.get(key[0], (0x80, 0xBF)))

    def _char(self, char: bytes, node: int) -> None:
        """Sort one character that something starts with (or the space)."""
        if char in self.pieces:
            return
        value = self.charsmap.value(node) if node >= 0 else None
        norm = char if value is None else value
        if norm == b" ":
            kind = BLANK
        elif norm == char:
            kind = PLAIN
        elif not self.remove or (norm and not norm.startswith(b" ") and not norm.endswith(b" ")):
            kind = MAPPED
        else:
            return
        if kind == MAPPED or (kind == BLANK and len(char) > 1):
            output = norm.replace(b" ", SPACE_BYTES) if self.escape else norm
            self.replace[char] = (self.space, True) if kind == BLANK else (output, False)
        follow = self.charsmap.followers(node) if char in self.hard else b""
        rests = [p[len(char):] for p in self.pieces
                 if len(p) > len(char) and p.startswith(char)] if char in self.heads else []
        look = _lookbehind(self.before.get(char, ()), len(char)) + _lookahead(follow, rests)
        self.entries.append((char[:-1], char[-1:], b"", look, kind))


_EXTENSIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _extensions(charsmap: CharsMap) -> tuple[dict[bytes, int], dict[bytes, set[bytes]],
                                              set[bytes]]:
    """`CharKinds`' (extends, before, hard) for a charsmap, from its keys longer than one
    character; computed once per charsmap."""
    found = _EXTENSIONS.get(charsmap)
    if found is None:
        extends: dict[bytes, int] = {}
        before: dict[bytes, set[bytes]] = {}
        hard: set[bytes] = set()
        for char, node, whole in _spelled(charsmap, 0, b"", 0):
            following = list(_spelled(charsmap, node, b"", 0)) if whole else []
            if not following:
                continue
            if not all(w for _, _, w in following):
                hard.add(char)
                continue
            extends[char] = node
            for after, _, _ in following:
                before.setdefault(after, set()).add(char)
        found = _EXTENSIONS[charsmap] = (extends, before, hard)
    return found


def _spelled(charsmap: CharsMap, node: int, prefix: bytes,
             size: int) -> Iterator[tuple[bytes, int, bool]]:
    """(bytes, node, whole) for each well-formed character the trie spells from `node` on
    (`prefix` of a `size`-byte one so far), and (its first bytes, node, False) where a key
    ends inside one."""
    if not prefix:
        lo, hi = 0x00, 0xF4
    else:
        lo, hi = _SECOND[prefix[0]] if len(prefix) == 1 else (0x80, 0xBF)
    for b, child in charsmap.children(node):
        if not lo <= b <= hi:
            continue
        length = size or (1 if b < 0x80 else ONE_CHAR_LEN[b >> 4] if b in _SECOND else 0)
        if not length:
            continue
        key = prefix + bytes((b,))
        if len(key) == length:
            yield key, child, True
        elif charsmap.units[child] & 0x100:  # a key ends inside the character
            yield key, child, False
        else:
            yield from _spelled(charsmap, child, key, length)


def _next_bytes(strings: Iterable[bytes]) -> dict[bytes, bytes]:
    """Each proper prefix of the strings -> the bytes that follow it in them.

    >>> _next_bytes([b"ab", b"ac"])
    {b'': b'aa', b'a': b'bc'}
    """
    out: dict[bytes, bytes] = {}
    for s in strings:
        for i in range(len(s)):
            out[s[:i]] = out.get(s[:i], b"") + s[i:i + 1]
    return out


def _tail(prefix: bytes, byte: int, size: int) -> bytes:
    """The regex for the rest of a `size`-byte character after ``prefix + byte``."""
    rest = size - len(prefix) - 1
    if not rest:
        return b""
    if not prefix:  # after a lead byte the second byte's range depends on the lead
        lo, hi = _SECOND[byte]
        second = b"[\\x%02x-\\x%02x]" % (lo, hi)
        return second + (b"[\\x80-\\xbf]{%d}" % (rest - 1) if rest > 1 else b"")
    return b"[\\x80-\\xbf]{%d}" % rest


def _lookbehind(before: Iterable[bytes], size: int) -> bytes:
    """``(?<!...)``, checked after a `size`-byte character: the byte before it is not the
    last byte of a character in `before` (coarser than the characters themselves, which
    only shortens runs; `RunTables.match` checks a run's end exactly)."""
    last = bytes({char[-1] for char in before})
    return b"(?<!%s[\\x00-\\xff]{%d})" % (_byte_class(last), size) if last else b""


def _lookahead(follow: bytes, rests: list[bytes]) -> bytes:
    """``(?!...)`` of the bytes that may extend a key and the rests of pieces, or b""."""
    parts = ([_byte_class(follow)] if follow else []) + [re.escape(r) for r in sorted(rests)]
    return b"(?!" + b"|".join(parts) + b")" if parts else b""


def _alternation(groups: dict[tuple[bytes, bytes, bytes], bytearray]) -> bytes:
    """One regex for ``{(prefix, tail, lookahead): last bytes}``, prefixes shared as a trie
    so that every alternative starts with a literal or a class (`re` skips those fast)."""
    tree: dict = {}
    for (prefix, tail, look), last in sorted(groups.items()):
        node = tree
        for b in prefix:
            node = node.setdefault(b, {})
        node.setdefault(None, []).append(_byte_class(bytes(last)) + tail + look)
    return _render(tree)[0]


def _render(node: dict) -> tuple[bytes, int]:
    """(regex, number of alternatives) of one `_alternation` trie node."""
    alternatives = list(node.get(None, []))
    for byte in sorted(b for b in node if b is not None):
        inner, count = _render(node[byte])
        alternatives.append(b"\\x%02x" % byte + (inner if count == 1 else b"(?:" + inner + b")"))
    return b"|".join(alternatives), len(alternatives)


class RunTables:
    """The fast path of `Normalizer.normalize`: `run` matches a run of `CharKinds`
    characters (each where its look-around holds), and `copy` writes a run's output and
    alignment: a PLAIN character is copied, a MAPPED one replaced, a BLANK one becomes one
    (escaped) space, dropped after a blank (or at the start, after a space) when extra
    whitespace is removed; all bytes of a character's output come from its first byte.
    Inside a run every look-around is known to hold, so `special` and `mapped` find the
    blanks and replaced characters by their bytes alone.
    """

    def __init__(self, normalizer: Normalizer) -> None:
        kinds = CharKinds(normalizer)
        self.remove, self.space, self.replace = kinds.remove, kinds.space, kinds.replace
        self.charsmap, self.extends = kinds.charsmap, kinds.extends
        groups: dict[tuple[bytes, bytes, bytes], bytearray] = {}
        for prefix, last, tail, look, kind in kinds.entries:
            groups.setdefault((prefix, tail, look), bytearray()).extend(last)
        # characters that are in a run whatever surrounds them, by form: each loops on its
        # own (a stretch of CJK costs one alternation, not one per character), its first
        # character outside the loop so that `re` can skip the alternative on one byte
        loops = [_byte_class(bytes(groups.pop(key))) + key[1] for key in sorted(groups)
                 if not key[0] and not key[2]]
        rest = _alternation(groups)
        body = b"|".join([b"%s(?:%s)*+" % (loop, loop) for loop in loops]
                         + ([rest] if rest else []))
        self.run = re.compile(b"(?:" + body + b")++" if body else b"(?!)")
        blanks = bytes(last[0] for prefix, last, _, _, kind in kinds.entries
                       if kind == BLANK and not prefix)
        self.blank_bytes = blanks
        self._blank_table = None  # numpy, made by the first long run
        mapped = _literals(self.replace)
        self.mapped = re.compile(mapped or b"(?!)")
        self.special = re.compile(b"(" + b"|".join(([_byte_class(blanks)] if blanks else [])
                                                   + ([mapped] if mapped else [])) + b")"
                                  if blanks or mapped else b"((?!))")

    def match(self, data: bytes, pos: int) -> int:
        """The end of the run at `pos` (`pos` when there is none). A run's last character
        is given back when a charsmap key from it reaches past the run."""
        run = self.run.match(data, pos)
        if run is None:
            return pos
        end = run.end()
        if end < len(data) and self.extends:
            start = end - 1
            while data[start] & 0xC0 == 0x80:
                start -= 1
            node = self.extends.get(data[start:end])
            if node is not None and self._reaches(data, end, node):
                return start
        return end

    def _reaches(self, data: bytes, pos: int, node: int) -> bool:
        """Whether a charsmap key goes on from `node` over ``data[pos:]`` to its end."""
        child, value = self.charsmap.child, self.charsmap.value
        for i in range(pos, len(data)):
            node = child(node, data[i])
            if node < 0:
                return False
            if value(node) is not None:
                return True
        return False

    def copy(self, data: bytes, pos: int, end: int, out: bytearray, n2o: array,
             is_prev_space: bool) -> bool:
        """Append the run ``data[pos:end]``'s output and alignment; returns is_prev_space."""
        if end - pos >= LONG_RUN:
            return self._copy_long(data, pos, end, out, n2o, is_prev_space)
        space, replace, remove = self.space, self.replace, self.remove
        offsets: list[int] = []  # one array extend at the end: they cost more per call
        parts = self.special.split(data[pos:end])  # plain, special, plain, ..., plain
        for k, part in enumerate(parts):
            if k & 1:
                text, blank = replace.get(part, (space, True))
                if not (blank and is_prev_space):
                    out += text
                    offsets += [pos] * len(text)
                is_prev_space = blank and remove
            elif part:
                out += part
                offsets += range(pos, pos + len(part)) if part.isascii() else \
                    _char_starts(data, pos, pos + len(part))
                is_prev_space = False
            pos += len(part)
        n2o.fromlist(offsets)
        return is_prev_space

    def _copy_long(self, data: bytes, pos: int, end: int, out: bytearray, n2o: array,
                   is_prev_space: bool) -> bool:
        """`copy` in numpy: per input byte the number of output bytes it gives (`count`);
        every output byte comes from its character's first byte."""
        import numpy as np

        chunk = data[pos:end]
        raw = np.frombuffer(chunk, dtype=np.uint8)                      # (run,)
        lead = (raw & 0xC0) != 0x80
        found = self._mapped(chunk)
        blank, kept = self._blanks(raw, lead, found, is_prev_space)
        width = np.uint8(len(self.space))  # 1 per other byte, 0 per dropped blank byte
        count = ((~blank).view(np.uint8) + kept.view(np.uint8) * width).astype(np.intp)
        if found is not None:
            at, size, text, is_blank = found
            mapped = ~is_blank
            count[_spread(at[mapped] + 1, size[mapped] - 1)] = 0
            count[at[mapped]] = [len(t) for t, m in zip(text, mapped.tolist()) if m]
        first = np.arange(pos, end, dtype=np.int64)                     # (run,) its character
        if not chunk.isascii():
            first = np.maximum.accumulate(np.where(lead, first, 0))
        n2o.frombytes(np.repeat(first, count).tobytes())
        out += self._output(raw, count, kept, found).tobytes()
        return bool(self.remove and blank[-1])

    def _blanks(self, raw, lead, found, is_prev_space: bool):
        """(blank, kept) bool masks over a run's bytes: every byte of a blank is marked
        blank, so a blank follows a blank exactly when the byte before it is one; kept are
        the first bytes of the blanks that give a space."""
        if self._blank_table is None:
            self._blank_table = _table(self.blank_bytes)
        blank = self._blank_table[raw]
        if found is not None:
            at, size, _, is_blank = found
            blank[_spread(at[is_blank], size[is_blank])] = True
        kept = blank & lead
        if self.remove:
            kept[1:] &= ~blank[:-1]
            kept[0] &= not is_prev_space
        return blank, kept

    def _output(self, raw, count, kept, found):
        """The run's output bytes: each input byte `count` times, then the escaped spaces
        and the replacements written over theirs."""
        import numpy as np

        result = np.repeat(raw, count)
        ends = np.cumsum(count)                                         # (run,) output end
        spaces = np.flatnonzero(kept)
        spaces = ends[spaces] - count[spaces]
        for k, b in enumerate(self.space):
            result[spaces + k] = b
        if found is not None and not found[3].all():
            at, _, text, is_blank = found
            text = [t for t, b in zip(text, is_blank.tolist()) if not b]
            starts = at[~is_blank]
            lengths = count[starts]
            result[_spread(ends[starts] - lengths, lengths)] = np.frombuffer(b"".join(text),
                                                                           dtype=np.uint8)
        return result

    def _mapped(self, chunk: bytes):
        """(starts, sizes, outputs, is blank) of the MAPPED and multi-byte BLANK characters
        in a run (numpy arrays, the outputs a list), or None."""
        import numpy as np

        if not self.replace:
            return None
        found = [(m.start(), m.end()) for m in self.mapped.finditer(chunk)]
        if not found:
            return None
        at, stop = np.array(found, dtype=np.intp).T
        text, is_blank = zip(*[self.replace[chunk[a:b]] for a, b in found])
        return at, stop - at, list(text), np.array(is_blank, dtype=bool)


def _spread(starts, lengths):
    """The indices ``starts[i] + k`` for ``k < lengths[i]``, all i in order.

    >>> import numpy as np
    >>> _spread(np.array([2, 7]), np.array([3, 1])).tolist()
    [2, 3, 4, 7]
    """
    import numpy as np

    total = int(lengths.sum())
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return np.arange(total) + shift


def _literals(chars: Iterable[bytes]) -> bytes:
    """A regex matching exactly the `chars` (whole characters, none a prefix of another),
    as a byte trie."""
    groups: dict[tuple[bytes, bytes, bytes], bytearray] = {}
    for char in chars:
        groups.setdefault((char[:-1], b"", b""), bytearray()).append(char[-1])
    return _alternation(groups)


def _table(values: bytes):
    """A (256,) bool numpy lookup table of `values`."""
    import numpy as np

    table = np.zeros(256, dtype=bool)
    table[list(values)] = True
    return table


#: runs of at least this many bytes are copied in numpy
LONG_RUN = 512


def _byte_class(values: bytes) -> bytes:
    """A regex matching exactly the bytes `values`: a literal or a class of ranges.

    >>> print(_byte_class(b"abcx").decode())
    [\\x61-\\x63\\x78]
    """
    if not values:
        return b"(?!)"
    if len(set(values)) == 1:
        return b"\\x%02x" % values[0]
    ranges, start = [], None
    ordered = sorted(set(values))
    for i, v in enumerate(ordered):
        if start is None:
            start = v
        if i + 1 == len(ordered) or ordered[i + 1] != v + 1:
            ranges.append(b"\\x%02x" % start if v == start else b"\\x%02x-\\x%02x" % (start, v))
            start = None
    return b"[" + b"".join(ranges) + b"]"


def _char_starts(data: bytes, start: int, end: int) -> list[int]:
    """For each byte in data[start:end] (whole UTF-8 characters), its character's first byte."""
    out: list[int] = []
    pos = start
    while pos < end:
        size = ONE_CHAR_LEN[data[pos] >> 4]
        out.extend([pos] * size)
        pos += size
    return out


def _valid_char_len(data: bytes, pos: int) -> int:
    """Length of the well-formed UTF-8 character at `pos`, or 0 (string_util DecodeUTF8)."""
    lead = data[pos]
    if lead < 0x80:
        return 1
    length = ONE_CHAR_LEN[lead >> 4] if lead >= 0xC0 else 0
    if length < 2 or pos + length > len(data) or (lead >= 0xF8):
        return 0
    try:
        ch = data[pos:pos + length].decode("utf-8")  # rejects overlongs, surrogates, > U+10FFFF
    except UnicodeDecodeError:
        return 0
    return length if len(ch) == 1 else 0


# ---- the models ------------------------------------------------------------------------

SCORE_RESET = 100000.0  # unigram_model.cc kScoreResetThreshold
#: seconds a whole text's live unigram columns wait for a word cache another thread holds
LIVE_WAIT = 0.5
CHUNK_CACHE_LIMIT = 1 << 16
#: a piece with ▁ after another character could merge across a word start
_WORD_SEAM = re.compile(rb"[^\x81]\xe2\x96\x81|[^\x96]\x81\xe2\x96\x81|[^\xe2]\x96\x81\xe2\x96\x81")
_ANY_BYTE = re.compile(rb".", re.S)
#: cut before a ▁ that follows anything but another ▁
_WORD_CUT = re.compile(rb"(?<!\xe2\x96\x81)(?<=.)(?=\xe2\x96\x81)", re.S)


#: bytes of normalized text per `_WORD_CUT.split` (a 1 MB split held the GIL ~50 ms)
WORD_SLICE = 1 << 16


def adjacent_pairs(texts: Iterable[str]) -> frozenset[str]:
    """Every two characters that stand side by side in one of `texts`: one vectorized pass
    over the texts joined by NUL (the pairs with a NUL that adds only hide places where a text
    could be cut).

    >>> sorted(adjacent_pairs(["ab", "c"]))
    ['\\x00c', 'ab', 'b\\x00']
    """
    import numpy as np

    points = np.frombuffer("\0".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    codes = np.unique((points[:-1].astype(np.int64) << 21) | points[1:])  # code points < 2**21
    return frozenset(chr(c >> 21) + chr(c & 0x1FFFFF) for c in codes.tolist())


def split_at_word_starts(normalized: bytes) -> list[bytes]:
    """``_WORD_CUT.split(normalized)``, one slice of about `WORD_SLICE` bytes at a time, each
    ending at a cut: a slice then starts with a ``▁`` after a non-``▁``, where the whole
    string is cut too, and within it the same places are cuts (their look-behind reaches
    no further back than that ``▁``), so the slices' words are the whole string's.

    >>> split_at_word_starts("▁a▁▁b▁c".encode()) == _WORD_CUT.split("▁a▁▁b▁c".encode())
    True
    """
    words: list[bytes] = []
    for lo, hi in cut_slices(normalized, _WORD_CUT, WORD_SLICE):
        words += _WORD_CUT.split(normalized[lo:hi] if (lo, hi) != (0, len(normalized)) else normalized)
    return words


def viterbi(data: bytes, prefixes: dict[bytes, int], scores: Sequence[float], unk_id: int,
            unk_score: float) -> list[tuple[int, int]]:
    """Best unigram segmentation of `data` as (piece id, byte length) pairs
    (unigram_model.cc ``EncodeOptimized``, float32 arithmetic and its score reset included).

    `prefixes` maps every byte prefix of every usable piece to its id, or -1 when the prefix
    is not itself a usable piece; `scores[id]` is the score a piece adds to a path.
    `core.unigram_fast` gives the same result faster, per cached word.
    """
    return viterbi_from(data, prefixes, scores, unk_id, unk_score, 0.0)[0]


def viterbi_from(data: bytes, prefixes: dict[bytes, int], scores: Sequence[float], unk_id: int,
                 unk_score: float, start_score: float) -> tuple[list[tuple[int, int]], float]:
    """`viterbi` with the float32 path score `start_score` at position 0 instead of 0, and the
    best path's float32 score at the end: the rest of a text from a place no piece crosses."""
    return viterbi_steps(lattice_steps(data, prefixes), len(data), scores, unk_id, unk_score, start_score)


def lattice_steps(data: bytes, prefixes: dict[bytes, int]) -> list[tuple[int, int, bool, list]]:
    """`viterbi_from`'s lattice over `data`: per position it visits (each character's start,
    in order), (position, where its one-character step ends, whether a usable piece ends
    there, the usable pieces from there as (end, id) in order of end). A word's steps are
    kept to segment it again from other start scores (core.unigram_fast).

    >>> lattice_steps("ab".encode(), {b"a": 0, b"ab": 1, b"b": -1})
    [(0, 1, True, [(1, 0), (2, 1)]), (1, 2, False, [])]
    """
    n = len(data)
    get = prefixes.get
    steps = []
    i = 0
    while i < n:
        lead = data[i]
        single = min(n, i + (1 if lead < 0x80 else ONE_CHAR_LEN[lead >> 4]))
        edges = []
        j = i + 1
        while j <= n:
            piece_id = get(data[i:j])
            if piece_id is None:
                break
            if piece_id >= 0:
                edges.append((j, piece_id))
            j += 1
        steps.append((i, single, any(j == single for j, _ in edges), edges))
        i = single
    return steps


def viterbi_steps(steps: list[tuple[int, int, bool, list]], n: int, scores: Sequence[float], unk_id: int,
                  unk_score: float, start_score: float) -> tuple[list[tuple[int, int]], float]:
    """`viterbi_from` over its `lattice_steps` (unigram_model.cc ``EncodeOptimized``): float32
    path scores, rebased to 0 past SCORE_RESET; a candidate takes a place when it is the first
    to reach it or strictly greater."""
    best, start, ids = viterbi_arrays(steps, n, scores, unk_id, unk_score, start_score)
    return backtrack(ids, start, n), best[n]


def viterbi_arrays(steps: list[tuple[int, int, bool, list]], n: int, scores: Sequence[float], unk_id: int,
                   unk_score: float, start_score: float) -> tuple[array, list[int], list[int]]:
    """`viterbi_steps` before its backtrack: per byte offset the best path's float32 score
    there, where it starts and its last piece (start -1: no path ends there)."""
    best = array("f", bytes(4 * (n + 1)))  # float32 path scores, as the C++ stores them
    best[0] = start_score
    start = [-1] * (n + 1)
    ids = [0] * (n + 1)
    rounded = array("f", [0.0])  # a float32 assignment: `f32` inlined (one call per lattice edge)
    frontier = 0
    for i, single, has_single, edges in steps:
        base = best[i]
        if base < -SCORE_RESET or base > SCORE_RESET:  # rebase to keep float32 precision
            for k in range(i, frontier + 1):
                if k == i or start[k] != -1:
                    best[k] -= base
            base = 0.0
        for j, piece_id in edges:
            if j > frontier:
                frontier = j
            rounded[0] = scores[piece_id] + base
            candidate = rounded[0]
            if start[j] == -1 or candidate > best[j]:
                best[j], start[j], ids[j] = candidate, i, piece_id
        if not has_single:
            if single > frontier:
                frontier = single
            rounded[0] = unk_score + base
            candidate = rounded[0]
            if start[single] == -1 or candidate > best[single]:
                best[single], start[single], ids[single] = candidate, i, unk_id
    return best, start, ids


def backtrack(ids: Sequence[int], start: Sequence[int], n: int) -> list[tuple[int, int]]:
    """A Viterbi's best path as (id, byte length) pairs, from the ids and start offsets it
    recorded at each end offset, followed back from the end n.

    >>> backtrack([0, 7, 8, 9], [-1, 0, 1, 1], 3)
    [(7, 1), (9, 2)]
    """
    out: list[tuple[int, int]] = []
    end = n
    while end > 0:
        out.append((ids[end], end - start[end]))
        end = start[end]
    out.reverse()
    return out


def float_priority(score: float) -> int:
    """The order bpe_model.cc's SymbolPairComparator gives a float32 score (it compares the
    int32 bit patterns, so -0.0 ranks below +0.0), as an int that sorts the same way.

    >>> float_priority(-1.0) > float_priority(-2.0), float_priority(0.0) > float_priority(-0.0)
    (True, True)
    """
    bits = struct.unpack("<i", struct.pack("<f", score))[0]
    return bits + 2**31 + 1 if bits >= 0 else -bits


def merge_by_score(symbols: list, score_of: Callable[[Hashable, Hashable], float | None], *,
                   frozen: Sequence[bool] | None = None,
                   trace: list | None = None) -> tuple[list, dict]:
    """Priority-ordered merging of adjacent symbols: sentencepiece's bpe_model.cc, llama.cpp's
    SPM session and (with score = -rank) llama.cpp's BPE session.

    Repeatedly merges the adjacent pair with the highest ``score_of(left, right)`` (None:
    the pair does not merge); ties go to the leftmost pair. Returns the final symbols and ``rev_merge`` (merged -> (left, right), the
    last pair that formed each merged symbol). With `trace`, appends (left, right, result,
    position) for every merge, position counted in the symbol list before the merge.
    """
    count = len(symbols)
    if count < 2:
        return list(symbols), {}
    syms = list(symbols)
    prev = list(range(-1, count - 1))
    nxt = list(range(1, count + 1))
    nxt[-1] = -1
    frozen = frozen or [False] * count
    heap: list[tuple[float, int, int, Hashable]] = []
    rev_merge: dict = {}

    def push(left: int, right: int) -> None:
        if left < 0 or right < 0 or frozen[left] or frozen[right]:
            return
        merged = syms[left] + syms[right]
        score = score_of(syms[left], syms[right])
        if score is not None:
            heapq.heappush(heap, (-score, left, right, merged))
            rev_merge[merged] = (syms[left], syms[right])

    for i in range(1, count):
        push(i - 1, i)
    while heap:
        _, left, right, merged = heapq.heappop(heap)
        if not syms[left] or not syms[right] or len(syms[left]) + len(syms[right]) != len(merged):
            continue  # stale: one side was merged away or grew since the pair was pushed
        if trace is not None:
            trace.append((syms[left], syms[right], merged, _rank_in_list(prev, left)))
        syms[left] = merged
        syms[right] = syms[right][:0]
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prev[nxt[right]] = left
        push(prev[left], left)
        push(left, nxt[left])
    out = []
    i = 0
    while i != -1:
        out.append(syms[i])
        i = nxt[i]
    return out, rev_merge


#: above this many symbols `merge_adjacent` (quadratic) hands over to the heap
SHORT_WORD = 48


def merge_adjacent(symbols: list, score: dict, missing: float | int, *,
                   frozen: Sequence[bool] | None = None) -> list:
    """`merge_by_score` for a short word, with the same merges in the same order: each
    step merges the adjacent pair with the highest ``score[left + right]``, the leftmost on
    ties. The heap is replaced by a list of pair scores that a C-level ``max`` and ``index``
    scan (the leftmost maximum), cheaper for the few symbols of a word. `missing` marks a
    pair that does not merge and must be below every score; `frozen` symbols never merge.

    >>> merge_adjacent(list("abc"), {"ab": 1.0, "bc": 2.0, "abc": 0.5}, float("-inf"))
    ['abc']
    """
    syms = list(symbols)
    get = score.get
    if frozen is None:
        pairs = [get(a + b, missing) for a, b in zip(syms, syms[1:])]  # pairs[i]: syms i, i+1
    else:
        frozen = list(frozen)
        pairs = [missing if frozen[i] or frozen[i + 1] else get(syms[i] + syms[i + 1], missing)
                 for i in range(len(syms) - 1)]
    while pairs:
        best = max(pairs)
        if best == missing:
            break
        i = pairs.index(best)
        merged = syms[i] + syms.pop(i + 1)
        syms[i] = merged
        del pairs[i]
        if frozen is not None:
            del frozen[i + 1]
        if i > 0 and (frozen is None or not frozen[i - 1]):
            pairs[i - 1] = get(syms[i - 1] + merged, missing)
        if i < len(pairs) and (frozen is None or not frozen[i + 1]):
            pairs[i] = get(merged + syms[i + 1], missing)
    return syms


def _rank_in_list(prev: list[int], index: int) -> int:
    """Position of linked-list node `index` (number of nodes before it)."""
    pos = 0
    while prev[index] >= 0:
        index = prev[index]
        pos += 1
    return pos


def split_into_words(data: bytes) -> list[bytes]:
    """model_interface.cc SplitIntoWords: a new word at the start and at every ``▁``.

    >>> split_into_words("▁a▁▁bc".encode())
    [b'\xe2\x96\x81a', b'\xe2\x96\x81', b'\xe2\x96\x81bc']
    """
    words: list[bytes] = []
    pos, n = 0, len(data)
    while pos < n:
        mblen = min(ONE_CHAR_LEN[data[pos] >> 4], n - pos)
        if pos == 0 or data[pos:pos + mblen] == SPACE_BYTES:
            words.append(data[pos:pos + mblen])
        else:
            words[-1] += data[pos:pos + mblen]
        pos += mblen
    return words


# ---- segments ------------------------------------------------------------------------------

def byte_to_char_offsets(text: str) -> list[int] | None:
    """For each UTF-8 byte offset of `text` (and the end), the character it lies in; None
    when the text is ASCII (the identity).

    >>> byte_to_char_offsets("a€b")
    [0, 1, 1, 1, 2, 3]
    """
    if text.isascii():
        return None
    out: list[int] = []
    for i, ch in enumerate(text):
        out.extend([i] * len(ch.encode("utf-8", "surrogatepass")))
    out.append(len(text))
    return out


def tile_spans(spans: Sequence[tuple[int, int]], n_chars: int) -> list[tuple[int, int, bool]]:
    """Make token spans tile ``[0, n_chars)``: (start, end, partial) per token.

    Tokens whose spans overlap (byte-fallback pieces of one character) form a cluster:
    each member spans the whole cluster and is partial. A gap between clusters (text the
    tokenizer dropped: extra spaces, removed control characters) joins the following
    cluster, text after the last cluster joins the last. Zero-width tokens (a dummy-prefix
    ``▁`` piece) stay zero-width where no gap precedes them.

    >>> tile_spans([(2, 3), (3, 4), (3, 4), (4, 4)], 6)
    [(0, 3, False), (3, 4, True), (3, 4, True), (4, 6, False)]
    """
    starts = [s for s, _ in spans]
    ends = [e for _, e in spans]
    if not all(map(ge, starts[1:], ends)):  # some spans overlap: clusters to form
        return tile_spans_reference(spans, n_chars)
    if not spans:
        return []
    # every token is its own cluster, from the previous one's end to its own
    return list(zip([0] + ends[:-1], ends[:-1] + [n_chars], repeat(False)))


def tile_columns(starts, ends, n_chars: int):
    """`tile_spans` over numpy columns: (starts, ends, partial) arrays, or None when some end
    is below the one before it (then clusters can hold gaps: `tile_spans_reference` decides).

    With ends in order, a cluster's end is its last token's, so token k opens a new cluster
    iff it starts at or after token k - 1's end.

    >>> [a.tolist() for a in tile_columns([2, 3, 3, 4], [3, 4, 4, 4], 6)]
    [[0, 3, 3, 4], [3, 4, 4, 6], [False, True, True, False]]
    """
    import numpy as np

    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if len(ends) and (ends[1:] < ends[:-1]).any():
        return None
    if not len(ends):
        return starts, ends, np.zeros(0, dtype=bool)
    opens = np.empty(len(ends), dtype=bool)                 # (tokens,) token k opens a cluster
    opens[0] = True
    np.greater_equal(starts[1:], ends[:-1], out=opens[1:])
    heads = np.flatnonzero(opens)                           # (clusters,) first token of each
    cluster = np.cumsum(opens) - 1                          # (tokens,) the cluster of each token
    last = np.append(heads[1:], len(ends)) - 1              # (clusters,) last token of each
    cluster_end = ends[last]
    cluster_end[-1] = n_chars                               # text after the last cluster joins it
    cluster_start = np.concatenate(([0], cluster_end[:-1]))
    partial = (last > heads)[cluster]
    return cluster_start[cluster], cluster_end[cluster], partial


def tile_spans_reference(spans: Sequence[tuple[int, int]],
                         n_chars: int) -> list[tuple[int, int, bool]]:
    """`tile_spans` cluster by cluster (the reference for its shortcut)."""
    clusters: list[list[int]] = []  # [start, end, first token index, last token index]
    for k, (s, e) in enumerate(spans):
        if clusters and s < clusters[-1][1]:
            cluster = clusters[-1]
            cluster[1], cluster[3] = max(cluster[1], e), k
        else:
            clusters.append([s, e, k, k])
    out: list[tuple[int, int, bool]] = []
    last = len(clusters) - 1
    for idx, (s, e, first, final) in enumerate(clusters):
        start = 0 if idx == 0 else clusters[idx - 1][1]
        end = n_chars if idx == last else e
        out.extend((start, end, final > first) for _ in range(first, final + 1))
    return out


# ---- cuts, for core.incremental -------------------------------------------------------------

_KEY_CHARACTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def key_characters(charsmap: CharsMap) -> tuple[frozenset[str], frozenset[str], bool]:
    """(continuations, tails, whole) of a charsmap's keys: every character that follows
    another one in some key, the last characters of the keys longer than one character,
    and whether every key is whole UTF-8 characters (a lead byte wherever a character
    starts, no key ending inside one). Walks the trie breadth first, all nodes of a depth
    at once in numpy; the trie shares suffixes (a DAWG), so a node is kept once per state
    it is reached in. Computed once per charsmap.

    >>> key_characters(CharsMap(b""))
    (frozenset(), frozenset(), True)
    """
    found = _KEY_CHARACTERS.get(charsmap)
    if found is None:
        found = _KEY_CHARACTERS[charsmap] = _walk_key_characters(charsmap)
    return found


def _walk_key_characters(charsmap: CharsMap) -> tuple[frozenset[str], frozenset[str], bool]:
    import numpy as np

    if not charsmap.units:
        return frozenset(), frozenset(), True
    units = np.frombuffer(charsmap.units, dtype=np.uint32).astype(np.int64)
    offset = (units >> 10) << ((units & 0x200) >> 6)
    label = units & 0x800000FF
    nodes = np.flatnonzero(label <= 0xFF)                   # (children,) every labelled unit
    labels = label[nodes]
    order = np.lexsort((labels, nodes ^ labels))            # by the base of their parent
    bases, labels, nodes = (nodes ^ labels)[order], labels[order], nodes[order]
    # one row per (node, chars started (capped at 2), continuation bytes due, code point so far)
    node = np.zeros(1, dtype=np.int64)
    started = need = point = np.zeros(1, dtype=np.int64)
    continuations, tails, whole = set(), set(), True
    while len(node):
        base = node ^ offset[node]
        lo, hi = np.searchsorted(bases, base, "left"), np.searchsorted(bases, base, "right")
        parent = np.repeat(np.arange(len(node)), hi - lo)   # (edges,)
        edge = np.arange(len(parent)) - np.repeat(np.cumsum(hi - lo) - (hi - lo), hi - lo) + lo[parent]
        b, child = labels[edge], nodes[edge]
        fresh = need[parent] == 0                           # the byte must start a character
        size = np.select([b < 0x80, (b >= 0xC2) & (b < 0xE0), (b >= 0xE0) & (b < 0xF0),
                          (b >= 0xF0) & (b < 0xF5)], [1, 2, 3, 4], 0)
        lead_bits = np.select([size == 1, size == 2, size == 3], [b, b & 0x1F, b & 0x0F], b & 0x07)
        bad = np.where(fresh, size == 0, (b & 0xC0) != 0x80)
        need_after = np.where(fresh, size - 1, need[parent] - 1)
        point_after = np.where(fresh, lead_bits, (point[parent] << 6) | (b & 0x3F))
        started_after = np.where(fresh, np.minimum(started[parent] + 1, 2), started[parent])
        has_value = (units[child] & 0x100) != 0
        if bad.any() or (has_value & (need_after > 0)).any():
            whole = False
        done = ~bad & (need_after == 0) & (started_after == 2)
        continuations.update(map(chr, np.unique(point_after[done]).tolist()))
        tails.update(map(chr, np.unique(point_after[done & has_value]).tolist()))
        keep = ~bad
        rows = np.unique(np.stack([child[keep], started_after[keep], need_after[keep],
                                   point_after[keep]]), axis=1)
        node, started, need, point = rows
    return frozenset(continuations), frozenset(tails), whole


class EditCuts:
    """Where the tokens of a SentencePiece BPE text split into two independent parts:
    ``cuts(pair)`` is true when, wherever the two characters of `pair` stand side by side
    in a text, the tokens before them are those of the text before them (normalized as a
    text's head) and the tokens after them those of the text after them (normalized as a
    middle part, `Normalizer.normalize_offsets` with head=False), with the same spans.
    That holds when (see core.incremental for the whole argument):

    * no normalizer step crosses the place: no user-defined piece holds the pair, and no
      charsmap key goes on past a character into the second one (it is no key's
      `continuation <key_characters>`), so each side's steps are its own;
    * the step that ends there gives output that does not end with a blank once escaped
      (so that ``is_prev_space`` is false after it, and a text's end that drops trailing
      blanks stops before it), and the step that starts there gives some output (so the
      last token before the place ends exactly there): the first character is no charsmap
      key's tail, and every output either step can make is checked;
    * no merge crosses the place: the last output character before it and the first after
      it stand side by side in no model piece (a merge only makes a piece, and user-defined
      symbols are pieces), so each side gets the merges it gets alone (a pair's place in the
      queue is its score, then its position);
    * without byte fallback, the two are not both unknown as single characters (a run of
      unknown pieces would collapse into one ``<unk>`` across the place).

    Lone surrogates (three malformed bytes, three U+FFFD) are never beside a cut. The
    answers are cached per pair.
    """

    def __init__(self, tokenizer: "SentencePieceTokenizer") -> None:
        normalizer = tokenizer.normalizer
        self.normalizer = normalizer
        self.remove = normalizer.remove_extra_whitespaces
        self.escape = normalizer.escape_whitespaces
        charsmap = normalizer.charsmap
        if charsmap is not None:
            self.continuations, self.tails, _ = key_characters(charsmap)
        else:
            self.continuations = self.tails = frozenset()
        user = [p.decode("utf-8") for p in (normalizer.matcher.pieces if normalizer.matcher else ())]
        self.user_pairs = frozenset(p[k:k + 2] for p in user for k in range(len(p) - 1))
        self.user_ending: dict[str, list[bytes]] = {}
        self.user_starting: dict[str, list[bytes]] = {}
        for p in user:
            if len(p) > 1:
                self.user_ending.setdefault(p[-1], []).append(p.encode())
                self.user_starting.setdefault(p[0], []).append(p.encode())
        self.piece_pairs = tokenizer.piece_pairs()
        self.byte_fallback = tokenizer.byte_fallback
        self._normal, self._types, self._unk = tokenizer.tables()["normal"], tokenizer.types, tokenizer.model_unk
        self._cache: dict[str, bool] = {}
        self._left: dict[str, frozenset[str] | None] = {}
        self._right: dict[str, frozenset[str] | None] = {}

    def __call__(self, pair: str) -> bool:
        """Whether the place between the two characters of `pair` is a cut."""
        found = self._cache.get(pair)
        if found is None:
            if len(self._cache) >= CHUNK_CACHE_LIMIT:
                self._cache.clear()
            found = self._cache[pair] = self._decide(pair)
        return found

    def _decide(self, pair: str) -> bool:
        first, second = pair
        if _is_surrogate(first) or _is_surrogate(second) or pair in self.user_pairs:
            return False
        lasts, firsts = self.last_outputs(first), self.first_outputs(second)
        if lasts is None or firsts is None:
            return False
        known = self.known
        return not any(a + b in self.piece_pairs or not (self.byte_fallback or known(a) or known(b))
                       for a in lasts for b in firsts)

    def known(self, char: str) -> bool:
        """Whether a normalized character alone is a piece the model reports (NORMAL or
        USER_DEFINED): a final symbol that holds it is then no unknown piece."""
        i = self._normal.get(char.encode("utf-8"), self._unk)
        return i != self._unk and self._types[i] in (NORMAL, USER_DEFINED)

    def last_outputs(self, char: str) -> frozenset[str] | None:
        """The last normalized characters of the steps that can end with `char` (None when
        one of them ends with a blank, gives nothing, or is a charsmap key's tail)."""
        if char not in self._left:
            outputs = None
            if char not in self.tails:
                outputs = [self._alone(char)] + self.user_ending.get(char, [])
            self._left[char] = self._edge(outputs, -1, self.remove)
        return self._left[char]

    def first_outputs(self, char: str) -> frozenset[str] | None:
        """The first normalized characters of the steps that can start with `char` (None
        when one gives nothing, or `char` continues a charsmap key)."""
        if char not in self._right:
            outputs = None
            if char not in self.continuations:
                outputs = ([self._alone(char)] + self.user_starting.get(char, [])
                           + self._longer_keys(char))
            self._right[char] = self._edge(outputs, 0, False)
        return self._right[char]

    def _alone(self, char: str) -> bytes:
        """What a step over just `char` outputs."""
        data = char.encode("utf-8")
        return self.normalizer.normalize_prefix(data, 0)[0]

    def _longer_keys(self, char: str) -> list[bytes]:
        """The outputs of the charsmap keys that start with `char` and go on past it."""
        charsmap = self.normalizer.charsmap
        if charsmap is None:
            return []
        node = 0
        for b in char.encode("utf-8"):
            node = charsmap.child(node, b)
            if node < 0:
                return []
        out, stack = [], [child for _, child in charsmap.children(node)]
        while stack:
            node = stack.pop()
            value = charsmap.value(node)
            if value is not None:
                out.append(value)
            stack += [child for _, child in charsmap.children(node)]
        return out

    def _edge(self, outputs: list[bytes] | None, at: int, blank_end: bool) -> frozenset[str] | None:
        """The characters at index `at` of the outputs, spaces escaped as the normalizer
        escapes them; None if an output is empty, not UTF-8, or (blank_end) ends with a
        blank once escaped: a text's end drops trailing escaped spaces, and a literal ``▁``
        looks like one."""
        if outputs is None:
            return None
        chars = set()
        space = SPACE_BYTES if self.escape else b" "
        for output in outputs:
            escaped = output.replace(b" ", SPACE_BYTES) if self.escape else output
            if not output or (blank_end and escaped.endswith(space)):
                return None
            try:
                text = output.decode("utf-8")
            except UnicodeDecodeError:
                return None
            chars.add(SPACE if self.escape and text[at] == " " else text[at])
        return frozenset(chars)


def _is_surrogate(char: str) -> bool:
    return "\ud800" <= char <= "\udfff"


def _utf8(data: bytes) -> bool:
    """Whether `data` is well-formed UTF-8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# ---- the tokenizer -------------------------------------------------------------------------

class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model: pieces with scores and types, a normalizer, and the algorithm.

    Constructed from a parsed `.model` (formats.sentencepiece_model) or directly:

    >>> sp = SentencePieceTokenizer(["<unk>", "▁a", "b", "▁"], [0, -1, -2, -3], [2, 1, 1, 1],
    ...                             algorithm="unigram")
    >>> sp.encode("ab"), sp.decode(sp.encode("ab"))
    ([1, 2], 'ab')
    """

    piece_style = "sentencepiece"
    KINDS = {"unigram": "SentencePiece unigram", "bpe": "SentencePiece BPE",
             "word": "SentencePiece word", "char": "SentencePiece char"}
    MAX_RESEGMENT_DEPTH = 100  # bpe_model.cc kMaxBpeResegmentDepth

    def __init__(self, pieces: Sequence[str], scores: Sequence[float], types: Sequence[int], *,
                 algorithm: str = "unigram", normalizer: Normalizer | None = None,
                 byte_fallback: bool = False, unk_piece: str = "<unk>",
                 unk_surface: str = DEFAULT_UNK_SURFACE, denormalizer: Normalizer | None = None,
                 name: str = "", path: str | None = None,
                 added_tokens: Sequence[AddedToken] = ()) -> None:
        super().__init__(name=name, path=path, added_tokens=added_tokens)
        if algorithm not in self.KINDS:
            raise ValueError(f"unknown SentencePiece algorithm {algorithm!r}")
        self.algorithm = algorithm
        self.kind = self.KINDS[algorithm]
        self.explains = "cuts" if algorithm == "unigram" else "merges"
        self.pieces = list(pieces)
        self.scores = scores if isinstance(scores, array) else array("f", scores)
        self.types = bytearray(types)
        self.byte_fallback = byte_fallback
        if byte_fallback:  # sentencepiece_processor.cc Load: a raw "\0" piece becomes UNUSED
            for i, p in enumerate(self.pieces):
                if p == "\0":
                    self.types[i] = UNUSED
        self.types = bytes(self.types)
        self.unk_surface = unk_surface
        unknown = indices_of(self.types, UNKNOWN)
        self.model_unk = unknown[0] if unknown else -1
        self.unk_id = unknown[0] if unknown else None
        self._unk_piece = unk_piece
        user = [self.pieces[i].encode("utf-8", "surrogateescape")
                for i in indices_of(self.types, USER_DEFINED)]
        self.matcher = PrefixMatcher(user)
        self.normalizer = normalizer or Normalizer()
        if self.matcher and self.normalizer.matcher is None:
            self.normalizer.matcher = self.matcher  # user-defined pieces skip normalization
        self.denormalizer = denormalizer
        self._piece_ids: dict[str, int] | None = None
        self._tables: dict | None = None

    # ---- vocabulary ------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def piece(self, token_id: int) -> str:
        return self.pieces[check_id(token_id, len(self.pieces))]

    def id_of(self, piece: str) -> int | None:
        if self._piece_ids is None:
            ids: dict[str, int] = {}
            for i, p in enumerate(self.pieces):
                ids.setdefault(p, i)
            self._piece_ids = ids
        return self._piece_ids.get(piece)

    def token_type(self, token_id: int) -> str:
        return PIECE_TYPES.get(self.types[check_id(token_id, len(self.types))], "normal")

    def token_score(self, token_id: int) -> float | None:
        return self.scores[check_id(token_id, len(self.types))]

    def token_bytes(self, token_id: int) -> bytes:
        """What the token decodes to on its own: ▁ -> space, <0xNN> -> the byte."""
        kind = self.types[check_id(token_id, len(self.types))]
        if kind == CONTROL:
            return b""
        if kind == UNKNOWN:
            return self.unk_surface.encode("utf-8", "surrogateescape")
        if kind == BYTE:
            return bytes([piece_to_byte(self.pieces[token_id]) or 0])
        return self.pieces[token_id].replace(SPACE, " ").encode("utf-8", "surrogateescape")

    # ---- tables, built on first use (loading stays cheap) ----------------------------------
    def tables(self) -> dict:
        """The lookup tables of the C++ model, built once."""
        if self._tables is None:
            self._tables = self._build_tables()
        return self._tables

    def _build_tables(self) -> dict:
        """``normal`` and ``reserved`` piece maps as ModelInterface::InitializePieces fills
        them (BPE keeps every piece in ``normal`` and refuses reserved ones at merge time)."""
        normal: dict[bytes, int] = {}
        reserved: dict[bytes, int] = {}
        split = self.algorithm != "bpe"
        for i, (p, t) in enumerate(zip(self.pieces, self.types)):
            if p == "\0" and t == UNUSED:
                continue
            target = normal if (t in MODEL_PIECE_TYPES or not split) else reserved
            target.setdefault(p.encode("utf-8", "surrogateescape"), i)
        tables = {"normal": normal, "reserved": reserved}
        unk = self.model_unk
        unk_piece = self._unk_piece.encode("utf-8", "surrogateescape")  # any bytes, as stored
        i = reserved.get(unk_piece, normal.get(unk_piece, unk))
        tables["proc_unk"] = i if i >= 0 and self.types[i] == UNKNOWN else -1
        tables["byte_ids"] = [self._piece_to_id(byte_piece(b).encode(), normal, reserved)
                              for b in range(256)]
        # ids that _populate must look at one by one (an id outside the pieces is unknown)
        tables["control_ids"] = frozenset(indices_of(self.types, CONTROL))
        tables["unknown_ids"] = indices_of(self.types, UNKNOWN) + [tables["proc_unk"]]
        tables["special_ids"] = tables["control_ids"] | frozenset(
            tables["unknown_ids"] + [self.model_unk, -1])
        tables["is_control"] = _id_mask(tables["control_ids"], len(self.pieces))
        tables["is_unknown"] = _id_mask(tables["unknown_ids"], len(self.pieces))
        tables["unknown_set"] = frozenset(tables["unknown_ids"])  # (`_live_populated_flat`)
        if self.algorithm == "unigram":
            tables.update(self._unigram_tables(normal))
        elif self.algorithm == "bpe":
            tables["priority"] = {key: float_priority(self.scores[i]) for key, i in normal.items()
                                  if i != unk and self.types[i] in MODEL_PIECE_TYPES}
            tables["chunkable"] = self.normalizer.escape_whitespaces and not any(
                _WORD_SEAM.search(key) for key in normal)
            tables["chunk_cache"] = {}
        return tables

    def _piece_to_id(self, key: bytes, normal: dict[bytes, int], reserved: dict[bytes, int]) -> int:
        """ModelInterface::PieceToId: reserved pieces first, then normal ones, else unk."""
        i = reserved.get(key)
        return i if i is not None else normal.get(key, self.model_unk)

    def _unigram_tables(self, normal: dict[bytes, int]) -> dict:
        normal_scores = [s for s, t in zip(self.scores, self.types) if t == NORMAL]
        lattice = list(self.scores)
        prefixes: dict[bytes, int] = {}
        for key, i in normal.items():
            if self.types[i] == USER_DEFINED:  # "extra bonus to always be selected"
                lattice[i] = f32(0.1 * (len(key) - 1))
            for k in range(1, len(key)):
                prefixes.setdefault(key[:k], -1)
        for key, i in normal.items():
            prefixes[key] = -1 if self.types[i] == UNUSED else i
        from forma_gui.core.unigram_fast import UnigramEncoder

        unk_score = f32(min(normal_scores, default=FLT_MAX) - UNK_PENALTY)
        return {"prefixes": prefixes, "lattice_scores": lattice, "unk_score": unk_score,
                "unigram": UnigramEncoder(prefixes, lattice, self.model_unk, unk_score)}

    # ---- encoding --------------------------------------------------------------------------
    def clear_cache(self) -> None:
        """Forget the cached BPE and unigram words (benchmarks measure cold starts with it)."""
        if self._tables is not None and "chunk_cache" in self._tables:
            self._tables["chunk_cache"].clear()
        if self._tables is not None and "unigram" in self._tables:
            self._tables["unigram"].clear_cache()

    def _encode_ordinary(self, text: str) -> list[int]:
        """The ids of `_encode_spans`: the model's own when no piece needs populating, else
        the id column of `_populate_columns` (no span triples built only to be dropped: a
        megabyte with Mistral's byte fallback 270 -> 150 ms)."""
        if self.algorithm == "unigram":
            return self._encode_unigram_ids(text)
        normalized, _, result = self._model_pieces(text)
        ids = list(map(itemgetter(0), result))
        if self.tables()["special_ids"].isdisjoint(ids):
            return ids
        import numpy as np

        return self._populated_ids(normalized, sliced_array(chain.from_iterable(result), np.int64).reshape(-1, 2))

    def _encode_unigram_ids(self, text: str) -> list[int]:
        """`_encode_ordinary` from the unigram model's columns (no tuple per token)."""
        import numpy as np

        normalized, _, pairs = self._model_columns(text)
        special = np.fromiter(self.tables()["special_ids"], dtype=np.int64)
        if not np.isin(pairs[:, 0], special).any():
            return pairs[:, 0].tolist()
        return self._populated_ids(normalized, pairs)

    def _populated_ids(self, normalized: bytes, pairs) -> list[int]:
        """The id column of `_populate_columns` for the model's (n, 2) (id, byte length) pairs."""
        import numpy as np

        off = np.zeros(len(pairs) + 1, dtype=np.int64)                  # (n + 1,)
        np.cumsum(pairs[:, 1], out=off[1:])
        return self._populate_columns(normalized, pairs[:, 0].copy(), off, np.zeros_like(off))[0].tolist()

    def _model_columns(self, text: str):
        """`_model_pieces` with the pairs as an (n, 2) int64 array (a unigram model gathers
        it from its cached words, no tuple per token)."""
        import numpy as np

        if self.algorithm != "unigram":
            normalized, n2o, result = self._model_pieces(text)
            return normalized, n2o, sliced_array(chain.from_iterable(result), np.int64).reshape(-1, 2)
        normalized, n2o = self.normalizer.normalize_offsets(text.encode("utf-8", "surrogatepass"))
        return normalized, n2o, self.tables()["unigram"].encode_columns(normalized)

    def _encode_spans(self, text: str) -> list[tuple[int, int, int]]:
        """(id, original byte start, original byte end) per token."""
        return self._populate(*self._model_pieces(text))

    def _model_pieces(self, text: str) -> tuple[bytes, Sequence[int], list[tuple[int, int]]]:
        """(normalized bytes, normalized -> original byte offsets, the model's (id, byte
        length) pairs) of `text`, before populating (byte fallback, unknown runs)."""
        data = text.encode("utf-8", "surrogatepass")
        normalized, n2o = self.normalizer.normalize_offsets(data)
        return normalized, n2o, self.encode_normalized(normalized) if normalized else []

    def encode_normalized(self, normalized: bytes) -> list[tuple[int, int]]:
        """The model's (id, byte length) pairs for already-normalized bytes (Model::Encode)."""
        tables = self.tables()
        if self.algorithm == "unigram":  # `viterbi`'s result, per cached word
            return tables["unigram"].encode(normalized)
        if self.algorithm == "bpe":
            return self._bpe(normalized, tables)
        if self.algorithm == "word":
            words = split_into_words(normalized)
        else:
            words = self._initial_symbols(normalized)[0]
        return [(self._no_unused(tables["normal"].get(w, self.model_unk)), len(w)) for w in words]

    def _no_unused(self, i: int) -> int:
        """word/char models: an UNUSED piece is reported as unknown."""
        return self.model_unk if i != self.model_unk and self.types[i] == UNUSED else i

    def _populate(self, normalized: bytes, n2o: Sequence[int],
                  result: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
        """EncodeOptimized / PopulateSentencePieceText: byte fallback, unknown runs merged.
        Between control and unknown pieces that is only the spans, made in C-level steps;
        `_populate_reference` is the C++ loop."""
        if not result:
            return []
        tables = self.tables()
        ids = list(map(itemgetter(0), result))
        offsets = list(accumulate(map(itemgetter(1), result), initial=0))
        bounds = list(map(n2o.__getitem__, offsets))
        special = tables["special_ids"]
        if special.isdisjoint(ids):
            return list(zip(ids, bounds, bounds[1:]))
        if self.byte_fallback and tables["control_ids"].isdisjoint(ids):
            import numpy as np

            columns = self._populate_columns(normalized, np.array(ids, dtype=np.int64),
                                             np.array(offsets, dtype=np.int64),
                                             np.array(bounds, dtype=np.int64))
            return list(zip(*(c.tolist() for c in columns)))
        out: list[tuple[int, int, int]] = []
        done, prev_unk = 0, False
        for k in [k for k, i in enumerate(ids) if i in special]:
            if k > done:
                out += zip(ids[done:k], bounds[done:k], bounds[done + 1:k + 1])
                prev_unk = False
            prev_unk = self._populate_one(out, ids[k], bounds[k], bounds[k + 1],
                                          normalized[offsets[k]:offsets[k + 1]], prev_unk, tables)
            done = k + 1
        out += zip(ids[done:], bounds[done:-1], bounds[done + 1:])
        return out

    def _populate_columns(self, normalized: bytes, token, off, bounds):
        """`_populate` in numpy, every case: (ids, begins, ends) int64 arrays from the model's
        ids `token` (n,), their byte offsets `off` in `normalized` (n + 1,) and the original
        byte offsets `bounds` of those (n + 1,). A control piece spans nothing; an unknown
        piece becomes one byte piece per byte, each spanning it (byte fallback), else a run
        of unknown pieces becomes its first, spanning the run."""
        return self._populated_spans(normalized, token, off, bounds)[:3]

    def _populated_spans(self, normalized: bytes, token, off, bounds):
        """`_populate_columns`, and the first and the last model piece of each output token."""
        import numpy as np

        out_ids, first, last = self._populate_map(normalized, token, off)
        control = self.tables()["is_control"][token]
        begin = bounds[:-1]
        end = np.where(control, begin, bounds[1:])
        return out_ids, begin[first], end[last], first, last

    def _populate_map(self, normalized: bytes, token, off):
        """(output ids, the first and the last model piece of each output token) of
        `_populate_columns`: with byte fallback an unknown piece gives one token per byte
        (first == last), else a run of unknown pieces gives one token (first < last)."""
        import numpy as np

        tables = self.tables()
        unk = tables["is_unknown"][token]                               # (n,)
        if self.byte_fallback:
            counts = np.where(unk, off[1:] - off[:-1], 1)
            rep = np.repeat(np.arange(len(token)), counts)              # (out,) source token
            first = np.cumsum(counts) - counts                          # (n,) its first output
            out_ids = token[rep]
            hit = unk[rep]
            if hit.any():
                at = off[rep[hit]] + np.flatnonzero(hit) - first[rep[hit]]  # byte in `normalized`
                raw = np.frombuffer(normalized, dtype=np.uint8)
                out_ids[hit] = np.array(tables["byte_ids"], dtype=np.int64)[raw[at]]
            return out_ids, rep, rep
        if not len(token):
            return token, np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
        keep = np.ones(len(token), dtype=bool)                          # (n,) not an unknown after one
        keep[1:] = ~(unk[1:] & unk[:-1])
        kept = np.flatnonzero(keep)
        last = np.append(kept[1:], len(token)) - 1                      # the run each kept one ends
        return token[kept], kept, last

    def _live_populated(self, normalized: bytes, run, off, bounds):
        """(ids, begins, ends, before, added, count, bound, char) columns of the populated
        tokens of a unigram `LiveRun` (`off`: its pieces' edges in `normalized`, `bounds`: their
        original byte offsets): a token's path score before it, the score each of its `count` additions adds
        (a run of unknown pieces adds the unknown score once per piece; a byte piece after
        the first of an unknown piece adds nothing), its word's bound where a word starts
        (-inf when a run of unknown pieces holds another word's start: it is not checked
        alone), and the `UnknownTexts` code of the text an unknown piece or a run of them
        stands for (-1 for the others): with the pieces' own texts and the byte pieces'
        bytes, a word's normalized bytes, to segment it again (core.incremental)."""
        import numpy as np

        token = run.tokens[:, 0].copy()
        tables = self.tables()
        if not (tables["is_unknown"][token].any() or tables["is_control"][token].any()):
            # (each piece its own token, as below: no unknown piece to spell out or merge)
            n = len(token)
            return (token, bounds[:-1], bounds[1:], run.before, run.added, np.ones(n, dtype=np.intp),
                    run.bound, np.full(n, -1, dtype=np.int64))
        ids, begins, ends, first, last = self._populated_spans(normalized, token, off, bounds)
        lead = np.ones(len(first), dtype=bool)                          # (out,) first of its piece
        lead[1:] = first[1:] != first[:-1]
        bound = np.where(lead, run.bound[first], np.nan)
        runs = np.flatnonzero(last > first)
        if len(runs):
            bound[runs] = _run_bounds(run.bound, run.added, first, last)[runs]
        count = (last - first + 1) * lead
        char = np.full(len(ids), -1, dtype=np.int64)
        if not self.byte_fallback:
            unknown = self.unknown_texts()
            for t in np.flatnonzero(self.tables()["is_unknown"][token[first]]).tolist():
                char[t] = unknown.code(normalized[off[first[t]]:off[last[t] + 1]], int(count[t]))
        return (ids, begins, ends, np.where(lead, run.before[first], np.nan),
                np.where(lead, run.added[first], 0.0), count, bound, char)

    def _populate_one(self, out: list, token_id: int, begin: int, end: int, data: bytes,
                      prev_unk: bool, tables: dict) -> bool:
        """One control or unknown piece of `_populate`; returns whether it was unknown."""
        if 0 <= token_id < len(self.types) and self.types[token_id] == CONTROL:
            out.append((token_id, begin, begin))
            return False
        is_unk = token_id == tables["proc_unk"] or (
            0 <= token_id < len(self.types) and self.types[token_id] == UNKNOWN)
        if is_unk and self.byte_fallback:
            out.extend((tables["byte_ids"][b], begin, end) for b in data)
        elif is_unk and prev_unk:
            out[-1] = (out[-1][0], out[-1][1], end)
        else:
            out.append((token_id, begin, end))
        return is_unk

    def _populate_reference(self, normalized: bytes, n2o: Sequence[int],
                            result: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
        """`_populate` token by token, as the C++ loop."""
        tables = self.tables()
        proc_unk, byte_ids, n_pieces = tables["proc_unk"], tables["byte_ids"], len(self.types)
        out: list[tuple[int, int, int]] = []
        consumed = 0
        prev_unk = False
        for token_id, length in result:
            begin, end = n2o[consumed], n2o[consumed + length]
            valid = 0 <= token_id < n_pieces
            if valid and self.types[token_id] == CONTROL:
                out.append((token_id, begin, begin))
                prev_unk = False
            else:
                is_unk = token_id == proc_unk or (valid and self.types[token_id] == UNKNOWN)
                if is_unk and self.byte_fallback:
                    out.extend((byte_ids[b], begin, end)
                               for b in normalized[consumed:consumed + length])
                elif is_unk and prev_unk:
                    out[-1] = (out[-1][0], out[-1][1], end)
                else:
                    out.append((token_id, begin, end))
                prev_unk = is_unk
            consumed += length
        return out

    def _initial_symbols(self, normalized: bytes) -> tuple[list[bytes], list[bool]]:
        """Characters, with user-defined pieces matched whole and frozen (PrefixMatch)."""
        chars = self._chars(normalized)
        if chars is not None:
            return chars, [False] * len(chars)
        symbols, frozen = [], []
        pos, n = 0, len(normalized)
        while pos < n:
            length = self.matcher.match(normalized, pos) if self.matcher else 0
            frozen.append(bool(length))
            if not length:
                length = min(ONE_CHAR_LEN[normalized[pos] >> 4], n - pos)
            symbols.append(normalized[pos:pos + length])
            pos += length
        return symbols, frozen

    def _chars(self, data: bytes) -> list[bytes] | None:
        """The UTF-8 characters of `data` in C-level steps, or None where the PrefixMatch
        loop must run: a byte that starts a user-defined piece, or malformed UTF-8."""
        first = self.__dict__.get("_first_bytes")
        if first is None:
            first = self._first_bytes = bytes(sorted(self.matcher.first)) if self.matcher else b""
        if first and len(data.translate(None, first)) != len(data):
            return None
        if data.isascii():
            return _ANY_BYTE.findall(data)
        try:
            return [c.encode() for c in data.decode("utf-8")]
        except UnicodeDecodeError:
            return None

    def _bpe(self, normalized: bytes, tables: dict,
             trace: list | None = None) -> list[tuple[int, int]]:
        """BPE over the whole normalized text, which sentencepiece never pre-splits. When no
        piece holds a ``▁`` after another character, no merge can cross the place where a
        ``▁`` follows a non-``▁``: the text is cut there and each word cached (exactly the
        same result, much faster on real text). A pair's place in the agenda is its score,
        then its left symbol's position, so a word's merges come in the same order with or
        without the other words. Resegmenting a merged UNUSED piece reads ``rev_merge``, the
        last pair that formed its text anywhere in the input; that pair is the same wherever
        the text forms (the merges inside a span run in the same order whatever surrounds
        it, until a neighbour takes an end symbol, after which the span never becomes one
        symbol), so a word's own ``rev_merge`` gives the same pieces."""
        if trace is None and tables.get("chunkable"):
            cache = tables["chunk_cache"]
            out: list[tuple[int, int]] = []
            for word in split_at_word_starts(normalized):
                ids = cache.get(word)
                if ids is None:
                    if len(cache) >= CHUNK_CACHE_LIMIT:
                        cache.clear()
                    ids = cache[word] = self._bpe_word(word, tables)
                out += ids
            return out
        return self._bpe_whole(normalized, tables, trace)

    def _bpe_word(self, word: bytes, tables: dict) -> list[tuple[int, int]]:
        """`_bpe_whole` for one word of a chunkable model, without the heap; a word that
        ends in an UNUSED piece (to resegment, rare) goes through `_bpe_whole`."""
        symbols, frozen = self._initial_symbols(word)
        if len(symbols) > SHORT_WORD:
            return self._bpe_whole(word, tables, None)
        frozen_or_none = frozen if any(frozen) else None
        final = merge_adjacent(symbols, tables["priority"], 0, frozen=frozen_or_none)
        normal, unk, types = tables["normal"], self.model_unk, self.types
        ids = [normal.get(sym, unk) for sym in final]
        if any(i != unk and types[i] == UNUSED for i in ids):
            return self._bpe_whole(word, tables, None)
        return [(self._model_id(i), len(sym)) for i, sym in zip(ids, final)]

    def _model_id(self, i: int) -> int:
        """What `_resegment` reports for a piece that is not UNUSED: the piece if the model
        produces it (NORMAL, USER_DEFINED), else unk."""
        produced = i != self.model_unk and self.types[i] in (NORMAL, USER_DEFINED)
        return i if produced else self.model_unk

    def _bpe_whole(self, normalized: bytes, tables: dict,
                   trace: list | None) -> list[tuple[int, int]]:
        symbols, frozen = self._initial_symbols(normalized)
        priority = tables["priority"].get
        final, rev_merge = merge_by_score(symbols, lambda a, b: priority(a + b), frozen=frozen,
                                          trace=trace)
        out: list[tuple[int, int]] = []
        for sym in final:
            self._resegment(sym, tables["normal"], rev_merge, out, 0)
        return out

    def _resegment(self, sym: bytes, normal: dict[bytes, int], rev_merge: dict,
                   out: list[tuple[int, int]], depth: int) -> None:
        """bpe_model.cc resegment: split merged UNUSED pieces back into their parts."""
        unk = self.model_unk
        i = normal.get(sym, unk)
        if depth > self.MAX_RESEGMENT_DEPTH:
            out.append((i, len(sym)))
        elif i == unk or self.types[i] not in MODEL_PIECE_TYPES:
            out.append((unk, len(sym)))
        elif self.types[i] != UNUSED:
            out.append((i, len(sym)))
        elif sym in rev_merge:
            left, right = rev_merge[sym]
            self._resegment(left, normal, rev_merge, out, depth + 1)
            self._resegment(right, normal, rev_merge, out, depth + 1)
        else:
            out.append((unk, len(sym)))

    def merge_steps(self, word: str) -> list[MergeStep]:
        """The merges BPE performs on `word` (normalized first), for the GUI."""
        if self.algorithm != "bpe":
            return []
        normalized, _ = self.normalizer.normalize(word.encode("utf-8", "surrogatepass"))
        trace: list = []
        tables = self.tables()
        self._bpe(normalized, tables, trace)
        current = self._initial_symbols(normalized)[0]
        steps = []
        for left, right, merged, pos in trace:
            current[pos:pos + 2] = [merged]
            text = tuple(s.decode("utf-8", "surrogateescape") for s in current)
            steps.append(MergeStep(left.decode("utf-8", "surrogateescape"),
                                   right.decode("utf-8", "surrogateescape"),
                                   tables["normal"][merged], text[pos], pos, text))
        return steps

    def segmentations(self, word: str, k: int = 5) -> list[Alternative]:
        """A unigram model's cut of `word` (normalized first) and the next best of its k best
        cuts (`unigram_paths`), best first; empty for other models. A run of unknown pieces
        is shown as one, as encoding (and sentencepiece's n-best) reports it."""
        if self.algorithm != "unigram" or k < 1:
            return []
        normalized, _ = self.normalizer.normalize(word.encode("utf-8", "surrogatepass"))
        tables = self.tables()
        return ranked_cuts(normalized, lattice_steps(normalized, tables["prefixes"]), tables["lattice_scores"],
                           self.model_unk, tables["unk_score"], tables["unigram"].encode(normalized),
                           self.pieces.__getitem__, k)

    # ---- cuts, for core.incremental (edits re-encode the text between two of them) -------
    def edit_reason(self) -> str:
        """Why an edit must re-encode the whole text ("" when the text between two
        `edit_cuts` around it suffices): BPE and unigram models qualify, and only when the
        normalizer's steps are whole characters. A unigram model's region starts from the
        path score before it (core.incremental carries the new scores on after it)."""
        if self.algorithm == "unigram":
            if self.tables()["unigram"].live() is None:
                return ("SentencePiece unigram with scores or pieces only the whole-text Viterbi "
                        "handles (core.unigram_fast)")
        elif self.algorithm != "bpe":
            return f"SentencePiece {self.algorithm} models are re-encoded in full"
        if self.model_unk < 0:
            return "no unknown piece (unknown characters get no id)"
        charsmap = self.normalizer.charsmap
        if charsmap is not None and not (key_characters(charsmap)[2] and _utf8(charsmap.normalized)):
            return "charsmap keys or outputs that are not whole UTF-8 characters"
        matcher = self.normalizer.matcher
        if matcher is not None and not all(_utf8(p) for p in matcher.pieces):
            return "user-defined pieces that are not UTF-8"
        return ""

    def edit_cuts(self) -> EditCuts:
        """The cut rule of a BPE model (`EditCuts`, built once): ``edit_cuts()(pair)`` says
        whether the place between the two characters of `pair` is a cut."""
        cuts = self.__dict__.get("_edit_cuts")
        if cuts is None:
            cuts = self._edit_cuts = EditCuts(self)
        return cuts

    def piece_pairs(self) -> frozenset[str]:
        """Every two characters that stand side by side in a piece a merge can make or an
        initial symbol can be (NORMAL, USER_DEFINED and UNUSED pieces): one vectorized
        pass over the texts joined by NUL, whose extra pairs only hide cuts."""
        pairs = self.__dict__.get("_piece_pairs")
        if pairs is None:
            pairs = self._piece_pairs = adjacent_pairs(
                p for p, t in zip(self.pieces, self.types) if t in MODEL_PIECE_TYPES)
        return pairs

    def fragment_spans(self, text: str, start: int, end: int, *, head: bool,
                       tail: bool) -> list[tuple[int, int, int]]:
        """The tokens of ``text[start:end]`` as (id, start, end), character offsets into
        `text` before `segment` tiles them: the part normalized as a text's head (leading
        blanks dropped, the dummy prefix) and/or tail (trailing blanks dropped), or as a
        middle part between two `edit_cuts`, then encoded and populated like a whole text."""
        part = text[start:end]
        data = part.encode("utf-8", "surrogatepass")
        normalized, n2o = self.normalizer.normalize_offsets(data, head=head, tail=tail)
        spans = self._populate(normalized, n2o, self.encode_normalized(normalized) if normalized else [])
        to_char = byte_to_char_offsets(part)
        if to_char is None:
            return [(i, start + b, start + e) for i, b, e in spans]
        return [(i, start + to_char[b], start + _char_end(to_char, e)) for i, b, e in spans]

    # ---- segments and decoding -------------------------------------------------------------
    def segment(self, text: str, *, special: bool = False) -> list[Token]:
        """Tokens with character spans into `text` (through the normalizer's alignment)."""
        spans: list[tuple[int, int, int, bool]] = []  # id, byte start, byte end, special
        for offset, chunk, token, size in self._pieces(text, special):
            if token is None:
                spans.extend((i, offset + b, offset + e, False)
                             for i, b, e in self._encode_spans(chunk))
            else:
                spans.append((token.id, offset, offset + size, True))
        return self._tokens(text, spans)

    def _pieces(self, text: str, special: bool) -> Iterator[tuple[int, str, AddedToken | None, int]]:
        """(byte offset, text, added token or None, byte length of an added token's match)
        of each piece `segment` encodes on its own: the whole text (length 0: not used), or
        with `special` the added tokens' matches (found again in the UTF-8 from where the
        previous piece ended) and what lies between."""
        if not (special and self.added_tokens):
            yield 0, text, None, 0
            return
        from forma_gui.core.special import split_added

        offset = 0
        data = text.encode("utf-8", "surrogatepass")
        for chunk, token in split_added(self, text):
            raw = chunk.encode("utf-8", "surrogatepass")
            at = data.find(raw, offset) if raw else offset
            offset = at if at >= 0 else offset
            yield offset, chunk, token, len(raw)
            offset += len(raw)

    def segment_columns(self, text: str, *, special: bool = False, live: bool = False):
        """`segment(text, special=special)` as numpy columns (ids, starts, ends, flags: 1
        partial, 2 special), token for token, without a Token object per token; None when
        the spans need `tile_spans_reference` or an id is no piece.

        The same pieces, normalization and model run as in `segment`; `_populate_columns`
        populates, the byte offsets become character offsets through each byte's character
        (a cumulative count of UTF-8 lead bytes) and `tile_columns` tiles.
        """
        import numpy as np

        parts: list[tuple] = []  # (ids, byte starts, byte ends[, the LiveRun columns]) per piece
        special_at: list[int] = []  # token indices of the added tokens
        n = 0
        for offset, chunk, token, size in self._pieces(text, special):
            if token is None:
                found = self._live_span_columns(chunk, wait=LIVE_WAIT) if live else self._span_columns(chunk)
                if found is None:
                    return None
                part = (found[0], found[1] + offset, found[2] + offset, *found[3:])
            else:
                special_at.append(n)
                part = tuple(np.array([v], dtype=np.int64) for v in (token.id, offset, offset + size))
                if live:  # no path runs through an added token: each piece starts from 0
                    part += (np.array([np.nan]), np.zeros(1), np.zeros(1, dtype=np.int64), np.array([np.nan]),
                             np.full(1, -1, dtype=np.int64))
            parts.append(part)
            n += len(part[0])
        width = 8 if live else 3
        ids, begins, ends, *extra = (np.concatenate([p[k] for p in parts]) if parts else np.zeros(0)
                                     for k in range(width))
        ids, begins, ends = (c.astype(np.int64) for c in (ids, begins, ends))
        if len(ids) and (ids.min() < 0 or ids.max() >= len(self.pieces)):
            return None
        starts, ends = _char_columns(text, begins, ends)
        tiled = tile_columns(starts, ends, len(text))
        if tiled is None:
            return None
        first, last, partial = tiled
        flags = partial.astype(np.uint8)
        flags[special_at] |= 2
        return (ids.astype(np.int32), first.astype(np.int32), last.astype(np.int32), flags, *extra)

    def _span_columns(self, text: str):
        """`_encode_spans` as (ids, byte starts, byte ends) int64 arrays."""
        import numpy as np

        normalized, n2o, pairs = self._model_columns(text)                # (n, 2)
        if not len(pairs):
            none = np.zeros(0, dtype=np.int64)
            return none, none, none
        off = np.zeros(len(pairs) + 1, dtype=np.int64)                  # (n + 1,)
        np.cumsum(pairs[:, 1], out=off[1:])
        bounds = np.frombuffer(n2o, dtype=np.int64)[off]  # n2o is an array("q")
        return self._populate_columns(normalized, pairs[:, 0].copy(), off, bounds)

    def _live_span_columns(self, text: str, score: float = 0.0, *, head: bool = True, tail: bool = True,
                           wait: float = 0.0):
        """`_span_columns` of a unigram model with the `_live_populated` columns, the text
        normalized as a head and/or tail (see `fragment_spans`) and its path starting from
        `score`; and the end score last. None when the model cannot give them (or another
        thread held the word cache for `wait` seconds)."""
        normalized, n2o = self.normalizer.normalize_offsets(text.encode("utf-8", "surrogatepass"),
                                                            head=head, tail=tail)
        run = self.tables()["unigram"].encode_live(normalized, score, wait=wait)
        if run is None:
            return None
        return (*self._live_run_columns(normalized, n2o, run), run.end)

    def _live_run_columns(self, normalized: bytes, n2o: array, run) -> tuple:
        """`_live_populated`'s columns of a `LiveRun` over `normalized` (`n2o`: its bytes'
        original offsets)."""
        import numpy as np

        off = np.zeros(len(run.tokens) + 1, dtype=np.int64)
        np.cumsum(run.tokens[:, 1], out=off[1:])
        bounds = np.frombuffer(n2o, dtype=np.int64)[off] if len(n2o) else np.zeros(1, dtype=np.int64)
        return self._live_populated(normalized, run, off, bounds)

    def _live_populated_flat(self, normalized: bytes, n2o: array, flat) -> tuple:
        """`_live_populated` of a `FlatRun` (`UnigramEncoder.encode_live`), in Python (an
        edit's region holds a few tokens): (ids, begins, ends, [before, added, count, bound,
        char]) as lists, the same values (tested against it)."""
        tokens, run_before, run_added, run_bound, _ = flat
        ids, n = tokens[0::2].tolist(), len(run_before)
        off = [0, *accumulate(tokens[1::2])]
        bounds = [n2o[o] for o in off] if len(n2o) else [0]
        tables = self.tables()
        unknown, control = tables["unknown_set"], tables["control_ids"]
        if unknown.isdisjoint(ids) and control.isdisjoint(ids):
            return (ids, bounds[:-1], bounds[1:],
                    [run_before.tolist(), run_added.tolist(), [1] * n, run_bound.tolist(), [-1] * n])
        out_ids, begins, ends = [], [], []
        before, added, count, bound, char = columns = [], [], [], [], []
        if self.byte_fallback:  # an unknown piece: a byte piece per byte, the first one leading
            byte_ids = tables["byte_ids"]
            for t, i in enumerate(ids):
                end = bounds[t] if i in control else bounds[t + 1]
                outs = [byte_ids[b] for b in normalized[off[t]:off[t + 1]]] if i in unknown else [i]
                for lead, out in zip((True, *[False] * (len(outs) - 1)), outs):
                    out_ids.append(out)
                    begins.append(bounds[t])
                    ends.append(end)
                    before.append(run_before[t] if lead else math.nan)
                    added.append(run_added[t] if lead else 0.0)
                    count.append(int(lead))
                    bound.append(run_bound[t] if lead else math.nan)
                    char.append(-1)
            return out_ids, begins, ends, columns
        texts = self.unknown_texts()
        part = None  # the running sums of |added| (`_run_bounds`), when a run needs them
        t = 0
        while t < n:  # a run of unknown pieces becomes its first, spanning the run
            i, last = ids[t], t
            if i in unknown:
                while last + 1 < n and ids[last + 1] in unknown:
                    last += 1
            out_ids.append(i)
            begins.append(bounds[t])
            ends.append(bounds[t] if i in control else bounds[last + 1])
            before.append(run_before[t])
            added.append(run_added[t])
            count.append(last - t + 1)
            if last > t:
                if part is None:
                    part = [0.0, *accumulate(abs(a) for a in run_added)]
                bound.append(_run_bound(run_bound, part, t, last))
            else:
                bound.append(run_bound[t])
            char.append(texts.code(normalized[off[t]:off[last + 1]], last - t + 1) if i in unknown else -1)
            t = last + 1
        return out_ids, begins, ends, columns

    def unknown_texts(self) -> "UnknownTexts":
        """The codes of the texts unknown pieces stood for (`_live_populated`), built once."""
        found = self.__dict__.get("_unknown_texts")
        if found is None:
            found = self._unknown_texts = UnknownTexts()
        return found

    def fragment_live(self, text: str, start: int, end: int, *, head: bool, tail: bool,
                      score: float):
        """`fragment_spans` of a unigram model whose path reaches ``text[start:end]`` with the
        score `score`: (spans, (before, added, count, bound, char) lists per token, end score), or
        None when the model cannot give them (see `UnigramEncoder.encode_live`)."""
        part = text[start:end]
        normalized, n2o = self.normalizer.normalize_offsets(part.encode("utf-8", "surrogatepass"),
                                                            head=head, tail=tail)
        run = self.tables()["unigram"].encode_live(normalized, score, flat=True)
        if run is None:
            return None
        if isinstance(run.tokens, array):  # few words (a `FlatRun`): in Python
            ids, begins, ends, extra = self._live_populated_flat(normalized, n2o, run)
        else:
            ids, begins, ends, *extra = (c.tolist() for c in self._live_run_columns(normalized, n2o, run))
        to_char = byte_to_char_offsets(part)
        if to_char is None:
            spans = [(i, start + b, start + e) for i, b, e in zip(ids, begins, ends)]
        else:
            spans = [(i, start + to_char[b], start + _char_end(to_char, e)) for i, b, e in zip(ids, begins, ends)]
        return spans, extra, run.end

    def _tokens(self, text: str, spans: list[tuple[int, int, int, bool]]) -> list[Token]:
        to_char = byte_to_char_offsets(text)
        char_spans = [(b, e) if to_char is None else (to_char[b], _char_end(to_char, e))
                      for _, b, e, _ in spans]
        tiled = tile_spans(char_spans, len(text))
        return [Token(i, self.pieces[i], self.token_bytes(i), s, e, partial, special)
                for (i, _, _, special), (s, e, partial) in zip(spans, tiled)]

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text exactly as SentencePieceProcessor::DecodeOptimized: control pieces
        vanish, unknown ones become the unk surface, byte pieces join into characters (one
        U+FFFD per malformed byte) and the leading dummy-prefix space is removed."""
        spec = self.normalizer
        strip = spec.add_dummy_prefix or spec.remove_extra_whitespaces
        parts: list[str] = []
        queue = bytearray()
        is_bos_ws = True
        written = False
        size = len(self.types)
        for token_id in ids:
            kind = self.types[check_id(token_id, size)]
            if kind == BYTE:
                queue.append(piece_to_byte(self.pieces[token_id]) or 0)
                continue
            if queue:
                parts.append(decode_utf8_per_byte(bytes(queue)))
                written = written or bool(parts[-1])
                queue.clear()
            if written:
                is_bos_ws = False
            if kind == CONTROL:
                continue
            piece = self.pieces[token_id]
            has_bos_ws = False
            if is_bos_ws and strip:
                has_bos_ws = piece.startswith(SPACE)
                stripped = piece[1:] if has_bos_ws else piece
                has_bos_ws = has_bos_ws and not spec.remove_extra_whitespaces
            else:
                stripped = piece
            surface = (self.unk_surface if kind == UNKNOWN or token_id == self.tables()["proc_unk"]
                       else stripped.replace(SPACE, " "))
            parts.append(surface)
            written = written or bool(surface)
            if has_bos_ws or written:
                is_bos_ws = False
        if queue:
            parts.append(decode_utf8_per_byte(bytes(queue)))
        text = "".join(parts)
        if self.denormalizer is not None:
            text = self.denormalizer.normalize(text.encode("utf-8", "surrogatepass"))[0].decode(
                "utf-8", "surrogateescape")
        return text


class UnknownTexts:
    """Codes for the normalized texts that unknown pieces (one character each) stood for, so
    that an int column keeps them: a character repeated `count` times is its code point, any
    other text of `count` characters an index into a table (-2 - index), and bytes that are
    not `count` characters of UTF-8 (or a full table) -1.

    >>> texts = UnknownTexts()
    >>> texts.code("東東".encode(), 2) == ord("東"), texts.code(b"+#-", 3), texts.code(bytes([255]), 1)
    (True, -2, -1)
    >>> texts.text(-2), texts.text(ord("x"))
    ('+#-', 'x')
    """

    #: the most texts kept in the table
    LIMIT = 1 << 20

    def __init__(self) -> None:
        self._texts: list[str] = []
        self._index: dict[str, int] = {}

    def code(self, data: bytes, count: int) -> int:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return -1
        if len(text) != count:
            return -1
        if text == text[0] * count:
            return ord(text[0])
        k = self._index.get(text)
        if k is None:
            if len(self._texts) >= self.LIMIT:
                return -1
            k = self._index[text] = len(self._texts)
            self._texts.append(text)
        return -2 - k

    def text(self, code: int) -> str:
        """The text of a code >= 0 (one character: the caller repeats it) or <= -2."""
        return chr(code) if code >= 0 else self._texts[-2 - code]


def _id_mask(ids, n_pieces: int):
    """A bool lookup table over ids -1..n_pieces-1 (-1 is its last entry): a token column
    indexes it (`np.isin`'s sort per call would cost more than the rest of a small region)."""
    import numpy as np

    mask = np.zeros(n_pieces + 1, dtype=bool)
    mask[[i for i in ids if -1 <= i < n_pieces]] = True
    return mask


#: what one float32 addition may err by while |score| <= SCORE_RESET < 2^17 (half an ulp, doubled)
_RUN_ULP = 2.0 ** -7


def _run_bounds(bound, added, first, last):
    """Per run of unknown pieces that populating merges into one token (pieces first..last,
    a cover of all pieces in order): a bound on the path score before the run under which
    every word starting inside it passes its own bound (each word's start is the run's start
    plus the additions before it, each erring by at most `_RUN_ULP`); -inf when the run
    starts inside a word and holds another word's start (no score is known to check it
    from); NaN when it holds no word start."""
    import numpy as np

    marks = ~np.isnan(bound)
    count = last - first + 1
    start = np.repeat(first, count)                               # (n,) each piece's run start
    part = np.concatenate([[0.0], np.cumsum(np.abs(added))])
    grown = (part[:-1] - part[start]) * (1 + 2.0 ** -20) + (np.arange(len(bound)) - start) * _RUN_ULP
    with np.errstate(invalid="ignore"):
        adjusted = np.where(marks, bound - grown, np.inf)
    least = np.minimum.reduceat(adjusted, first)
    inner = np.add.reduceat(marks, first) - marks[first] > 0
    return np.where(marks[first], least, np.where(inner, -np.inf, np.nan))


def _run_bound(bound: Sequence[float], part: list[float], first: int, last: int) -> float:
    """`_run_bounds` of one run, pieces first..last, in Python floats (the same operations
    in the same order; `part`: the running sums of |added| from the first piece, part[0] 0)."""
    least, inner = math.inf, False
    for p in range(first, last + 1):
        b = bound[p]
        if b == b:  # a word starts at piece p
            grown = (part[p] - part[first]) * (1 + 2.0 ** -20) + (p - first) * _RUN_ULP
            least = min(least, b - grown)
            inner = inner or p > first
    if bound[first] == bound[first]:
        return least
    return -math.inf if inner else math.nan


def _char_columns(text: str, begins, ends):
    """Byte spans into ``text``'s UTF-8 -> character spans, as `SentencePieceTokenizer._tokens`
    maps them: a start to its byte's character, an end past the character of the byte
    before it (0 stays 0)."""
    import numpy as np

    if text.isascii():
        return begins, ends
    raw = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    to_char = np.empty(len(raw) + 1, dtype=np.int64)                  # (bytes + 1,)
    np.cumsum((raw & 0xC0) != 0x80, out=to_char[:-1])                 # lead bytes so far
    to_char[:-1] -= 1
    to_char[-1] = len(text)
    return to_char[begins], np.where(ends > 0, to_char[ends - 1] + 1, 0)


def _char_end(to_char: list[int], byte_end: int) -> int:
    """The character offset just past byte `byte_end - 1` (byte ends may fall inside one)."""
    if byte_end == 0:
        return 0
    return to_char[byte_end - 1] + 1
