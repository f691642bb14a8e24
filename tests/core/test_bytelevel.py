"""ByteLevelBPETokenizer as a class: raw-data construction, the encode contract, members."""
from __future__ import annotations

import random
from itertools import accumulate

import pytest
from hypothesis import given, settings, strategies as st

from forma_gui.core import bytelevel
from forma_gui.core.byte_map import BYTE_TO_UNICODE
from forma_gui.core.bytelevel import ByteLevelBPETokenizer, MergeError, replace_surrogates
from forma_gui.core.tokenizer import AddedToken
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file
from tests.corpus import CORPUS, TEXT

BYTES = [BYTE_TO_UNICODE[b] for b in range(256)]
# enough distinct words to take the batched (numpy) path for new pre-tokens
st_lists_of_text = st.lists(TEXT, min_size=bytelevel.BATCH, max_size=3 * bytelevel.BATCH)


def _tiny(**kwargs) -> ByteLevelBPETokenizer:
    """256 byte pieces + 'Ġt', 'he', 'Ġthe' with their merges, built from raw lists (as GGUF does)."""
    pieces = BYTES + ["Ġt", "he", "Ġthe"]
    merges = ["Ġ t", ("h", "e"), "Ġt he"]
    return ByteLevelBPETokenizer(pieces, merges, **kwargs)


def test_raw_lists_known_answer():
    tok = _tiny()
    assert tok.encode(" the") == [258]
    assert tok.encode("the") == [ord("t"), 257]
    assert [(s.left, s.right, s.rank, s.result, s.position) for s in tok.merge_steps(" the")] == [
        ("Ġ", "t", 0, "Ġt", 0), ("h", "e", 1, "he", 1), ("Ġt", "he", 2, "Ġthe", 0)]
    assert tok.merge_steps(" the")[-1].symbols == ("Ġthe",)
    assert tok.token_score(258) == 2 and tok.token_score(ord("a")) is None
    assert tok.merge_rank("Ġt", "he") == 2 and tok.merge_rank("he", "Ġt") is None


def test_merge_errors_and_lenient_mode():
    with pytest.raises(MergeError) as info:
        ByteLevelBPETokenizer(BYTES + ["ab"], ["a b", "x yz"])
    assert info.value.index == 1
    tok = ByteLevelBPETokenizer(BYTES + ["ab"], ["a b", "x yz", "a b c"], strict=False)
    assert tok.encode("ab") == [256]


@pytest.mark.parametrize("bad", [5, None, {"a": 0, "b": 1}, ("a", ["b"]), ("a",), "ab", ("a", "b", "c")])
def test_a_malformed_merge_among_pairs_is_a_merge_error(bad):
    """Whatever the item (JSON gives numbers, objects and nested lists), the merge is named by
    its index, never a TypeError or KeyError from the look-ups."""
    with pytest.raises(MergeError) as info:
        ByteLevelBPETokenizer(BYTES + ["ab"], [("a", "b"), bad])
    assert info.value.index == 1


def test_vocab_mapping_with_holes_and_literal_pieces():
    vocab = {p: i for i, p in enumerate(BYTES)}
    vocab["<pad>"] = 300  # ids 256..299 unused
    vocab["▁literal"] = 301  # not byte-level: stands for its UTF-8
    tok = ByteLevelBPETokenizer(vocab, [])
    assert tok.vocab_size == 302
    assert tok.token_type(260) == "unused" and tok.piece(260) == "" and tok.token_bytes(260) == b""
    assert tok.token_type(301) == "user-defined" and tok.token_bytes(301) == "▁literal".encode()
    assert tok.encode("▁") == list("▁".encode())  # literal pieces never take part in BPE


def test_encode_contract_for_live_editing(monkeypatch):
    # ordinary text (no added token cut out): the concatenation of encode_pretoken over
    # pre_tokenize(prepare(t))
    tok = load_tokenizer(data_file("hf", "qwen3", "tokenizer.json"))
    for text in CORPUS + ["Cafe\u0301", "a\ud800b"]:
        prepared = tok.prepare(text)
        ids = [i for s, e in tok.pre_tokenize(prepared) for i in tok.encode_pretoken(prepared[s:e])]
        assert ids == tok._encode_ordinary(text), text
        if not any(t.content in text for t in tok.added_tokens):
            assert ids == tok.encode(text), text


@pytest.fixture(scope="module")
def gpt2():
    return load_tokenizer(data_file("gpt2", "encoder.json"))


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=TEXT)
def test_round_trip(gpt2, text):
    ids = gpt2.encode(text)
    assert gpt2.decode_bytes(ids) == text.encode()
    assert gpt2.decode(ids) == text
    prepared = gpt2.prepare(text)
    spans = gpt2.pre_tokenize(prepared)
    assert "".join(prepared[s:e] for s, e in spans) == prepared


def test_decode_replaces_like_python(gpt2):
    half = [gpt2.id_of("Ã"), gpt2.id_of("a")]  # a lone 0xC3 lead byte, then 'a'
    assert gpt2.decode(half) == b"\xc3a".decode("utf-8", "replace") == "\ufffda"
    with pytest.raises(IndexError):
        gpt2.decode([50257])
    with pytest.raises(IndexError):
        gpt2.decode([-1])


def test_surrogates_follow_tiktoken(gpt2):
    assert replace_surrogates("a\ud800") == "a\ufffd"
    assert gpt2.encode("a\ud800") == gpt2.encode("a\ufffd")
    assert gpt2.encode("\ud83d\ude00") == gpt2.encode("😀")


def test_small_cache_limit_changes_nothing(gpt2, monkeypatch):
    text = "\n".join(CORPUS)
    expected = gpt2.encode(text)
    monkeypatch.setattr(bytelevel, "CACHE_LIMIT", 8)
    gpt2.clear_cache()
    assert gpt2.encode(text) == expected
    assert gpt2.encode(text) == expected
    assert len(gpt2._chunk_cache) <= max(8, len(set(text.split(" "))) + 1)


def test_patterns_raw_and_sequences():
    tok = _tiny(pattern=[r"\S+|\s+", r"[a-z]+|[^a-z]+"])
    assert tok.pre_tokenize("ab1 c") == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert _tiny(pattern=[]).pre_tokenize("a b") == [(0, 3)]
    with pytest.raises(ValueError, match="normalizer"):
        _tiny(normalizer="Lowercase")


def test_prefix_space_and_normalizer():
    tok = _tiny(add_prefix_space=True, normalizer="NFKC")
    assert tok.prepare("the") == " the" and tok.prepare(" the") == " the" and tok.prepare("") == ""
    assert tok.encode("the") == [258]
    assert tok.prepare("ﬁ") == " fi"


def test_added_tokens_and_types():
    added = [AddedToken("<|s|>", 259, special=True), AddedToken("<x>", 262, special=False)]
    tok = _tiny(added_tokens=added)
    assert tok.vocab_size == 263
    assert tok.encode("<|s|> the<x>", special=True) == [259, 258, 262]
    assert tok.token_type(259) == "control" and tok.token_type(262) == "user-defined"
    assert tok.token_type(260) == "unused" and tok.token_type(258) == "normal"
    assert tok.piece(259) == "<|s|>" and tok.id_of("<x>") == 262
    assert tok.token_score(259) is None


def test_unknown_bytes_dropped_or_unk():
    pieces = ["a", "b", "ab", "<unk>"]
    assert ByteLevelBPETokenizer(pieces, ["a b"]).encode("abc") == [2]
    assert ByteLevelBPETokenizer(pieces, ["a b"], unk_id=3).encode("abcc") == [2, 3, 3]
    assert ByteLevelBPETokenizer(pieces, ["a b"], unk_id=3, fuse_unk=True).encode("abcc") == [2, 3]


@pytest.fixture(scope="module")
def r50k():
    return load_tokenizer(data_file("tiktoken", "r50k_base.tiktoken"))


@settings(max_examples=max(10, MAX_EXAMPLES // 5), deadline=None)
@given(words=st_lists_of_text)
def test_cuts_and_batches_equal_plain_merging(gpt2, r50k, words):
    # Cutting at byte pairs no token holds, caching the parts, and batching new pre-tokens
    # through numpy must give what merging each whole pre-token gives.
    text = " ".join(words)
    for tok in (gpt2, r50k):
        tok.clear_cache()
        prepared = tok.prepare(text)
        pieces = [prepared[s:e] for s, e in tok.pre_tokenize(prepared)]
        whole = [tok._encoder.get(p.encode()) if tok._ignore_merges else None for p in pieces]
        expected = [i for p, w in zip(pieces, whole) for i in ([w] if w is not None else tok._merge(p.encode()))]
        assert tok.encode(text) == expected


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(tokens=st.lists(st.binary(min_size=1, max_size=5).map(lambda b: bytes(x % 4 + 97 for x in b)),
                       max_size=30),
       datas=st.lists(st.binary(max_size=12).map(lambda b: bytes(x % 4 + 97 for x in b)), min_size=1, max_size=6))
def test_batch_cuts_are_never_crossed_by_a_token(tokens, datas):
    # No token of the vocabulary may occur in a string across a place where it is cut.
    vocab = [bytes([b]) for b in range(256)] + tokens
    parts, bounds = bytelevel._cut_all(datas, bytelevel._inner_triples(vocab))
    for k, data in enumerate(datas):
        pieces = parts[bounds[k]:bounds[k + 1]]
        assert b"".join(pieces) == data
        places = list(accumulate(map(len, pieces)))[:-1]
        for place in places:
            for token in tokens:
                start = data.find(token)
                while start >= 0:
                    assert not start < place < start + len(token), (data, token, place)
                    start = data.find(token, start + 1)


def test_from_ranks_with_gaps_and_specials():
    ranks = {bytes([b]): b for b in range(256)}
    ranks[b"ab"] = 300  # ids 256..299 are unused
    tok = ByteLevelBPETokenizer.from_ranks(
        ranks, added_tokens=[AddedToken("<taken>", 97), AddedToken("<s>", 280), AddedToken("<e>", 301)])
    assert [t.id for t in tok.added_tokens] == [280, 301]  # 97 is the rank of b"a"
    assert tok.vocab_size == 302 and tok.encode("ab") == [300]
    assert tok.token_type(256) == "unused" and tok.token_type(280) == "control"
    assert tok.piece(300) == "ab" and tok.id_of("<e>") == 301 and tok.token_score(300) == 300


def test_rank_table_batches_equal_plain_merging(monkeypatch):
    # A rank tokenizer merges new parts with merge_batch once its pair table is built; the
    # table is normally deferred (RANKED_TABLE_AFTER), here it is built on the first batch.
    monkeypatch.setattr(bytelevel, "RANKED_TABLE_AFTER", 0)
    tok = load_tokenizer(data_file("tiktoken", "r50k_base.tiktoken"))
    rng = random.Random(8)
    words = ["".join(rng.choice("abcdeklmnorstuyzабвгдеклмнорст中文字") for _ in range(rng.randint(2, 12)))
             for _ in range(400)]
    text = " ".join(words) + " eeeeeeee ababab\n\n  x"
    prepared = tok.prepare(text)
    pieces = [prepared[s:e] for s, e in tok.pre_tokenize(prepared)]
    whole = [tok._encoder.get(p.encode()) for p in pieces]
    expected = [i for p, w in zip(pieces, whole) for i in ([w] if w is not None else tok._merge(p.encode()))]
    assert tok.encode(text) == expected
    assert tok._batch  # the batch path ran


def _plain(tok: ByteLevelBPETokenizer, text: str) -> list[int]:
    """The slow path: every pre-token looked up whole (where the library does) or merged."""
    prepared = tok.prepare(text)
    pieces = [prepared[s:e].encode() for s, e in tok.pre_tokenize(prepared)]
    whole = [tok._encoder.get(p) if tok._ignore_merges else None for p in pieces]
    return [i for p, w in zip(pieces, whole) for i in ([w] if w is not None else tok._merge(p))]


def _assert_cold_and_warm_plain(tok, text: str) -> None:
    tok.clear_cache()
    assert tok.encode(text) == _plain(tok, text)
    assert tok.encode(text) == _plain(tok, text)  # warm


def _random_words(rng: random.Random, alphabet: str, n: int) -> list[str]:
    """n words of 1-9 characters drawn from `alphabet`."""
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9))) for _ in range(n)]


@pytest.mark.parametrize("first, last", [("Привет", " end  "), ("start", " конец  "), ("x", " y"),
                                         ("  漢字", "\n"), ("ok", " ok")])
def test_cold_batch_with_ascii_and_other_chunks_equals_plain_merging(gpt2, r50k, first, last):
    # The missing chunks are pre-tokenized in two groups (ASCII through the `re` twin, the
    # rest through `regex`); the text's first chunk (no leading space) and last one (may end
    # in spaces) must each lead or end its own group, whichever that is.
    words = _random_words(random.Random(8), "abcXYZ09'.,;-дежз中文", 3 * bytelevel.BATCH)
    text = first + " " + " ".join(words) + last
    for tok in (gpt2, r50k):
        _assert_cold_and_warm_plain(tok, text)
        prepared = tok.prepare(text)
        assert [i for s, e in tok.pre_tokenize(prepared) for i in tok.encode_pretoken(prepared[s:e])] \
            == _plain(tok, text)


@pytest.mark.parametrize("first, last", [("Привет", " конец  "), ("ﾊﾛｰ", " 😀"), ("x", " y"), ("٣٣", "\n")])
def test_cold_batch_through_the_wide_twin_equals_plain_merging(gpt2, r50k, first, last, monkeypatch):
    # Non-ASCII chunks of covered scripts go through the pattern's wide `re` twin, chunks with
    # other characters (emoji, Arabic digits) through `regex`: three groups, and the text's first
    # and last chunk must each lead or end its own.
    monkeypatch.setattr(bytelevel, "WIDE_CHARS", 0)
    words = _random_words(random.Random(5), "abcXY09'.,дежзЁ中文。ｱ가\u3000ſ😀٣", 4 * bytelevel.BATCH)
    text = first + " " + " ".join(words) + last
    for tok in (gpt2, r50k):
        _assert_cold_and_warm_plain(tok, text)
    covered = " ".join(w for w in words if "😀" not in w and "٣" not in w)
    r50k.clear_cache()
    assert r50k.encode(covered) == _plain(r50k, covered)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=12).map(lambda b: bytes(x % 3 for x in b))  # many repeats
                | st.binary(min_size=1, max_size=10), min_size=1, max_size=60))
def test_distinct_parts_equal_a_set_of_byte_strings(parts):
    import numpy as np

    joined = b"".join(parts)
    starts = np.cumsum([0, *map(len, parts)])[:-1]
    distinct, which = bytelevel._distinct_parts(joined, starts)
    assert len(set(distinct)) == len(distinct) == len(set(parts))
    assert [distinct[k] for k in which.tolist()] == parts


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=20).map(lambda b: bytes(x % 3 + 97 for x in b))  # many repeats
                | st.text(min_size=1, max_size=8).map(lambda t: t.encode("utf-8", "replace")), min_size=1, max_size=60),
       st.booleans())
def test_distinct_spans_equal_the_reference(spans, weak):
    # Short spans are keyed by their bytes, long ones by a hash checked word for word; with a
    # hash that collides all the time (weak) the check must catch it and fall back.
    from unittest import mock

    import numpy as np

    data = b"".join(spans)
    ends = np.cumsum([len(s) for s in spans])
    starts = ends - [len(s) for s in spans]
    weak_hash = (lambda words, starts, ends: (ends - starts).astype(np.uint64)) if weak else bytelevel._span_hashes
    with mock.patch.object(bytelevel, "_span_hashes", weak_hash):
        first, which = bytelevel._distinct_spans(data, starts, ends)
    ref_first, ref_which = bytelevel._distinct_spans_reference(data, starts, ends)
    assert len(first) == len(ref_first) == len(set(spans))
    assert which[first].tolist() == list(range(len(first))) and first.tolist() == sorted(first.tolist())
    assert [spans[k] for k in first[which].tolist()] == spans == [spans[k] for k in ref_first[ref_which].tolist()]


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.text(min_size=1, max_size=40), st.data())
def test_byte_offsets_of_characters(text, data):
    import numpy as np

    text = bytelevel.replace_surrogates(text)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(text)), max_size=6)) | {len(text)})
    offsets = bytelevel._byte_offsets(text.encode(), np.array(cuts))
    assert offsets.tolist() == [len(text[:c].encode()) for c in cuts]


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.lists(st.lists(st.integers(0, 1 << 20), max_size=4), min_size=1, max_size=10), st.data())
def test_gather_runs_and_packed_ids(runs, data):
    import numpy as np

    which = data.draw(st.lists(st.integers(0, len(runs) - 1), max_size=20))
    flat = np.array([i for run in runs for i in run], dtype=np.int64)
    ids, lengths = bytelevel._gather_runs(flat, np.array([len(r) for r in runs]), np.array(which, dtype=np.int64))
    assert ids.tolist() == [i for k in which for i in runs[k]]
    assert lengths.tolist() == [len(runs[k]) for k in which]
    packed = [bytelevel.pack_ids(run) for run in runs]
    assert bytelevel.unpack_ids(b"".join(packed)) == [i for run in runs for i in run]


def test_caches_cleared_midway_change_nothing(r50k, monkeypatch):
    # Another thread may clear the caches between filling and reading them: the encode then
    # falls back to encoding pre-token by pre-token, with the same ids.
    rng = random.Random(3)
    text = " ".join("".join(rng.choice("abcdeжзи中文") for _ in range(rng.randint(1, 8))) for _ in range(500))
    r50k.clear_cache()
    expected = r50k.encode(text)
    for name, cache in (("_fill_chunks", "_chunk_cache"), ("_encode_batch", "_piece_cache")):
        original = getattr(r50k, name)

        def fill_then_clear(*args, original=original, cache=cache):
            original(*args)
            getattr(r50k, cache).clear()

        monkeypatch.setattr(r50k, name, fill_then_clear)
        r50k.clear_cache()
        assert r50k.encode(text) == expected == _plain(r50k, text)
        monkeypatch.undo()


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(merges=st.lists(st.text(alphabet="ab ", max_size=5), max_size=12))
def test_split_merge_strings_equals_str_split(merges):
    """The join/split fast path of the merge columns equals str.split on each merge, and
    refuses any list where some merge has no space or several."""
    from forma_gui.core import bytelevel

    out = bytelevel._split_merge_strings(merges)
    if all(m.count(" ") == 1 for m in merges):
        assert out == ([m.split(" ")[0] for m in merges], [m.split(" ")[1] for m in merges])
    else:
        assert out is None
