"""tiktoken rank files (``cl100k_base.tiktoken``): one ``BASE64 RANK`` line per token.

The files carry no pre-tokenizer pattern and no special tokens. The pattern comes from
``pattern=`` or from the file name (``cl100k_base`` -> cl100k, ``r50k``/``p50k`` -> gpt2,
``o200k_base`` -> o200k); the special tokens of the four OpenAI encodings are the ones
tiktoken itself adds (tiktoken_ext/openai_public.py).

Parsing checks and decodes the whole file in numpy, then makes the token bytes with one
bytes.split and the rank dict with one dict() call; a line-by-line pass runs only for files
laid out otherwise, and to name the line when something is wrong.
"""
from __future__ import annotations

import binascii
import os
import sys
from pathlib import Path

from forma_gui.core.byte_split import split_at_slots
from forma_gui.core.bytelevel import ByteLevelBPETokenizer
from forma_gui.core.patterns import ALIASES, PATTERNS, resolve_name
from forma_gui.core.slices import sliced_dict
from forma_gui.core.tokenizer import AddedToken
from forma_gui.errors import FormatError, shown
from forma_gui.formats.file_bytes import read_bytes
from forma_gui.formats.limits import check_id_space, id_limit

#: encoding name -> the special tokens tiktoken registers for it
SPECIAL_TOKENS: dict[str, dict[str, int]] = {
    "r50k_base": {"<|endoftext|>": 50256},
    "p50k_base": {"<|endoftext|>": 50256},
    "cl100k_base": {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                    "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276},
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}

MAX_RANK_DIGITS = 18  # ranks are ids, far below 10**18; longer digit runs are not converted
_STRICT = sys.version_info >= (3, 11)  # a2b_base64(strict_mode=) is new in 3.11
_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_BASE64 = _ALPHABET + b"="
_BASE64_OR_SEPARATOR = _BASE64 + b" \n"
#: base64 character -> its 6 bits (a bytes.translate table; "=" and the rest: 0)
_SIX_BITS = bytes(max(_ALPHABET.find(b), 0) for b in range(256))


def load_tiktoken(path: str | os.PathLike, *, pattern: str | None = None) -> ByteLevelBPETokenizer:
    """Load a tiktoken rank file; FormatError if it is malformed or no pattern is known."""
    path = Path(path)
    encoding = encoding_name(path)
    source = _pattern_for(path, encoding, pattern)
    ranks = parse_ranks(read_bytes(path), path)
    specials = [AddedToken(content, token_id) for content, token_id in SPECIAL_TOKENS.get(encoding, {}).items()]
    try:
        return ByteLevelBPETokenizer.from_ranks(ranks, pattern=source, added_tokens=specials,
                                                name=encoding, path=str(path))
    except ValueError as e:
        raise FormatError(str(e), path=path) from None


def encoding_name(path: Path) -> str:
    """The file name without .tiktoken (``cl100k_base``)."""
    name = path.name
    return name[: -len(".tiktoken")] if name.endswith(".tiktoken") else path.stem


def _pattern_for(path: Path, encoding: str, pattern: str | None) -> str:
    if pattern:
        return resolve_name(pattern)
    for key in (encoding, encoding.split(".")[0]):
        if key in ALIASES or key in PATTERNS:
            return resolve_name(key)
    raise FormatError("a tiktoken rank file does not say which pre-tokenizer regex it needs, and the "
                      f"file name {path.name!r} is not a known encoding; pass pattern= (one of "
                      + ", ".join(PATTERNS) + ", or a regex)", path=path)


def parse_ranks(data: bytes, path: str | os.PathLike = "<bytes>") -> dict[bytes, int]:
    """``BASE64 RANK`` lines -> {token bytes: rank}; FormatError names the first bad line.

    Files as tiktoken writes them (one space, ``\\n`` endings) are parsed in a few C-level
    passes; anything else (blank lines, CRLF, tabs, or an error) goes line by line.
    """
    ranks = _parse_canonical(data)
    if ranks is None:
        ranks = _parse_lines(data, path)
    if not ranks:
        raise FormatError("no ranks in the file", path=path, offset=0)
    top = max(ranks.values())
    if top >= id_limit(len(ranks)):  # ranks index dense tables: see formats.limits
        check_id_space(top, len(ranks), "rank", path, line=_line_of_rank(data, top))
    return ranks


def _line_of_rank(data: bytes, rank: int) -> int | None:
    """The line number of `rank` in a file that parsed."""
    for number, line in enumerate(data.splitlines(), 1):
        parts = line.split()
        if len(parts) == 2 and int(parts[1]) == rank:
            return number
    return None


def _parse_canonical(data: bytes) -> dict[bytes, int] | None:
    """The fast path, or None if the file is not exactly ``BASE64 RANK\\n`` lines or has duplicates.

    In numpy over the whole file, then one C-level split into the token bytes (see `_tokens`)
    and one dict: about 1.3-1.6x faster than a per-line loop (tiktoken's; Nov 2026). Exactness:
    the file holds only base64 characters, ``=``, spaces and newlines; the separators
    alternate space, newline, so every line is one field, a space, one field; the rank is
    decimal digits; the token is strictly padded base64 (`_tokens`).
    """
    import numpy as np

    if not data or data.translate(None, _BASE64_OR_SEPARATOR):
        return None
    if data[-1] != ord("\n"):
        data += b"\n"
    chars = np.frombuffer(data, np.uint8)
    separators = np.flatnonzero(chars <= ord(" "))                     # spaces and newlines
    spaces, ends = separators[0::2], separators[1::2]
    n = len(ends)
    if len(spaces) != n or (chars[spaces] != ord(" ")).any() or (chars[ends] != ord("\n")).any():
        return None
    starts = np.concatenate(([0], ends[:-1] + 1))
    token_len, rank_len = spaces - starts, ends - spaces - 1
    if (token_len < 4).any() or (token_len & 3).any() or (rank_len < 1).any() \
            or (rank_len > MAX_RANK_DIGITS).any():
        return None
    ranks = _ranks(data, spaces + 1, rank_len)
    tokens = _tokens(data, starts, token_len) if ranks is not None else None
    if tokens is None:
        return None
    if np.array_equal(ranks, np.arange(n)):
        values: range | list[int] = range(n)
    else:
        values = ranks.tolist()
        if len(set(values)) != n:
            return None
    parsed = sliced_dict(tokens, values)  # in slices: a window's worker must not hold the GIL ~50 ms
    return parsed if len(parsed) == n else None


def _rows(data: bytes, starts, width: int):
    """(len(starts), width) uint8: the `width` bytes at each start (one item gathered per row)."""
    import numpy as np

    windows = np.ndarray((len(data) - width + 1,), f"V{width}", data, 0, (1,))
    return windows[starts].view(np.uint8).reshape(-1, width)


def _ranks(data: bytes, starts, lengths):
    """The decimal numbers of `lengths` digits at `starts` (int64), None if some is not digits."""
    import numpy as np

    width = int(lengths.max())
    if int(starts[-1]) + width > len(data):  # the last rank is shorter than the longest
        data += b"\n" * width
    digits = _rows(data, starts, width) - np.uint8(ord("0"))            # (n, width), past the rank too
    digits *= np.arange(width) < lengths[:, None]                       # zero past the rank
    if (digits > 9).any():
        return None
    value = np.zeros(len(starts), np.int64)
    for column in digits.T:
        value *= 10
        value += column
    return value // 10 ** (width - lengths)


def _tokens(data: bytes, starts, lengths) -> list[bytes] | None:
    """The base64 tokens at `starts` decoded, or None unless each is strictly padded base64.

    Each token is whole quads (lengths are multiples of 4), so all quads decode in numpy at
    once; only the last quad of a token may hold ``=``, as ``xxx=`` or ``xx==``, which drop
    one or two of its three bytes. The tokens are laid out with a spare byte after each and
    cut by core.byte_split.
    """
    import numpy as np

    per_token = lengths >> 2
    first = np.cumsum(per_token) - per_token                            # each token's first quad
    last = first + per_token - 1
    n_quads = int(per_token.sum())
    quad_at = np.repeat(starts - 4 * first, per_token)
    quad_at += np.arange(0, 4 * n_quads, 4)
    quads = _rows(data, quad_at, 4)                                     # (Q, 4) characters
    tail = quads[last, 2:] == ord("=")                                  # (n, 2)
    pad2, pad3 = tail[:, 0], tail[:, 1]
    if np.count_nonzero(tail) != data.count(b"=") or (pad2 & ~pad3).any():
        return None  # "=" elsewhere, or "x=x=" / "xx=x"
    v = np.frombuffer(quads.tobytes().translate(_SIX_BITS), np.uint8).reshape(-1, 4)
    out = np.empty((n_quads, 4), np.uint8)                              # 3 bytes, a spare slot
    out[:, 0] = (v[:, 0] << 2) | (v[:, 1] >> 4)
    out[:, 1] = (v[:, 1] << 4) | (v[:, 2] >> 2)
    out[:, 2] = (v[:, 2] << 6) | v[:, 3]
    keep = np.empty((n_quads, 4), np.bool_)
    keep[...] = (True, True, True, False)
    keep[last, 1], keep[last, 2], keep[last, 3] = ~pad2, ~pad3, True
    slots = np.cumsum(per_token * 3 - pad2 - pad3 + 1) - 1
    return split_at_slots(out[keep], slots)


def _parse_lines(data: bytes, path) -> dict[bytes, int]:
    """Line by line, naming the first malformed or repeated line."""
    ranks: dict[bytes, int] = {}
    seen_ranks: set[int] = set()
    for number, line in enumerate(data.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        token = _line_token(parts)
        if token is None:
            raise FormatError(f"expected 'BASE64 RANK', got {line[:60]!r}", path=path, line=number)
        if len(parts[1]) > MAX_RANK_DIGITS:
            raise FormatError(f"rank {parts[1][:24].decode()}... has {len(parts[1])} digits",
                              path=path, line=number)
        rank = int(parts[1])
        if token in ranks or rank in seen_ranks:
            what = f"token {shown(token)}" if token in ranks else f"rank {rank}"
            raise FormatError(f"{what} appears twice", path=path, line=number)
        ranks[token] = rank
        seen_ranks.add(rank)
    return ranks


def _decode_strict(token: bytes) -> bytes:
    """Base64 with padding checked (where Python has strict mode)."""
    return binascii.a2b_base64(token, strict_mode=True) if _STRICT else binascii.a2b_base64(token)


def _line_token(parts: list[bytes]) -> bytes | None:
    """The decoded token of a split line, or None if the line is not ``BASE64 RANK``."""
    if len(parts) != 2 or not parts[1].isdigit() or parts[0].translate(None, _BASE64):
        return None
    try:
        token = _decode_strict(parts[0])
    except binascii.Error:
        return None
    return token or None
