"""The tokenizer interface every format loads into, and the records it hands to the GUI.

Concrete tokenizers (byte-level BPE, SentencePiece, WordPiece) subclass `Tokenizer` and
implement `_encode_ordinary`, `token_bytes`, `piece`, `id_of` and `vocab_size`. Special /
added-token splitting, decoding and segmentation live here once.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Iterable, Sequence

TOKEN_TYPES = ("normal", "unknown", "control", "user-defined", "unused", "byte")


@dataclass(frozen=True, slots=True)
class Token:
    """One token of a segmentation.

    `piece` is the vocabulary string exactly as stored (`Ġworld`, `▁the`, `<0x0A>`), `data` the
    raw bytes it stands for, and `start`/`end` character offsets into the input. A token whose
    bytes cover only part of a character spans that whole character and has `partial=True`.
    """

    id: int
    piece: str
    data: bytes
    start: int
    end: int
    partial: bool = False
    special: bool = False


@dataclass(frozen=True, slots=True)
class AddedToken:
    """A special or added token, with HuggingFace's matching flags."""

    content: str
    id: int
    special: bool = True
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False
    normalized: bool = False


@dataclass(frozen=True, slots=True)
class MergeStep:
    """One merge performed while encoding a pre-token: `left + right -> result` at `rank`."""

    left: str
    right: str
    rank: int
    result: str
    position: int  # index of the left symbol in the symbol list before the merge
    symbols: tuple[str, ...] = field(default=())  # the symbol list after the merge


@dataclass(frozen=True)
class MatchStep:
    """One piece greedy longest-match takes: the longest piece the vocabulary has at the
    start of what is left of `word` (the word as matched, with its word-start mark), bytes
    start..end of it; token_id -1 when none is there (the whole word becomes the unknown
    token, `piece` its text)."""

    word: str
    piece: str
    token_id: int
    start: int
    end: int


@dataclass(frozen=True)
class Alternative:
    """One way a unigram model can cut a word: its pieces (as stored; an unknown piece as the
    text it covers), their ids, the sum of their scores, and whether encoding picks it."""

    pieces: tuple[str, ...]
    ids: tuple[int, ...]
    score: float
    chosen: bool


def check_id(token_id: int, size: int) -> int:
    """`token_id` if it names one of `size` tokens, else IndexError (a negative id must not
    index from the end, as a Python list would).

    >>> check_id(3, 10)
    3
    >>> check_id(-1, 10)
    Traceback (most recent call last):
    ...
    IndexError: token id -1 is outside 0..9
    """
    if not 0 <= token_id < size:
        raise IndexError(f"token id {token_id} is outside 0..{size - 1}")
    return token_id


class Tokenizer(ABC):
    """Text <-> ids. Subclasses supply the vocabulary and the ordinary (non-special) encoder."""

    #: short description of the algorithm, shown in the GUI ("byte-level BPE", "SentencePiece unigram", ...)
    kind: str = "tokenizer"
    #: how pieces are rendered: "bytelevel" (Ġ map), "sentencepiece" (▁, <0xNN>), "wordpiece" (##)
    piece_style: str = "bytelevel"
    #: what explains a token: "merges" (`merge_steps`: BPE), "cuts" (`segmentations`: a model
    #: that picks the best-scoring cut of a word) or "matches" (`longest_matches`: WordPiece)
    explains: str = "merges"

    def __init__(self, *, name: str = "", path: str | None = None,
                 added_tokens: Sequence[AddedToken] = ()) -> None:
        self.name = name
        self.path = path
        self.added_tokens: list[AddedToken] = list(added_tokens)
        self.bos_id: int | None = None
        self.eos_id: int | None = None
        self.unk_id: int | None = None
        self.pad_id: int | None = None
        self._special_splitter = None  # built lazily by forma_gui.core.special

    # ---- what subclasses provide -------------------------------------------------------
    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids (the largest id + 1)."""

    @abstractmethod
    def piece(self, token_id: int) -> str:
        """The vocabulary string exactly as stored."""

    @abstractmethod
    def id_of(self, piece: str) -> int | None:
        """The id of a stored piece, or None."""

    @abstractmethod
    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes a token stands for when decoded on its own (no leading-space stripping)."""

    @abstractmethod
    def _encode_ordinary(self, text: str) -> list[int]:
        """Encode text that contains no special tokens to match."""

    # ---- optional, with sensible defaults ----------------------------------------------
    def token_type(self, token_id: int) -> str:
        """One of TOKEN_TYPES."""
        return "control" if any(t.id == token_id and t.special for t in self.added_tokens) else "normal"

    def token_score(self, token_id: int) -> float | None:
        """The piece's score (SentencePiece) or merge rank (BPE), if the format has one."""
        return None

    def merge_steps(self, word: str) -> list[MergeStep]:
        """The merges that encoding one pre-token performs, in order (empty if not BPE)."""
        return []

    def longest_matches(self, word: str) -> list[MatchStep]:
        """For greedy longest-match (WordPiece): each piece taken from the start of what is
        left of each word in `word` (empty for other models)."""
        return []

    def segmentations(self, word: str, k: int = 5) -> list[Alternative]:
        """For a model that picks the best-scoring cut of a word (unigram): its choice, then
        the next best of the k best cuts (empty for other models)."""
        return []

    def pre_tokenize(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the pre-tokens of ordinary text (one span if there is no split)."""
        return [(0, len(text))] if text else []

    # ---- shared behaviour ----------------------------------------------------------------
    def matched_added(self, special: bool) -> tuple[AddedToken, ...]:
        """The added tokens `encode` finds in the text: all of them with special=True, else
        the ones not marked special (HF matches those in every mode, even with
        split_special_tokens; tiktoken and SentencePiece have none)."""
        if special:
            return tuple(self.added_tokens)
        return tuple(t for t in self.added_tokens if not t.special)

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        """Text -> ids, no BOS/EOS. Added tokens' strings match first: with special=True all
        of them, else the non-special ones (`matched_added`)."""
        tokens = self.matched_added(special)
        if not tokens:
            return self._encode_ordinary(text)
        from forma_gui.core.special import split_added

        ids: list[int] = []
        for chunk, token in split_added(self, text, tokens):
            ids.extend(self._encode_ordinary(chunk) if token is None else [token.id])
        return ids

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """Ids -> raw bytes (no UTF-8 validation)."""
        return b"".join(self.token_bytes(i) for i in ids)

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text; invalid UTF-8 becomes U+FFFD exactly as bytes.decode('utf-8', 'replace')."""
        return self.decode_bytes(ids).decode("utf-8", "replace")

    def segment(self, text: str, *, special: bool = False) -> list[Token]:
        """Tokens with character spans that tile `text`."""
        from forma_gui.core.segment import align_tokens

        ids = self.encode(text, special=special)
        return align_tokens(self, text, ids)

    @property
    def special_ids(self) -> set[int]:
        """Ids of the added tokens marked special."""
        return {t.id for t in self.added_tokens if t.special}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.kind}, {self.vocab_size} tokens>"
