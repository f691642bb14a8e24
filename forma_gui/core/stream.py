"""Streaming decode: the UTF-8 byte buffer, stop sequences, and a step-by-step trace.

A byte-level tokenizer may cut a character's UTF-8 encoding between two tokens. Decoding
each token on its own then prints U+FFFD for the half character; a streaming decoder keeps
a byte buffer instead and emits only what can no longer change. Stop strings need a second,
separate buffer: that one waits for *text* that may still turn into a stop string, while
the byte buffer waits for *bytes* that may still complete a character. Sharing one buffer
would make both decisions wrong, so `StreamDecoder` and `StopMatcher` never see each
other's state; the trace pipes the decoder's text into the matcher.

>>> d = StreamDecoder()
>>> [d.push(c) for c in (b"Go\\xe2", b"\\x82\\xac\\xe2\\x86", b"\\x92\\xf0\\x9f", b"\\x99\\x82")]
['Go', '€', '→', '🙂']
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from forma_gui.core.tokenizer import Tokenizer

REPLACEMENT = "\ufffd"

#: lead bytes -> (sequence length, lowest and highest allowed second byte), Unicode Table 3-7.
#: The narrowed second-byte ranges exclude overlong forms (E0, F0), surrogates (ED) and
#: code points above U+10FFFF (F4); every later byte is 80..BF.
WELL_FORMED = {
    (0xC2, 0xDF): (2, 0x80, 0xBF),
    (0xE0, 0xE0): (3, 0xA0, 0xBF),
    (0xE1, 0xEC): (3, 0x80, 0xBF),
    (0xED, 0xED): (3, 0x80, 0x9F),
    (0xEE, 0xEF): (3, 0x80, 0xBF),
    (0xF0, 0xF0): (4, 0x90, 0xBF),
    (0xF1, 0xF3): (4, 0x80, 0xBF),
    (0xF4, 0xF4): (4, 0x80, 0x8F),
}


def _lead_table() -> tuple[tuple[int, int, int] | None, ...]:
    """WELL_FORMED expanded to one entry per byte value (None: not a lead byte)."""
    table: list[tuple[int, int, int] | None] = [None] * 256
    for (first, last), rule in WELL_FORMED.items():
        for b in range(first, last + 1):
            table[b] = rule
    return tuple(table)


_LEAD = _lead_table()

#: the role of a byte in the stream, as the GUI colours it
ROLES = ("ascii", "lead", "continuation", "invalid", "held")


@dataclass(frozen=True, slots=True)
class ByteRole:
    """What one byte is doing: its role, the length of the sequence it belongs to, its place in it.

    `expected` is the length a lead byte announces (2-4; 1 for ASCII, 0 for a stray byte) and
    `offset` the byte's index inside its unit (a character, a replaced run, or the held tail).
    """

    role: str
    expected: int = 1
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Unit:
    """A run of bytes that decodes as one unit: a character, one U+FFFD, or a held tail."""

    start: int
    end: int
    kind: str  # "char", "invalid" or "held"
    expected: int  # the length the first byte announces (0 for a byte that starts nothing)


def _subpart_end(data: bytes, i: int, rule: tuple[int, int, int]) -> int:
    """End of the longest well-formed prefix of the sequence that starts at data[i]."""
    length, lo, hi = rule
    j = i + 1
    while j < min(i + length, len(data)):
        low, high = (lo, hi) if j == i + 1 else (0x80, 0xBF)
        if not low <= data[j] <= high:
            break
        j += 1
    return j


def scan_units(data: bytes, *, final: bool = True) -> list[Unit]:
    """Split bytes into characters and maximal ill-formed subparts (the readable reference).

    Each maximal subpart becomes one U+FFFD, as in `bytes.decode("utf-8", "replace")`. With
    final=False a truncated but well-formed tail is a "held" unit instead.

    >>> [(u.start, u.end, u.kind) for u in scan_units(b"A\\xe2\\x82", final=False)]
    [(0, 1, 'char'), (1, 3, 'held')]
    """
    units: list[Unit] = []
    i = 0
    while i < len(data):
        rule = _LEAD[data[i]]
        if data[i] < 0x80 or rule is None:
            units.append(Unit(i, i + 1, "char" if data[i] < 0x80 else "invalid", int(data[i] < 0x80)))
            i += 1
            continue
        j = _subpart_end(data, i, rule)
        kind = "char" if j == i + rule[0] else "held" if j == len(data) and not final else "invalid"
        units.append(Unit(i, j, kind, rule[0]))
        i = j
    return units


def decode_reference(data: bytes) -> str:
    """Decode via `scan_units`: the slow path the fast decoder is tested against."""
    return "".join(data[u.start:u.end].decode("utf-8") if u.kind == "char" else REPLACEMENT
                   for u in scan_units(data))


def byte_roles(data: bytes, *, final: bool = False) -> list[ByteRole]:
    """The role of every byte of `data` (ASCII, lead, continuation, invalid, held).

    >>> [r.role for r in byte_roles(b"G\\xe2\\x82\\xac\\xe2")]
    ['ascii', 'lead', 'continuation', 'continuation', 'held']
    """
    roles: list[ByteRole] = []
    for unit in scan_units(data, final=final):
        for offset in range(unit.end - unit.start):
            roles.append(ByteRole(_role_of(unit, offset), unit.expected, offset))
    return roles


def _role_of(unit: Unit, offset: int) -> str:
    if unit.kind != "char":
        return unit.kind
    if unit.expected == 1:
        return "ascii"
    return "lead" if offset == 0 else "continuation"


def held_start(buf: bytes) -> int:
    """Where the truncated but well-formed tail of `buf` begins (len(buf) if there is none).

    Only the last three bytes can hold one, and at most one position qualifies: a lead
    byte followed only by the continuation bytes it allows, fewer than it announces.

    >>> held_start(b"Go\\xe2"), held_start(b"Go\\xe2\\x41"), held_start(b"\\xed\\xa0")
    (2, 4, 2)
    """
    n = len(buf)
    for i in range(max(0, n - 3), n):
        rule = _LEAD[buf[i]]
        if rule is not None and n - i < rule[0] and _subpart_end(buf, i, rule) == n:
            return i
    return n


class StreamDecoder:
    """Bytes in, text out: every complete character at once, invalid bytes at once as U+FFFD.

    Only a truncated but well-formed prefix of a multi-byte character is held back, so for
    every chunking `"".join(map(d.push, chunks)) + d.flush() == b"".join(chunks).decode("utf-8", "replace")`.
    """

    def __init__(self) -> None:
        self._pending = b""  # at most 3 bytes: a well-formed, incomplete character

    @property
    def pending(self) -> bytes:
        """The held-back bytes."""
        return self._pending

    def push(self, data: bytes) -> str:
        """Add bytes; return the text that can no longer change."""
        buf = self._pending + data
        cut = held_start(buf)
        self._pending = buf[cut:]
        # The tail starts with a lead byte, so no unit before `cut` can reach into it.
        return buf[:cut].decode("utf-8", "replace")

    def flush(self) -> str:
        """End of stream: held bytes become one U+FFFD."""
        out = REPLACEMENT if self._pending else ""
        self._pending = b""
        return out


class StopMatcher:
    """Text in, text out, cut at the first stop string; its buffer holds a possible stop's start.

    The stream stops where a stop string is first complete (the earliest end; at the same
    end, the longest stop). Nothing at or after the stop's first character is emitted.

    >>> m = StopMatcher(["\\nUser:"])
    >>> m.push("Hi\\nUs"), m.held, m.push("er: x"), m.stopped
    ('Hi', '\\nUs', '', '\\nUser:')
    """

    def __init__(self, stops: Sequence[str]) -> None:
        if any(not stop for stop in stops):
            raise ValueError("a stop string cannot be empty")
        self.stops: tuple[str, ...] = tuple(dict.fromkeys(stops))
        self._longest = max(map(len, self.stops), default=0)
        self._held = ""
        self._emitted = 0  # characters emitted so far: where the held buffer begins
        self.stopped: str | None = None
        self.stop_offset: int | None = None  # character offset of the stop in the pushed text

    @property
    def held(self) -> str:
        """Text held back because a stop string could begin there."""
        return self._held

    def push(self, text: str) -> str:
        """Add text; return the part that can no longer be part of a stop string."""
        if self.stopped is not None:
            return ""
        buf = self._held + text
        hit = self._first_match(buf)
        if hit is not None:
            start, self.stopped = hit
            self.stop_offset = self._emitted + start
            self._held = ""
            return self._emit(buf[:start])
        cut = self._hold_start(buf)
        self._held = buf[cut:]
        return self._emit(buf[:cut])

    def flush(self) -> str:
        """End of stream: the held text was not a stop after all."""
        out, self._held = self._held, ""
        return self._emit(out)

    def _emit(self, text: str) -> str:
        self._emitted += len(text)
        return text

    def _first_match(self, buf: str) -> tuple[int, str] | None:
        """(start, stop) of the stop string that completes first in buf."""
        best: tuple[tuple[int, int], str] | None = None
        for stop in self.stops:
            i = buf.find(stop)
            if i >= 0 and (best is None or (i + len(stop), i) < best[0]):
                best = ((i + len(stop), i), stop)
        return None if best is None else (best[0][1], best[1])

    def _hold_start(self, buf: str) -> int:
        """Start of the longest suffix of buf that some stop string begins with."""
        for i in range(max(0, len(buf) - self._longest + 1), len(buf)):
            tail = buf[i:]
            if any(stop.startswith(tail) for stop in self.stops):
                return i
        return len(buf)


@dataclass(frozen=True, slots=True)
class StreamStep:
    """One step of a streaming decode: a token's bytes go in, some text comes out.

    `roles` has one entry per byte of `buffer_before + token_bytes`. `emitted` is what the
    buffered decoder printed, `naive` what decoding the token alone prints. `stop_emitted`
    and `stop_held` are the stop matcher's output and buffer; `stopped` is the stop string
    once one has matched (at this step or before) and `stop_offset` its character offset in
    the decoded text. The last step of a trace is the end-of-stream flush (`final`).
    """

    index: int
    token_id: int | None
    piece: str
    token_bytes: bytes
    buffer_before: bytes
    buffer_after: bytes
    roles: tuple[ByteRole, ...]
    emitted: str
    naive: str
    stop_emitted: str = ""
    stop_held: str = ""
    stopped: str | None = None
    stop_offset: int | None = None
    stops_here: bool = False
    final: bool = False

    @property
    def stream_bytes(self) -> bytes:
        """The bytes `roles` describes: the held buffer, then the token."""
        return self.buffer_before + self.token_bytes


def trace_stream(tokenizer: "Tokenizer", ids: Sequence[int], *, stops: Sequence[str] = (),
                 flush: bool = True) -> list[StreamStep]:
    """Trace decoding `ids` one token at a time, ending with the flush step (unless flush=False)."""
    return list(iter_trace(tokenizer, ids, stops=stops, flush=flush))


def iter_trace(tokenizer: "Tokenizer", ids: Sequence[int], *, stops: Sequence[str] = (),
               flush: bool = True) -> Iterator[StreamStep]:
    """`trace_stream` one step at a time, for callers that report progress or stop early."""
    size = tokenizer.vocab_size
    for i in ids:
        if not 0 <= i < size:
            raise ValueError(f"token id {i} is out of range: the vocabulary has ids 0..{size - 1}")
    tokens = ((i, tokenizer.piece(i), tokenizer.token_bytes(i)) for i in ids)
    return _Tracer(stops).run(tokens, flush=flush)


def trace_chunks(chunks: Iterable[bytes], *, stops: Sequence[str] = (), flush: bool = True) -> list[StreamStep]:
    """Trace decoding raw byte chunks (no tokenizer), ending with the flush step."""
    return list(_Tracer(stops).run(((None, "", bytes(c)) for c in chunks), flush=flush))


class _Tracer:
    """Runs a decoder and a stop matcher side by side and records every step."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.decoder = StreamDecoder()
        self.matcher = StopMatcher(stops)
        self.index = 0

    def run(self, tokens: Iterable[tuple[int | None, str, bytes]], *, flush: bool) -> Iterator[StreamStep]:
        for token_id, piece, data in tokens:
            yield self.push(token_id, piece, data)
        if flush:
            yield self.flush()

    def push(self, token_id: int | None, piece: str, data: bytes) -> StreamStep:
        before, was_stopped = self.decoder.pending, self.matcher.stopped is not None
        emitted = self.decoder.push(data)
        stop_out = self.matcher.push(emitted)
        return self._step(token_id, piece, data, before, was_stopped, emitted, stop_out,
                          naive=data.decode("utf-8", "replace"))

    def flush(self) -> StreamStep:
        before, was_stopped = self.decoder.pending, self.matcher.stopped is not None
        emitted = self.decoder.flush()
        stop_out = self.matcher.push(emitted) + self.matcher.flush()
        return self._step(None, "", b"", before, was_stopped, emitted, stop_out, naive="", final=True)

    def _step(self, token_id: int | None, piece: str, data: bytes, before: bytes, was_stopped: bool,
              emitted: str, stop_out: str, *, naive: str, final: bool = False) -> StreamStep:
        """Record the state of both buffers after one step."""
        m = self.matcher
        self.index += 1
        return StreamStep(
            index=self.index - 1, token_id=token_id, piece=piece, token_bytes=data,
            buffer_before=before, buffer_after=self.decoder.pending,
            roles=tuple(byte_roles(before + data, final=final)),
            emitted=emitted, naive=naive, stop_emitted=stop_out, stop_held=m.held,
            stopped=m.stopped, stop_offset=m.stop_offset,
            stops_here=m.stopped is not None and not was_stopped, final=final,
        )


def joined(steps: Sequence[StreamStep], field: str = "emitted") -> str:
    """The concatenated `emitted`, `naive` or `stop_emitted` text of a trace."""
    return "".join(getattr(step, field) for step in steps)


# ---- parsing user input ------------------------------------------------------------------

_ID_SEPARATORS = re.compile(r"[\s,;\[\]()]+")


def parse_ids(text: str) -> list[int]:
    """Token ids typed by hand: "1, 2, 3", "[1 2 3]" (a pasted Python list) all work.

    >>> parse_ids("[15496, 11,  995]")
    [15496, 11, 995]
    """
    ids: list[int] = []
    for item in filter(None, _ID_SEPARATORS.split(text)):
        try:
            ids.append(int(item, 0))
        except ValueError:
            raise ValueError(f"not a token id: {item!r}") from None
    return ids


#: escape letter -> character, for stop strings typed in a one-line field
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "|": "|"}
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def unescape(text: str) -> str:
    r"""Turn \n, \t, \r, \\ and \| into the characters they name; other escapes stay as typed.

    >>> unescape(r"\nUser:")
    '\nUser:'
    """
    return _ESCAPE.sub(lambda m: ESCAPES.get(m.group(1), m.group(0)), text)


def split_stops(field: str) -> list[str]:
    r"""Stop strings from one field: separated by "|", with escapes (\| is a literal bar).

    >>> split_stops(r"\n\n|User:|a\|b")
    ['\n\n', 'User:', 'a|b']
    """
    parts = re.split(r"(?<!\\)((?:\\\\)*)\|", field)
    # re.split keeps the captured runs of escaped backslashes: glue them back to the left part.
    items = [parts[0]]
    for glue, part in zip(parts[1::2], parts[2::2]):
        items[-1] += glue
        items.append(part)
    return [s for s in map(unescape, items) if s]


# ---- the plain-text table ------------------------------------------------------------------

_CONTROL_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\", '"': '\\"'}


def visible(text: str) -> str:
    """Quote text so spaces, control characters and emptiness show in a table cell.

    >>> visible("a\\n b")
    '"a\\\\n b"'
    """
    out = []
    for ch in text:
        if ch in _CONTROL_ESCAPES:
            out.append(_CONTROL_ESCAPES[ch])
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") and ch != "\u200d":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def hex_bytes(data: bytes) -> str:
    """`47 6f e2` (empty string for no bytes)."""
    return data.hex(" ")


def _cell_step(step: StreamStep) -> str:
    return "end" if step.final else str(step.index)


def _cell_token(step: StreamStep) -> str:
    if step.final:
        return "(flush)"
    if step.token_id is None:
        return "-"
    return f"{step.token_id} {visible(step.piece)}"


def _cell_stop(step: StreamStep) -> str:
    if step.stops_here:
        return f"STOP {visible(step.stopped or '')}"
    return "stopped" if step.stopped is not None else ""


#: column header -> cell text of a step; the GUI's table model shows the same columns
TRACE_COLUMNS: dict[str, Callable[[StreamStep], str]] = {
    "step": _cell_step,
    "token": _cell_token,
    "bytes": lambda s: hex_bytes(s.token_bytes),
    "buffer": lambda s: hex_bytes(s.buffer_after),
    "emitted": lambda s: visible(s.emitted),
    "naive": lambda s: "" if s.final else visible(s.naive),
}

#: extra columns when the trace has stop strings
STOP_COLUMNS: dict[str, Callable[[StreamStep], str]] = {
    "stop buffer": lambda s: visible(s.stop_held),
    "stop out": lambda s: visible(s.stop_emitted),
    "stop": _cell_stop,
}


def trace_columns(*, with_stops: bool) -> dict[str, Callable[[StreamStep], str]]:
    """The table's columns, with the stop matcher's when there are stop strings."""
    return {**TRACE_COLUMNS, **STOP_COLUMNS} if with_stops else dict(TRACE_COLUMNS)


def display_width(text: str) -> int:
    """Terminal columns: wide (CJK, emoji) characters take two, combining marks none."""
    return sum(0 if unicodedata.combining(ch) or ch == "\u200d"
               else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def format_trace_table(steps: Sequence[StreamStep], *, with_stops: bool = False) -> str:
    """A plain-text table of a trace, one row per step, columns aligned for a terminal."""
    columns = trace_columns(with_stops=with_stops)
    rows = [list(columns)] + [[cell(step) for cell in columns.values()] for step in steps]
    widths = [max(display_width(row[c]) for row in rows) for c in range(len(columns))]
    rows.insert(1, ["-" * w for w in widths])
    return "\n".join("  ".join(cell + " " * (w - display_width(cell)) for cell, w in zip(row, widths)).rstrip()
                     for row in rows)
