"""Live re-tokenization: after an edit, re-encode only the pre-tokens the edit can affect.

`IncrementalEncoder(tokenizer, text)` holds a document's token ids and their character spans
as flat arrays (`ids`, `starts`, `ends`, `flags`: the GUI's TokenStore layout). After
`apply_edit(start, removed_len, inserted_text)`, `ids == tokenizer.encode(text, special=...)`
and the spans equal `tokenizer.segment(...)`'s, at a cost that depends on the size of the edit,
not of the document.

Why a small region suffices (byte-level BPE, one pre-tokenizer regex from VERIFIED):

* Pre-tokenization is a findall of the pattern, and the ids are the concatenated BPE of each
  pre-token (see bytelevel.py). The VERIFIED patterns have no look-behind, so the matches from
  a pre-token boundary p on depend only on text[p:].
* A *cut* is a position r whose two neighbouring characters alone guarantee (1) r is a
  pre-token boundary, whatever the rest of the text, and (2) the pre-tokens before r depend only
  on text[:r + 1]. CUT_RULES lists such character pairs (the reasoning is in CUT_RULES's
  comments; tests/core/test_incremental.py checks (1) and (2) on random text).
* With r the last cut before the edit and q the first cut after it, both between unchanged
  characters, the pre-tokens before r and after q (shifted) are unchanged, and only text[r:q]
  is pre-tokenized and encoded again (the tokenizer's pre-token cache makes the BPE nearly free).

Special tokens (special=True) cut the text into ordinary segments encoded on their own. They
match leftmost-longest, so a match at p depends only on text[p:p + longest]: the scan restarts
`longest` characters before the edit and runs until no old or new match straddles the same
(shifted) point after it; from there the old matches stand. Segment ends count as cuts.

llama.cpp's byte-level BPE (GGUF ``gpt2`` vocabularies, `LlamaBPETokenizer`) is handled alike
when its pre-tokenizer is one stage whose regex is in VERIFIED (gpt-2, llama-bpe/llama3, qwen2
and the other names mapping to those regexes), or two stages, a digit stage then GPT-2's regex
(smollm, starcoder, command-r, refact, codeshell, exaone, minerva-7b, mellum2), whose one-regex
form `patterns.DIGITS_GPT2` is in VERIFIED, because then:

* its words are that regex's matches (one stage: `LlamaPreTokenizer.split` is one
  `split_pieces`, which equals the findall, and a VERIFIED regex never runs on the wide-space
  rewrite; two stages: `llama_pre.ONE_REGEX` holds the regex whose matches on the whole text
  are `split`'s words, see patterns.DIGITS_GPT2 and its property test against `split`), and
  the session encodes each word alone: a word with no byte the vocabulary lacks
  and no lone surrogate gets the ids of the byte-level encoder's `encode_pretoken`
  (`LlamaBPETokenizer.words_exact` says when; a region failing it falls back);
* special tokens are what llama.cpp's partition cuts out: user-defined ones always, control
  and unknown ones with special=True. It cuts each text out everywhere in turn, longest
  first, which finds the same matches as a leftmost-longest scan when no two occurrences of
  those texts can overlap (`_overlap_free`): then the matches are all occurrences either way.
  Those tokens, and no others, are flagged special, as `LlamaTokenizer.segment` flags them;
  a byte-level token with one of their ids would spell one of their texts, and the partition
  leaves no whole occurrence in the text it hands on;
* spans follow `segment`'s `tile_spans`: the tokens sharing a split character each span all
  the characters of their run (`tiled`);
* no BOS/EOS: the Tokenize view shows `encode`/`segment`, which add none.

llama.cpp's SentencePiece BPE (GGUF ``llama`` vocabularies: Llama 2, Mistral, Gemma;
`LlamaSPMTokenizer`) has no pre-tokenizer regex; its cuts come from the vocabulary:

* the session merges two adjacent symbols only into a token, so it never merges across two
  adjacent characters that stand side by side in no token text (spaces escaped to ``▁``;
  `LlamaSPMTokenizer.joinable_pairs`). Such a place splits a fragment into parts that never
  interact: a pair's place in the queue is its score, then its position, so each part gets
  the merges, final symbols and byte fallback it gets alone (the argument of the class
  docstring, whose word starts, a ``▁`` after another character, are such places; CJK text,
  whose pairs are mostly in no token, has them nearly everywhere). A *cut* is such a place
  inside a fragment: the tokens before it depend only on the text before it, and the tokens
  after it are those of the fragment's tail, encoded without the prepended ``▁``
  (`fragment_spans` with after_special false); a run of joinable pairs is one region, as
  it is one merge in llama.cpp.
* the region between the cut r before the edit and the cut q after it (or the fragment ends
  when there are none) is re-encoded piece by piece between its special tokens: a piece that
  starts a fragment (at r when r is the text's start or a special token's end, or after a
  special token in the region) gets the prepended ``▁`` of add_space_prefix, as every
  fragment does (no fragment follows another); the one starting at a cut does not. The
  special tokens are the partition's, found as for llama.cpp's BPE (`_rescan_matches`), and
  flagged special by place, as `segment` flags them (a merge after a prepended ``▁`` may spell
  a user-defined token's text: not special there).
* the tokens' raw spans (the prepended ``▁`` clamped to zero width) tile the text with no gap
  when every byte has a token (its ``<0xNN>`` one, else unk; `_spm_reason`), so `segment`'s
  tiling (`tile_spans`: byte-fallback tokens of one character form a cluster, each spanning
  it, partial) is local: the region's clusters are its own (`_tiled`).
* lone surrogates are characters like any other (three byte-fallback tokens), and there is
  no normalizer: nothing else falls back. The whole text is encoded from the tokenizer's
  `segment_columns`, ids included (one pass, no Token per token).

SentencePiece BPE .model files (`SentencePieceTokenizer`: Mistral's, botchan's) run a normalizer
first, whose output the model merges; a cut is a place between two characters where both the
normalizer and the model fall apart (`EditCuts`, a rule on the two characters alone):

* the normalizer is a sequence of steps, each the longest user-defined piece, else the longest
  charsmap key, else one character (one byte of malformed UTF-8), that starts where the last
  ended. When every key is whole characters (`key_characters`; else `reason`), steps start
  and end on characters, and one that crosses a place holds both its characters: no step
  crosses it when no user piece holds the pair and the second character continues no charsmap
  key. Each side's steps are then its own (a longest match that does not cross sees the same
  bytes). Its state there is ``is_prev_space`` (with remove_extra_whitespaces): false when
  every output the step ending there can make (the first character alone, or a user piece it
  ends; it ends no longer charsmap key) does not end with a blank once escaped; that also stops
  a text's end from dropping trailing blanks, a literal ``▁`` among them, past it. Every output
  the step starting there can make must be non-empty, so that the last token before the place
  ends exactly there (a token's span ends where the next output byte comes from).
* the model starts from the normalized characters (user-defined pieces as one symbol) and only
  merges into pieces, in score-then-position order, so, as for llama.cpp, no merge crosses two
  output characters that stand side by side in no piece (`piece_pairs`), and each side gets
  the merges it gets alone (a merged UNUSED piece splits back by the one pair that can form it,
  the same anywhere). Without byte fallback a run of unknown pieces becomes one ``<unk>``: the
  two characters must not both be unknown alone. Lone surrogates are never beside a cut.
* so the tokens before a cut are those of the text before it normalized as a text's head, and
  the tokens after it those of the text after it normalized as a middle part
  (`Normalizer.normalize_offsets` with head=False: no leading blanks dropped, no dummy prefix,
  ``is_prev_space`` false), with the same spans. The region between the cuts around an edit
  is re-encoded piece by piece between special tokens (special=True: control and unknown
  pieces' texts, cut out leftmost-longest; each text between them is encoded on its own) by
  `SentencePieceTokenizer.fragment_spans`, a piece being a head after the text's start or a
  special token and a tail before one or the text's end (trailing blanks dropped, the dummy
  suffix of treat_whitespace_as_suffix).
* spans are tiled as `segment` tiles them (`_tiled_with_gaps`): dropped text joins the cluster
  after it, so a region ending at an unchanged special token takes that token in; the last
  cluster takes in the rest of the text: the region's when no token follows it (text after a
  cut can be all blanks that the end drops), else the one before the region when the region
  gives no token, and that cluster ends at the region again once it does.
* unigram models (`UnigramEncoder` of core.unigram_fast) have the same cuts: no piece crosses
  one, so the Viterbi search passes it, and the text after it depends on the text before it
  only through the float32 path score there (sentencepiece adds path scores from the text's
  start, resetting them to 0 past 1e5). The encoder keeps, per token, the path score before
  it, the score it adds (and how many times: a merged run of unknown pieces), and at the first
  token of each word checked alone its `limits()` bound, -inf for a word viterbi_from
  segmented (`encode_live`, `_live_populated`). A region starts from the score before it and
  ends where a word's check starts (`_word_start`). When its end score differs from the one
  kept there, `_walk` carries the new scores on: a word whose start score stays within its
  bound keeps its tokens, and float32 sums over its tokens' scores (numpy, sequential) give
  the next word's start; any other word is segmented again from its tokens' bytes
  (`_word_again`: pieces' texts, the texts unknown pieces stood for, byte pieces' bytes) and
  goes on when its tokens stay, else is re-encoded from the text between the cuts around it.
  The walk stops where a word's new start score, after the reset, is the one kept there (all
  after it is then the old text's), at a special token or at the end. The old and new scores
  differ by about the edit's own score, and they only meet again where both reset at the
  same place: on the bench's 1 MB document a walk passes 3-4 resets at the median. From a
  word after a reset of the new scores to the word after their next one, the walk depends
  only on that word's start score and the tokens, so such chains are kept and replayed by
  later walks (`core.chain_memo`).
* word and char models re-encode in full (`reason`); so do models without an unknown piece,
  charsmaps whose keys or outputs are not whole UTF-8 characters, and unigram scores that only
  the whole-text Viterbi handles.

llama.cpp's WordPiece (GGUF ``bert`` vocabularies, `WordPieceTokenizer`) has neither merges
nor a normalizer run over the text; its cuts come from `preprocess` (`WordPieceTokenizer.edit_cuts`,
a rule on the two characters alone):

* `preprocess` decides each character's fate on its own (`char_kind`: accent stripping and
  lowercasing map one character to one, controls, NUL, U+FFFD and marks vanish, whitespace of
  unicode_set_whitespace, NBSP and U+3000 included, ends a word, punctuation, ASCII symbols and
  CJK ideographs are one-character words) and carries only the word being built from one
  character to the next; each word is then cut greedily into vocabulary entries on its own
  (or is one [UNK]). After a one-character word, or between a kept word character and
  whitespace or a one-character word, no word is being built: the words on each side, and
  their tokens, are their own. The character before such a place being kept, the last token
  before it ([UNK] included) ends exactly there, and the tokens after it start at or after it.
* the region between the cuts around an edit is re-encoded piece by piece between the
  partition's special tokens (found as for llama.cpp's BPE, `_rescan_matches`; flagged special
  by place) by `WordPieceTokenizer.fragment_spans` (every fragment alike: no prefix space).
* `segment` tiles raw spans that leave gaps (whitespace, dropped characters): a gap joins the
  cluster after it, the rest of the text the last cluster, as for .model files; so the region
  is tiled as there (`_tiled_with_gaps`, an unchanged special token at the region's end joining
  it, `_retile_before`). Lone surrogates are dropped characters like any other.
* `encode`/`segment` add no [CLS]/[SEP] (llama.cpp's WPM session adds them only with
  add_special, which the Tokenize view does not ask for). A vocabulary without an unknown
  token re-encodes in full (`_wpm_reason`): a word with no match would give no token at all.

llama.cpp's unigram (GGUF ``t5`` vocabularies, `LlamaUGMTokenizer`) normalizes each fragment
(charsmap, user-defined tokens, spaces) and runs a Viterbi over it in double:

* its cuts (`LlamaUGMTokenizer.edit_cuts`) follow an ASCII character that the normalizer keeps
  apart (in no longer charsmap key or user-defined token) and come before a character that
  opens a word (whatever piece the normalizer begins there starts with another byte than a
  space). After whitespace, with remove_extra_whitespaces, the normalized text has one ▁ there,
  whatever came before, as at a fragment's start; no piece holds a ▁ after another character
  and ▁ is a piece, so every path passes through it and no unknown run joins across it. After
  another character (digits, most punctuation, newlines under nmt_nfkc), where no piece holds
  the two normalized characters side by side and one of them is a piece: the part after it is
  normalized as going on inside a word (`inside`: no ▁ before it). So a run without spaces, a
  URL or CJK, is cut too.
* the path scores there differ with the text before, but a double sum of float32 scores is
  exact while no value passes 2**(53 + low), where every score is a multiple of 2**low (for
  botchan's, texts of up to 2.8M characters: `exact_chars`); then each comparison after the ▁
  is the same from any start score, and the words after a cut are the part's own. So an edit
  re-encodes the region between two cuts, each word alone and cached
  (`_small_fragment_spans`), and nothing after it: no walk. A longer text, or a vocabulary
  whose scores are too fine or not finite, re-encodes in full (`_local_ok`, `edit_reason`).
* spans are tiled with gaps as for WordPiece. A fragment's first token takes in the blanks
  before it (`tile_spans`), so a region never starts or ends where only blanks lie between
  the fragment's start and the cut (`_first_word`): that token belongs to the word after them.

The text lives in `TextBlocks`: copying a 1 MB str of Cyrillic already costs over 1 ms here.

Where the shortcut is not provably right the encoder re-encodes everything (`full_encodes`
counts it), so the result is always exact:

* always (`reason` says why): tokenizers other than ByteLevelBPETokenizer, LlamaBPETokenizer,
  LlamaSPMTokenizer, WordPieceTokenizer, LlamaUGMTokenizer and SentencePiece BPE and unigram
  .model files, a regex
  outside VERIFIED (custom ones, several Split stages, llama.cpp regex stages without a
  one-regex form); with special=True, added tokens with lstrip/rstrip/single_word/normalized
  flags, or add_prefix_space; for llama.cpp, partition tokens with the LSTRIP/RSTRIP
  attributes or texts that can overlap, or add_space_prefix (byte-level BPE); for its
  SentencePiece BPE, a vocabulary whose words can interact (a token with ``▁`` after another
  character, or a score that is not a number: `LlamaSPMTokenizer._words` is None) or that
  has bytes without a token (no ``<0xNN>`` token and no unk: llama.cpp drops them); for its
  WordPiece, a vocabulary without an unknown token; for its unigram, spaces that do not merge,
  or as a suffix, pieces with ``▁`` after another character or no ``▁`` piece, and texts
  longer than `exact_chars`;
* while the text has lone surrogates (not for llama.cpp's SentencePiece BPE or WordPiece nor
  .model files), or the tokenizer's normalizer (NFC, NFKC, ...) would change it (prepare()
  then rewrites the text, so offsets no longer line up);
* for one edit, when the region's token bytes differ from its text bytes (a vocabulary that
  lacks some byte and drops it or maps it to unk), or, for llama.cpp, when the region holds a
  byte the vocabulary lacks; and then while the tokens' bytes are not the text's (the spans
  of the tokens around a dropped byte take it in, so they no longer start at cuts).

`supports_edits` is `local_edits` for ByteLevelBPETokenizer only: core.chunked slices the
text for it, and knows nothing of llama.cpp's partition nor of SentencePiece's normalizer.

`nbytes` is the tokens' bytes all together, as the view's TokenStore counts them (for
llama.cpp's SentencePiece BPE, the prepended spaces included).
"""
from __future__ import annotations

import math
import struct
import unicodedata
import weakref
from array import array
from bisect import bisect_left, bisect_right
from time import perf_counter
from typing import TYPE_CHECKING, NamedTuple

import regex

from forma_gui.core import patterns as pats
from forma_gui.core.segment import byte_count, token_lengths
from forma_gui.core.sentencepiece import SCORE_RESET as RESET
from forma_gui.core.tokenizer import Token

if TYPE_CHECKING:  # pragma: no cover
    from forma_gui.core.tokenizer import Tokenizer

#: flag bits per token (the same values as app.token_store)
PARTIAL = 1
SPECIAL = 2

#: regex sources the cut rules were checked for (every one matches every character, and
#: none looks behind); llama.cpp's spellings of llama3/qwen2 are what GGUF vocabularies use,
#: DIGITS_GPT2 is the one-regex form of its "\p{N}, then GPT-2's regex" (smollm, starcoder, ...)
VERIFIED: frozenset[str] = frozenset(
    [pats.PATTERNS[name] for name in ("gpt2", "cl100k", "o200k", "llama3", "qwen2")]
    + [pats.HF_BYTELEVEL_REGEX, pats.DIGITS_GPT2] + list(pats.CPP_PATTERNS.values()))

#: character pairs (before, after) at which every VERIFIED pattern always cuts. In each of them
#: a pre-token can only start with an optional U+0020 (gpt2), or an optional character that is
#: not CR, LF, a letter or a digit (cl100k, o200k, llama3, qwen2), or an apostrophe
#: (contractions); digit runs never take a prefix in cl100k/o200k/llama3/qwen2 (nor does a
#: digit, always a pre-token of its own, in DIGITS_GPT2), and no alternative continues past a
#: character outside its own class. For (2): a match looks at most one character past its own
#: run (`\s+(?!\S)`, `\s+(?![^\s\p{N}])`, `\s++$`, the end of `\p{L}++`, `\p{N}++`,
#: `[\r\n]*`), or up to three past an apostrophe, which these pairs rule out at r.
CUT_RULES: dict[str, str] = {
    # SPACE_SAFE's own rule: nothing runs from a non-space across a following space
    "space after a non-space": r"(?<=\S)(?= )",
    # digit runs take nothing but digits; "'" then a digit is no contraction
    "digit, then a non-digit": r"(?<=\p{N})(?=\P{N})",
    # only U+0020 may lead a digit (gpt2's " ?\p{N}"); the others take no prefix at all
    "non-digit other than U+0020, then a digit": r"(?<=[^ \p{N}])(?=\p{N})",
    # CR/LF are excluded from every letter prefix; whitespace runs stop at the letter
    "CR or LF, then a letter": r"(?<=[\r\n])(?=\p{L})",
    # letter runs end at punctuation; "'" (o200k contractions) and marks (o200k letters) excluded
    "letter, then punctuation": r"(?<=\p{L})(?=[^\s\p{L}\p{N}\p{M}'])",
    # ... and at whitespace, which only ever leads a pre-token
    "letter, then whitespace": r"(?<=\p{L})(?=\s)",
}
CUT = regex.compile("|".join(CUT_RULES.values()))
CUT_BACKWARD = regex.compile("|".join(CUT_RULES.values()), regex.REVERSE)
#: first window (characters) searched for a cut; doubled until one is found
CUT_WINDOW = 64
#: with apply_edit(local_only=True), the most characters searched for a cut on either side of
#: an edit: a longer run without one (100k CJK characters with no punctuation, 200k digits,
#: a screen of spaces) is re-encoded in full by the caller's worker, not in place
LOCAL_LIMIT = 20_000
#: a unigram edit's walk: its first stretch of tokens summed at once (`_sum_words`), doubled
#: while nothing stops it, up to the most; after a reset inside a word the next is a quarter
#: more than the one before (resets come regularly); after a stretch that ended past where
#: the old scores were reset, a short one (the new ones are reset a few words later, if at all)
WALK_WINDOW, MAX_WALK_WINDOW, WALK_AFTER_CUT = 1 << 14, 1 << 17, 1 << 9
#: with local_only, the most words a walk re-encodes (from the text: `_reencode_word`; from its
#: tokens' bytes: `_word_again`) before the edit goes to the worker
WALK_REGIONS, WALK_WORDS = 64, 1024
#: at most this many tokens' bytes counted in Python (`segment.byte_count`), more in numpy
FEW_TOKENS = 64
#: at most this many word bounds rounded to float32 in Python (`_bounds32`), more in numpy
FEW_BOUNDS = 32
#: a unigram .model's per-token columns (`IncrementalEncoder._scores`)
_SCORE_COLUMNS = {"before": "f", "adds": "f", "count": "i", "bound": "f", "char": "i"}
#: token runs whose bytes `_word_again` keeps (past this it starts afresh)
SPELLED_WORDS = 4096
_SURROGATE = regex.compile("[\ud800-\udfff]")
_ASCII = regex.compile("[\x00-\x7f]")
_NOT_SPACE = regex.compile("[^ ]")
_ASCII_BACKWARD = regex.compile("[\x00-\x7f]", regex.REVERSE)
#: the _Plan per llama.cpp or SentencePiece tokenizer and mode (its overlap check is not free)
_CACHED_PLANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Plan(NamedTuple):
    """How an IncrementalEncoder treats one tokenizer in one mode."""

    pattern: regex.Pattern | None        # the VERIFIED pre-tokenizer regex (None: no regex, see reason)
    reason: str                          # why edits re-encode in full ("" when they do not)
    matched: tuple[tuple[str, int], ...]  # (text, id) the special-token scan cuts out; the first listed wins
    special_ids: frozenset[int]          # ids of the tokens flagged special
    disjoint: bool = False               # no two matches of `matched` can overlap (`_overlap_free`)


class EditNotLocal(ValueError):
    """`IncrementalEncoder.apply_edit(..., local_only=True)` met an edit it cannot re-encode
    locally (a reason to re-encode the whole text, or no cut within LOCAL_LIMIT characters).
    The encoder then holds the edited text with stale tokens: `set_text`, or an `apply_edit`
    without local_only, encodes it afresh."""


class Splice(NamedTuple):
    """What the last edit did to the token list: tokens[first:first + removed] -> `added` tokens."""

    first: int
    removed: int
    added: int

    def then(self, b: "Splice") -> "Splice":
        """One Splice for this one followed by `b` (whose indices are those after this one).

        >>> Splice(2, 1, 3).then(Splice(10, 2, 2))
        Splice(first=2, removed=8, added=10)
        >>> Splice(5, 2, 2).then(Splice(1, 1, 2))
        Splice(first=1, removed=6, added=7)
        """
        a_end = self.first + self.added
        if a_end > b.first:  # through b
            a_end = a_end + b.added - b.removed if a_end >= b.first + b.removed else b.first + b.added
        first = min(self.first, b.first)
        end = max(a_end, b.first + b.added)
        net = self.added - self.removed + b.added - b.removed
        return Splice(first, end - first - net, end - first)


class TextBlocks:
    """A long str kept as ~4K-character blocks, so that an edit copies a block, not the text.

    >>> t = TextBlocks("hello world"); t.replace(5, 6, ", "); str(t)
    'hello, world'
    """

    SIZE = 4096

    def __init__(self, text: str = "") -> None:
        self.set(text)

    def set(self, text: str) -> None:
        n = self.SIZE
        self._blocks = [text[i:i + n] for i in range(0, len(text), n)]
        self._starts = list(range(0, len(text), n))  # offset of each block
        self._len = len(text)
        self._joined: str | None = text

    def __len__(self) -> int:
        return self._len

    def __str__(self) -> str:
        if self._joined is None:
            self._joined = "".join(self._blocks)
        return self._joined

    def slice(self, a: int, b: int) -> str:
        """text[a:b] (a, b clamped)."""
        a, b = max(a, 0), min(b, self._len)
        if a >= b:
            return ""
        if self._joined is not None:
            return self._joined[a:b]
        i = bisect_right(self._starts, a) - 1
        j = bisect_right(self._starts, b - 1) - 1
        si, sj = self._starts[i], self._starts[j]
        if i == j:
            return self._blocks[i][a - si:b - si]
        return "".join([self._blocks[i][a - si:], *self._blocks[i + 1:j], self._blocks[j][:b - sj]])

    def replace(self, a: int, b: int, new: str) -> None:
        """text[a:b] = new."""
        if not self._blocks:
            self.set(new)
            return
        i = bisect_right(self._starts, a) - 1
        j = bisect_right(self._starts, b) - 1
        si, sj = self._starts[i], self._starts[j]
        merged = self._blocks[i][:a - si] + new + self._blocks[j][b - sj:]
        n = self.SIZE
        pieces = [merged[k:k + n] for k in range(0, len(merged), n)] if len(merged) > 2 * n else [merged] * bool(merged)
        starts = []
        pos = si
        for piece in pieces:
            starts.append(pos)
            pos += len(piece)
        delta = len(new) - (b - a)
        self._blocks[i:j + 1] = pieces
        self._starts[i:j + 1] = starts
        tail = self._starts
        for k in range(i + len(pieces), len(tail)):
            tail[k] += delta
        self._len += delta
        self._joined = None


def _score_column(index: int) -> property:
    """A view of one of a unigram .model's per-token score columns (`IncrementalEncoder._scores`;
    the walk reads them a hundred times an edit)."""
    return property(lambda self: self._scores.views[index])


class IncrementalEncoder:
    """A document's tokens, kept current edit by edit (see the module docstring).

    >>> from forma_gui.formats.loader import load_tokenizer  # doctest: +SKIP
    >>> enc = IncrementalEncoder(load_tokenizer("encoder.json"), "Hello world")  # doctest: +SKIP
    >>> list(enc.apply_edit(5, 0, ","))  # doctest: +SKIP
    [15496, 11, 995]
    """

    def __init__(self, tokenizer: "Tokenizer", text: str = "", *, special: bool = False) -> None:
        self.tokenizer = tokenizer
        self.special = special
        plan = _plan(tokenizer, special)
        self._pattern, self.reason = plan.pattern, plan.reason
        self._forms = tuple(getattr(tokenizer, "_forms", ()))
        self._prefix_space = bool(getattr(tokenizer, "add_prefix_space", False))
        self._special_ids = plan.special_ids
        self._added = _added_matcher(plan.matched) if plan.matched else None
        self._llama = _is_llama(tokenizer)
        self._disjoint = plan.disjoint  # matches never overlap (see _llama_reason, _sentencepiece_plan)
        # llama.cpp's SentencePiece BPE and SentencePiece .model files: whole texts from their
        # columns, regions between the cuts of their edit_cuts rule from their fragment_spans
        sentencepiece = _is_sentencepiece(tokenizer)
        # llama.cpp's WordPiece and unigram: whole texts from their columns too, regions
        # between the cuts of their edit_cuts rule from their fragment_spans, tiled with gaps
        # as for .model files (a unigram while its sums are exact: `_exact_chars`)
        wordpiece = _is_wpm(tokenizer) or _is_ugm(tokenizer)
        self._columns = _is_spm(tokenizer) or sentencepiece or wordpiece
        self._spm = _is_spm(tokenizer) and not self.reason
        self._sp = sentencepiece and not self.reason
        # a SentencePiece unigram .model: regions start from the path score before them, and
        # the tokens after a region are re-checked until the path scores meet again (`_walk`)
        self._ug = self._sp and getattr(tokenizer, "algorithm", "") == "unigram"
        # per token: the path score before it, the score it adds and how many times, its
        # word's bound (float32: the scores are float32 values; the bounds rounded down) and
        # the text of an unknown piece (`_live_populated`: `UnknownTexts`, else -1); a splice
        # that changes the token count moves the shorter side of the columns, not the tail
        self._scores = None  # (a DequeColumns once a text has them: numpy is imported late)
        self._spelled_words: dict[tuple, tuple | None] = {}  # `_word_again`'s token runs
        self._chains = None  # a unigram .model's walk: its chains between resets (`ChainMemo`)
        self._reset_exit = False  # the walk's last stretch ended after a reset inside a word
        if self._ug:
            from forma_gui.core.chain_memo import ChainMemo

            self._chains = ChainMemo()
        self._wp = wordpiece and not self.reason
        self._exact_chars = tokenizer.exact_chars() if self._wp and _is_ugm(tokenizer) else None
        self._inside = False  # llama.cpp's unigram: the region starts at a cut inside a word
        # the tokenizer's cut rule on two adjacent characters (edit_cuts)
        self._is_cut = tokenizer.edit_cuts() if self._spm or self._sp or self._wp else None
        self._words_exact = getattr(tokenizer, "words_exact", None)  # llama.cpp BPE: per region
        # characters no region may hold (lone surrogates, and for llama.cpp BPE the code
        # points its Unicode tables leave undefined): while the text has any, edits re-encode it
        self._undefined = getattr(tokenizer, "count_undefined", None)
        self._blocks = TextBlocks()
        self.full_encodes = 0
        #: seconds spent carrying a unigram model's path scores on after edits (`_walk`), for
        #: the bench's breakdown of an edit's cost
        self.walk_seconds = 0.0
        self._stale = False  # the tokens are not the text's (an EditNotLocal was raised)
        self.ids = array("i")
        self.starts = array("i")
        self.ends = array("i")
        self.flags = bytearray()
        self.set_text(text)

    # ---- a unigram .model's score columns (views: take them again after a splice) ---------
    _before, _adds, _count, _bound, _char = (_score_column(index) for index in range(len(_SCORE_COLUMNS)))

    # ---- public state ------------------------------------------------------------------
    @property
    def incremental(self) -> bool:
        """Whether edits can be re-encoded locally for this tokenizer and mode (see `reason`)."""
        return not self.reason

    @property
    def text(self) -> str:
        return str(self._blocks)[self._offset:]

    @property
    def n_chars(self) -> int:
        """len(text), without building it."""
        return len(self._blocks) - self._offset

    def __len__(self) -> int:
        """Number of tokens."""
        return len(self.ids)

    def token(self, k: int) -> Token:
        """Token k as a Token record."""
        tid = self.ids[k]
        return Token(tid, self.tokenizer.piece(tid), self.tokenizer.token_bytes(tid), self.starts[k],
                     self.ends[k], bool(self.flags[k] & PARTIAL), bool(self.flags[k] & SPECIAL))

    def tokens(self) -> list[Token]:
        """All tokens, as `tokenizer.segment(text, special=...)` returns them."""
        return [self.token(k) for k in range(len(self.ids))]

    # ---- whole text ----------------------------------------------------------------------
    def set_text(self, text: str) -> array:
        """Encode `text` from scratch; returns `ids`."""
        old = len(self.ids)
        self._offset = int(self._prefix_space and bool(text) and not text.startswith(" "))
        inner = " " * self._offset + text
        self._blocks.set(inner)
        self._surrogates = _count_barriers(text, self._undefined)
        self._clean = not self._surrogates and all(unicodedata.is_normalized(f, text) for f in self._forms)
        if self._columns:
            self._set_columns(text)
        else:
            ids = self.tokenizer.encode(text, special=self.special)
            self.ids = array("i", ids)
            self._set_spans(text, inner, ids)
        if self._added is not None:
            self._find_all_matches(inner)
        self._stale = False
        self.last_splice = Splice(0, old, len(self.ids))
        return self.ids

    def adopt(self, text: str, ids: array, starts: array, ends: array, flags: bytearray, nbytes: int,
              *, matches: list[tuple[int, int]] | None = None) -> None:
        """Take `text` with the columns `set_text(text)` would compute, computed elsewhere.

        core.chunked encodes a huge text slice by slice (no call holds the GIL for long) and
        hands the result over here. `text` must be clean (no lone surrogates, normalized under
        the tokenizer's forms); `matches` are the added-token spans when special=True.
        """
        old = len(self.ids)
        self._offset = int(self._prefix_space and bool(text) and not text.startswith(" "))
        self._blocks.set(" " * self._offset + text)
        self._surrogates, self._clean, self._aligned = 0, True, True
        self.ids, self.starts, self.ends, self.flags, self.nbytes = ids, starts, ends, flags, nbytes
        self._stale = False
        if self._chains is not None:
            self._chains.clear()
        if self._added is not None:
            self._m_starts = array("i", [s for s, _ in matches or ()])
            self._m_ends = array("i", [e for _, e in matches or ()])
        self.last_splice = Splice(0, old, len(self.ids))

    def _set_columns(self, text: str) -> None:
        """ids and spans for the whole text from the tokenizer's own columns (SPM: one pass, no
        Token per token); they tile the text, as every local region's do (see _spm_reason)."""
        from forma_gui.core.segment import segment_columns

        if self._ug and self._set_live_columns(text):
            return
        columns = segment_columns(self.tokenizer, text, self.special)
        if columns is None:  # spans that need tile_spans_reference
            tokens = self.tokenizer.segment(text, special=self.special)
            self.ids = array("i", [t.id for t in tokens])
            self.starts = array("i", [t.start for t in tokens])
            self.ends = array("i", [t.end for t in tokens])
            self.flags = bytearray([t.partial | t.special << 1 for t in tokens])
            self.nbytes = sum(len(t.data) for t in tokens)
        else:
            self.ids, self.starts, self.ends, self.flags = columns.ids, columns.starts, columns.ends, columns.flags
            self.nbytes = columns.nbytes
        self._aligned = True

    def _set_live_columns(self, text: str) -> bool:
        """`_set_columns` for a unigram .model, with the path score before each token, the
        score it adds, its count of additions and its word's bound (`UnigramEncoder.encode_live`);
        False (and no path scores: edits then re-encode in full) when the model cannot."""
        from forma_gui.core.segment import _int_array, token_lengths

        found = self.tokenizer.segment_columns(text, special=self.special, live=True)
        self._chain_ok = found is not None
        if found is None:
            return False
        ids, starts, ends, flags, before, adds, count, bound, char = found
        self.ids, self.starts, self.ends = _int_array(ids), _int_array(starts), _int_array(ends)
        self.flags = bytearray(flags.tobytes())
        self.nbytes = int(token_lengths(self.tokenizer, ids).sum()) if len(ids) else 0
        if self._scores is None:
            from forma_gui.core.deque_columns import DequeColumns

            self._scores = DequeColumns(_SCORE_COLUMNS)
        self._scores.set([before, adds, count, _bounds32(bound), char])
        self._chains.clear()
        self._aligned = True
        return True

    def _set_spans(self, text: str, inner: str, ids: list[int]) -> None:
        """starts/ends/flags for the whole text: vectorized when token bytes are the text's bytes."""
        data = self.tokenizer.decode_bytes(ids)
        encoded = inner.encode("utf-8") if self._clean else None
        # spans of tokens that drop bytes take the gaps in (tile_spans, align_tokens): a region's
        # tokens would no longer start at its cuts, so edits stay local only while they line up
        self._aligned = data == encoded
        if self._aligned:
            self.starts, self.ends, self.flags = _identity_spans(self.tokenizer, data, self.ids, self._offset,
                                                                 self._special_ids, tiled=self._llama)
        else:
            from forma_gui.core.segment import align_tokens

            # llama.cpp tokenizers place their tokens themselves (dropped bytes, partition flags)
            tokens = self.tokenizer.segment(text, special=self.special) if self._llama else \
                align_tokens(self.tokenizer, text, ids)
            self.starts = array("i", [t.start for t in tokens])
            self.ends = array("i", [t.end for t in tokens])
            self.flags = bytearray([t.partial | t.special << 1 for t in tokens])
        self.nbytes = len(data)

    # ---- edits ---------------------------------------------------------------------------
    def apply_edit(self, start: int, removed_len: int, inserted_text: str, *,
                   local_only: bool = False) -> array:
        """text[start:start + removed_len] = inserted_text, re-encoding what it affects; returns `ids`.

        An edit that cannot be re-encoded locally re-encodes the whole text, unless local_only:
        then it raises EditNotLocal (the GUI thread hands the text to a worker instead of
        stalling for the length of a document).
        """
        size = self.n_chars
        if not (0 <= start <= size and 0 <= removed_len <= size - start):
            raise ValueError(f"edit {start}+{removed_len} is outside the text (length {size})")
        if not removed_len and not inserted_text and not self._stale:
            self.last_splice = Splice(0, 0, 0)
            return self.ids
        e = start + self._offset
        removed = self._blocks.slice(e, e + removed_len)
        self._surrogates += _count_barriers(inserted_text, self._undefined) - \
            _count_barriers(removed, self._undefined)
        self._blocks.replace(e, e + removed_len, inserted_text)
        limit = LOCAL_LIMIT if local_only else None
        if not self._stale and self._local_ok(start, removed_len, inserted_text) and \
                self._retokenize(e, removed_len, len(inserted_text), limit):
            return self.ids
        if local_only:
            self._stale = True
            raise EditNotLocal(self.reason or "this edit needs the whole text re-encoded")
        self.full_encodes += 1
        old = len(self.ids)
        self.set_text(self.text)
        self.last_splice = Splice(0, old, len(self.ids))
        return self.ids

    def _local_ok(self, start: int, removed_len: int, inserted: str) -> bool:
        """Whether the edit can be handled locally (checked after the text changed)."""
        if self.reason:
            return False
        if self._spm or self._sp or self._wp:  # lone surrogates are characters like any other
            # (never beside a .model file's cut, dropped by WordPiece); the normalizer (.model,
            # llama.cpp's unigram) or preprocess (WordPiece) is re-run on the region
            if self._exact_chars is not None:
                return self.n_chars <= self._exact_chars
            return not self._ug or self._chain_ok
        if not self._clean or self._surrogates or not self._aligned:
            return False
        if start == 0 and self._prefix_space:
            text0 = self._blocks.slice(self._offset, self._offset + 1)
            if int(bool(text0) and text0 != " ") != self._offset:
                return False  # the prefix space appears or goes
        if self._forms:
            return self._normalized_near(start + self._offset, len(inserted))
        return True

    def _normalized_near(self, e: int, added: int) -> bool:
        """Whether the text is still normalized, checking only between stable points around the edit.

        An ASCII character never combines with the one before it and has combining class 0, so
        the text splits before it into parts that normalize independently; the parts outside
        the edit are pieces of the old (normalized) text.
        """
        lo = _find_backward(_ASCII_BACKWARD, self._blocks, 0, e + 1)
        hi = _find_forward(_ASCII, self._blocks, e + added, len(self._blocks))
        window = self._blocks.slice(lo if lo is not None else 0, hi if hi is not None else len(self._blocks))
        return all(unicodedata.is_normalized(f, window) for f in self._forms)

    def _retokenize(self, e: int, removed: int, added: int, limit: int | None = None) -> bool:
        """Re-encode the region the edit at e (inner coordinates) can affect; False to fall back
        (also when a limit is given and no cut lies within `limit` characters of the edit)."""
        delta = added - removed
        u0, u1, seg_lo, seg_hi, matches = e, e + added, 0, len(self._blocks), []
        if self._added is not None:
            u0, u1, seg_lo, seg_hi, matches = self._rescan_matches(e, removed, added)
        lo, hi = (seg_lo, seg_hi) if limit is None else (max(seg_lo, u0 - limit), min(seg_hi, u1 + limit))
        r = self._cut_before(u0, lo)
        while self._ug and r > lo and math.isnan(self._score_at(r)):
            r = self._cut_before(r, lo)  # inside a word viterbi_from segmented: no score kept there
        if self._exact_chars is not None and r > seg_lo and self._first_word(seg_lo, r) is None:
            r = seg_lo  # the fragment's first token takes in the blanks before it, from seg_lo
        q, q_is_cut = self._cut_after(u1, hi)
        while self._ug and q_is_cut and not self._word_start(q - delta):
            q, q_is_cut = self._cut_after(q, hi)  # a unigram region ends where a word's check starts
        while self._exact_chars is not None and q_is_cut and self._first_word(u1, q) is None and \
                (self._added is not None or self._first_word(seg_lo, u0) is None):
            # the old or the new text may have only blanks between a fragment's start (seg_lo,
            # or the end of a special token, old or new, before u1) and q, whose next token then
            # starts at the fragment's start: the region ends past a word both texts share
            q, q_is_cut = self._cut_after(q, hi)
        if (r == lo > seg_lo) or (q == hi < seg_hi and not q_is_cut):
            return False  # no cut within the limit: the region would be a long run
        if self._ug:
            return self._retokenize_unigram(r, r != seg_lo, q, q_is_cut, matches, delta, limit)
        if self._exact_chars is not None:  # a cut inside a word: the rest goes on without a ▁
            before = self.tokenizer.alone(self._blocks.slice(r - 1, r)) if r != seg_lo else None
            self._inside = bool(before) and not before.endswith(b" ")
        if self._sp or self._wp:
            return self._retokenize_with_gaps(r, r != seg_lo, q, q_is_cut, matches, delta)
        if self._spm:
            new = self._encode_words(r, r != seg_lo, q, q_is_cut, matches)
        else:
            new = self._encode_region(r, q, q_is_cut, matches)
        if new is None:
            return False
        self._splice(r, q - delta, new, delta)
        return True

    def _first_word(self, lo: int, hi: int) -> int | None:
        """llama.cpp's unigram: the first place in [lo, hi) whose character gives a fragment a
        token (`opens_word`), else None. Runs of spaces are skipped at C speed."""
        opens_word = self.tokenizer.opens_word
        while lo < hi:
            at = _find_forward(_NOT_SPACE, self._blocks, lo, hi)
            if at is None or opens_word(self._blocks.slice(at, at + 1)):
                return at
            lo = at + 1
        return None

    def _cut_before(self, u0: int, lo: int) -> int:
        """The last cut r with lo < r < u0 (both neighbours before u0), else lo."""
        if self._is_cut is not None:
            r = _rule_cut_backward(self._blocks, lo, u0, self._is_cut)
        else:
            r = _find_backward(CUT_BACKWARD, self._blocks, lo, u0)
        return lo if r is None else r

    def _cut_after(self, u1: int, hi: int) -> tuple[int, bool]:
        """(the first cut q with u1 < q < hi, True), else (hi, False)."""
        if self._is_cut is not None:
            q = _rule_cut_forward(self._blocks, u1, hi, self._is_cut)
        else:
            q = _find_forward(CUT, self._blocks, u1, hi)
        return (hi, False) if q is None else (q, True)

    def _encode_region(self, r: int, q: int, q_is_cut: bool, matches: list[tuple[int, int, int]]):
        """(ids, starts, ends, flags) of the new text[r:q], or None if its bytes do not line up
        (or, for llama.cpp BPE, some word in it is not encoded the byte-level way)."""
        if self._words_exact is not None and not self._words_exact(self._blocks.slice(r, q)):
            return None
        ids: list[int] = []
        pos = r
        for m_start, m_end, token_id in [*matches, (q, q, -1)]:
            if m_start > pos:
                context = q_is_cut and m_start == q  # one more character, for the lookahead
                ids += self._encode_ordinary(self._blocks.slice(pos, m_start + context), context)
            if token_id >= 0:
                ids.append(token_id)
            pos = m_end
        return _region_spans(self.tokenizer, self._blocks.slice(r, q), r, ids, self._offset, self._special_ids,
                             tiled=self._llama)

    def _encode_words(self, r: int, r_is_cut: bool, q: int, q_is_cut: bool,
                      matches: list[tuple[int, int, int]]):
        """(ids, starts, ends, flags) of the new text[r:q] for llama.cpp's SentencePiece BPE, or
        None if their spans do not tile it (not expected, see _spm_reason).

        Each raw piece between the special tokens is encoded as what it is in the whole text
        (`_spm_part`); the spans tile text[r:q] without gaps, as nothing is dropped.
        """
        spans = self._piece_spans(r, r_is_cut, q, q_is_cut, matches, self._spm_part)
        return None if spans is None else _tiled(spans, q - r, r)

    def _spm_part(self, text: str, start: int, end: int, head: bool,
                  tail: bool) -> list[tuple[int, int, int]]:
        """A piece of a llama.cpp SentencePiece BPE text: a fragment, whose tokens get the
        prepended ``▁`` (every fragment follows the text's start or a special token), or, from
        a cut r, a fragment's tail, without. A piece ending at the cut q gets the tokens before
        q, whatever follows (see the module docstring), so `tail` changes nothing."""
        return self.tokenizer.fragment_spans(text, start, end, head)

    def _retokenize_with_gaps(self, r: int, r_is_cut: bool, q: int, q_is_cut: bool,
                                  matches: list[tuple[int, int, int]], delta: int) -> bool:
        """Re-encode text[r:q] for a SentencePiece .model file or llama.cpp's WordPiece (whose
        raw spans also leave gaps of dropped text, and whose tokens also end at its cuts),
        tiled as `segment` tiles it; False to fall back.

        When q is an unchanged special token's start (not a cut, not the end), that token
        joins the region: the blanks dropped before it belong to its span, which therefore
        depends on the region. The last cluster before r ends at r, unless the region has no
        token and none follows: then it takes in the rest of the text (and it may have done
        so before the edit). When no token follows, the region's last cluster takes it in
        (text after a cut can be all blanks that the text's end drops).
        """
        if not q_is_cut and q < len(self._blocks):
            k = bisect_left(self._m_starts, q)  # the unchanged match at q (see _rescan_matches)
            end = self._m_ends[k]
            matches = [*matches, (q, end, self._added[1][self._blocks.slice(q, end)])]
            q = end
        encode = (self._unigram_part if self._ug else self._ugm_part if self._exact_chars is not None
                  else self._wordpiece_part if self._wp
                  else self._sentencepiece_part)
        self._part_extra: list = []
        spans = self._piece_spans(r, r_is_cut, q, q_is_cut, matches, encode)
        if spans is None:
            return False
        # a region up to the end takes every token left (a zero-width dummy suffix starts there)
        q_old = q - delta if q < len(self._blocks) else len(self._blocks) - delta + 1
        at_end = bisect_left(self.starts, q_old) == len(self.starts)  # no token follows
        if not spans and not at_end:
            return False  # not expected: a cut or a special token always brings a token
        new = _tiled_with_gaps(spans, (len(self._blocks) if at_end else q) - r, r, at_end)
        self._splice(r, q_old, new, delta, self._live_extra(spans) if self._ug else None)
        self._retile_before(self.last_splice.first, r if spans else len(self._blocks))
        return True

    # ---- unigram .model files: path scores -------------------------------------------------
    def _retokenize_unigram(self, r: int, r_is_cut: bool, q: int, q_is_cut: bool,
                            matches: list[tuple[int, int, int]], delta: int, limit: int | None) -> bool:
        """`_retokenize_with_gaps` for a unigram .model: the region's path starts from the
        score before the token at r, and when it reaches the cut q with another score than
        before, `_walk` carries the new scores on through the unchanged tokens."""
        self._part_score = self._score_at(r) if r_is_cut else 0.0
        self._part_end = None
        if not self._retokenize_with_gaps(r, r_is_cut, q, q_is_cut, matches, delta):
            return False
        if self._part_end is None or self._part_end[0] != q - r or not q_is_cut:
            return True  # the region's last piece ends at a special token or the text's end
        k = self.last_splice.first + self.last_splice.added
        t0 = perf_counter()
        try:
            return self._walk(k, self._part_end[1], q, limit)
        finally:
            self.walk_seconds += perf_counter() - t0

    def _word_start(self, q: int) -> bool:
        """Whether a word's check starts at q (inner coordinates of the tokens), or no token
        does: a region must not end inside the words its tokens were checked as (the bound
        of the word before would not cover the rest of one)."""
        t = bisect_left(self.starts, q - self._offset)
        return t >= len(self.ids) or not math.isnan(self._bound[t])

    def _score_at(self, r: int) -> float:
        """The path score before the token that starts at r (inner coordinates): kept at a
        word's start, else the float32 sum from there over the tokens before it (no reset
        happens inside a word its bound covers); NaN when no token starts at r (blanks that
        the text's end drops) or r is inside a word viterbi_from segmented."""
        t = bisect_left(self.starts, r - self._offset)
        if t >= len(self.ids) or self.starts[t] != r - self._offset:
            return math.nan
        m = t
        while m > 0 and math.isnan(self._bound[m]):
            m -= 1
        if m == t:
            return self._before[t]
        if not abs(_rebased(self._before[m])) <= self._bound[m]:
            return math.nan  # (no bound, -inf, or a start past it: a reset may happen inside)
        total = array("f", [_rebased(self._before[m])])
        for k in range(m, t):
            for _ in range(self._count[k]):
                total[0] += self._adds[k]  # (rounded to float32 on each store)
        return total[0]

    def _unigram_part(self, text: str, start: int, end: int, head: bool,
                      tail: bool) -> list[tuple[int, int, int]] | None:
        """`_sentencepiece_part` through `fragment_live`: a piece from the cut r starts from the
        path score `_part_score`, a head from 0; the per-token scores go to `_part_extra` and
        the piece's end (its offset in the region's text, its end score) to `_part_end`."""
        found = self.tokenizer.fragment_live(text, start, end, head=head, tail=tail,
                                             score=0.0 if head else self._part_score)
        if found is None:
            return None
        part, extra, end_score = found
        if not head and (part[0][1] != start if part else not tail):
            return None
        self._part_extra.append(extra)
        self._part_end = (end, end_score)
        return part

    def _live_extra(self, spans: list[tuple[int, int, int, int]]) -> tuple[list, ...]:
        """The per-token score columns of a region's spans: the pieces' (`_part_extra`, in
        order), an added token's none (no path runs through it)."""
        parts, self._part_extra = iter(self._part_extra), []
        columns: tuple[list, ...] = ([], [], [], [], [])
        pending: list = []
        for _, _, _, flag in spans:
            if flag & SPECIAL:
                for column, value in zip(columns, (math.nan, 0.0, 0, math.nan, -1)):
                    column.append(value)
                continue
            while not pending:  # (a piece may give no token: blanks its end drops)
                pending = list(zip(*next(parts)))[::-1]
            for column, value in zip(columns, pending.pop()):
                column.append(value)
        return columns

    def _walk(self, k: int, b: float, cut: int, limit: int | None) -> bool:
        """Carry the path score b before token k (at the cut `cut`, inner coordinates) on
        through the tokens after a re-encoded region, until it agrees with the score they were
        encoded with (from there on nothing differs), a special token or the text's end.

        A word whose start score stays within its bound keeps its tokens (`limits()`), and
        the scores are summed over them a stretch at a time (`_sum_words`); a word that leaves
        its bound is segmented again from its tokens' bytes (`_word_again`), and one whose
        tokens then change is re-encoded from the last cut before it to the first cut after
        it where a word starts (`_reencode_word`). From a word after a reset to the word after
        the next one the walk is a chain kept for later walks (`core.chain_memo`): one seen
        before is replayed, not summed. False to fall back (with a limit: more words
        re-encoded than `WALK_REGIONS` or segmented again than `WALK_WORDS`)."""
        from forma_gui.core.chain_memo import Chain

        merged, regions = self.last_splice, 0
        self._window, self._resegmented, self._reset_exit = WALK_WINDOW, 0, False
        chains, chain = self._chains, None  # (the chain being summed: its first token, start, count)
        while True:
            n = len(self.ids)
            if k >= n or self.flags[k] & SPECIAL:
                break
            old = self._before[k]
            self._before[k] = b
            if _rebased(b) == _rebased(old):
                break  # the same score after the reset: the rest is the old text's
            bound = self._bound[k]
            if abs(_rebased(b)) <= bound:  # (False for NaN)
                if self._reset_exit:  # a chain starts here: replay it when kept, else keep it
                    kept = chains.get(k, b)
                    if kept is not None:
                        last = k + 1 + len(kept.values)
                        self._before[k + 1:last] = kept.values
                        k, b = last, kept.end_score
                        self._resegmented += kept.resegmented
                        self._window = kept.window
                        if limit is not None and self._resegmented > WALK_WORDS:
                            return False
                        continue
                    chain = (k, b, self._resegmented)
                k, b = self._sum_words(k, _rebased(b))
                if chain is not None and self._reset_exit:
                    first, start, counted = chain
                    chains.put(first, k, start, Chain(self._before[first + 1:k].copy(), b,
                                                      self._resegmented - counted, self._window))
                    chain = None
                if limit is not None and self._resegmented > WALK_WORDS:
                    return False
                continue
            chain, self._reset_exit = None, False
            regions += 1
            if limit is not None and regions > WALK_REGIONS:
                return False
            self.last_splice = merged
            found = self._reencode_word(k, cut, limit)
            if found is None:
                return False
            k, b, cut = found
            merged = merged.then(self.last_splice)
            if b is None:
                break
        self.last_splice = merged
        return True

    def _sum_words(self, k: int, b: float) -> tuple[int, float]:
        """One stretch of the walk from word k's start score b (after the reset; word k is
        checked): (token, score before it) of the first word after k whose score meets its old
        one, or that leaves its bound and whose tokens change when segmented again alone
        (`_word_again`: the caller re-encodes it), or that follows a word the reset fell in
        (the sums start again there), else the stretch's end: a word start, a special token or
        the end. The scores are float32 sums over the stretch's tokens (sequential, as the
        reference adds). A stretch ends two words past the first place the old scores were
        reset in it: the new ones are reset near there, and meet the old ones just after.

        Each numpy call costs a few microseconds here whatever its size, so a stretch makes
        as few as it can: word starts are offsets from `base`, and a stretch without a merged
        run of unknown pieces skips the repeat (a token that adds nothing, a special token or
        a byte piece after an unknown piece's first, keeps a slot whose +0.0 changes no sum:
        a path score is never -0.0, as every start is +0.0 or a float32 sum or difference of
        nonzero values, and x - x is +0.0)."""
        import numpy as np

        n, window = len(self.ids), self._window
        kept, bound = self._before, self._bound
        self._reset_exit = False
        base = k + 1
        while True:  # up to a special token, the end, or the window's last word start
            hi = min(n, k + window)
            ahead = bound[base:hi]
            rel = (ahead == ahead).nonzero()[0]  # word starts (not NaN: a word's first token)
            if self._added is not None:
                special = np.flatnonzero(np.frombuffer(self.flags, dtype=np.uint8)[base:hi] & SPECIAL)
                if len(special):
                    end = base + int(special[0])
                    rel = rel[:int(np.searchsorted(rel, end - base))]
                    break
            if hi == n:
                end = n
                break
            if len(rel):
                end = base + int(rel[-1])
                rel = rel[:-1]
                break
            window *= 2  # no word starts in the window
        kept_here = kept[base:end]  # (the scores kept before the stretch's tokens)
        old_m = kept_here[rel]
        rises = old_m[1:] > old_m[:-1]  # (a start above the one before: a reset)
        first = int(rises.argmax()) if len(rises) else 0  # (the first one, or 0 when none)
        cut = len(rises) > 0 and bool(rises[first]) and first + 3 < len(rel)
        if cut:
            last = first + 3
            end, rel, old_m = base + int(rel[last]), rel[:last], old_m[:last]
        count, adds = self._count[k:end], self._adds[k:end]
        if count.max() <= 1:  # each token adds its score once, or +0.0 (none: x + 0.0 is x,
            run = np.empty(end - k + 1, dtype=np.float32)  # and no path score is -0.0)
            run[0] = b
            run[1:] = adds
            run.cumsum(out=run)  # sequential float32 sums, as the reference adds
            new_m = run[1:][rel]
        else:  # a run of unknown pieces adds the unknown score once per piece
            added = count.cumsum()  # additions up to each token, itself included
            run = np.empty(int(added[-1]) + 1, dtype=np.float32)
            run[0] = b
            run[1:] = adds.repeat(count)
            run.cumsum(out=run)
            new_m = run[added[rel]]
        meets = new_m == old_m
        leaves = np.abs(new_m) > ahead[rel]  # (bounds at word starts are not NaN; end <= hi)
        # (a start past the reset leaves its bound: segmented again, it resets there, and where
        # both scores were reset the next word's start meets the old one)
        for j in (meets | leaves).nonzero()[0].tolist():
            m, value = base + int(rel[j]), float(new_m[j])
            m_next = base + int(rel[j + 1]) if j + 1 < len(rel) else end
            found = None if meets[j] else self._word_again(m, m_next, value)
            if found is None:  # its old score again (the rest is the old text's), or re-encode
                kept_here[rel[:j]] = new_m[:j]
                return m, value
            if found != (new_m[j + 1] if j + 1 < len(rel) else run[-1]):
                # the same tokens, and a reset inside: the sums start again after it
                kept_here[rel[:j + 1]] = new_m[:j + 1]
                self._window = max(WALK_WINDOW, (m_next - k) * 5 // 4)
                self._reset_exit = True
                return m_next, found
        kept_here[rel] = new_m  # kept at word starts
        # past a place the old scores were reset, the new ones were not yet: soon, if at all
        self._window = WALK_AFTER_CUT if cut else min(MAX_WALK_WINDOW, 2 * window)
        return end, float(run[-1])

    def _word_again(self, m: int, m_next: int, b: float) -> float | None:
        """The end score `viterbi_from` gives the normalized bytes of tokens m..m_next (from a
        word start to the next) from the score b, when its path is those tokens (the walk goes
        on past them); else None. The bytes are the pieces' own, the text an unknown piece or a
        run of them stood for (`_char`, `UnknownTexts`) or, with byte fallback, its byte
        pieces' bytes (`_spelled_word`, kept per token run: the same words come back)."""
        self._resegmented += 1
        key = (self.ids[m:m_next].tobytes(), self._count[m:m_next].tobytes(), self._char[m:m_next].tobytes())
        spelled = self._spelled_words.get(key)
        if spelled is None:
            if len(self._spelled_words) >= SPELLED_WORDS:
                self._spelled_words.clear()
            spelled = self._spelled_words[key] = self._spelled_word(m, m_next)
        if spelled is None:
            return None
        data, pairs, checked = spelled
        path, found_end = self._spellers()[0].resegment(data, b)
        if path is not checked[0]:  # (resegment hands back the paths it keeps: checked once)
            checked[:] = path, len(path) == len(pairs) and [i for i, _ in path] == pairs
        return found_end if checked[1] else None

    def _spelled_word(self, m: int, m_next: int) -> tuple[bytes, list[int], list] | None:
        """(the normalized bytes of tokens m..m_next, the ids of the model's pieces there: a
        run of c unknown pieces is c unknown ids, [the path last compared with them, whether
        it was theirs]), or None when the bytes are not known."""
        unigram, spelled, byte_of, unknown = self._spellers()
        parts, pairs = [], []
        for i, c, char in zip(self.ids[m:m_next], self._count[m:m_next].tolist(), self._char[m:m_next].tolist()):
            key = spelled.get(i)
            if c == 0 and i in byte_of:          # a byte piece after an unknown piece's first
                parts.append(byte_of[i])
            elif char != -1:                     # c unknown pieces, one character each
                text = unknown.text(char)
                parts.append((text * c if char >= 0 else text).encode("utf-8", "surrogatepass"))
                pairs += [i] * c
            elif c != 1:
                return None
            elif key is not None:
                parts.append(key)
                pairs.append(i)
            elif i in byte_of:                   # an unknown piece's first byte piece
                parts.append(byte_of[i])
                pairs.append(unigram.unk_id)
            else:
                return None
        return b"".join(parts), pairs, [None, False]

    def _spellers(self) -> tuple:
        """(the unigram encoder, its id -> piece bytes, byte piece id -> its byte, the
        tokenizer's `UnknownTexts`), looked up once."""
        found = self.__dict__.get("_spellers_found")
        if found is None:
            tables = self.tokenizer.tables()
            byte_of = {i: bytes([b]) for b, i in enumerate(tables.get("byte_ids") or [])
                       if i is not None and i >= 0 and self.tokenizer.piece(i).startswith("<0x")}
            found = self._spellers_found = (tables["unigram"], tables["unigram"].spelled(), byte_of,
                                            self.tokenizer.unknown_texts())
        return found

    def _reencode_word(self, k: int, cut: int, limit: int | None):
        """Re-encode from the last cut at or before token k (not before `cut`, where the new
        scores are known) to the first cut after it where a word starts (or the special token
        or the text's end before that): (token after the region, score before it or None when
        none continues, that cut); None to fall back."""
        off = self._offset
        s_k = self.starts[k] + off
        # a zero-width token (the dummy suffix ▁ of treat_whitespace_as_suffix) stands at the
        # start of the special token after it: the region ends at that token, and starts before
        zero = self.starts[k] == self.ends[k]
        r = self._cut_before(s_k + (not zero), cut)
        while r > cut and math.isnan(self._score_at(r)):  # inside a word viterbi_from segmented
            r = self._cut_before(r, cut)
        seg_hi = len(self._blocks)
        if self._added is not None:
            j = (bisect_left if zero else bisect_right)(self._m_starts, s_k)
            seg_hi = self._m_starts[j] if j < len(self._m_starts) else seg_hi
        hi = seg_hi if limit is None else min(seg_hi, s_k + limit)
        q, q_is_cut = self._cut_after(s_k, hi)
        while q_is_cut and not self._word_start(q):
            q, q_is_cut = self._cut_after(q, hi)
        if q == hi < seg_hi:
            return None  # no cut within the limit
        self._part_score = self._score_at(r)
        self._part_end = None
        if math.isnan(self._part_score) or not self._retokenize_with_gaps(r, True, q, q_is_cut, [], 0):
            return None
        splice = self.last_splice
        after = splice.first + splice.added
        if self._part_end is None or self._part_end[0] != q - r or not q_is_cut:
            return after, None, q
        return after, self._part_end[1], q

    def _piece_spans(self, r: int, r_is_cut: bool, q: int, q_is_cut: bool,
                     matches: list[tuple[int, int, int]], encode) -> list[tuple[int, int, int, int]] | None:
        """The raw (id, start, end, flag) spans of the tokens of text[r:q], offsets in it: each
        piece between special tokens through ``encode(text, start, end, head, tail)``
        (`_spm_part`, `_sentencepiece_part`, `_wordpiece_part`), where head says the piece starts at the
        text's start or after a special token (else at the cut r) and tail that a special token
        or the text's end follows it (else the cut q). None when `encode` refuses a piece or the
        tokens do not end at the cut q (not expected: see the tokenizers' `edit_cuts`)."""
        text = self._blocks.slice(r, q)
        spans: list[tuple[int, int, int, int]] = []
        pos, head = 0, not r_is_cut
        for m_start, m_end, token_id in [*matches, (q, q, -1)]:
            if m_start - r > pos:
                part = encode(text, pos, m_start - r, head, token_id >= 0 or not q_is_cut)
                if part is None:
                    return None
                spans += [(t, s, e, 0) for t, s, e in part]
            if token_id >= 0:
                spans.append((token_id, m_start - r, m_end - r, SPECIAL))
            pos, head = m_end - r, True
        if q_is_cut and (not spans or spans[-1][2] != len(text)):
            return None
        return spans

    def _sentencepiece_part(self, text: str, start: int, end: int, head: bool,
                            tail: bool) -> list[tuple[int, int, int]] | None:
        """A piece of a SentencePiece .model text, normalized and encoded as what it is in the
        whole text (`SentencePieceTokenizer.fragment_spans`): its head or a middle part from
        the cut r, its tail or a middle part up to the cut q. None when a part from r does not
        start its tokens at r (not expected: see `EditCuts`; a tail from r may be all blanks,
        which its end drops)."""
        part = self.tokenizer.fragment_spans(text, start, end, head=head, tail=tail)
        if not head and (part[0][1] != start if part else not tail):
            return None
        return part

    def _ugm_part(self, text: str, start: int, end: int, head: bool,
                  tail: bool) -> list[tuple[int, int, int]]:
        """A piece of a llama.cpp unigram text: a fragment, or the rest of one from the cut r,
        as one (after a space) or going on inside a word (`edit_cuts`, `_inside`)."""
        return self.tokenizer.fragment_spans(text, start, end, inside=not head and self._inside)

    def _wordpiece_part(self, text: str, start: int, end: int, head: bool,
                        tail: bool) -> list[tuple[int, int, int]]:
        """A piece of a llama.cpp WordPiece text: its words from a cut are the words of the
        piece alone (`WordPieceTokenizer.edit_cuts`), so every piece is encoded alike."""
        return self.tokenizer.fragment_spans(text, start, end)

    def _retile_before(self, i0: int, end: int) -> None:
        """Give the cluster of tokens just before token i0 the tiled end `end` (all its tokens
        share their tiled end, and clusters before it end earlier), widening last_splice."""
        k = i0 - 1
        old = self.ends[k] if k >= 0 else end
        while k >= 0 and self.ends[k] == old != end:
            self.ends[k] = end
            k -= 1
        if k < i0 - 1:
            first, removed, added = self.last_splice
            moved = i0 - 1 - k
            self.last_splice = Splice(first - moved, removed + moved, added + moved)

    def _encode_ordinary(self, text: str, drop_last: bool) -> list[int]:
        """Ids of ordinary text; with drop_last, its last character is only context."""
        pieces = self._pattern.findall(text)
        if drop_last:
            pieces.pop()  # a cut sits before the last character, so it is its own one-character piece
        encode = self.tokenizer.encode_pretoken
        return [i for piece in pieces for i in encode(piece)]

    def _byte_count(self, ids) -> int:
        """The bytes of these tokens (`segment.byte_count` for an edit's few, else numpy's)."""
        if len(ids) <= FEW_TOKENS:
            return byte_count(self.tokenizer, ids)
        import numpy as np

        return int(token_lengths(self.tokenizer, np.asarray(ids, dtype=np.intp)).sum())

    def _splice(self, r: int, q_old: int, new, delta: int, extra=None) -> None:
        """Replace the tokens of old text[r:q_old] (inner coordinates) by `new` (and a unigram
        model's score columns by `extra`); shift the rest."""
        import numpy as np

        ids, starts, ends, flags = new
        off = self._offset
        i0 = bisect_left(self.starts, r - off) if r > off else 0
        j0 = bisect_left(self.starts, q_old - off)
        # by the tokens' bytes: the old ones may have dropped a byte the vocabulary lacks
        self.nbytes += self._byte_count(ids) - self._byte_count(self.ids[i0:j0])
        self.ids[i0:j0] = array("i", ids)
        self.starts[i0:j0] = array("i", starts)
        self.ends[i0:j0] = array("i", ends)
        self.flags[i0:j0] = flags
        if extra is not None:
            before, adds, count, bound, char = extra
            self._scores.splice(i0, j0, [before, adds, count, _bounds32(bound), char])
        if self._chains is not None:
            self._chains.splice(i0, j0, len(ids))
        tail = i0 + len(ids)
        if delta and tail < len(self.ids):
            for column in (self.starts, self.ends):
                view = np.asarray(memoryview(column))  # (n_tokens,) int32, shares the array's memory
                view[tail:] += delta
                del view  # the array cannot be resized while a view of it exists
        self.last_splice = Splice(i0, j0 - i0, len(ids))

    # ---- special tokens ------------------------------------------------------------------
    def _find_all_matches(self, text: str) -> None:
        pattern = self._added[0]
        spans = [m.span() for m in pattern.finditer(text)]
        self._m_starts = array("i", [s for s, _ in spans])
        self._m_ends = array("i", [e for _, e in spans])

    def _rescan_matches(self, e: int, removed: int, added: int):
        """Redo the special-token scan around an edit; returns (u0, u1, seg_lo, seg_hi, matches).

        [u0, u1) covers the edit and every match that may have changed; seg_lo/seg_hi are the
        ends of the nearest unchanged matches around it; `matches` are the new matches in
        [u0, u1) as (start, end, id).
        """
        pattern, ids, longest = self._added
        delta = added - removed
        starts, ends = self._m_starts, self._m_ends
        i = bisect_right(starts, e - longest)     # old matches [0, i) end before e: unchanged
        cur = ends[i - 1] if i else 0
        # a leftmost-longest scan must start where the last one stood; when matches are all the
        # occurrences (llama.cpp, `_overlap_free`), anywhere: no document-long rescan
        scan = max(cur, e - longest + 1) if self._disjoint else cur
        x = e + added                             # new coordinates
        while True:  # find x with no old or new match straddling it
            window = self._blocks.slice(scan, x + longest)
            new = [(scan + m.start(), scan + m.end()) for m in pattern.finditer(window) if scan + m.start() < x]
            j = bisect_left(starts, x - delta)
            moved = x
            if new and new[-1][1] > x:
                moved = new[-1][1]
            if j and ends[j - 1] > x - delta:
                moved = max(moved, ends[j - 1] + delta)
            if moved == x:
                break
            x = moved
        u0 = min([e, *(s for s, _ in new), *starts[i:j]])
        u1 = max([e + added, *(t for _, t in new), *(_moved_end(t, e, removed, added) for t in ends[i:j])])
        seg_hi = starts[j] + delta if j < len(starts) else len(self._blocks)
        self._m_starts[i:j] = array("i", [s for s, _ in new])
        self._m_ends[i:j] = array("i", [t for _, t in new])
        _shift(self._m_starts, i + len(new), delta)
        _shift(self._m_ends, i + len(new), delta)
        text_of = self._blocks.slice
        return u0, u1, cur, seg_hi, [(s, t, ids[text_of(s, t)]) for s, t in new]


def local_edits(tokenizer: "Tokenizer", special: bool = False) -> bool:
    """Whether an IncrementalEncoder re-encodes edits locally for this tokenizer and mode."""
    return not _plan(tokenizer, special).reason


def supports_edits(tokenizer: "Tokenizer", special: bool = False) -> bool:
    """Whether edits are local (`local_edits`) for a ByteLevelBPETokenizer, whose encode
    core.chunked may also cut into slices. False for llama.cpp's BPE: those slices would know
    nothing of its partition (user-defined tokens are cut out even with special=False); False
    for SentencePiece .model files: core.chunked has no slicing for them."""
    return not (_is_llama(tokenizer) or _is_sentencepiece(tokenizer)) and local_edits(tokenizer, special)


# ---- helpers -----------------------------------------------------------------------------------

def _plan(tokenizer: "Tokenizer", special: bool) -> _Plan:
    """The _Plan for a tokenizer and mode."""
    maker = _llama_plan if _is_llama(tokenizer) else _sentencepiece_plan if _is_sentencepiece(tokenizer) else None
    if maker is not None:
        plans = _CACHED_PLANS.setdefault(tokenizer, {})
        if special not in plans:
            plans[special] = maker(tokenizer, special)
        return plans[special]
    pattern, reason = _incremental_pattern(tokenizer, special)
    matched = tuple((t.content, t.id) for t in tokenizer.matched_added(special))
    return _Plan(pattern, reason, matched, frozenset(tokenizer.special_ids))


def _is_llama(tokenizer: "Tokenizer") -> bool:
    from forma_gui.core.llama_vocab import LlamaTokenizer

    return isinstance(tokenizer, LlamaTokenizer)


def _is_sentencepiece(tokenizer: "Tokenizer") -> bool:
    from forma_gui.core.sentencepiece import SentencePieceTokenizer

    return isinstance(tokenizer, SentencePieceTokenizer)


def _is_wpm(tokenizer: "Tokenizer") -> bool:
    from forma_gui.core.wordpiece import WordPieceTokenizer

    return isinstance(tokenizer, WordPieceTokenizer)


def _is_ugm(tokenizer: "Tokenizer") -> bool:
    from forma_gui.core.llama_tokenizers import LlamaUGMTokenizer

    return isinstance(tokenizer, LlamaUGMTokenizer)


def _is_spm(tokenizer: "Tokenizer") -> bool:
    from forma_gui.core.llama_tokenizers import LlamaSPMTokenizer

    return isinstance(tokenizer, LlamaSPMTokenizer)


def _llama_plan(tokenizer, special: bool) -> _Plan:
    """The _Plan for a llama.cpp tokenizer; its special tokens are the ones its partition cuts
    out in this mode (user-defined ones always), and only those are flagged special."""
    cut = _partition_tokens(tokenizer, special)
    matched = tuple((text, token_id) for text, token_id, _ in cut)
    reason = _llama_reason(tokenizer, cut)
    pattern = None if reason or _is_spm(tokenizer) or _is_wpm(tokenizer) or _is_ugm(tokenizer) \
        else tokenizer.word_pattern
    return _Plan(pattern, reason, matched, frozenset(token_id for _, token_id in matched), not reason)


def _sentencepiece_plan(tokenizer, special: bool) -> _Plan:
    """The _Plan for a SentencePiece .model file: with special=True its control and unknown
    pieces' texts are cut out first (leftmost-longest, as core.special does for tokens
    without flags), and the ordinary text between them is encoded piece by piece."""
    reason = tokenizer.edit_reason()
    matched = tuple((t.content, t.id) for t in tokenizer.added_tokens) if special else ()
    flagged = [t.content for t in tokenizer.added_tokens if t.lstrip or t.rstrip or t.single_word or t.normalized]
    if not reason and special and flagged:
        reason = f"added tokens with lstrip/rstrip/single_word/normalized flags ({flagged[0]!r})"
    disjoint = not reason and bool(matched) and _overlap_free([text for text, _ in matched if text])
    return _Plan(None, reason, matched, frozenset(token_id for _, token_id in matched), disjoint)


def _partition_tokens(tokenizer, special: bool) -> list[tuple[str, int, bool]]:
    """(text, id, stripped) of the tokens `LlamaVocab.partition` cuts out with parse_special=
    `special`, in its order (the tokenizer's added tokens are its special cache); stripped: the
    LSTRIP or RSTRIP attribute."""
    from forma_gui.core.llama_vocab import ATTR_CONTROL, ATTR_LSTRIP, ATTR_RSTRIP, ATTR_UNKNOWN

    attrs = tokenizer.vocab.attrs
    skip = 0 if special else ATTR_CONTROL | ATTR_UNKNOWN
    return [(t.content, t.id, bool(attrs[t.id] & (ATTR_LSTRIP | ATTR_RSTRIP)))
            for t in tokenizer.added_tokens if not attrs[t.id] & skip]


def _llama_reason(tokenizer, cut: list[tuple[str, int, bool]]) -> str:
    """Why edits re-encode in full for a llama.cpp tokenizer ("" when they need not)."""
    reason = (_spm_reason(tokenizer) if _is_spm(tokenizer) else _wpm_reason(tokenizer) if _is_wpm(tokenizer)
              else tokenizer.edit_reason() if _is_ugm(tokenizer)
              else _bpe_reason(tokenizer))
    if reason:
        return reason
    stripped = [text for text, _, strip in cut if strip]
    if stripped:
        return f"special tokens with llama.cpp's lstrip/rstrip attributes ({stripped[0]!r})"
    if not _overlap_free([text for text, _, _ in cut]):
        return "special tokens whose texts can overlap (llama.cpp cuts them longest first, not leftmost)"
    return ""


def _bpe_reason(tokenizer) -> str:
    """Why a llama.cpp tokenizer other than SPM cannot edit through its words ("" if it can)."""
    if not hasattr(tokenizer, "word_pattern"):
        return f"{tokenizer.kind} tokenizers are re-encoded in full"
    pattern = tokenizer.word_pattern
    if pattern is None or pattern.pattern not in VERIFIED:
        return (f"llama.cpp's {tokenizer.pre.name!r} pre-tokenizer ({len(tokenizer.pre.patterns)} regex "
                f"stage(s)) is not one the incremental cuts were checked for")
    if tokenizer.vocab.flags.get("add_space_prefix"):
        return "add_space_prefix (the decoded bytes drop a leading space)"
    return ""


def _spm_reason(tokenizer) -> str:
    """Why llama.cpp's SentencePiece BPE cannot edit between cuts ("" if it can): its words must
    never interact (`LlamaSPMTokenizer._words`), and every byte must have a token (the
    ``<0xNN>`` one, else unk), so that the tokens' spans tile the text with no gap."""
    from forma_gui.core.llama_tokenizers import byte_token

    if not tokenizer.words_independent():
        return ("a token holds ▁ after another character, or a score is not a number: "
                "merges can cross the spaces of a fragment")
    if any(byte_token(tokenizer.vocab, b) is None for b in range(256)):
        return "bytes without a token (no <0xNN> one, no unknown token): llama.cpp drops them"
    return ""


def _wpm_reason(tokenizer) -> str:
    """Why llama.cpp's WordPiece cannot edit between cuts ("" if it can): a word no vocabulary
    entry starts must become [UNK], else it gives no token and the token before a cut need not
    end there (`WordPieceTokenizer.edit_cuts`)."""
    if tokenizer.vocab.specials.get("unk") is None:
        return "no unknown token: a word without a match vanishes, tokens need not end at the cuts"
    return ""


def _overlap_free(texts: list[str]) -> bool:
    """Whether no two occurrences of these (non-empty) texts can ever overlap in a text.

    Then every occurrence of every text is disjoint from all others, so llama.cpp's partition
    (each text cut out everywhere in turn, longest first) and a leftmost-longest scan both cut
    out exactly all of them. Two occurrences overlap iff, for some text a and 0 <= i < len(a),
    a[i:] is a prefix of another text b or b is a prefix of a[i:] (b != a when i == 0).

    >>> _overlap_free(["<|a|>", "<|b|>"]), _overlap_free(["ab", "bc"]), _overlap_free(["aa"])
    (True, False, False)
    """
    distinct = sorted(set(texts))
    if "" in distinct:
        return False
    known, lengths = set(distinct), sorted({len(t) for t in distinct})
    for a in distinct:
        for i in range(len(a)):
            s = a[i:]
            k = bisect_left(distinct, s)
            # the texts s begins are distinct[k:...]; at i == 0, distinct[k] is a itself
            if any(b.startswith(s) and (i or b != a) for b in distinct[k:k + 2]):
                return False
            if any(s[:n] in known for n in lengths if n < len(s) or (i and n == len(s))):
                return False
    return True

def _incremental_pattern(tokenizer: "Tokenizer", special: bool) -> tuple[regex.Pattern | None, str]:
    """(the single VERIFIED pattern, "") or (None, why edits are re-encoded in full)."""
    stages = getattr(tokenizer, "_patterns", None)
    if stages is None or not hasattr(tokenizer, "encode_pretoken"):
        return None, f"{tokenizer.kind} tokenizers are re-encoded in full"
    if len(stages) != 1 or stages[0].pattern not in VERIFIED:
        return None, "the pre-tokenizer regex is not one the incremental cuts were checked for"
    added = tokenizer.matched_added(special)
    if added:
        flagged = [t.content for t in added if t.lstrip or t.rstrip or t.single_word or t.normalized]
        if flagged:
            return None, f"added tokens with lstrip/rstrip/single_word/normalized flags ({flagged[0]!r})"
        if getattr(tokenizer, "add_prefix_space", False):
            return None, "add_prefix_space with special tokens (every segment gets its own space)"
    return stages[0], ""


def _added_matcher(matched: tuple[tuple[str, int], ...]) -> tuple[regex.Pattern, dict[str, int], int]:
    """(alternation of the (text, id) pairs longest first, text -> id, longest length).

    The same leftmost-longest matching as core.special for tokens without flags; the first
    token listed wins for a duplicated content, as there.
    """
    by_text: dict[str, int] = {}
    for content, token_id in matched:
        if content:
            by_text.setdefault(content, token_id)
    ordered = sorted(by_text, key=len, reverse=True)
    pattern = regex.compile("|".join(map(regex.escape, ordered)) or r"(?!)")
    return pattern, by_text, max(map(len, ordered), default=0)


def _bounds32(bounds) -> array:
    """Word bounds (float64 values; NaN: no word starts there) as float32 rounded down: never
    above the bound `limits()` proved."""
    if len(bounds) <= FEW_BOUNDS:  # (an edit's region: numpy's cost per call would dominate)
        narrow = array("f", bounds)  # (to nearest, as numpy casts; inf past FLT_MAX)
        for k, (value, wide) in enumerate(zip(narrow, bounds)):
            if value > wide:
                narrow[k] = _below32(value)
        return narrow
    import numpy as np

    wide = np.asarray(bounds, dtype=np.float64)
    narrow = wide.astype(np.float32)
    with np.errstate(invalid="ignore"):
        up = narrow > wide
    narrow[up] = np.nextafter(narrow[up], np.float32(-np.inf))
    return array("f", narrow.tobytes())


def _below32(value: float) -> float:
    """The float32 value next below a float32 value (numpy's ``nextafter(x, -inf)``)."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    if value > 0:  # (+inf too: FLT_MAX)
        bits -= 1
    elif value == 0:
        bits = 0x8000_0001  # below +0 and -0: the smallest negative subnormal
    else:
        bits += 1
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _rebased(score: float) -> float:
    """A unigram path score as the reference goes on from it: 0 past its reset threshold."""
    return 0.0 if abs(score) > RESET else score


def _moved_end(t: int, e: int, removed: int, added: int) -> int:
    """Where an old offset t ends up after text[e:e + removed] became `added` characters."""
    if t <= e:
        return t
    return t + added - removed if t >= e + removed else e + added


def _count_barriers(text: str, count_undefined=None) -> int:
    """Characters no region may hold: lone surrogates, and what the tokenizer's
    `count_undefined` counts (llama.cpp BPE); while a text holds any, edits re-encode it."""
    if text.isascii():
        return 0
    return len(_SURROGATE.findall(text)) + (count_undefined(text) if count_undefined else 0)


def _find_backward(pattern: regex.Pattern, blocks: TextBlocks, lo: int, hi: int) -> int | None:
    """Where the last match of a REVERSE `pattern` in blocks[lo:hi] starts (windows doubling back from hi).

    A zero-width cut is only found where both of its neighbours are in the window, so a cut at
    a window's left edge is found by the next, wider window, never at lo itself.
    """
    width = CUT_WINDOW
    while True:
        a = max(lo, hi - width)
        m = pattern.search(blocks.slice(a, hi))
        if m is not None:
            return a + m.start()
        if a == lo:
            return None
        width *= 2


def _find_forward(pattern: regex.Pattern, blocks: TextBlocks, lo: int, hi: int) -> int | None:
    """Where the first match of `pattern` in blocks[lo:hi] starts (windows doubling from lo).

    A zero-width cut needs both neighbours in the window, so it is found strictly inside (lo, hi).
    """
    width = CUT_WINDOW
    while True:
        b = min(hi, lo + width)
        m = pattern.search(blocks.slice(lo, b))
        if m is not None:
            return lo + m.start()
        if b == hi:
            return None
        width *= 2


def _rule_cut_backward(blocks: TextBlocks, lo: int, hi: int, is_cut) -> int | None:
    """The last r with lo < r < hi where ``is_cut(text[r - 1:r + 1])`` (the tokenizer's
    `edit_cuts`); windows doubling back from hi, overlapping by a character so that every
    pair is looked at once."""
    width, b = CUT_WINDOW, hi
    while b - lo >= 2:
        a = max(lo, b - width)
        window = blocks.slice(a, b)
        for k in range(len(window) - 1, 0, -1):
            if is_cut(window[k - 1:k + 1]):
                return a + k
        b, width = a + 1, width * 2
    return None


def _rule_cut_forward(blocks: TextBlocks, lo: int, hi: int, is_cut) -> int | None:
    """The first q with lo < q < hi where ``is_cut(text[q - 1:q + 1])`` (see `_rule_cut_backward`)."""
    width, a = CUT_WINDOW, lo
    while hi - a >= 2:
        b = min(hi, a + width)
        window = blocks.slice(a, b)
        for k in range(1, len(window)):
            if is_cut(window[k - 1:k + 1]):
                return a + k
        a, width = b - 1, width * 2
    return None


def _shift(column: array, start: int, delta: int) -> None:
    """column[start:] += delta (C speed)."""
    if delta and start < len(column):
        import numpy as np

        view = np.asarray(memoryview(column))
        view[start:] += delta
        del view


def _identity_spans(tokenizer: "Tokenizer", data: bytes, ids: array, offset: int, special_ids: frozenset,
                    *, tiled: bool = False):
    """(starts, ends, flags) when the tokens' bytes are exactly the UTF-8 of the inner text.

    tiled: the spans of `sentencepiece.tile_spans` (llama.cpp tokenizers' `segment`), where the
    tokens that share a split character each span their whole run, from the first one's start
    to the last one's end.
    """
    import numpy as np

    tok = np.frombuffer(ids, dtype=np.int32) if len(ids) else np.zeros(0, np.int32)
    lengths = token_lengths(tokenizer, tok)               # (n_tokens,)
    b1 = np.cumsum(lengths)                               # (n_tokens,) byte end of each token
    b0 = b1 - lengths
    raw = np.frombuffer(data, dtype=np.uint8)
    lead = np.append((raw & 0xC0) != 0x80, True)          # (n_bytes + 1,): byte starts a character
    char_at = np.cumsum(lead) - 1                         # (n_bytes + 1,): character holding byte p
    first = char_at[b0]
    last = np.where(b1 > b0, char_at[np.maximum(b1 - 1, 0)] + 1, first)
    flags = (~lead[b0] | ~lead[b1]).astype(np.uint8)
    if tiled and len(tok):
        heads = np.flatnonzero(lead[b0])                  # (runs,) the tokens that start a character
        run = np.cumsum(lead[b0]) - 1                     # (n_tokens,) the run each token is in
        first, last = first[heads][run], last[np.append(heads[1:], len(tok)) - 1][run]
    if special_ids:
        flags |= np.isin(tok, np.fromiter(special_ids, dtype=np.int64)).astype(np.uint8) << 1
    starts = np.maximum(first - offset, 0).astype(np.int32)
    ends = np.maximum(last - offset, 0).astype(np.int32)
    return array("i", starts.tobytes()), array("i", ends.tobytes()), bytearray(flags.tobytes())


def _region_spans(tokenizer: "Tokenizer", text: str, base: int, ids: list[int], offset: int,
                  special_ids: frozenset, *, tiled: bool = False):
    """(ids, starts, ends, flags) for the tokens of a region starting at inner offset `base`,
    or None when their bytes are not the region's UTF-8 (tiled: see `_identity_spans`)."""
    datas = [tokenizer.token_bytes(i) for i in ids]
    encoded = text.encode("utf-8")
    if b"".join(datas) != encoded:
        return None
    if text.isascii():
        char_at = None
    else:
        char_at = [c for c, ch in enumerate(text) for _ in range(len(ch.encode("utf-8")))]
        char_at.append(len(text))
    starts, ends, flags = [], [], bytearray()
    b = 0
    for i, d in zip(ids, datas):
        b1 = b + len(d)
        if char_at is None:
            c0, c1, partial = b, b1, False
        else:
            c0 = char_at[b]
            c1 = char_at[b1 - 1] + 1 if b1 > b else c0
            partial = (b < len(encoded) and encoded[b] & 0xC0 == 0x80) or \
                      (b1 < len(encoded) and encoded[b1] & 0xC0 == 0x80)
        starts.append(max(base + c0 - offset, 0))
        ends.append(max(base + c1 - offset, 0))
        flags.append(partial | (i in special_ids) << 1)
        b = b1
    if tiled and char_at is not None:
        _tile_runs(encoded, datas, starts, ends)
    return ids, starts, ends, flags


def _tiled(spans: list[tuple[int, int, int, int]], length: int, base: int):
    """(ids, starts, ends, flags) of a region's raw (id, start, end, flag) spans tiled as
    `sentencepiece.tile_spans` tiles them: tokens overlapping the cluster before them (byte
    fallback pieces of one character) join it, and every member spans the cluster, partial
    when it has several. None unless the clusters tile [0, length) with no gap: then `segment`'s
    spans of the whole text, tiled alike, are these shifted by `base`.

    >>> ids, starts, ends, flags = _tiled([(7, 0, 0, 0), (8, 0, 1, 0), (9, 1, 2, 0), (10, 1, 2, 0)], 2, 5)
    >>> starts, ends, list(flags)
    ([5, 5, 6, 6], [5, 6, 7, 7], [0, 0, 1, 1])
    """
    clusters: list[list[int]] = []  # [start, end, first token, last token]
    for k, (_, s, e, _) in enumerate(spans):
        if clusters and s < clusters[-1][1]:
            cluster = clusters[-1]
            cluster[1], cluster[3] = max(cluster[1], e), k
        elif s != (clusters[-1][1] if clusters else 0):
            return None  # a gap: the tiled spans would reach out of the region
        else:
            clusters.append([s, e, k, k])
    if (clusters[-1][1] if clusters else 0) != length:
        return None
    starts, ends, flags = [], [], bytearray()
    for s, e, first, last in clusters:
        for k in range(first, last + 1):
            starts.append(base + s)
            ends.append(base + e)
            flags.append((last > first) | spans[k][3])
    return [t for t, _, _, _ in spans], starts, ends, flags


def _tiled_with_gaps(spans: list[tuple[int, int, int, int]], length: int, base: int, at_end: bool):
    """(ids, starts, ends, flags) of a region's raw (id, start, end, flag) spans tiled as
    `sentencepiece.tile_spans_reference` tiles a whole text: tokens overlapping the cluster
    before them join it, a cluster starts where the one before it ends (the first at the
    region's start: the gap of dropped text before a token joins its cluster), every member
    spans the cluster, partial when it has several; at_end (no token follows the region):
    the last cluster ends at `length`, the text's end.

    >>> ids, starts, ends, flags = _tiled_with_gaps([(7, 1, 2, 0), (8, 3, 4, 0), (9, 3, 4, 0)], 6, 10, True)
    >>> starts, ends, list(flags)
    ([10, 12, 12], [12, 16, 16], [0, 1, 1])
    """
    clusters: list[list[int]] = []  # [start, end, first token, last token]
    for k, (_, s, e, _) in enumerate(spans):
        if clusters and s < clusters[-1][1]:
            cluster = clusters[-1]
            cluster[1], cluster[3] = max(cluster[1], e), k
        else:
            clusters.append([s, e, k, k])
    starts, ends, flags = [], [], bytearray()
    before = 0
    for idx, (_, e, first, last) in enumerate(clusters):
        end = length if at_end and idx == len(clusters) - 1 else e
        for k in range(first, last + 1):
            starts.append(base + before)
            ends.append(base + end)
            flags.append((last > first) | spans[k][3])
        before = e
    return [t for t, _, _, _ in spans], starts, ends, flags


def _tile_runs(encoded: bytes, datas: list[bytes], starts: list[int], ends: list[int]) -> None:
    """Give every token of a run sharing split characters the run's whole span (in place)."""
    head, b = 0, 0
    for k in range(1, len(datas) + 1):
        b += len(datas[k - 1])
        if b >= len(encoded) or encoded[b] & 0xC0 != 0x80:  # token k starts a character: a new run
            starts[head:k] = [starts[head]] * (k - head)
            ends[head:k] = [ends[k - 1]] * (k - head)
            head = k
