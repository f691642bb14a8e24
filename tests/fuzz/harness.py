"""The fuzz harness shared by every reader's fuzz module.

Each example takes a seed (a real file from the test data, usually shrunk so that an example
stays fast), applies a few hostile mutations, writes the result into a fresh file and calls
the reader on it. The invariants, checked by `run_reader`:

* the reader returns a result, or raises `FormatError` naming the file; nothing else escapes;
* each reader call takes at most `CPU_LIMIT` seconds of CPU time (process time: other
  people's jobs on a shared machine do not count), and each example at most `DEADLINE`
  of wall time (hypothesis' deadline, generous for the same reason);
* peak traced memory (tracemalloc; it traces numpy's buffers too, not mmap'd pages) stays
  below ``MEMORY_FLOOR + multiple * input bytes``; each reader module states its multiple.

`FUZZ_EXAMPLES` (env ``FORMA_FUZZ_EXAMPLES``, default 350) is the number of examples per
reader; the default gives the 2,000-example CI run, a larger value the long run::

    FORMA_FUZZ_EXAMPLES=20000 python -m pytest tests/fuzz
"""
from __future__ import annotations

import importlib
import itertools
import json
import os
import struct
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from forma_gui.errors import FormatError
from forma_gui.formats.loader import LOADERS

# Import every reader now: the first call of an entry point would otherwise import its
# modules (numpy, regex tables) inside a traced call and count them against the input.
for _module in sorted({*(target.split(":")[0] for target in LOADERS.values()),
                       "forma_gui.formats.weights", "forma_gui.core.quant"}):
    importlib.import_module(_module)

FUZZ_EXAMPLES = int(os.environ.get("FORMA_FUZZ_EXAMPLES", "350"))
#: per reader call and per example; real examples take milliseconds, so only a hang or a
#: blow-up comes near them
CPU_LIMIT = 2.0
DEADLINE = timedelta(seconds=10)
#: allocations every load makes whatever the input (compiled regexes, small tables)
MEMORY_FLOOR = 8 * 2**20

#: examples run per reader in this session, printed at the end (tests/fuzz/conftest.py)
EXAMPLES_RUN: Counter[str] = Counter()
OUTCOMES: Counter[str] = Counter()

#: the extreme values a count, length, id or offset field is replaced with
EXTREME_INTS = (0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1,
                2**64 - 2**31)  # the last two are -1 and -2^31 as int64


def fuzz_settings(share: float = 1.0) -> settings:
    """Hypothesis settings for a fuzz test that runs `share` of its reader's examples."""
    return settings(max_examples=max(1, round(FUZZ_EXAMPLES * share)), deadline=DEADLINE,
                    database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


# -- byte-level mutations -----------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    """A numeric field of a seed (a count, length, type or offset) worth replacing."""

    offset: int
    width: int  # 1 (varint: replaced by a 10-byte varint), 4 or 8
    order: str = "<"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _replace_field(blob: bytearray, field: Field, value: int) -> None:
    end = field.offset + field.width
    if end > len(blob):
        return
    if field.width == 1:  # a protobuf varint: keep the bytes after it where they are
        width = _varint_width(blob, field.offset)
        blob[field.offset:field.offset + width] = _varint(value & (2**64 - 1))
        return
    code = {4: "I", 8: "Q"}[field.width]
    blob[field.offset:end] = struct.pack(field.order + code, value % 2 ** (8 * field.width))


def _varint_width(blob: bytearray, at: int) -> int:
    width = 0
    while at + width < len(blob) and width < 10:
        width += 1
        if blob[at + width - 1] < 0x80:
            break
    return width


def apply_ops(seed: bytes, ops: Sequence[tuple]) -> bytes:
    """Apply mutation ops in order; offsets are taken modulo the current length."""
    blob = bytearray(seed)
    for op, *args in ops:
        n = len(blob)
        if op == "truncate":
            del blob[args[0] % (n + 1):]
        elif op == "flip" and n:
            blob[args[0] % n] ^= 1 << args[1]
        elif op == "overwrite" and n:
            at = args[0] % n
            blob[at:at + len(args[1])] = args[1]
        elif op == "insert":
            at = args[0] % (n + 1)
            blob[at:at] = args[1]
        elif op == "delete" and n:
            del blob[args[0] % n:args[0] % n + args[1]]
        elif op == "copy" and n:  # duplicates a record: names, keys, pieces
            start = args[0] % n
            chunk = blob[start:start + args[1]]
            at = args[2] % (n + 1)
            blob[at:at] = chunk
        elif op == "extreme":
            _replace_field(blob, args[0], args[1])
    return bytes(blob)


def byte_ops(size: int, fields: Sequence[Field] = (), max_ops: int = 4) -> st.SearchStrategy:
    """A list of mutation ops for a seed of `size` bytes with the given numeric `fields`."""
    offset = st.integers(0, max(size, 1))
    blob = st.binary(min_size=1, max_size=16)
    kinds = [
        st.tuples(st.just("truncate"), offset),
        st.tuples(st.just("flip"), offset, st.integers(0, 7)),
        st.tuples(st.just("overwrite"), offset, blob | st.sampled_from(
            [b"\xff", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\0", b"\xff" * 8]),),
        st.tuples(st.just("insert"), offset, blob),
        st.tuples(st.just("delete"), offset, st.integers(1, 64)),
        st.tuples(st.just("copy"), offset, st.integers(1, 256), offset),
    ]
    if fields:
        extreme = st.sampled_from(EXTREME_INTS) | st.integers(0, 2**64 - 1) | \
            st.sampled_from([size, size + 1, size * 2])
        kinds += [st.tuples(st.just("extreme"), st.sampled_from(list(fields)), extreme)] * 3
    return st.lists(st.one_of(kinds), min_size=1, max_size=max_ops)


# -- JSON-level mutations -------------------------------------------------------------------

RAW = "\x00raw{}\x00"  # placeholder string replaced by raw bytes after serialisation

#: raw JSON texts no json.dumps produces: huge numbers, non-UTF-8, deep nesting
RAW_VALUES: tuple[bytes, ...] = (
    b"1" * 5000,                      # over Python's 4300-digit int parsing limit
    b"-" + b"9" * 400, b"1e400", b"-1e400", b"NaN", b"Infinity", b"-Infinity",
    b"18446744073709551615", b"9223372036854775808", b"-9223372036854775809",
    b'"\xff\xfe"', b'"\xed\xa0\x80"', b'"\\ud800"', b'"\\u0000"',
    b"[" * 100_000 + b"]" * 100_000,  # 100k nested arrays
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    b"[" * 100_000,                     # and unclosed
)

JSON_VALUES = st.one_of(
    st.sampled_from([None, True, False, 0, -1, 1.5, -0.0, "", " ", "Ġ", [], {}, [[]], [""],
                     [1, 2], ["a b"], {"type": "Sequence"}, {"type": None},
                     2**63, 2**64 - 1, -2**63, 2**31, float("inf"), float("nan")]),
    st.integers(), st.text(max_size=6), st.floats(),
    st.lists(st.integers(-2, 2**32) | st.text(max_size=3), max_size=3),
)


def json_paths(obj: Any, limit: int = 4000) -> list[tuple]:
    """Every path (tuple of keys/indices) into `obj`, breadth first, at most `limit`."""
    paths: list[tuple] = [()]
    frontier = [((), obj)]
    while frontier and len(paths) < limit:
        nxt = []
        for path, value in frontier:
            items = value.items() if isinstance(value, dict) else \
                enumerate(value) if isinstance(value, list) else ()
            for key, child in items:
                paths.append(path + (key,))
                nxt.append((path + (key,), child))
        frontier = nxt
    return paths[:limit]


def _get(obj: Any, path: tuple) -> Any:
    for key in path:
        obj = obj[key]
    return obj


@st.composite
def json_ops(draw: st.DrawFn, paths: Sequence[tuple], max_ops: int = 3) -> list[tuple]:
    """Structural edits: replace a value (hostile value or raw text), delete, duplicate key."""
    ops = []
    for _ in range(draw(st.integers(1, max_ops))):
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["value", "value", "raw", "delete", "dupkey"]))
        if kind == "value":
            ops.append(("value", path, draw(JSON_VALUES)))
        elif kind == "raw":
            ops.append(("raw", path, draw(st.sampled_from(RAW_VALUES))))
        else:
            ops.append((kind, path, draw(JSON_VALUES)))
    return ops


def apply_json_ops(obj: Any, ops: Iterable[tuple]) -> bytes:
    """`obj` (deep-copied) with the ops applied, serialised; raw values spliced in as bytes."""
    obj = json.loads(json.dumps(obj))
    raws: list[bytes] = []
    for kind, path, value in ops:
        if not path:
            continue
        try:
            parent, key = _get(obj, path[:-1]), path[-1]
            parent[key]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier op changed the structure under this path
        if not isinstance(parent, (dict, list)):
            continue
        if kind == "value":
            parent[key] = value
        elif kind == "raw":
            parent[key] = RAW.format(len(raws))
            raws.append(value)
        elif kind == "delete":
            del parent[key]
        elif kind == "dupkey" and isinstance(parent, dict):
            # JSON objects may repeat a key; json.loads keeps the last one
            text = json.dumps(parent[key]).encode() + b',' + json.dumps(str(key)).encode() + \
                b":" + json.dumps(value).encode()
            parent[key] = RAW.format(len(raws))
            raws.append(text)
    data = json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")
    for i, raw in enumerate(raws):
        data = data.replace(json.dumps(RAW.format(i)).encode(), raw)
    return data


# -- running a reader ---------------------------------------------------------------------

_counter = itertools.count()


def fresh_path(folder: Path, name: str) -> Path:
    """A new file path for one example (results may keep earlier files mapped)."""
    sub = folder / f"ex{next(_counter)}"
    sub.mkdir()
    return sub / name


def note_example(reader: str) -> None:
    """Count one fuzz example of `reader` (for the end-of-run summary)."""
    EXAMPLES_RUN[reader] += 1


def run_reader(call: Callable[[], Any], files: Sequence[Path], *,
               memory_multiple: float, input_bytes: int | None = None,
               check: Callable[[Any], None] | None = None, expect_error: bool = False,
               cpu_limit: float = CPU_LIMIT, memory_floor: int = MEMORY_FLOOR) -> Any:
    """Run `call` under tracemalloc; enforce the invariants; return its result or None.

    `files` are the paths an error may name; `input_bytes` defaults to their total size.
    `check` validates a result, which is then closed if it can be. With `expect_error`,
    the call must raise FormatError, which is returned. `cpu_limit` is for the explicit
    pathological inputs of many megabytes (the fuzz examples are a few KB).
    """
    size = input_bytes if input_bytes is not None else sum(_size(p) for p in files)
    error = None
    tracemalloc.start()
    start = time.process_time()
    try:
        try:
            result = call()
        except FormatError as e:
            result, error = None, e
            _check_error(e, files)
            OUTCOMES[e.message[:40]] += 1
        cpu = time.process_time() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    limit = memory_floor + memory_multiple * size
    assert peak <= limit, f"peak traced memory {peak} > {limit} for {size} input bytes"
    assert cpu <= cpu_limit, f"took {cpu:.2f} s of CPU time (limit {cpu_limit} s)"
    if expect_error:
        if hasattr(result, "close"):
            result.close()
        assert error is not None, f"expected a FormatError, got {result!r}"
        return error
    if error is None:
        OUTCOMES["(a result)"] += 1
    if result is not None and check is not None:
        check(result)
    if hasattr(result, "close"):
        result.close()
    return result


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _check_error(e: FormatError, files: Sequence[Path]) -> None:
    """A FormatError names one of the input files, their folder or a file in it (a shard
    an index names), and says something."""
    folders = {os.fspath(p.parent) for p in files}
    names = {os.fspath(p) for p in files} | folders
    assert e.path in names or os.path.dirname(e.path or "") in folders, \
        f"FormatError names {e.path!r}, not one of {sorted(names)}: {e}"
    assert e.message.strip(), "FormatError without a message"
    if e.offset is not None:
        assert e.offset >= 0, e
    if e.line is not None:
        assert e.line >= 1, e


# -- tokenizers ---------------------------------------------------------------------------------

#: a loaded vocabulary costs ~20x its file in Python objects (measured on the real files:
#: 8x for tokenizer.json, 21-24x for vocab.json + merges.txt and tiktoken files); the worst
#: dense inputs (6-byte vocab entries, 4-byte merge lines) about 40x
TOKENIZER_MEMORY_MULTIPLE = 64
#: the special tokens of a named tiktoken encoding sit at fixed ids (o200k: 199999 and
#: 200018), so even a cut rank file gets a 200k-entry table: a fixed cost of ~18 MiB
TIKTOKEN_MEMORY_FLOOR = 32 * 2**20
SAMPLE_TEXT = "Hello wörld 123\n\t<|endoftext|> ▁日本 🙂"


def check_tokenizer(tok: Any) -> None:
    """A loaded tokenizer works: ids in range, decodable, segments. (Segmenting spells every
    piece, which for a 200k id space would dominate an example's time: small ones only.)"""
    for special in (False, True):
        ids = tok.encode(SAMPLE_TEXT, special=special)
        assert all(0 <= i < tok.vocab_size for i in ids), ids
        tok.decode_bytes(ids)
        if tok.vocab_size <= 65536:
            tok.segment(SAMPLE_TEXT, special=special)
        for i in ids:
            tok.token_bytes(i), tok.token_type(i)
