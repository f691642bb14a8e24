"""Streaming decode: the byte buffer against Python's UTF-8 decoder, stop strings, the trace."""
from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core.stream import (
    REPLACEMENT, StopMatcher, StreamDecoder, byte_roles, decode_reference, display_width,
    format_trace_table, held_start, joined, parse_ids, split_stops, trace_chunks,
    trace_stream, unescape, visible,
)
from forma_gui.core.tokenizer import Tokenizer
from tests.conftest import MAX_EXAMPLES, data_file

# ---- oracles ---------------------------------------------------------------------------------


def decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


@functools.lru_cache(maxsize=1)
def valid_prefixes() -> frozenset[bytes]:
    """Every proper prefix of the UTF-8 encoding of every scalar value, from Python's encoder."""
    prefixes = set()
    for lo, hi, width in ((0x80, 0x800, 2), (0x800, 0x10000, 3), (0x10000, 0x110000, 4)):
        # A proper prefix never includes the last byte, which carries the low 6 bits:
        # one code point in every 64 gives them all.
        for cp in range(lo, hi, 64):
            if not 0xD800 <= cp <= 0xDFFF:
                enc = chr(cp).encode()
                prefixes.update(enc[:k] for k in range(1, width))
    return frozenset(prefixes)


def expected_pending(data: bytes) -> bytes:
    """The longest suffix (at most 3 bytes) that is a proper prefix of some character."""
    for k in (3, 2, 1):
        if len(data) >= k and data[-k:] in valid_prefixes():
            return data[-k:]
    return b""


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])] or [b""]


# UTF-8 fragments that exercise every branch: whole characters of each length, their
# truncations, the narrowed second-byte ranges, stray continuations and never-valid bytes.
FRAGMENTS = st.one_of(
    st.characters(codec="utf-8").map(str.encode),
    st.characters(min_codepoint=0x80, codec="utf-8").map(lambda c: c.encode()[:-1]),
    st.sampled_from([b"\xe0\x80", b"\xe0\xa0", b"\xed\xa0", b"\xed\x9f", b"\xf0\x8f", b"\xf0\x90",
                     b"\xf4\x8f", b"\xf4\x90", b"\xc0", b"\xc1", b"\xf5", b"\xff", b"\x80", b"\xbf"]),
    st.integers(0x80, 0xBF).map(lambda b: bytes([b])),
    st.integers(0xC0, 0xFF).map(lambda b: bytes([b])),
)
UTF8ISH = st.lists(FRAGMENTS, max_size=24).map(b"".join)
CUTS = st.lists(st.integers(0, 200), max_size=12)


# ---- StreamDecoder ---------------------------------------------------------------------------

SEED = [  # the seed example: pushed bytes -> emitted text
    (bytes.fromhex("476fe2"), "Go"),
    (bytes.fromhex("82ace286"), "€"),
    (bytes.fromhex("92f09f"), "→"),
    (bytes.fromhex("9982"), "🙂"),
]


def test_seed_example_exact_outputs():
    d = StreamDecoder()
    assert [d.push(data) for data, _ in SEED] == [text for _, text in SEED]
    assert d.pending == b"" and d.flush() == ""


def test_seed_example_holds_the_truncated_tail():
    d = StreamDecoder()
    pendings = []
    for data, _ in SEED:
        d.push(data)
        pendings.append(d.pending)
    assert pendings == [b"\xe2", b"\xe2\x86", b"\xf0\x9f", b""]


@pytest.mark.parametrize("data, expected", [
    (b"\xe0\x80", "\ufffd\ufffd"),          # E0 needs A0..BF next: overlong
    (b"\xf0\x9f\x41", "\ufffdA"),           # one maximal subpart, then A
    (b"\xed\xa0\x80", "\ufffd" * 3),        # a surrogate: ED allows only 80..9F next
    (b"\xf4\x90", "\ufffd\ufffd"),          # above U+10FFFF
    (b"\xc0\xaf", "\ufffd\ufffd"),          # C0/C1 are never lead bytes
    (b"\xe2\x82", ""),                      # truncated but valid: held, nothing yet
])
def test_never_valid_bytes_are_emitted_at_once(data, expected):
    d = StreamDecoder()
    assert d.push(data) == expected
    # Whatever was not emitted is exactly what a later byte could still complete.
    assert expected + (REPLACEMENT if d.pending else "") == decode(data)


@pytest.mark.parametrize("data", [b"\xe0\x80", b"\xf0\x9f\x41", b"\xed\xa0\x80", b"\xf4\x90", b"\xe2\x82\xac"])
def test_byte_by_byte_emits_as_soon_as_decided(data):
    d = StreamDecoder()
    out = ""
    for i in range(len(data)):
        out += d.push(data[i:i + 1])
        assert out == decode(data[:i + 1 - len(d.pending)])
        assert d.pending == expected_pending(data[:i + 1])


def test_flush_turns_held_bytes_into_one_replacement():
    d = StreamDecoder()
    assert d.push(b"A\xf0\x9f\x99") == "A"
    assert d.flush() == REPLACEMENT == decode(b"\xf0\x9f\x99")
    assert d.pending == b"" and d.flush() == ""


def test_held_start_examples():
    assert held_start(b"") == 0
    assert held_start(b"Go\xe2") == 2
    assert held_start(b"\xe2\x82\xac") == 3       # complete: nothing held
    assert held_start(b"\xed\xa0") == 2           # can never be valid: nothing held
    assert held_start(b"\xf0\x9f\x99") == 0


def _check_decoder(data: bytes, cuts: list[int]) -> None:
    chunks = chunked(data, cuts)
    d = StreamDecoder()
    out, seen = "", b""
    for chunk in chunks:
        out += d.push(chunk)
        seen += chunk
        assert d.pending == expected_pending(seen)
        assert out == decode(seen[:len(seen) - len(d.pending)])
    assert out + d.flush() == decode(b"".join(chunks))


@settings(max_examples=MAX_EXAMPLES)
@given(st.binary(max_size=64), CUTS)
def test_contract_on_any_bytes_and_chunking(data, cuts):
    _check_decoder(data, cuts)


@settings(max_examples=MAX_EXAMPLES)
@given(UTF8ISH, CUTS)
def test_contract_on_utf8_fragments(data, cuts):
    _check_decoder(data, cuts)


@settings(max_examples=MAX_EXAMPLES)
@given(st.one_of(st.binary(max_size=64), UTF8ISH))
def test_reference_scanner_matches_python(data):
    assert decode_reference(data) == decode(data)


@settings(max_examples=MAX_EXAMPLES)
@given(UTF8ISH)
def test_one_byte_at_a_time(data):
    _check_decoder(data, list(range(len(data) + 1)))


# ---- byte roles ------------------------------------------------------------------------------

def test_byte_roles_of_the_seed_buffer():
    roles = byte_roles(b"\xe2" + b"\x82\xac\xe2\x86")
    assert [(r.role, r.expected, r.offset) for r in roles] == [
        ("lead", 3, 0), ("continuation", 3, 1), ("continuation", 3, 2), ("held", 3, 0), ("held", 3, 1)]


def test_byte_roles_invalid_and_final():
    assert [r.role for r in byte_roles(b"A\x80\xf0\x9f\x41")] == ["ascii", "invalid", "invalid", "invalid", "ascii"]
    assert [r.role for r in byte_roles(b"\xe6\x97", final=True)] == ["invalid", "invalid"]
    assert [r.expected for r in byte_roles(b"\xf0\x9f\x99\x82")] == [4, 4, 4, 4]


@settings(max_examples=MAX_EXAMPLES)
@given(UTF8ISH)
def test_held_roles_are_the_pending_bytes(data):
    roles = byte_roles(data)
    held = sum(r.role == "held" for r in roles)
    assert held == len(expected_pending(data))
    assert all(r.role == "held" for r in roles[len(roles) - held:])
    assert "held" not in {r.role for r in byte_roles(data, final=True)}


# ---- StopMatcher -----------------------------------------------------------------------------

def stop_reference(text: str, stops: list[str]) -> tuple[str, str | None]:
    """The output and the stop: the first stop string to complete, the longest at a tie."""
    for end in range(1, len(text) + 1):
        done = [s for s in stops if text[:end].endswith(s)]
        if done:
            stop = max(done, key=len)
            return text[:end - len(stop)], stop
    return text, None


def run_matcher(chunks: list[str], stops: list[str]) -> tuple[str, StopMatcher]:
    m = StopMatcher(stops)
    out = "".join(m.push(c) for c in chunks)
    return out + m.flush(), m


def test_stop_spanning_chunks():
    m = StopMatcher(["\nUser:"])
    assert m.push("Hello\nUs") == "Hello"
    assert m.held == "\nUs" and m.stopped is None
    assert m.push("er: more") == ""
    assert m.stopped == "\nUser:" and m.stop_offset == 5
    assert m.push("anything") == "" and m.flush() == ""


def test_false_alarm_is_released():
    m = StopMatcher(["\nUser:"])
    assert m.push("a\nU") == "a"
    assert m.push("ni") == "\nUni"
    assert m.push("\n") == "" and m.held == "\n"
    assert m.flush() == "\n" and m.stopped is None


@pytest.mark.parametrize("text, stops, expected", [
    ("abcde", ["abcd", "bc"], ("a", "bc")),     # the shorter one completes first
    ("xabc", ["abc", "ab"], ("x", "ab")),
    ("abcd", ["bcd", "abc"], ("", "abc")),
    ("baaa", ["aa"], ("b", "aa")),
    ("xyz", ["xyz", "yz"], ("", "xyz")),        # same end: the longest
    ("no stop here", ["STOP"], ("no stop here", None)),
])
def test_overlapping_stops(text, stops, expected):
    assert stop_reference(text, stops) == expected   # the reference agrees with the rule
    for cut in range(len(text) + 1):
        out, m = run_matcher([text[:cut], text[cut:]], stops)
        assert (out, m.stopped) == expected


def test_no_stops_passes_everything():
    m = StopMatcher([])
    assert m.push("abc") == "abc" and m.held == "" and m.flush() == ""


def test_empty_stop_is_rejected():
    with pytest.raises(ValueError):
        StopMatcher(["ok", ""])


STOP_ALPHABET = "ab€\n"


@settings(max_examples=MAX_EXAMPLES)
@given(st.text(STOP_ALPHABET, max_size=30), st.lists(st.text(STOP_ALPHABET, min_size=1, max_size=4), max_size=4),
       st.lists(st.integers(0, 40), max_size=8))
def test_matcher_against_reference_for_any_chunking(text, stops, cuts):
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    chunks = [text[a:b] for a, b in zip(points, points[1:])]
    m = StopMatcher(stops)
    out, seen = "", ""
    for chunk in chunks:
        out += m.push(chunk)
        seen += chunk
        if m.stopped is None:
            # Everything not emitted is held, and held is the longest suffix a stop begins with.
            assert out + m.held == seen
            starts = [i for i in range(len(seen)) if any(s.startswith(seen[i:]) for s in stops)]
            assert m.held == (seen[starts[0]:] if starts else "")
    out += m.flush()
    expected_out, expected_stop = stop_reference(text, stops)
    assert (out, m.stopped) == (expected_out, expected_stop)
    if expected_stop is not None:
        assert text[m.stop_offset:].startswith(expected_stop) and m.stop_offset == len(expected_out)


# ---- the trace -------------------------------------------------------------------------------

R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def load_gpt2() -> Tokenizer:
    """The embedded GPT-2 vocabulary through forma's own loader."""
    import forma_gui
    from forma_gui._resources import default_tokenizer_path

    return forma_gui.load_tokenizer(default_tokenizer_path())


@functools.lru_cache(maxsize=1)
def r50k():
    """tiktoken's r50k_base (the GPT-2 vocabulary): the reference for GPT-2 ids."""
    import tiktoken
    import tiktoken.load

    ranks = tiktoken.load.load_tiktoken_bpe(str(data_file("tiktoken", "r50k_base.tiktoken")))
    return tiktoken.Encoding("r50k", pat_str=R50K_PATTERN, mergeable_ranks=ranks, special_tokens={})


@pytest.fixture(scope="module")
def gpt2() -> Tokenizer:
    return load_gpt2()


SAMPLE = "Go€→🙂 日本語"


def test_trace_of_gpt2_tokens_decodes_like_the_tokenizer(gpt2):
    ids = gpt2.encode(SAMPLE)
    assert ids == r50k().encode_ordinary(SAMPLE)
    steps = trace_stream(gpt2, ids)
    assert len(steps) == len(ids) + 1 and steps[-1].final
    assert joined(steps) == gpt2.decode(ids) == SAMPLE
    assert joined(steps, "stop_emitted") == SAMPLE
    assert [s.token_id for s in steps[:-1]] == ids
    for step in steps:
        assert len(step.roles) == len(step.stream_bytes)
        assert step.naive == ("" if step.final else r50k().decode_single_token_bytes(step.token_id).decode("utf-8", "replace"))
    # Some GPT-2 token ends inside a character here, and the naive decode shows it.
    assert any(step.buffer_after for step in steps)
    assert REPLACEMENT in joined(steps, "naive")


def test_trace_buffers_chain(gpt2):
    steps = trace_stream(gpt2, gpt2.encode(SAMPLE))
    for prev, step in zip(steps, steps[1:]):
        assert step.buffer_before == prev.buffer_after
        assert [r.role for r in step.roles[len(step.stream_bytes) - len(step.buffer_after):]] == \
            ["held"] * len(step.buffer_after) or step.final


def test_trace_flush_of_a_truncated_stream():
    steps = trace_chunks([b"ok\xe6\x97"])
    assert steps[0].buffer_after == b"\xe6\x97" and steps[0].emitted == "ok"
    assert steps[1].final and steps[1].emitted == REPLACEMENT
    assert [r.role for r in steps[1].roles] == ["invalid", "invalid"]
    assert joined(steps) == decode(b"ok\xe6\x97")


def test_trace_without_flush():
    steps = trace_chunks([b"ok\xe6\x97"], flush=False)
    assert len(steps) == 1 and not steps[0].final


def test_stop_whose_first_bytes_fall_inside_a_character():
    # "→" is e2 86 92: the stop "→end" begins inside the first chunk's held bytes.
    steps = trace_chunks([b"a\xe2\x86", b"\x92en", b"d!", b"more"], stops=["→end"])
    assert steps[0].buffer_after == b"\xe2\x86"
    assert steps[0].stop_emitted == "a" and steps[0].stop_held == ""   # the matcher never sees bytes
    assert steps[1].emitted == "→en" and steps[1].stop_held == "→en"
    assert steps[2].stops_here and steps[2].stopped == "→end" and steps[2].stop_offset == 1
    assert joined(steps, "stop_emitted") == "a"
    assert joined(steps) == "a→end!more"                               # the decoder goes on


def test_stop_spanning_token_and_character_boundaries(gpt2):
    ids = gpt2.encode(SAMPLE)
    steps = trace_stream(gpt2, ids, stops=["🙂 日"])
    stop_step = next(s for s in steps if s.stops_here)
    assert joined(steps, "stop_emitted") == "Go€→"
    assert stop_step.stop_offset == len("Go€→")
    # The emoji is split across tokens, so the stop buffer starts filling before the stop step.
    assert any(s.stop_held for s in steps[:stop_step.index])
    assert all(s.stopped == "🙂 日" for s in steps[stop_step.index:])


def test_out_of_range_id(gpt2):
    with pytest.raises(ValueError, match="out of range"):
        trace_stream(gpt2, [1, gpt2.vocab_size])


# ---- parsing and the table -------------------------------------------------------------------

def test_parse_ids():
    assert parse_ids("1, 2, 3") == [1, 2, 3]
    assert parse_ids(" [15496 11;995] ") == [15496, 11, 995]
    assert parse_ids("") == []
    with pytest.raises(ValueError, match="'x'"):
        parse_ids("1, x")


def test_stop_field_parsing():
    assert unescape(r"a\nb\tc\\d\q") == "a\nb\tc\\d\\q"
    assert split_stops(r"\n\n|User:| |a\|b|") == ["\n\n", "User:", " ", "a|b"]
    assert split_stops(r"x\\|y") == ["x\\", "y"]
    assert split_stops("") == []


def test_visible_and_width():
    assert visible("") == '""'
    assert visible(" a\n") == '" a\\n"'
    assert visible("\x00") == '"\\u0000"'
    assert display_width("日本") == 4 and display_width("a€") == 2 and display_width("🙂") == 2


def table_cells(table: str) -> list[dict[str, str]]:
    """Cut each row at the display columns where the header's titles start."""
    header, _, *rows = table.splitlines()
    names = [n for n in header.split("  ") if n]
    starts = [header.index(n) for n in names]  # the header is ASCII: index == display column
    out = []
    bounds = starts[1:] + [10 ** 9]
    for row in rows:
        cells, col, current = [], 0, ""
        for ch in row:
            if col >= bounds[len(cells)]:
                cells.append(current.strip())
                current = ""
            current += ch
            col += display_width(ch)
        cells.append(current.strip())
        out.append(dict(zip(names, cells + [""] * (len(names) - len(cells)))))
    return out


def test_table_of_the_seed_example():
    steps = trace_chunks([data for data, _ in SEED])
    table = format_trace_table(steps)
    assert table.splitlines()[0].split() == ["step", "token", "bytes", "buffer", "emitted", "naive"]
    rows = table_cells(table)
    assert [r["bytes"] for r in rows[:4]] == [data.hex(" ") for data, _ in SEED]
    assert [r["emitted"] for r in rows[:4]] == [f'"{text}"' for _, text in SEED]
    assert [r["naive"] for r in rows[:4]] == [f'"{decode(data)}"' for data, _ in SEED]
    assert [r["buffer"] for r in rows] == ["e2", "e2 86", "f0 9f", "", ""]
    assert rows[-1] == {"step": "end", "token": "(flush)", "bytes": "", "buffer": "",
                        "emitted": '""', "naive": ""}


def test_table_lines_up_wide_characters(gpt2):
    table = format_trace_table(trace_stream(gpt2, gpt2.encode(SAMPLE)))
    header, *rows = table.splitlines()
    naive_col = header.index("naive")
    for row in rows[1:-1]:  # the flush row has no naive cell
        # The naive cell starts at the same display column on every row.
        widths = [display_width(row[:i]) for i in range(len(row))]
        assert row[widths.index(naive_col)] == '"'


def test_table_with_stops_marks_the_stop():
    steps = trace_chunks([b"ab", b"c"], stops=["bc"])
    table = format_trace_table(steps, with_stops=True)
    assert "stop buffer" in table.splitlines()[0]
    assert 'STOP "bc"' in table
