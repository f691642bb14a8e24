"""Live editing: one-character edits in a 1 MB document, against encoding it from scratch.

The document is the first 1 MB (UTF-8) of the encode benchmark's mixed corpus (English, code,
Cyrillic, CJK). Ours: `IncrementalEncoder.apply_edit` (ids and character spans kept current)
for a one-character insert or delete at a random position, alternating, median over many
edits. Peers: tiktoken's `encode_ordinary` and HF tokenizers' `encode` of the whole document
(what a live view has to do without an incremental path), median of a few runs, in the same
process run. The issue's target: 40x faster than the from-scratch peers, about 2 ms or less.
After the edits the ids are checked against tiktoken's from-scratch encode of the final text.
The full run adds the llama-bpe GGUF (llama.cpp's byte-level BPE with Llama 3's vocabulary),
against HF tokenizers over the same vocabulary and pre-tokenizer; its ids are checked against
HF's encode of the final text; and the llama-spm GGUF (llama.cpp's SentencePiece BPE with Llama 2's
vocabulary), against `sentencepiece` (C++) encoding the whole document with the same vocabulary
written as a BPE model; its ids are checked against our own from-scratch encode of the final
text (sentencepiece differs from llama.cpp where the text holds "<", see tests/core/test_llama_spm.py);
and Mistral's SentencePiece .model (BPE, byte fallback, user-defined pieces), against the
`sentencepiece` library encoding the whole document with the same file; its ids are checked
against our own from-scratch encode and the library's; botchan's unigram .model (its region's
path starts from the score before it, and the words after it are walked on, usually to the end:
core.incremental), against the library; the same model written as a GGUF `t5` vocabulary
(llama.cpp's unigram: double sums, exact, so no walk), against the library; and the bert-bge GGUF (llama.cpp's
WordPiece), with no peer (HF tokenizers' BERT normalizer strips accents and splits text unlike
llama.cpp's WPM session, so it is no exact peer); its ids are checked against our own
from-scratch encode, whose segment columns are timed for the note.
"""
from __future__ import annotations

import random
import statistics
import time

from forma_gui.bench import BenchResult, data_path, median_time

TARGET = 40.0
DOC_BYTES = 1_000_000
#: tokenizer label -> (tiktoken encoding, our file)
TOKENIZERS = {"GPT-2": ("r50k_base", ("gpt2", "encoder.json")),
              "cl100k": ("cl100k_base", ("tiktoken", "cl100k_base.tiktoken"))}


def document(n_bytes: int = DOC_BYTES) -> str:
    """The first n_bytes of the mixed corpus (cut at a character boundary)."""
    from forma_gui.bench.encode import build_corpus

    text = build_corpus(0.6 * n_bytes / DOC_BYTES)
    return text.encode("utf-8")[:n_bytes].decode("utf-8", "ignore")


def edit_times(enc, n_edits: int, seed: int = 0, walks: list[float] | None = None) -> list[float]:
    """Seconds per apply_edit: one-character inserts and deletes at random positions, alternating;
    `walks` gets each edit's seconds in a unigram model's walk (`IncrementalEncoder.walk_seconds`)."""
    rng = random.Random(seed)
    times = []
    for k in range(n_edits):
        walked = enc.walk_seconds
        text_len = len(enc._blocks) - enc._offset
        pos = rng.randrange(text_len)
        if k % 2:
            char = enc._blocks.slice(rng.randrange(text_len), text_len)[:1]  # a character of the document
            t0 = time.perf_counter()
            enc.apply_edit(pos, 0, char)
        else:
            t0 = time.perf_counter()
            enc.apply_edit(pos, 1, "")
        times.append(time.perf_counter() - t0)
        if walks is not None:
            walks.append(enc.walk_seconds - walked)
    return times


def _peers(encoding: str):
    """{name: encode-the-whole-text function} for the installed peers."""
    from forma_gui.bench.encode import _hf_gpt2, _tiktoken

    peers = {}
    tik = _tiktoken(encoding, data_path("tiktoken", f"{encoding}.tiktoken"))
    if tik is not None:
        peers["tiktoken"] = tik
    if encoding == "r50k_base":
        hf = _hf_gpt2()
        if hf is not None:
            peers["HF tokenizers"] = hf
    return peers


def run(quick: bool = False) -> list[BenchResult]:
    from forma_gui.core.incremental import IncrementalEncoder
    from forma_gui.formats.loader import load_tokenizer

    doc = document(DOC_BYTES // 10 if quick else DOC_BYTES)
    size = f"{len(doc.encode()) / 1e6:.1f} MB" if not quick else f"{len(doc.encode()) // 1000} KB"
    results = []
    for label, (encoding, parts) in (list(TOKENIZERS.items())[:1] if quick else TOKENIZERS.items()):
        tok = load_tokenizer(data_path(*parts))
        enc = IncrementalEncoder(tok, doc)
        times = edit_times(enc, 60 if quick else 1000)
        ours = statistics.median(times) * 1e3
        p90 = sorted(times)[int(0.9 * len(times))] * 1e3
        peers = _peers(encoding)
        final = enc.text
        same = "ids identical" if "tiktoken" not in peers or \
            list(enc.ids) == peers["tiktoken"].encode_ordinary(final) else "ids DIFFER"
        note = (f"{tok.name}: median {ours:.2f} ms, p90 {p90:.2f} ms over {len(times)} edits "
                f"(target ≤ 2 ms); {enc.full_encodes} full re-encodes; {same} with tiktoken")
        for peer_name, peer in peers.items():
            if peer_name == "tiktoken":
                secs = median_time(lambda peer=peer: peer.encode_ordinary(doc), repeat=2 if quick else 5)
            else:
                secs = median_time(lambda peer=peer: peer.encode(doc, add_special_tokens=False),
                                   repeat=1 if quick else 3)
            results.append(BenchResult(
                f"one-char edit in {size}, {label}, vs from-scratch {peer_name}", ours, secs * 1e3,
                peer_name, "ms", higher_is_better=False, target=TARGET, note=note))
        if not peers:
            results.append(BenchResult(f"one-char edit in {size}, {label}", ours, None, "tiktoken", "ms",
                                       higher_is_better=False, target=TARGET, note=note))
    if not quick:
        results += _gguf(doc, size)
        results += _gguf_spm(doc, size)
        results += _sentencepiece_model(doc, size)
        results += _sentencepiece_unigram(doc, size)
        results += _gguf_t5(doc, size)
        results += _gguf_wordpiece(doc, size)
    return results


def _live(tok, doc: str, *, own: bool = False, n_edits: int = 1000) -> tuple:
    """(encoder, median ms, note) after n_edits one-char edits of `doc` with a live encoder; the
    note gives median, p90, max and the number of full re-encodes, and with `own` whether the
    final ids equal our from-scratch encode and how long our from-scratch segment columns take
    (what the Tokenize view re-ran after each keystroke without the live encoder)."""
    from forma_gui.core.incremental import IncrementalEncoder

    enc = IncrementalEncoder(tok, doc)
    walks: list[float] = []
    times = edit_times(enc, n_edits, walks=walks)
    ordered = sorted(times)
    ours = statistics.median(ordered) * 1e3
    p90, worst = ordered[int(0.9 * len(ordered))] * 1e3, ordered[-1] * 1e3
    note = (f"median {ours:.2f} ms, p90 {p90:.2f} ms, max {worst:.1f} ms over {len(ordered)} edits "
            f"(target ≤ 2 ms); {enc.full_encodes} full re-encodes")
    if any(walks):  # a unigram model: what an edit costs besides carrying the scores on
        walk = statistics.median(walks) * 1e3
        rest = statistics.median(t - w for t, w in zip(times, walks)) * 1e3
        note += f"; the walk {walk:.2f} ms at the median, an edit without it {rest:.2f} ms"
        chains = getattr(enc, "_chains", None)
        if chains is not None and chains.hits + chains.misses:
            note += f"; chains between resets replayed {chains.hits} of {chains.hits + chains.misses}"
    if own:
        same = "identical" if list(enc.ids) == tok.encode(enc.text) else "DIFFER"
        scratch = median_time(lambda: tok.segment_columns(doc), repeat=3)
        note += f"; ids {same} with our from-scratch encode; our from-scratch segment columns {scratch * 1e3:.0f} ms"
    return enc, ours, note


def _gguf(doc: str, size: str) -> list[BenchResult]:
    """The same edits with the llama-bpe GGUF (llama.cpp's byte-level BPE, Llama 3's vocabulary),
    against HF tokenizers over the same vocabulary and pre-tokenizer encoding from scratch."""
    from forma_gui.bench.tokenizer_load import GGUF_FILES, hf_llama_bpe
    from forma_gui.formats.loader import load_tokenizer

    path = data_path(*GGUF_FILES["llama-bpe"])
    if not path.exists():
        return []
    tok = load_tokenizer(path)
    enc, ours, note = _live(tok, doc)
    peer = hf_llama_bpe(tok, path)
    same = ""
    if peer is not None:
        final = peer.encode(enc.text, add_special_tokens=False).ids
        same = "; ids identical with HF" if list(enc.ids) == final else "; ids DIFFER from HF"
    secs = median_time(lambda: peer.encode(doc, add_special_tokens=False), repeat=3) if peer else None
    note += same
    return [BenchResult(f"one-char edit in {size}, llama-bpe GGUF, vs from-scratch HF tokenizers", ours,
                        secs and secs * 1e3, "HF tokenizers", "ms", higher_is_better=False,
                        target=TARGET, note=note)]


def _gguf_spm(doc: str, size: str) -> list[BenchResult]:
    """The same edits with the llama-spm GGUF (llama.cpp's SentencePiece BPE, Llama 2's vocabulary),
    against sentencepiece encoding the whole document from scratch; the final ids are checked
    against our from-scratch encode, and our from-scratch segment columns (what the Tokenize view
    re-ran after each keystroke without the live encoder) are timed for the note."""
    import tempfile
    from pathlib import Path

    from forma_gui.bench.tokenizer_load import _llama_spm_as_model
    from forma_gui.formats.loader import load_tokenizer

    path = data_path("gguf-vocab", "ggml-vocab-llama-spm.gguf")
    if not path.exists():
        return []
    tok = load_tokenizer(path)
    enc, ours, note = _live(tok, doc, own=True)
    with tempfile.TemporaryDirectory() as tmp:
        lib = _llama_spm_as_model(tok, Path(tmp))
        secs = median_time(lambda: lib.encode(doc), repeat=3) if lib else None
    return [BenchResult(f"one-char edit in {size}, llama-spm GGUF, vs from-scratch sentencepiece", ours,
                        secs and secs * 1e3, "sentencepiece", "ms", higher_is_better=False,
                        target=TARGET, note=note)]


def _sentencepiece_model(doc: str, size: str) -> list[BenchResult]:
    """The same edits with Mistral's SentencePiece .model (a SentencePieceTokenizer: BPE, byte
    fallback, user-defined pieces, no charsmap), against the `sentencepiece` library encoding the
    whole document from the same file; the final ids are checked against our from-scratch
    encode and the library's, and our from-scratch segment columns (what the Tokenize view re-ran
    after each keystroke before the live encoder) are timed for the note."""
    return _model_file_row(("sentencepiece", "mistral_instruct_tokenizer_240323.model.v3"), doc,
                           f"one-char edit in {size}, Mistral .model", own=True)


def _sentencepiece_unigram(doc: str, size: str) -> list[BenchResult]:
    """The same edits with botchan's unigram .model: the region around the edit starts from the
    float32 path score before it, and the words after it are walked on until the scores meet
    (usually the end: a numpy float32 sum per stretch between resets, the words that leave
    their bound segmented again). Against the `sentencepiece` library encoding the whole
    document; the final ids are checked against our from-scratch encode and the library's."""
    return _model_file_row(("sentencepiece", "botchan_en_unigram_1000.model"), doc,
                           f"one-char edit in {size}, botchan unigram .model", own=True)


def _gguf_t5(doc: str, size: str) -> list[BenchResult]:
    """The same edits with llama.cpp's unigram: botchan's unigram .model written as a GGUF `t5`
    vocabulary (`t5_gguf_from`), whose ids are sentencepiece's (tests/formats/test_gguf_tokenizer.py).
    Its sums are double and exact, so an edit re-encodes the words between two cuts and nothing
    after them. Against the `sentencepiece` library encoding the whole document with the .model;
    the final ids are checked against our from-scratch encode and the library's."""
    import tempfile
    from pathlib import Path

    from forma_gui.formats.loader import load_tokenizer

    model = data_path("sentencepiece", "botchan_en_unigram_1000.model")
    try:
        import sentencepiece
    except ImportError:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        path = t5_gguf_from(model, Path(tmp) / "botchan-t5.gguf") if model.exists() else None
        if path is None:
            return []
        enc, ours, note = _live(load_tokenizer(path), doc, own=True)
    lib = sentencepiece.SentencePieceProcessor(model_file=str(model))
    note += "; ids " + ("identical with" if list(enc.ids) == lib.encode(enc.text) else "DIFFER from") + \
        " sentencepiece"
    secs = median_time(lambda: lib.encode(doc), repeat=3)
    return [BenchResult(f"one-char edit in {size}, botchan as a t5 GGUF (llama.cpp unigram), vs from-scratch "
                        "sentencepiece", ours, secs * 1e3, "sentencepiece", "ms", higher_is_better=False,
                        target=TARGET, note=note)]


def t5_gguf_from(model_path, dst):
    """Write a SentencePiece unigram .model as a GGUF `t5` vocabulary (its pieces, scores, types,
    space flags and charsmap, <unk> 0 and </s> 2 as botchan has them), as llama.cpp's
    convert_hf_to_gguf.py does for T5; `dst`, or None without the `gguf` and `sentencepiece`
    packages."""
    try:
        import gguf
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError:
        return None
    model = pb.ModelProto()
    model.ParseFromString(model_path.read_bytes())
    spec = model.normalizer_spec
    kind = gguf.GGUFValueType
    writer = gguf.GGUFWriter(str(dst), "t5")
    for key, value, value_type, sub_type in [
            ("model", "t5", kind.STRING, None),
            ("tokens", [p.piece for p in model.pieces], kind.ARRAY, kind.STRING),
            ("scores", [p.score for p in model.pieces], kind.ARRAY, kind.FLOAT32),
            ("token_type", [p.type for p in model.pieces], kind.ARRAY, kind.INT32),
            ("unknown_token_id", 0, kind.UINT32, None),
            ("eos_token_id", 2, kind.UINT32, None),
            ("add_space_prefix", spec.add_dummy_prefix, kind.BOOL, None),
            ("remove_extra_whitespaces", spec.remove_extra_whitespaces, kind.BOOL, None),
            ("precompiled_charsmap", list(spec.precompiled_charsmap), kind.ARRAY, kind.UINT8)]:
        writer.add_key_value("tokenizer.ggml." + key, value, value_type, sub_type=sub_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def _model_file_row(parts: tuple[str, ...], doc: str, name: str, **live) -> list[BenchResult]:
    """A `.model` file's live-edit row against the `sentencepiece` library encoding the whole
    document from the same file (its ids also checked against the library's on the final text)."""
    from forma_gui.formats.loader import load_tokenizer

    path = data_path(*parts)
    if not path.exists():
        return []
    enc, ours, note = _live(load_tokenizer(path), doc, **live)
    try:
        import sentencepiece
    except ImportError:
        lib = None
    else:
        lib = sentencepiece.SentencePieceProcessor(model_file=str(path))
        note += "; ids " + ("identical with" if list(enc.ids) == lib.encode(enc.text) else "DIFFER from") + \
            " sentencepiece"
    secs = median_time(lambda: lib.encode(doc), repeat=3) if lib else None
    return [BenchResult(f"{name}, vs from-scratch sentencepiece", ours, secs and secs * 1e3, "sentencepiece",
                        "ms", higher_is_better=False, target=TARGET, note=note)]


def _gguf_wordpiece(doc: str, size: str) -> list[BenchResult]:
    """The same edits with the bert-bge GGUF (llama.cpp's WordPiece, BGE's uncased vocabulary),
    without a peer (see the module docstring); the final ids are checked against our from-scratch
    encode, and our from-scratch segment columns (what the Tokenize view re-ran after each
    keystroke before the live encoder) are timed for the note."""
    from forma_gui.formats.loader import load_tokenizer

    path = data_path("gguf-vocab", "ggml-vocab-bert-bge.gguf")
    if not path.exists():
        return []
    enc, ours, note = _live(load_tokenizer(path), doc, own=True)
    return [BenchResult(f"one-char edit in {size}, bert-bge GGUF (WordPiece)", ours, None, "none", "ms",
                        higher_is_better=False, target=TARGET, note=note)]


if __name__ == "__main__":  # pragma: no cover
    from forma_gui.commands.bench import format_table

    print(format_table(run(quick=False)))
