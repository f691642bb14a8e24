"""BPE training: the paper's example, Wikipedia's byte-pair example, HF's trainer as oracle,
and the incremental trainers against their naive references."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forma_gui.core.bpe import (PAPER_EXAMPLE, learn_bpe, learn_bpe_reference, merge_symbols,
                                pair_counts, parse_words, pattern_regex, tie_order,
                                train_bytelevel, train_bytelevel_reference)
from tests.conftest import MAX_EXAMPLES, data_file

# Sennrich et al. (2016), section 3.2 and Figure 1, and the seed chapter's Go port of it
PAPER_SYMBOLS = "es est est</w> lo low ne new newest</w> low</w> wi".split()
PAPER_WORDS = {"low</w>": 5, "low e r </w>": 2, "newest</w>": 6, "wi d est</w>": 3}


def test_paper_example_merges_and_words():
    training = learn_bpe(PAPER_EXAMPLE, 10)
    assert training.symbols == PAPER_SYMBOLS
    assert training.words == PAPER_WORDS
    assert training.merges[:3] == [("e", "s"), ("es", "t"), ("est", "</w>")]


def test_paper_example_first_step_counted_by_hand():
    # e s: newest 6 + widest 3; s t and t </w> the same 9, but seen later in scanning order
    step = learn_bpe(PAPER_EXAMPLE, 1).steps[0]
    assert (step.pair, step.count) == (("e", "s"), 9)
    assert [(p.pair, p.count, p.tied) for p in step.runners_up[:3]] == [
        (("s", "t"), 9, True), (("t", "</w>"), 9, True), (("w", "e"), 8, False)]
    assert step.changed == (("n e w e s t </w>", "n e w es t </w>"),
                            ("w i d e s t </w>", "w i d es t </w>"))


def test_words_at_replays_the_steps():
    training = learn_bpe(PAPER_EXAMPLE, 10)
    assert training.words_at(0) == PAPER_EXAMPLE
    assert training.words_at(10) == PAPER_WORDS
    assert training.words_at(3)["n e w est</w>"] == 6
    # irregular spacing in the keys, and words that become equal, add up
    assert learn_bpe({"a  b": 1, "ab": 2}, 1).words_at(1) == {"ab": 3}


def test_stops_cleanly_when_no_pair_is_left():
    training = learn_bpe(PAPER_EXAMPLE, 1000)
    assert training.words == {"low</w>": 5, "lower</w>": 2, "newest</w>": 6, "widest</w>": 3}
    assert len(training.merges) == len(training.steps) < 1000
    assert learn_bpe({"a": 3}, 5).merges == []


def test_merging_is_left_to_right_without_overlap():
    assert merge_symbols(["e", "e", "e"], ("e", "e"), "ee") == ["ee", "e"]
    assert pair_counts([(["e", "e", "e"], 2)]) == {("e", "e"): 4}
    training = learn_bpe({"e e e </w>": 1}, 1)
    assert training.words == {"ee e </w>": 1}


@pytest.mark.parametrize("vocab, num_merges", [
    ({"": 1}, 1), ({"a b": 0}, 1), ({"a b": -2}, 1), ({"a b": 1.5}, 1), ({"a b": 1}, -1)])
def test_bad_input_is_a_value_error(vocab, num_merges):
    with pytest.raises(ValueError):
        learn_bpe(vocab, num_merges)


def test_parse_words():
    assert parse_words("l o w </w>:5, l o w e r </w>:2\n\nn e w:1") == {
        "l o w </w>": 5, "l o w e r </w>": 2, "n e w": 1}
    for bad in ("l o w", "l o w:x", ":3", "a:0"):
        with pytest.raises(ValueError):
            parse_words(bad)


SYMBOL = st.sampled_from(["a", "b", "c", "e", "ab", "</w>"])
WORD = st.lists(SYMBOL, min_size=1, max_size=8).map(" ".join)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(st.dictionaries(WORD, st.integers(1, 9), min_size=1, max_size=8), st.integers(0, 12))
def test_incremental_equals_reference(vocab, num_merges):
    fast = learn_bpe(vocab, num_merges)
    slow = learn_bpe_reference(vocab, num_merges)
    assert fast.merges == slow.merges
    assert fast.words == slow.words
    assert fast.steps == slow.steps
    assert fast.words_at(len(fast.steps)) == fast.words


# ---- byte level ------------------------------------------------------------------------

def test_wikipedia_aaabdaaabac():
    # en.wikipedia.org/wiki/Byte_pair_encoding: Z=aa, Y=ab, X=ZY, leaving "XdXac"
    training = train_bytelevel("aaabdaaabac", 3)
    assert training.merged_bytes() == [(b"a", b"a"), (b"a", b"b"), (b"aa", b"ab")]
    assert training.merges == [(97, 97), (97, 98), (256, 257)]
    tiktoken = pytest.importorskip("tiktoken")
    enc = tiktoken.Encoding("t", pat_str=pattern_regex("gpt2"),
                            mergeable_ranks=training.ranks, special_tokens={})
    assert enc.encode_ordinary("aaabdaaabac") == [258, ord("d"), 258, ord("a"), ord("c")]


def test_ranks_are_bytes_first_then_merges():
    training = train_bytelevel("low lower newest widest " * 3, 20)
    ranks = training.ranks
    assert [ranks[bytes([b])] for b in range(256)] == list(range(256))
    assert len(ranks) == training.vocab_size == 256 + len(training.merges)
    assert training.skipped == []


def test_tie_order_is_gpt2_character_order():
    order = tie_order()
    assert sorted(order) == list(range(256))
    assert order[ord("!")] == 0 and order[ord("~")] == ord("~") - ord("!")
    assert order[0] == 188 and order[ord(" ")] == 188 + 32  # the remapped bytes come last


@pytest.fixture(scope="module")
def botchan() -> str:
    return data_file("sentencepiece", "botchan.txt").read_text(encoding="utf-8")


def test_same_merges_as_hf_bpe_trainer(botchan):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import Regex, models, pre_tokenizers, trainers

    from forma_gui.formats.bpe_export import gpt2_merges

    n = 300
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern_regex("gpt2")), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=256 + n, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([botchan], trainer)
    theirs = [tuple(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    ours = train_bytelevel(botchan, n)
    assert gpt2_merges(ours) == theirs
    assert sum(any(p.tied for p in s.runners_up) for s in ours.steps) > 10  # ties were hit


def test_progress_and_cancel(botchan):
    seen: list[int] = []
    training = train_bytelevel(botchan[:20000], 50, progress=lambda d, t: seen.append(d),
                               should_stop=lambda: len(seen) >= 7)
    assert training.cancelled and len(training.merges) == 7
    assert seen == list(range(1, 8))


@settings(max_examples=MAX_EXAMPLES // 4 or 1, deadline=None)
@given(st.text(alphabet="ab e\n'é🙂1", max_size=120), st.integers(0, 30))
def test_bytelevel_incremental_equals_reference(text, num_merges):
    fast = train_bytelevel(text, num_merges)
    slow = train_bytelevel_reference(text, num_merges)
    assert fast.merges == slow.merges
    assert fast.steps == slow.steps


def test_bytelevel_reference_on_a_real_slice(botchan):
    text = botchan[5000:15000]
    assert train_bytelevel(text, 60).steps == train_bytelevel_reference(text, 60).steps
