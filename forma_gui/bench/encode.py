"""Encode throughput against tiktoken and HF tokenizers, and rank-file load time against tiktoken.

Corpus (~2 MB of UTF-8, deterministic, built from files every checkout can rely on):

* English: Project Gutenberg's *Botchan* (``sentencepiece/botchan.txt`` in the test data);
* code: the first ~0.9 MB of a fixed list of standard-library modules (argparse, difflib, ...);
* Cyrillic and CJK: sentences drawn with a seeded RNG from the Cyrillic and CJK words of the
  Qwen3 vocabulary (``hf/qwen3/vocab.json``): a BPE vocabulary lists real words roughly in
  frequency order, so words are picked Zipf-distributed by that order, and one word in six
  glues two words together to give the long tail of rare words real text has.

"Cold" starts every encode with empty caches (`ByteLevelBPETokenizer.clear_cache`: chunks,
pre-tokens, parts); "warm" encodes the same text again. Tables derived from the vocabulary
alone (which byte pairs and triples occur inside tokens, built once on the first encode; for a
rank table the merge_batch pair table, built once ~0.2 parts per vocabulary entry went through
the one-by-one merge loop) are not caches and are kept. tiktoken has no cache, so both compare against its one figure.

What bounds the figures (Nov 2026, 2 shared cores; medians of three runs): cold 0.65x tiktoken
for r50k and 0.57x for cl100k (single runs 0.52-0.75x; tiktoken gains more than we do from a
quiet core, where the best cold runs measured ~250 ms / ~300 ms against its ~160 / ~170 ms),
warm 2.2x and 2.4x (single runs 1.4-2.5x). A cold 2 MB encode takes ~300 ms (r50k) / ~390 ms
(cl100k), tiktoken 170-250 ms depending on load. Its steps: cutting at spaces (~30 ms, warm
too) and telling the 176k chunks apart (~15 ms); pre-tokenizing the 50k distinct ones
(~60 ms: the pattern's `re` twins, one for the ASCII chunks and a wide one for the Cyrillic and
CJK ones, which `regex` took twice as long over); telling the 200k pre-tokens apart in numpy
(~25 ms); the BPE of the new ones that are not whole tokens (~45 ms r50k / ~90 ms cl100k:
cutting ~0.6 MB into parts ~9 ms, telling the parts apart ~13 ms, merging the 6.5k / 27k
distinct parts in numpy rounds, `bpe_encoder.merge_batch`, ~10 / ~40 ms, a third of it its
pair-table lookups); gathering every pre-token's ids and caching the 50k chunks' (~40 ms); and
the final gather and unpacking of ~1M ids (~45 ms, warm too). A cold encode fills the chunk and
part caches, not the pre-token cache (`encode_pretoken` fills its own). Warm: the cut at
spaces, the dict gather and the unpacking into a list of ints.
The HF peer is the same GPT-2 vocabulary (vocab.json + merges, ByteLevel pre-tokenizer) as
r50k; there is no HF form of cl100k in the test data. Runs of ours and the peers alternate,
so load from other processes on a shared machine hits both alike. Ids are checked equal.

Load: `load_tiktoken` (a usable tokenizer) against `tiktoken.load.load_tiktoken_bpe` (only the
rank dict; building tiktoken's Encoding on top of it costs more).
"""
from __future__ import annotations

import bisect
import itertools
import json
import os
import random
import sysconfig
from pathlib import Path
from typing import Callable

from forma_gui.bench import BenchResult, alternating, cpu_note

COLD_TARGET, WARM_TARGET, LOAD_TARGET = 0.4, 0.9, 1.0
ENCODINGS = {"r50k_base": "gpt2", "cl100k_base": "cl100k"}
LOAD_FILES = ("cl100k_base", "o200k_base")
STDLIB_MODULES = ("argparse.py", "difflib.py", "inspect.py", "typing.py", "dataclasses.py",
                  "subprocess.py", "tarfile.py", "pydoc.py", "_pydecimal.py", "turtle.py")
#: bytes of each part of the full corpus
SIZES = {"code": 900_000, "cyrillic": 450_000, "cjk": 400_000}


def data_path(*parts: str) -> Path:
    """A file of the test data (FORMA_TEST_DATA, default ../shared/data)."""
    root = os.environ.get("FORMA_TEST_DATA")
    base = Path(root) if root else Path(__file__).resolve().parents[2].parent / "shared" / "data"
    return base.joinpath(*parts)


# ---- the corpus ---------------------------------------------------------------------------------

def build_corpus(scale: float = 1.0) -> str:
    """English + code + Cyrillic + CJK, about 2 MB at scale 1 (see module docstring)."""
    english = data_path("sentencepiece", "botchan.txt").read_text("utf-8")
    english = english[: int(len(english) * scale)]
    code = _stdlib_code(int(SIZES["code"] * scale))
    cyrillic, cjk = _vocabulary_words()
    rng = random.Random(8)
    return "\n".join([english, code, _sentences(rng, cyrillic, int(SIZES["cyrillic"] * scale), _cyrillic),
                      _sentences(rng, cjk, int(SIZES["cjk"] * scale), _cjk)])


def _stdlib_code(size: int) -> str:
    lib = Path(sysconfig.get_paths()["stdlib"])
    parts, total = [], 0
    for name in STDLIB_MODULES:
        if total >= size:
            break
        text = (lib / name).read_text("utf-8")
        parts.append(text)
        total += len(text)
    return "".join(parts)[:size]


def _vocabulary_words() -> tuple[list[str], list[str]]:
    """Cyrillic words and CJK words of the Qwen3 vocabulary, in vocabulary (≈ frequency) order."""
    from forma_gui.core.byte_map import unicode_str_to_bytes

    cyrillic, cjk = [], []
    for piece in json.loads(data_path("hf", "qwen3", "vocab.json").read_bytes()):
        try:
            word = unicode_str_to_bytes(piece).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            continue
        bare = word.lstrip(" ")
        if len(bare) >= 2 and bare.islower() and all("\u0430" <= c <= "\u044f" or c == "ё" for c in bare):
            cyrillic.append(bare)
        elif word == bare and bare and all("\u4e00" <= c <= "\u9fff" for c in bare):
            cjk.append(bare)
    return cyrillic, cjk


def _zipf(rng: random.Random, items: list[str]) -> Callable[[], str]:
    weights = list(itertools.accumulate(1.0 / (k + 1) for k in range(len(items))))
    return lambda: items[bisect.bisect(weights, rng.random() * weights[-1])]


def _sentences(rng: random.Random, words: list[str], size: int, make) -> str:
    pick = _zipf(rng, words)
    word = (lambda: pick() + pick() if rng.random() < 1 / 6 else pick())
    out, total = [], 0
    while total < size:
        sentence = make(rng, word)
        out.append(sentence)
        total += len(sentence.encode())
    return "".join(out)


def _cyrillic(rng: random.Random, word: Callable[[], str]) -> str:
    sentence = " ".join(word() for _ in range(rng.randint(4, 16)))
    return sentence[0].upper() + sentence[1:] + rng.choice("....,!?") + (" " if rng.random() < 0.85 else "\n")


def _cjk(rng: random.Random, word: Callable[[], str]) -> str:
    return "".join(word() for _ in range(rng.randint(2, 10))) + rng.choice("，，，。。！？、") \
        + ("\n" if rng.random() < 0.08 else "")


# ---- peers --------------------------------------------------------------------------------------

def _tiktoken(name: str, path: Path):
    """tiktoken's own Encoding (its pattern) from the local rank file, or None if not installed."""
    try:
        import tiktoken
        import tiktoken.load
        from tiktoken_ext import openai_public
    except ImportError:
        return None
    original = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda url, expected_hash=None: tiktoken.load.load_tiktoken_bpe(str(path))
    try:
        spec = getattr(openai_public, name)()
    finally:
        openai_public.load_tiktoken_bpe = original
    return tiktoken.Encoding(**spec)


def _hf_gpt2():
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers
    except ImportError:
        return None
    model = models.BPE.from_file(str(data_path("gpt2", "encoder.json")), str(data_path("gpt2", "vocab.bpe")))
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tok


# ---- measurements -------------------------------------------------------------------------------

def encode_results(text: str, repeat: int) -> list[BenchResult]:
    from forma_gui.formats.tiktoken_file import load_tiktoken

    mb = len(text.encode("utf-8")) / 1e6
    results = []
    for name, pattern in ENCODINGS.items():
        path = data_path("tiktoken", f"{name}.tiktoken")
        ours = load_tiktoken(path, pattern=pattern)
        peer = _tiktoken(name, path)
        hf = _hf_gpt2() if name == "r50k_base" else None

        def cold(ours=ours):
            ours.clear_cache()
            return ours.encode(text)

        fns = {"cold": cold, "warm": lambda ours=ours: ours.encode(text)}
        if peer is not None:
            fns["tiktoken"] = lambda peer=peer: peer.encode_ordinary(text)
        if hf is not None:
            fns["hf"] = lambda hf=hf: hf.encode(text, add_special_tokens=False)
        secs = alternating(fns, repeat)
        ids = ours.encode(text)
        same = [] if peer is None else ["tiktoken ids identical" if ids == peer.encode_ordinary(text)
                                        else "tiktoken ids DIFFER"]
        if hf is not None:
            same.append("HF ids identical" if ids == hf.encode(text, add_special_tokens=False).ids
                        else "HF ids DIFFER")
        rate = {k: mb / v[0] for k, v in secs.items()}
        label = f"encode {mb:.1f} MB mixed, {name}"
        for kind, target in (("cold", COLD_TARGET), ("warm", WARM_TARGET)):
            note = ", ".join([*same, cpu_note(secs, kind, "tiktoken")])
            results.append(BenchResult(f"{label}, {kind} cache", rate[kind], rate.get("tiktoken"), "tiktoken",
                                       "MB/s", target=target, note=note))
        if hf is not None:
            note = ", ".join([*same, cpu_note(secs, "cold", "hf")])
            results.append(BenchResult(f"{label}, cold cache vs HF", rate["cold"], rate["hf"], "HF tokenizers",
                                       "MB/s", note=note))
    return results


def load_results(repeat: int) -> list[BenchResult]:
    from forma_gui.formats.tiktoken_file import load_tiktoken

    results = []
    for name in LOAD_FILES:
        path = data_path("tiktoken", f"{name}.tiktoken")
        fns = {"ours": lambda path=path: load_tiktoken(path)}
        try:
            import tiktoken.load

            fns["peer"] = lambda path=path: tiktoken.load.load_tiktoken_bpe(str(path))
        except ImportError:
            pass
        secs = alternating(fns, repeat)
        note = ", ".join(filter(None, ["ours: a usable tokenizer; peer: the rank dict only",
                                       cpu_note(secs, "ours", "peer")]))
        results.append(BenchResult(f"load {name}.tiktoken", secs["ours"][0] * 1e3,
                                   secs["peer"][0] * 1e3 if "peer" in secs else None,
                                   "tiktoken.load", "ms", higher_is_better=False, target=LOAD_TARGET,
                                   note=note))
    return results


def run(quick: bool = False) -> list[BenchResult]:
    """The encode and rank-file load benchmarks (quick: a 0.2 MB corpus, fewer repeats)."""
    text = build_corpus(0.1 if quick else 1.0)
    return encode_results(text, 2 if quick else 5) + load_results(2 if quick else 7)


if __name__ == "__main__":  # pragma: no cover
    from forma_gui.commands.bench import format_table

    print(format_table(run(quick=False)))
