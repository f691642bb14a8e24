"""Loading GGUF-embedded and SentencePiece tokenizers, and SentencePiece encode speed.

* GGUF: `load_gguf_tokenizer` (header only; BPE merge tables are built on the first encode)
  on SmolLM2 (49k tokens, 49k merges), llama-bpe (128k, 280k merges) and a synthetic
  262 144-token SentencePiece vocabulary written to a temporary file (the size of Gemma 3's;
  the issue asks for well under 0.5 s there). The peer builds HF `tokenizers`' BPE from the
  same tokens and merges (for the SPM vocabulary: nothing, llama.cpp is not installed).
* `.model`: `load_sentencepiece` against `sentencepiece.SentencePieceProcessor`.
* encode: MB/s on Botchan against the `sentencepiece` library (pure Python against C++).
"""
from __future__ import annotations

import random
import tempfile
from pathlib import Path

from forma_gui.bench import BenchResult, data_path, median_time

GGUF_FILES = {"SmolLM2": ("gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"),
              "llama-bpe": ("gguf-vocab", "ggml-vocab-llama-bpe.gguf")}
SPM_MODELS = ("botchan_en_unigram_1000.model", "mistral_instruct_tokenizer_240323.model.v3")
BIG_VOCAB = 262_144


def write_big_spm_vocab(path: Path, n: int = BIG_VOCAB) -> Path:
    """A vocab-only GGUF with `n` SentencePiece tokens (gguf-py writes it)."""
    import gguf
    import numpy as np

    rng = random.Random(0)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    seen = set(tokens)
    while len(tokens) < n:
        word = ("▁" if rng.random() < 0.5 else "") + "".join(
            rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9)))
        if word not in seen:
            seen.add(word)
            tokens.append(word)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(np.linspace(0, -20, n).astype(np.float32).tolist())
    writer.add_token_types([2, 3, 3] + [6] * 256 + [1] * (n - 259))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _hf_bpe(path: Path):
    from forma_gui.formats.gguf import GGUFFile

    try:
        from tokenizers import Tokenizer, models
    except ImportError:
        return None
    with GGUFFile(path, read_tensors=False) as g:
        tokens = g.metadata["tokenizer.ggml.tokens"]
        merges = [tuple(m.split(" ")) for m in g.metadata["tokenizer.ggml.merges"]]
    return Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))


def run(quick: bool) -> list[BenchResult]:
    """GGUF and SentencePiece tokenizer load and encode times against the reference libraries."""
    from forma_gui.formats.gguf_tokenizer import load_gguf_tokenizer
    from forma_gui.formats.sentencepiece_model import load_sentencepiece

    repeat = 1 if quick else 7
    out: list[BenchResult] = []
    for label, parts in list(GGUF_FILES.items())[:1 if quick else None]:
        path = data_path(*parts)
        ours = median_time(lambda: load_gguf_tokenizer(path), repeat=repeat)
        peer = median_time(lambda: _hf_bpe(path), repeat=repeat, warmup=not quick)
        out.append(BenchResult(f"load GGUF tokenizer {label}", ours * 1e3, peer * 1e3,
                               "HF tokenizers BPE from the same metadata", "ms",
                               higher_is_better=False, note="header read included"))
    with tempfile.TemporaryDirectory() as tmp:
        n = BIG_VOCAB // 8 if quick else BIG_VOCAB
        big = write_big_spm_vocab(Path(tmp) / "spm.gguf", n)
        ours = median_time(lambda: load_gguf_tokenizer(big), repeat=repeat)
        out.append(BenchResult(f"load GGUF tokenizer {n // 1024}k SPM", ours * 1e3, None, "-", "ms",
                               higher_is_better=False, note="target: well under 500 ms"))
    out += _sentencepiece(load_sentencepiece, repeat, quick)
    return out


def _sentencepiece(load_sentencepiece, repeat: int, quick: bool) -> list[BenchResult]:
    try:
        import sentencepiece as spm
    except ImportError:
        spm = None
    out = []
    text = data_path("sentencepiece", "botchan.txt").read_text("utf-8")
    text = text[: 20_000 if quick else 100_000]
    megabytes = len(text.encode()) / 1e6
    for name in SPM_MODELS:
        path = data_path("sentencepiece", name)
        ours = median_time(lambda: load_sentencepiece(path), repeat=repeat)
        peer = median_time(lambda: spm.SentencePieceProcessor(model_file=str(path)),
                           repeat=repeat) if spm else None
        out.append(BenchResult(f"load .model {name}", ours * 1e3, peer and peer * 1e3,
                               "sentencepiece", "ms", higher_is_better=False))
        tok = load_sentencepiece(path)
        lib = spm.SentencePieceProcessor(model_file=str(path)) if spm else None
        ours = median_time(lambda: tok.encode(text), repeat=max(1, repeat // 2))
        peer = median_time(lambda: lib.encode(text), repeat=repeat) if lib else None
        out.append(BenchResult(f"encode SentencePiece {name}", megabytes / ours,
                               peer and megabytes / peer, "sentencepiece (C++)", "MB/s",
                               note="pure Python against C++"))
    return out
