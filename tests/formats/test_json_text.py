"""parse_json, and every JSON reader: whatever json.loads raises becomes a FormatError."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import given, strategies as st

from forma_gui import load_tokenizer, open_weights
from forma_gui.errors import FormatError
from forma_gui.formats.json_text import locate, located, parse_json

HUGE_NUMBER = b"1" * 5000          # over Python's 4300-digit int conversion limit
DEEP = b"[" * 100_000 + b"]" * 100_000  # 100k nested arrays


def test_valid_json_and_a_byte_order_mark() -> None:
    assert parse_json(b'{"a": [1, "\xc3\xa9"]}', "t.json") == {"a": [1, "é"]}
    assert parse_json(b'\xef\xbb\xbf{"a": 1}', "t.json") == {"a": 1}


@pytest.mark.parametrize("data, offset, line, words", [
    (b'{"a": ' + HUGE_NUMBER + b"}", 6, 1, "4300 digits"),
    (b"\n" + DEEP, 0, None, "nested too deeply"),
    (b'{"a":\n "\xff"}', 8, 2, "UTF-8"),
    (b'{"\xc3\xa9": tru}', 7, 1, "invalid JSON"),  # offsets count bytes, not characters
    (b'\xef\xbb\xbf{"a": x}', 9, 1, "invalid JSON"),
])
def test_errors_name_offset_and_line(data: bytes, offset: int, line: int | None,
                                     words: str) -> None:
    with pytest.raises(FormatError) as info:
        parse_json(data, "t.json", base=100)
    err = info.value
    assert (err.path, err.offset, err.line) == ("t.json", 100 + offset, line)
    assert words in err.message


def _safetensors(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


#: file name -> how a hostile JSON value is placed in that file, and who reads it
JSON_READERS: dict[str, tuple[Callable[[bytes], bytes], Callable[[Path], object]]] = {
    "model.safetensors": (lambda v: _safetensors(b'{"w": ' + v + b"}"), open_weights),
    "model.safetensors.index.json": (lambda v: b'{"weight_map": ' + v + b"}", open_weights),
    "tokenizer.json": (lambda v: b'{"model": ' + v + b"}", load_tokenizer),
    "vocab.json": (lambda v: b'{"a": ' + v + b"}", load_tokenizer),
    "small.json": (lambda v: b'{"a": ' + v + b"}", load_tokenizer),  # sniffed by parsing it
}


@pytest.mark.parametrize("value", [HUGE_NUMBER, DEEP[:3000] + DEEP[-3000:], DEEP,
                                   b'"\xff"'], ids=["huge-int", "deep-4k", "deep-200k", "utf8"])
@pytest.mark.parametrize("name", JSON_READERS)
def test_every_json_reader(tmp_path: Path, name: str, value: bytes) -> None:
    """These used to leak ValueError (huge numbers) and RecursionError (deep nesting)."""
    build, reader = JSON_READERS[name]
    path = tmp_path / name
    path.write_bytes(build(value))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    with pytest.raises(FormatError) as info:
        reader(path)
    assert info.value.path == str(path)


def test_parse_json_agrees_with_json_loads_on_real_text() -> None:
    text = json.dumps({"k": [1, 2.5, None, True, "Ġ\u2581"], "n": {"x": -3}})
    assert parse_json(text.encode(), "t.json") == json.loads(text)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20)


def _paths(value, at=()):
    yield at, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*at, k))
    elif isinstance(value, list):
        for n, v in enumerate(value):
            yield from _paths(v, (*at, n))


@given(_JSON, st.sampled_from([None, 0, 2]), st.booleans())
def test_locate_finds_every_value(value, indent, ascii_only):
    """Every value's offset, whatever the layout and characters: the value decoded there is it."""
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    for path, inner in _paths(value):
        at = locate(text, path)
        assert json.JSONDecoder().raw_decode(text, at)[0] == inner
    assert locate(text, (*max((p for p, _ in _paths(value)), key=len), "no such key")) is None


def test_a_repeated_key_means_its_last_value_and_errors_get_bytes() -> None:
    text = '{"k": 1, "k": [true, "é"], "z": null}'
    assert text[locate(text, ("k", 1)):].startswith('"é"') and locate(text, ("k", 2)) is None
    data = b'\xef\xbb\xbf' + '{"é": {"id": "x"}}'.encode()
    error = located(FormatError("bad id", path="t.json", json_path=("é", "id")), data)
    assert (error.offset, error.line) == (len(b'\xef\xbb\xbf{"\xc3\xa9": {"id": '), 1)
    assert located(FormatError("gone", json_path=("é", "name")), data).offset == \
        len(b'\xef\xbb\xbf{"\xc3\xa9": ')  # a missing value: where its object is


def test_a_lookup_past_its_budget_gives_up(monkeypatch) -> None:
    """A hostile file with millions of entries gets its error without an offset, not a wait."""
    import forma_gui.formats.json_text as jt

    text = json.dumps({"map": {str(n): n for n in range(100)}, "list": list(range(100))})
    assert locate(text, ("map", "10")) is not None and locate(text, ("list", 99)) is not None
    monkeypatch.setattr(jt, "MAX_LOCATE_MEMBERS", 50)
    # (an object is read to its end: a key given twice means its last value)
    assert locate(text, ("map", "10")) is None and locate(text, ("list", 99)) is None
    assert text[locate(text, ("list", 10)):].startswith("10,")
