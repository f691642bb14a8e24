"""A small, self-contained Tokenizer for the GUI tests.

Whole-word pieces from a short list, every other pre-token spelled out in byte tokens
(GPT-2 byte-map pieces), so multi-byte characters produce partial tokens. It implements
`segment` itself, so the GUI tests do not depend on the core's alignment code.
"""
from __future__ import annotations

import regex

from forma_gui.core.tokenizer import AddedToken, MergeStep, Token, Tokenizer

GPT2_SPLIT = regex.compile(
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
WORDS = ("Hello", " world", "!", " the", " cat", "don", "'t", " is", "\n", " tokens", "€")


def _byte_pieces() -> list[str]:
    """GPT-2's printable stand-in for each byte (Ġ for space, Ċ for newline, ...)."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


class StubTokenizer(Tokenizer):
    kind = "stub byte-level"

    def __init__(self, name: str = "stub") -> None:
        super().__init__(name=name, added_tokens=[AddedToken("<|end|>", 256 + len(WORDS))])
        self._bytes = [bytes([b]) for b in range(256)] + [w.encode() for w in WORDS] + [b"<|end|>"]
        byte_map = _byte_pieces()
        self._pieces = [byte_map[b] for b in range(256)]
        self._pieces += ["".join(byte_map[b] for b in w.encode()) for w in WORDS] + ["<|end|>"]
        self._ids = {p: i for i, p in enumerate(self._pieces)}
        self._word_ids = {w: 256 + i for i, w in enumerate(WORDS)}

    @property
    def vocab_size(self) -> int:
        return len(self._pieces)

    def piece(self, token_id: int) -> str:
        return self._pieces[token_id]

    def id_of(self, piece: str) -> int | None:
        return self._ids.get(piece)

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[token_id]

    def token_type(self, token_id: int) -> str:
        return "control" if token_id == self.vocab_size - 1 else "normal"

    def token_score(self, token_id: int) -> float | None:
        return float(token_id - 256) if token_id >= 256 else None

    def pre_tokenize(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in GPT2_SPLIT.finditer(text)]

    def _encode_ordinary(self, text: str) -> list[int]:
        ids: list[int] = []
        for start, end in self.pre_tokenize(text):
            word = text[start:end]
            ids.extend([self._word_ids[word]] if word in self._word_ids else word.encode())
        return ids

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        if not special:
            return self._encode_ordinary(text)
        ids: list[int] = []
        for i, chunk in enumerate(text.split("<|end|>")):
            if i:
                ids.append(self.vocab_size - 1)
            ids.extend(self._encode_ordinary(chunk))
        return ids

    def merge_steps(self, word: str) -> list[MergeStep]:
        """Pretend merges: join the byte symbols left to right when the word is in WORDS."""
        if word not in self._word_ids or len(word.encode()) < 2:
            return []
        symbols = [self._pieces[b] for b in word.encode()]
        steps = []
        for rank in range(len(symbols) - 1):
            left, right = symbols[0], symbols[1]
            symbols = [left + right] + symbols[2:]
            steps.append(MergeStep(left, right, rank, left + right, 0, tuple(symbols)))
        return steps

    def segment(self, text: str, *, special: bool = False) -> list[Token]:
        ids = self.encode(text, special=special)
        specials = {self.vocab_size - 1} if special else set()
        return align(self, text, ids, specials)


def align(tokenizer: Tokenizer, text: str, ids: list[int], specials: set[int]) -> list[Token]:
    """Tokens with character spans; a token inside one character spans it, partial."""
    char_at = {}  # byte offset -> (char index, is the char's last byte, is its first byte)
    pos = 0
    for i, ch in enumerate(text):
        n = len(ch.encode("utf-8", "surrogatepass"))
        for k in range(n):
            char_at[pos + k] = (i, k == n - 1, k == 0)
        pos += n
    tokens, offset = [], 0
    for tid in ids:
        data = tokenizer.token_bytes(tid)
        first, last = char_at[offset], char_at[offset + len(data) - 1]
        tokens.append(Token(tid, tokenizer.piece(tid), data, first[0], last[0] + 1,
                            partial=not (first[2] and last[1]), special=tid in specials))
        offset += len(data)
    return tokens
