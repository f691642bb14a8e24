"""Byte-level BPE training speed: 1,000 merges on botchan.txt (about 280 KB of English).

The peer is HF tokenizers' BpeTrainer (Rust, multi-threaded) with the same pre-tokenizer
and the same byte alphabet; both learn the same merges (tests/core/test_bpe.py), so the
figures compare the same work: pre-tokenize, count, and 1,000 incremental merges.
"""
from __future__ import annotations

from pathlib import Path

from forma_gui.bench import BenchResult, data_path, median_time
from forma_gui.core.bpe import pattern_regex, train_bytelevel

MERGES = 1000
QUICK_MERGES = 200


def corpus_path() -> Path:
    """botchan.txt in the test data (FORMA_TEST_DATA, default ../shared/data)."""
    return data_path("sentencepiece", "botchan.txt")


def _hf_trainer(text: str, merges: int):
    """A callable training HF's BpeTrainer like ours, or None if tokenizers is missing."""
    try:
        from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    except ImportError:
        return None

    def train() -> None:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern_regex("gpt2")), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        trainer = trainers.BpeTrainer(vocab_size=256 + merges, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator([text], trainer)

    return train


def run(quick: bool = False) -> list[BenchResult]:
    """Byte-level BPE training time on botchan.txt against HF's BpeTrainer."""
    path = corpus_path()
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    merges = QUICK_MERGES if quick else MERGES
    repeat = 1 if quick else 3
    ours = median_time(lambda: train_bytelevel(text, merges), repeat=repeat)
    peer_fn = _hf_trainer(text, merges)
    peer = median_time(peer_fn, repeat=repeat) if peer_fn else None
    return [BenchResult(
        name=f"train byte-level BPE, {merges} merges on botchan.txt ({len(text) // 1000} KB)",
        ours=ours * 1000, peer=None if peer is None else peer * 1000,
        peer_name="tokenizers BpeTrainer", unit="ms", higher_is_better=False,
        note="pure Python, incremental pair counts; the peer is Rust on all cores")]


if __name__ == "__main__":
    for result in run(quick=False):
        print(result)
