"""The shared Tokenizer behaviour: ids outside the vocabulary."""
from __future__ import annotations

import pytest

from forma_gui.formats.loader import load_tokenizer
from tests.conftest import data_file

FILES = [("tiktoken", "cl100k_base.tiktoken"), ("gpt2", "encoder.json"), ("hf", "qwen3", "tokenizer.json"),
         ("sentencepiece", "mistral_instruct_tokenizer_240323.model.v3"),
         ("sentencepiece", "botchan_en_unigram_1000.model"),
         ("gguf-vocab", "ggml-vocab-gpt-2.gguf"), ("gguf-vocab", "ggml-vocab-llama-spm.gguf"),
         ("gguf-vocab", "ggml-vocab-bert-bge.gguf")]


@pytest.fixture(scope="module", params=FILES, ids=lambda parts: parts[-1])
def tok(request):
    return load_tokenizer(data_file(*request.param))


def test_ids_outside_the_vocabulary_are_refused(tok):
    """As sentencepiece's OUT_OF_RANGE: a negative id must not index from the end."""
    for bad in (-1, -tok.vocab_size, tok.vocab_size, 10**9):
        for use in (lambda: tok.decode([0, bad]), lambda: tok.piece(bad),
                    lambda: tok.token_bytes(bad), lambda: tok.token_type(bad)):
            with pytest.raises(IndexError, match=f"token id {bad} is outside"):
                use()
    assert tok.decode([]) == ""
