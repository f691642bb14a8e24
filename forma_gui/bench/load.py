"""Opening vocabularies and model files: tokenizer.json against HF tokenizers, and a GGUF with a
262,144-token vocabulary (Gemma 3's size) against gguf-py.

* tokenizer.json: `load_tokenizer` on Qwen3's (151k tokens, 151k merges, NFC, 26 added
  tokens) against `tokenizers.Tokenizer.from_file`, runs alternating; target: no slower (1x).
  What bounds ours (Nov 2026): json.loads (~150 ms), looking up both sides and the result
  of each of the 151k merges (~100 ms of dict look-ups and string joins), the pieces' bytes
  (~20 ms). Rank files are measured by the encode benchmark (against
  `tiktoken.load.load_tiktoken_bpe`).
* The 262k GGUF: no Gemma file is in the test data, so one is written once per run with
  `gguf.GGUFWriter` into a temporary folder: a GPT-2-family tokenizer of 262,144 tokens
  (GPT-2's 256 byte symbols, then merges of two random tokens of up to 6 characters),
  its 262k merges, scores and token types, and Gemma 3 270M's tensor table (the same 236
  tensor names, each a 32-element F32 array: listing tensors does not read their data, so
  only their number matters). Measured:
  - `load_tokenizer` on it; target 0.5 s (the peer column shows the target). What bounds
    it (Nov 2026, ~290 ms on a quiet core): reading the header (~45 ms: the string arrays'
    bounds found in numpy, nothing decoded), then checking the vocabulary on its bytes
    (formats.token_table: no token text twice, both sides of every merge are tokens, and
    each merge's result id), ~230 ms of numpy, most of it random look-ups in a hash table
    of the 262k token keys. The token list and the text -> id dict are made on first use:
    the first encode decodes the 262k texts (~80 ms) and builds the merge table from the
    ids found at load (the note gives load + first encode);
  - `GGUFFile` open + list tensors against `gguf.GGUFReader` (open_gguf's functions);
    target 100x;
  - peak RSS of a fresh interpreter doing the same (open_gguf's `peak_rss_mb`); target
    under 100 MB (the peer column shows gguf-py's).
  --quick writes a 16,384-token file instead and skips the RSS runs.
"""
from __future__ import annotations

import random
import tempfile
from pathlib import Path

from forma_gui.bench import BenchResult, alternating, cpu_note, data_path, median_time

BIG_VOCAB = 262_144
QUICK_VOCAB = 16_384
LOAD_TARGET_MS = 500.0
RSS_TARGET_MB = 100.0
OPEN_TARGET = 100.0
MAX_PIECE = 12
SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>")
#: Gemma 3 270M: 18 blocks of these tensors, plus the embedding and the final norm
BLOCK_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm",
                 "attn_k_norm", "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up",
                 "ffn_down", "post_ffw_norm")
N_BLOCKS = 18


def synthetic_vocab(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """(tokens, merges) of a consistent GPT-2-style BPE vocabulary with n tokens (specials last)."""
    from forma_gui.core.byte_map import BYTE_TO_UNICODE

    rng = random.Random(seed)
    tokens = [BYTE_TO_UNICODE[b] for b in range(256)]
    short = list(tokens)  # the tokens that may still be merged: at most MAX_PIECE // 2 long
    seen = set(tokens)
    merges = []
    goal = n - len(SPECIALS)
    while len(tokens) < goal:
        left, right = short[rng.randrange(len(short))], short[rng.randrange(len(short))]
        new = left + right
        if new not in seen:
            seen.add(new)
            tokens.append(new)
            merges.append(f"{left} {right}")
            if len(new) <= MAX_PIECE // 2:
                short.append(new)
    return tokens + list(SPECIALS), merges


def write_gemma_like(path: Path, n_vocab: int = BIG_VOCAB) -> Path:
    """A GGUF with an n_vocab GPT-2-family tokenizer and Gemma 3 270M's tensor names (see module docstring)."""
    import gguf
    import numpy as np

    tokens, merges = synthetic_vocab(n_vocab)
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_scores([0.0] * (n_vocab - len(SPECIALS)) + [-1000.0] * len(SPECIALS))
    writer.add_token_types([1] * (n_vocab - len(SPECIALS)) + [3] * len(SPECIALS))
    writer.add_bos_token_id(tokens.index("<bos>"))
    writer.add_eos_token_id(tokens.index("<eos>"))
    data = np.zeros(32, dtype=np.float32)
    names = ["token_embd.weight"] + [f"blk.{i}.{t}.weight" for i in range(N_BLOCKS) for t in BLOCK_TENSORS]
    for name in names + ["output_norm.weight"]:
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def hf_json_results(quick: bool) -> list[BenchResult]:
    """load_tokenizer on Qwen3's tokenizer.json against tokenizers.Tokenizer.from_file."""
    from forma_gui.formats.loader import load_tokenizer

    path = data_path("hf", "qwen3", "tokenizer.json")
    if not path.exists():
        return []
    fns = {"ours": lambda: load_tokenizer(path)}
    try:
        from tokenizers import Tokenizer
    except ImportError:
        pass
    else:
        fns["peer"] = lambda: Tokenizer.from_file(str(path))
    secs = alternating(fns, 1 if quick else 7)
    peer = secs["peer"][0] * 1e3 if "peer" in secs else None
    note = ", ".join(filter(None, ["ours: a usable tokenizer (merges checked; the merge table is "
                                   "built on first encode)", cpu_note(secs, "ours", "peer")]))
    return [BenchResult("load tokenizer.json (Qwen3, 151k)", secs["ours"][0] * 1e3, peer,
                        "tokenizers.Tokenizer.from_file", "ms", higher_is_better=False, target=1.0,
                        note=note)]


def gguf_results(path: Path, label: str, quick: bool) -> list[BenchResult]:
    """load_tokenizer, open + list against GGUFReader, and peak RSS on one GGUF."""
    from forma_gui.bench.open_gguf import open_ours, open_peer, peak_rss_mb, peer_installed
    from forma_gui.formats.loader import load_tokenizer

    load = median_time(lambda: load_tokenizer(path), repeat=1 if quick else 5)
    first = median_time(lambda: load_tokenizer(path).encode("Hello world"), repeat=1 if quick else 3,
                        warmup=not quick)
    out = [BenchResult(f"load_tokenizer, {label}", load * 1e3, LOAD_TARGET_MS, "target 0.5 s", "ms",
                       higher_is_better=False, target=1.0,
                       note=f"load + first encode (decodes the texts, builds the merge table): "
                            f"{first * 1e3:.0f} ms")]
    ours = median_time(lambda: open_ours(path), repeat=3 if quick else 7)
    peer = median_time(lambda: open_peer(path), repeat=1, warmup=not quick) if peer_installed() else None
    out.append(BenchResult(f"open GGUF + list tensors, {label}", ours * 1e3, peer and peer * 1e3,
                           "gguf.GGUFReader", "ms", higher_is_better=False, target=OPEN_TARGET,
                           note="236 tensors; both parse every metadata value"))
    if not quick:
        mine = peak_rss_mb("ours", path)
        theirs = peak_rss_mb("peer", path) if peer_installed() else None
        base = peak_rss_mb("baseline", path)
        verdict = "" if mine is None else ("under" if mine < RSS_TARGET_MB else "OVER") + " the 100 MB target"
        out.append(BenchResult(f"open GGUF peak RSS, {label}", mine or 0.0, theirs, "gguf.GGUFReader", "MB",
                               higher_is_better=False,
                               note=f"fresh interpreter; {verdict}; python + numpy alone: {base or 0:.0f} MB"))
    return out


def run(quick: bool = False) -> list[BenchResult]:
    results = hf_json_results(quick)
    import importlib.util

    if importlib.util.find_spec("gguf") is None:  # gguf-py writes the synthetic file
        return results
    n = QUICK_VOCAB if quick else BIG_VOCAB
    with tempfile.TemporaryDirectory(prefix="forma-bench-") as tmp:
        path = write_gemma_like(Path(tmp) / f"gemma-like-{n}.gguf", n)
        label = f"synthetic {n:,}-token GGUF ({path.stat().st_size / 1e6:.0f} MB)"
        results += gguf_results(path, label, quick)
    return results


if __name__ == "__main__":  # pragma: no cover
    from forma_gui.commands.bench import format_table

    print(format_table(run(quick=False)))
