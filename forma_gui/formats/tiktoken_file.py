"""tiktoken rank files (``cl100k_base.tiktoken``): one ``BASE64 RANK`` line per token.

The files carry no pre-tokenizer pattern and no special tokens. The pattern comes from
``pattern=`` or from the file name (``cl100k_base`` -> cl100k, ``r50k``/``p50k`` -> gpt2,
``o200k_base`` -> o200k); the special tokens of the four OpenAI encodings are the ones
tiktoken itself adds (tiktoken_ext/openai_public.py).

Parsing is a handful of C-level passes over the whole file (split, base64, int), with a
line-by-line pass only to name the line when something is wrong.
"""
from __future__ import annotations

import binascii
import os
import sys
from pathlib import Path

from forma_gui.core.bytelevel import ByteLevelBPETokenizer
from forma_gui.core.patterns import ALIASES, PATTERNS, resolve_name
from forma_gui.core.tokenizer import AddedToken
from forma_gui.errors import FormatError
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
_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
_NOT_SEPARATOR = bytes(b for b in range(256) if b not in b" \n")
_BASE64_OR_SEPARATOR = _BASE64 + b" \n"


def load_tiktoken(path: str | os.PathLike, *, pattern: str | None = None) -> ByteLevelBPETokenizer:
    """Load a tiktoken rank file; FormatError if it is malformed or no pattern is known."""
    path = Path(path)
    encoding = encoding_name(path)
    source = _pattern_for(path, encoding, pattern)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise FormatError(f"cannot read: {e.strerror or e}", path=path) from e
    ranks = parse_ranks(data, path)
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

    Exactness without a per-line loop: the file holds only base64 characters, spaces and
    newlines, and the separators left after deleting everything else read `` \\n`` once per
    line, so every line is one field, a space, one field, a newline.
    """
    fields = data.split()
    pairs = len(fields) // 2
    tokens, numbers = fields[0::2], fields[1::2]
    if (len(fields) != 2 * pairs or data.translate(None, _BASE64_OR_SEPARATOR)
            or data.translate(None, _NOT_SEPARATOR) != b" \n" * pairs
            or not all(map(bytes.isdigit, numbers))
            or max(map(len, numbers), default=0) > MAX_RANK_DIGITS):
        return None
    try:  # strict as on the line path: the two paths accept exactly the same files
        decoded = list(map(_decode_strict, tokens))
    except binascii.Error:
        return None
    values = list(map(int, numbers))
    ranks = dict(zip(decoded, values))
    if b"" in ranks or len(ranks) != pairs or (values != list(range(pairs)) and len(set(values)) != pairs):
        return None
    return ranks


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
            what = f"token {token!r}" if token in ranks else f"rank {rank}"
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
