"""Incremental re-encoding: after every edit, the ids equal a from-scratch encode (tiktoken's own,
for the OpenAI vocabularies) and the spans equal `segment`; the cut rules hold on random text."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from forma_gui.core import incremental as inc
from forma_gui.core import patterns as pats
from forma_gui.core.bytelevel import ByteLevelBPETokenizer
from forma_gui.formats.gpt2_files import read_merges, read_vocab
from forma_gui.formats.loader import load_tokenizer
from tests.conftest import MAX_EXAMPLES, data_file
from tests.core.incremental_checks import random_edits

# characters pre-tokenizers care about: letters of several scripts and cases, digits of two
# scripts, contractions, punctuation, marks, every kind of whitespace, emoji, a special token;
# long s and the Kelvin sign, which (?i) folds into s and k but llama.cpp's '[sS] does not
_PIECES = list("aZé1٣'s.-/_( \t\n\r\x0b\xa0\u2003\u3000漢Яя\u0301\u200d😀\u017f\u212a") + [
    "'ll", "'S", "don't", "  ", "\n\n", "   \n ", "123456", "<|endoftext|>", "<|endo", "ftext|>", "Ab",
    "'\u017f"]
DOC = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join) | st.text(max_size=30)
INSERT = st.lists(st.sampled_from(_PIECES), max_size=2).map("".join) | st.text(max_size=2)

TIKTOKEN = {"r50k": "r50k_base", "cl100k": "cl100k_base", "o200k": "o200k_base"}


def _oracle(name: str):
    """tiktoken's own Encoding with its special tokens, from the local rank file."""
    import tiktoken
    import tiktoken.load
    from tiktoken_ext import openai_public

    path = str(data_file("tiktoken", f"{name}.tiktoken"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(openai_public, "load_tiktoken_bpe",
                   lambda url, expected_hash=None: tiktoken.load.load_tiktoken_bpe(path))
        spec = getattr(openai_public, name)()
    return tiktoken.Encoding(**spec)


@pytest.fixture(scope="module", params=["gpt2", "r50k", "cl100k", "o200k"])
def pair(request):
    """(our tokenizer, tiktoken oracle); the GPT-2 default (vocab.json + merges) is r50k's vocabulary."""
    name = request.param
    if name == "gpt2":
        return load_tokenizer(data_file("gpt2", "encoder.json")), _oracle("r50k_base")
    return load_tokenizer(data_file("tiktoken", f"{TIKTOKEN[name]}.tiktoken")), _oracle(TIKTOKEN[name])


@pytest.fixture(scope="module")
def gpt2():
    return load_tokenizer(data_file("gpt2", "encoder.json"))


def _records(tokens):
    return [(t.id, t.piece, t.data, t.start, t.end, t.partial, t.special) for t in tokens]


def _edit(data, text: str) -> tuple[int, int, str]:
    start = data.draw(st.integers(0, len(text)), label="start")
    removed = data.draw(st.integers(0, min(4, len(text) - start)), label="removed")
    return start, removed, data.draw(INSERT, label="inserted")


def _check(enc, tok, text: str, special: bool, oracle=None) -> None:
    assert enc.text == text
    expected = tok.encode(text, special=special)
    if oracle is not None:
        expected_ref = oracle.encode(text, allowed_special="all" if special else set(), disallowed_special=())
        assert expected == expected_ref
    assert list(enc.ids) == expected
    assert _records(enc.tokens()) == _records(tok.segment(text, special=special))
    assert enc.nbytes == len(tok.decode_bytes(expected))


# ---- the cut rules ----------------------------------------------------------------------------

@pytest.mark.parametrize("source", sorted(inc.VERIFIED))
@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=DOC, suffix=DOC)
def test_cuts_are_boundaries_that_do_not_look_ahead(source, text, suffix):
    """(1) a cut is a pre-token boundary; (2) the pre-tokens before it depend only on text[:r + 1]."""
    pattern = pats.compile_pattern(source)
    spans = pats.split_pieces(pattern, text)
    bounds = {s for s, _ in spans}
    for m in inc.CUT.finditer(text):
        r = m.start()
        assert r in bounds, (text, r)
        other = pats.split_pieces(pattern, text[:r + 1] + suffix)
        assert [s for s in other if s[1] <= r] == [s for s in spans if s[1] <= r], (text, r, suffix)


def test_verified_patterns_are_the_space_safe_ones():
    assert inc.VERIFIED <= pats.SPACE_SAFE


def test_cut_examples():
    cuts = [m.start() for m in inc.CUT.finditer("ab 12x\nyz.(7")]
    assert cuts == [2, 5, 6, 7, 9, 11]
    for joined in (" 1", " a", "'b", "a'", "\tc", "(x", "a\u0301", "!\n", "  ", "ab", "a b"[1:]):
        assert inc.CUT.search(joined) is None, joined


# ---- incremental == from scratch --------------------------------------------------------------

@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=DOC, data=st.data(), special=st.booleans())
def test_random_edits_equal_a_fresh_encode(pair, text, data, special):
    tok, oracle = pair
    enc = inc.IncrementalEncoder(tok, text, special=special)
    assert enc.incremental
    _check(enc, tok, text, special, oracle)
    for _ in range(6):
        start, removed, inserted = _edit(data, text)
        old = list(enc.ids)
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, tok, text, special, oracle)
        first, gone, added = enc.last_splice
        new = list(enc.ids)
        assert new[:first] == old[:first] and new[first + added:] == old[first + gone:]


@settings(max_examples=MAX_EXAMPLES // 2, deadline=None)
@given(text=DOC, data=st.data())
def test_nfc_tokenizer_falls_back_only_while_not_normalized(text, data):
    """Qwen3 normalizes with NFC: edits stay local while the text is NFC, and are exact anyway."""
    tok = _qwen3()
    enc = inc.IncrementalEncoder(tok, text, special=True)
    for _ in range(5):
        start, removed, inserted = _edit(data, text)
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, tok, text, True)


@settings(max_examples=MAX_EXAMPLES // 2, deadline=None)
@given(data=st.data(), special=st.booleans())
def test_non_special_added_tokens_match_in_both_modes(data, special):
    """Qwen3's <think> and <tool_call> are not special: encode finds them with special=False
    too (as HF does), and the live encoder cuts them out the same way."""
    tok = _qwen3()
    text = "<think>a</think> b<tool_call>{}</tool_call><|im_start|>x<|endoftext|>\n" * 3
    enc = inc.IncrementalEncoder(tok, text, special=special)
    assert tok.encode("<think>") == [tok.id_of("<think>")]
    inserts = st.sampled_from(["<think>", "</", "think>", "<", ">", "x", " ", "<tool_call>", "<|im_end|>"])
    random_edits(enc, tok, text, data, inserts)
    assert enc.full_encodes == 0


_QWEN3 = []


def _qwen3():
    if not _QWEN3:
        _QWEN3.append(load_tokenizer(data_file("hf", "qwen3", "tokenizer.json")))
    return _QWEN3[0]


def test_nfc_edits_are_local_on_normalized_text():
    tok = _qwen3()
    enc = inc.IncrementalEncoder(tok, "Café au lait. " * 50)
    enc.apply_edit(10, 0, "é")
    enc.apply_edit(300, 1, "ü")
    assert enc.full_encodes == 0
    enc.apply_edit(5, 0, "e\u0301")  # not NFC: the normalizer would rewrite it
    assert enc.full_encodes == 1 and list(enc.ids) == tok.encode(enc.text)
    enc.apply_edit(5, 2, "")
    assert list(enc.ids) == tok.encode(enc.text)


@settings(max_examples=MAX_EXAMPLES // 2, deadline=None)
@given(text=DOC, data=st.data())
def test_add_prefix_space(gpt2_prefixed, text, data):
    enc = inc.IncrementalEncoder(gpt2_prefixed, text)
    assert enc.incremental
    for _ in range(5):
        start, removed, inserted = _edit(data, text)
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        _check(enc, gpt2_prefixed, text, False)


@pytest.fixture(scope="module")
def gpt2_prefixed():
    vocab = read_vocab(data_file("gpt2", "encoder.json"))
    merges, _ = read_merges(data_file("gpt2", "vocab.bpe"))
    return ByteLevelBPETokenizer(vocab, merges, pattern=pats.HF_BYTELEVEL_REGEX, add_prefix_space=True)


def test_surrogates_fall_back_and_recover(gpt2):
    enc = inc.IncrementalEncoder(gpt2, "ab cd")
    enc.apply_edit(2, 0, "\ud83d")
    assert enc.full_encodes == 1 and list(enc.ids) == gpt2.encode(enc.text)
    enc.apply_edit(3, 0, "\ude00")  # now a pair: tiktoken joins it into 😀
    assert list(enc.ids) == gpt2.encode(enc.text)
    enc.apply_edit(2, 2, "")
    assert enc.text == "ab cd" and list(enc.ids) == gpt2.encode("ab cd")
    before = enc.full_encodes
    enc.apply_edit(4, 0, "x")
    assert enc.full_encodes == before  # surrogate-free again: local


def test_other_tokenizers_re_encode_in_full(tmp_path):
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = pb.ModelProto()
    model.ParseFromString(data_file("sentencepiece", "botchan_en_unigram_1000.model").read_bytes())
    model.trainer_spec.model_type = pb.TrainerSpec.CHAR
    (tmp_path / "char.model").write_bytes(model.SerializeToString())
    tok = load_tokenizer(tmp_path / "char.model")
    enc = inc.IncrementalEncoder(tok, "Hello world")
    assert not enc.incremental and "SentencePiece char" in enc.reason
    enc.apply_edit(5, 0, ", there")
    assert list(enc.ids) == tok.encode("Hello, there world") and enc.full_encodes == 1


def test_custom_regex_re_encodes_in_full(gpt2):
    vocab = read_vocab(data_file("gpt2", "encoder.json"))
    merges, _ = read_merges(data_file("gpt2", "vocab.bpe"))
    tok = ByteLevelBPETokenizer(vocab, merges, pattern=r"\w+|\W")
    enc = inc.IncrementalEncoder(tok, "a b")
    assert not enc.incremental and "regex" in enc.reason
    enc.apply_edit(1, 1, "")
    assert list(enc.ids) == tok.encode("ab")


def test_large_document_edits_stay_local(gpt2):
    text = ("The quick brown fox, 1234 times; Привет мир! 東京\n" * 2000)
    enc = inc.IncrementalEncoder(gpt2, text)
    for start, removed, inserted in [(50_000, 0, "x"), (10, 1, ""), (len(text) - 1, 1, "!"), (0, 0, " ")]:
        enc.apply_edit(start, removed, inserted)
        text = text[:start] + inserted + text[start + removed:]
        assert enc.last_splice.removed < 10 and enc.last_splice.added < 10
    assert enc.full_encodes == 0
    assert list(enc.ids) == gpt2.encode(text) and enc.text == text
    assert _records(enc.tokens()[-50:]) == _records(gpt2.segment(text)[-50:])


def test_local_only_refuses_a_whole_text_re_encode():
    """local_only: an edit that makes the text not NFC raises instead of re-encoding in place;
    the encoder keeps the edited text, and the next edit without local_only encodes it afresh."""
    tok = _qwen3()
    text = "Café au lait. " * 50
    enc = inc.IncrementalEncoder(tok, text)
    enc.apply_edit(10, 0, "é", local_only=True)  # still NFC: local
    text = text[:10] + "é" + text[10:]
    with pytest.raises(inc.EditNotLocal):
        enc.apply_edit(5, 0, "e\u0301", local_only=True)
    text = text[:5] + "e\u0301" + text[5:]
    assert enc.full_encodes == 0 and enc.text == text
    with pytest.raises(inc.EditNotLocal):  # stale until encoded afresh, even if this one is local
        enc.apply_edit(len(text), 0, "x", local_only=True)
    text += "x"
    enc.apply_edit(0, 0, "")
    assert enc.full_encodes == 1 and list(enc.ids) == tok.encode(text) and enc.text == text


@pytest.mark.parametrize("run", ["7" * 300, "東" * 300, " " * 300])
def test_local_only_refuses_a_long_run_without_cuts(gpt2, monkeypatch, run):
    """With no cut within LOCAL_LIMIT characters of an edit, local_only raises; ordinary
    edits nearby stay local, and the same edit without local_only is exact."""
    monkeypatch.setattr(inc, "LOCAL_LIMIT", 100)
    text = "Some words, then a run: " + run + " and more words after it."
    enc = inc.IncrementalEncoder(gpt2, text)
    enc.apply_edit(5, 0, "x", local_only=True)
    text = text[:5] + "x" + text[5:]
    assert list(enc.ids) == gpt2.encode(text)
    middle = text.index(run) + 150
    with pytest.raises(inc.EditNotLocal):
        enc.apply_edit(middle, 1, "", local_only=True)
    text = text[:middle] + text[middle + 1:]
    enc.set_text(text)
    enc.apply_edit(middle, 0, run[0])
    text = text[:middle] + run[0] + text[middle:]
    assert list(enc.ids) == gpt2.encode(text) and enc.full_encodes == 0


def test_edit_outside_the_text_is_an_error(gpt2):
    enc = inc.IncrementalEncoder(gpt2, "abc")
    with pytest.raises(ValueError, match="outside the text"):
        enc.apply_edit(2, 2, "")
    with pytest.raises(ValueError):
        enc.apply_edit(-1, 0, "x")
    assert enc.apply_edit(1, 0, "") is enc.ids and enc.last_splice == (0, 0, 0)


def test_set_text_replaces_everything(gpt2):
    enc = inc.IncrementalEncoder(gpt2)
    assert len(enc) == 0 and enc.text == ""
    enc.set_text("Hello world")
    assert list(enc.ids) == [15496, 995] and enc.last_splice == (0, 0, 2)


# ---- the text store ---------------------------------------------------------------------------

class _SmallBlocks(inc.TextBlocks):
    SIZE = 4  # many blocks, so that edits split, merge and drop them


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(text=st.text(max_size=40), edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 9), st.text(max_size=12)),
                                                max_size=12))
def test_text_blocks_behave_like_str(text, edits):
    blocks = _SmallBlocks(text)
    for where, removed, inserted in edits:
        a = int(where * len(text))
        b = min(len(text), a + removed)
        blocks.replace(a, b, inserted)
        text = text[:a] + inserted + text[b:]
        assert len(blocks) == len(text)
        for lo, hi in [(0, len(text)), (a, a + 5), (len(text) // 3, len(text) - 2)]:
            assert blocks.slice(lo, hi) == text[max(lo, 0):hi]
        assert str(blocks) == text


@st.composite
def _two_splices(draw):
    """(n, a, b): splice a on n tokens, then splice b on the tokens after a."""
    n = draw(st.integers(0, 30))
    first = draw(st.integers(0, n))
    a = inc.Splice(first, draw(st.integers(0, n - first)), draw(st.integers(0, 6)))
    n1 = n + a.added - a.removed
    first = draw(st.integers(0, n1))
    b = inc.Splice(first, draw(st.integers(0, n1 - first)), draw(st.integers(0, 6)))
    return n, a, b


@given(_two_splices())
def test_a_splice_then_another_covers_every_token_either_changed(case):
    """`Splice.then`: the tokens before its first and after its end are the original ones
    (the Tokenize view keeps their layout across the edits it batches)."""
    n, a, b = case
    tokens = list(range(n))
    new = iter(range(1000, 2000))
    for s in (a, b):
        tokens[s.first:s.first + s.removed] = [next(new) for _ in range(s.added)]
    m = a.then(b)
    assert len(tokens) - n == m.added - m.removed and m.first >= 0 and m.removed >= 0
    assert tokens[:m.first] == list(range(m.first))
    assert tokens[m.first + m.added:] == list(range(m.first + m.removed, n))
