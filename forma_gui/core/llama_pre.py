r"""llama.cpp's pre-tokenizers: every ``tokenizer.ggml.pre`` name it knows, and its regexes.

For a ``gpt2``-family GGUF, llama.cpp (llama-vocab.cpp, ``llm_tokenizer_bpe``) picks a pre-
tokenizer *type* from ``tokenizer.ggml.pre`` (LLAMA_PRE_NAMES, with the flags it sets: merges
ignored for whole-token words, clean-up of spaces, BOS/SEP) and each type has a LIST of
regexes (LLAMA_PRE_REGEXES) that unicode.cpp ``unicode_regex_split`` applies one after
another: each regex runs on every fragment the previous ones produced, on that fragment
alone (lookarounds never see past it), and the text between matches is kept as a fragment
of its own. `LlamaPreTokenizer.split` does the same with the `regex` module; one combined
regex would not be equivalent for the multi-regex types (falcon, smollm, deepseek, ...).

How llama.cpp evaluates a regex, and what we do to match it exactly:

* A regex with Unicode categories (``\p{L}``, ``\p{N}``, ``\p{P}``, ``\p{M}``, ``\p{S}``) runs
  with std::regex on a "collapsed" text: ASCII stays, every other code point becomes one byte
  for its general category (whitespace first). That is category matching, so `regex`'s own
  ``\p{..}`` classes agree, except that ``\p{Lu}``/``\p{Ll}``/``\p{Lt}``/``\p{Lm}``/
  ``\p{Lo}`` all collapse to "any letter": we rewrite them to ``\p{L}``.
* A regex without categories runs with std::wregex on the code points, after every non-ASCII
  whitespace character was replaced by U+000B: we replace them the same way (`wide`).
  std::regex's ``\d`` is ASCII-only (-> ``[0-9]``) and ECMAScript ``$`` is the very end of the
  fragment (-> ``\Z``).
* Some regexes are implemented by hand in unicode.cpp (gpt2, llama3, qwen2, qwen35, kimi-k2,
  afmoe digits, newline runs; tiny_aya's digit regex reuses the afmoe code). CUSTOM gives a
  regex that cuts exactly like each hand-written function, quirks included (the afmoe code
  glues the non-digits before a digit run onto its first group).

* llama.cpp's category tables are Unicode 15.1, `regex`'s 16.0 (pinned for tiktoken and HF):
  the 5,185 code points 16.0 assigned are in no class for llama.cpp. The category regexes
  run on the text with those replaced by an unassigned code point (`as_llama_classes`).

Unknown names raise `UnknownPreTokenizer`, never a silent default. The tables were extracted
from llama-vocab.cpp of the llama.cpp vendored by llama-cpp-python 0.3.36 (the release whose
``models/ggml-vocab-*.gguf`` test vectors the tests use).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import regex

from forma_gui.core import patterns as pats

#: llama.cpp pre-tokenizer type -> its regex list, verbatim (llm_tokenizer_bpe)
LLAMA_PRE_REGEXES: dict[str, tuple[str, ...]] = {
    'LLAMA3': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'JAIS2': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",
    ),
    'DBRX': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'SMAUG': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'DEEPSEEK_LLM': (
        '[\r\n]',
        r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
        r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
        r"\s+$",
        r"[一-龥ࠀ-一가-퟿]+",
        r"\p{N}+",
    ),
    'DEEPSEEK3_LLM': (
        r"\p{N}{1,3}",
        r"[一-龥぀-ゟ゠-ヿ]+",
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',
    ),
    'HUNYUAN_DENSE': (
        r"\p{N}{1,3}",
        r"[一-龥぀-ゟ゠-ヿ]+",
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',
    ),
    'JOYAI_LLM': (
        r"\p{N}{1,3}",
        r"[一-龥぀-ゟ゠-ヿ]+",
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',
    ),
    'HY_V4': (
        r"\p{N}{1,3}",
        r"[一-龥぀-ゟ゠-ヿ]+",
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',
    ),
    'SPARK2_5': (
        r"\p{N}{1,3}",
        r"[一-龥぀-ゟ゠-ヿ]+",
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+',
        r"\p{N}",
    ),
    'YOUTU': (
        r"[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'DEEPSEEK_CODER': (
        '[\r\n]',
        r"\s?\p{L}+",
        r"\s?\p{P}+",
        r"[一-龥ࠀ-一가-퟿]+",
        r"\p{N}",
    ),
    'FALCON': (
        r"[\p{P}\$\+<=>\^~\|`]+",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        r"[0-9][0-9][0-9]",
    ),
    'STARCODER': (
        r"\p{N}",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'REFACT': (
        r"\p{N}",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'COMMAND_R': (
        r"\p{N}",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'SMOLLM': (
        r"\p{N}",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'CODESHELL': (
        r"\p{N}",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'EXAONE': (
        r"\p{N}",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'MINERVA': (
        r"\p{N}",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'MELLUM2': (
        r"\p{N}",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'GPT2': (
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'MPT': (
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'OLMO': (
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'JAIS': (
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'TRILLION': (
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'GRANITE_DOCLING': (
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'STABLELM2': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'QWEN2': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'HUNYUAN': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'SOLAR_OPEN': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'QWEN35': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'PORO': (
        r" ?[^(\s|.,!?…。，、।۔،)]+",
    ),
    'BLOOM': (
        r" ?[^(\s|.,!?…。，、।۔،)]+",
    ),
    'GPT3_FINNISH': (
        r" ?[^(\s|.,!?…。，、।۔،)]+",
    ),
    'CHATGLM4': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'VIKING': (
        r" ?[^(\s|.,!?…。，、।۔،)]+",
        r"\p{N}",
    ),
    'TEKKEN': (
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'CHAMELEON': (
        r"<sentinel:[0-9]+>",
        r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
        r"([\t\n]|    |  )",
        r"\p{N}",
        r"[\p{P}!-/:-@\[-`{-~]",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    ),
    'GPT4O': (
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'MINIMAX_M2': (
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'GRANITE_EMB_MULTI': (
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'TINY_AYA': (
        r"\d{1,3}(?=(?:\d{3})*\b)",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'KIMI_K2': (
        r"\p{Han}+",
    ),
    'SUPERBPE': (
        r"\p{N}+",
        r"(?=(\d{3})+(?!\d))",
    ),
    'BAILINGMOE': (
        r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    ),
    'SEED_CODER': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'UFAKZEKA': (
        r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'GROK_2': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'AFMOE': (
        r"\p{AFMoE_digits}",
        r"[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    ),
    'LAGUNA': (
        r"[^\n]+|[\n]+",
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'EXAONE_MOE': (
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",
    ),
    'GEMMA4': (
        r"[^\n]+|[\n]+",
    ),
    'SARVAM_MOE': (
        r"[^\n]+|[\n]+",
    ),
    'MINICPM5': (
        r"\p{N}{1,3}",
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    'WHITESPACE': (
        r"\S+",
    ),
    'DEFAULT': (
        r"[\p{P}\$\+<=>\^~\|]+",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        r"\p{N}+",
        r"[0-9][0-9][0-9]",
    ),
}

#: pre-tokenizer types whose words are raw UTF-8, not GPT-2 byte-encoded
RAW_UTF8_TYPES = frozenset(['GEMMA4', 'SARVAM_MOE', 'WHITESPACE'])

#: ``tokenizer.ggml.pre`` name -> (pre-tokenizer type, the flags llama.cpp sets for it)
LLAMA_PRE_NAMES: dict[str, tuple[str, dict[str, bool]]] = {
    'default': ('DEFAULT', {}),
    'minicpm5': ('MINICPM5', {'ignore_merges': True}),
    'llama3': ('LLAMA3', {'ignore_merges': True, 'add_bos': True}),
    'llama-v3': ('LLAMA3', {'ignore_merges': True, 'add_bos': True}),
    'llama-bpe': ('LLAMA3', {'ignore_merges': True, 'add_bos': True}),
    'falcon3': ('LLAMA3', {'ignore_merges': True, 'add_bos': True}),
    'falcon-h1': ('LLAMA3', {'ignore_merges': True, 'add_bos': True}),
    'pixtral': ('LLAMA3', {'ignore_merges': True, 'add_bos': True}),
    'midm-2.0': ('LLAMA3', {'ignore_merges': True, 'add_bos': True}),
    'lfm2': ('LLAMA3', {'ignore_merges': True, 'add_bos': True}),
    'jina-v5-nano': ('LLAMA3', {'ignore_merges': True, 'add_bos': True}),
    'deepseek-llm': ('DEEPSEEK_LLM', {'clean_spaces': False}),
    'deepseek-coder': ('DEEPSEEK_CODER', {'clean_spaces': False}),
    'deepseek-v3': ('DEEPSEEK3_LLM', {'clean_spaces': False}),
    'spark2_5': ('SPARK2_5', {'clean_spaces': False}),
    'youtu': ('YOUTU', {'clean_spaces': False, 'ignore_merges': True}),
    'falcon': ('FALCON', {}),
    'mpt': ('MPT', {}),
    'starcoder': ('STARCODER', {}),
    'gpt-2': ('GPT2', {}),
    'phi-2': ('GPT2', {}),
    'jina-es': ('GPT2', {}),
    'jina-de': ('GPT2', {}),
    'gigachat': ('GPT2', {}),
    'jina-v2-es': ('GPT2', {}),
    'jina-v2-de': ('GPT2', {}),
    'a.x-4.0': ('GPT2', {}),
    'mellum': ('GPT2', {}),
    'modern-bert': ('GPT2', {}),
    'jais-2': ('JAIS2', {}),
    'gemma4': ('GEMMA4', {'escape_whitespaces': True}),
    'granite-embed-multi-311m': ('GEMMA4', {'escape_whitespaces': True}),
    'sarvam-moe': ('SARVAM_MOE', {'escape_whitespaces': True, 'clean_spaces': False}),
    'jina-v1-en': ('GPT2', {'add_sep': True}),
    'jina-v2-code': ('GPT2', {'add_sep': True}),
    'roberta-bpe': ('GPT2', {'add_sep': True}),
    'whitespace': ('WHITESPACE', {}),
    'refact': ('REFACT', {}),
    'command-r': ('COMMAND_R', {'clean_spaces': False}),
    'qwen2': ('QWEN2', {'clean_spaces': False}),
    'deepseek-r1-qwen': ('QWEN2', {'clean_spaces': False}),
    'kormo': ('QWEN2', {'clean_spaces': False}),
    'f2llmv2': ('QWEN2', {'clean_spaces': False}),
    'qwen35': ('QWEN35', {'clean_spaces': False}),
    'stablelm2': ('STABLELM2', {}),
    'olmo': ('OLMO', {}),
    'dbrx': ('DBRX', {}),
    'smaug-bpe': ('SMAUG', {}),
    'poro-chat': ('PORO', {'clean_spaces': False}),
    'chatglm-bpe': ('CHATGLM4', {'no_bos': True}),
    'glm4': ('CHATGLM4', {'ignore_merges': True, 'no_bos': True}),
    'glm5': ('CHATGLM4', {'ignore_merges': True, 'no_bos': True}),
    'viking': ('VIKING', {'clean_spaces': False}),
    'jais': ('JAIS', {}),
    'tekken': ('TEKKEN', {'clean_spaces': False, 'ignore_merges': True, 'add_bos': True}),
    'smollm': ('SMOLLM', {'clean_spaces': False}),
    'codeshell': ('CODESHELL', {}),
    'bloom': ('BLOOM', {}),
    'gpt3-finnish': ('GPT3_FINNISH', {}),
    'exaone': ('EXAONE', {}),
    'exaone4': ('GPT2', {}),
    'exaone-moe': ('EXAONE_MOE', {}),
    'chameleon': ('CHAMELEON', {'add_bos': True, 'clean_spaces': False}),
    'minerva-7b': ('MINERVA', {}),
    'megrez': ('QWEN2', {}),
    'gpt-4o': ('GPT4O', {'clean_spaces': False}),
    'llama4': ('GPT4O', {'clean_spaces': False}),
    'kanana2': ('GPT4O', {'clean_spaces': False}),
    'talkie': ('GPT4O', {'clean_spaces': False}),
    'granite-embed-multi-97m': ('GRANITE_EMB_MULTI', {'clean_spaces': False, 'ignore_merges': True}),
    'tiny_aya': ('TINY_AYA', {'clean_spaces': False}),
    'cohere2moe': ('TINY_AYA', {'clean_spaces': False}),
    'superbpe': ('SUPERBPE', {'clean_spaces': False}),
    'trillion': ('TRILLION', {'clean_spaces': False}),
    'granite-docling': ('GRANITE_DOCLING', {'clean_spaces': False}),
    'bailingmoe': ('BAILINGMOE', {'clean_spaces': False}),
    'bailingmoe2': ('BAILINGMOE', {'clean_spaces': False}),
    'llada-moe': ('BAILINGMOE', {'clean_spaces': False}),
    'seed-coder': ('SEED_CODER', {'clean_spaces': False}),
    'hunyuan': ('HUNYUAN', {'clean_spaces': False}),
    'hunyuan-dense': ('HUNYUAN_DENSE', {'clean_spaces': False}),
    'hy_v4': ('HY_V4', {'clean_spaces': False}),
    'joyai-llm': ('JOYAI_LLM', {'clean_spaces': False}),
    'kimi-k2': ('KIMI_K2', {'clean_spaces': False}),
    'ufakzeka': ('UFAKZEKA', {'clean_spaces': False}),
    'grok-2': ('GROK_2', {'clean_spaces': False}),
    'afmoe': ('AFMOE', {'clean_spaces': False}),
    'laguna': ('LAGUNA', {'clean_spaces': False}),
    'minimax-m2': ('MINIMAX_M2', {'clean_spaces': False}),
    'solar-open': ('SOLAR_OPEN', {'clean_spaces': False}),
    'mellum2': ('MELLUM2', {}),
}


#: the flags llama.cpp sets for every BPE vocabulary before the per-name ones
DEFAULT_FLAGS = {"ignore_merges": False, "clean_spaces": True, "add_bos": False,
                 "add_sep": False, "no_bos": False, "escape_whitespaces": False}

#: code points unicode.cpp ``unicode_cpt_is_han`` counts as Han (kimi-k2)
_HAN = ("\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f"
        "\U0002b740-\U0002b81f\U0002b820-\U0002ceaf\U0002ceb0-\U0002ebef\uf900-\ufaff"
        "\U0002f800-\U0002fa1f")
#: unicode.cpp custom_afmoe: digit runs cut into a leading 1-2 digits then groups of three,
#: the non-digits before a run glued onto its first group, trailing non-digits left over
_AFMOE_DIGITS = r"\P{N}*(?:\p{N}{1,2}(?=(?:\p{N}{3})*(?!\p{N}))|\p{N}{3})"

#: llama.cpp regex source -> an exactly equivalent `regex` source, for the regexes unicode.cpp
#: implements by hand (`unicode_regex_split_custom`)
CUSTOM: dict[str, str] = {
    # gpt2: the text the hand-written cut leaves unmatched (a lone non-space whitespace before
    # a non-space) is exactly what GPT-2's final "|\s+" would match, so the original GPT-2
    # regex (space-safe, see patterns.py) cuts identically
    LLAMA_PRE_REGEXES["GPT2"][0]: pats.HF_BYTELEVEL_REGEX,
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+":
        LLAMA_PRE_REGEXES["LLAMA3"][0],
    LLAMA_PRE_REGEXES["KIMI_K2"][0]: (
        f"[{_HAN}]+|[^\\r\\n\\p{{L}}\\p{{N}}]?(?:(?![{_HAN}])\\p{{L}})+"
        r"(?:'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL]))?"
        r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    LLAMA_PRE_REGEXES["AFMOE"][0]: _AFMOE_DIGITS,
    LLAMA_PRE_REGEXES["TINY_AYA"][0]: _AFMOE_DIGITS,
}
#: Python sources known to be space-safe (patterns.py): the [sS] spellings of llama3/qwen2
#: differ from patterns.py's (?i:...) ones only inside the contraction alternatives
SPACE_SAFE = frozenset({pats.HF_BYTELEVEL_REGEX, LLAMA_PRE_REGEXES["LLAMA3"][0],
                        LLAMA_PRE_REGEXES["QWEN2"][0]})

#: llama.cpp regex lists (verbatim) -> one `regex` source whose matches on the whole text are
#: exactly the words `LlamaPreTokenizer.split` cuts (patterns.DIGITS_GPT2 says why; tested
#: against `split`). Keyed by the whole list: only identical stages qualify.
ONE_REGEX: dict[tuple[str, ...], str] = {
    (r"\p{N}", LLAMA_PRE_REGEXES["GPT2"][0]): pats.DIGITS_GPT2,
}

_CATEGORY = regex.compile(r"\\p\{(?:N|L|P|M|S|Lu|Ll|Lt|Lm|Lo)\}")
_LETTER_KINDS = regex.compile(r"\\p\{L[ultmo]\}")
#: non-ASCII whitespace (unicode-data.cpp unicode_set_whitespace) -> U+000B, as unicode.cpp
#: does before running std::wregex
_WIDE_SPACES = dict.fromkeys([0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
                              0x202F, 0x205F, 0x3000], 0x0B)


#: code points Unicode 16.0 assigned that llama.cpp's tables (unicode-data.cpp, generated from
#: Unicode 15.1) leave undefined: `regex` (pinned to 16.0 for tiktoken and HF) puts them in
#: classes, llama.cpp in none, as any unassigned code point (the ranges where `regex`
#: 2024.7.24, Unicode 15.1, and 2025.9.18 disagree on \p{Cn}; no other class changed between
#: them; unicode-data.cpp has U+0897, U+1B4E-1B4F, U+1B7F and U+1C89 undefined)
UNDEFINED_IN_LLAMA = (
    (0x00897, 0x00897), (0x01B4E, 0x01B4F), (0x01B7F, 0x01B7F), (0x01C89, 0x01C8A),
    (0x02427, 0x02429), (0x031E4, 0x031E5), (0x0A7CB, 0x0A7CD), (0x0A7DA, 0x0A7DC),
    (0x105C0, 0x105F3), (0x10D40, 0x10D65), (0x10D69, 0x10D85), (0x10D8E, 0x10D8F),
    (0x10EC2, 0x10EC4), (0x10EFC, 0x10EFC), (0x11380, 0x11389), (0x1138B, 0x1138B),
    (0x1138E, 0x1138E), (0x11390, 0x113B5), (0x113B7, 0x113C0), (0x113C2, 0x113C2),
    (0x113C5, 0x113C5), (0x113C7, 0x113CA), (0x113CC, 0x113D5), (0x113D7, 0x113D8),
    (0x113E1, 0x113E2), (0x116D0, 0x116E3), (0x11BC0, 0x11BE1), (0x11BF0, 0x11BF9),
    (0x11F5A, 0x11F5A), (0x13460, 0x143FA), (0x16100, 0x16139), (0x16D40, 0x16D79),
    (0x18CFF, 0x18CFF), (0x1CC00, 0x1CCF9), (0x1CD00, 0x1CEB3), (0x1E5D0, 0x1E5FA),
    (0x1E5FF, 0x1E5FF), (0x1F8B2, 0x1F8BB), (0x1F8C0, 0x1F8C1), (0x1FA89, 0x1FA89),
    (0x1FA8F, 0x1FA8F), (0x1FABE, 0x1FABE), (0x1FAC6, 0x1FAC6), (0x1FADC, 0x1FADC),
    (0x1FADF, 0x1FADF), (0x1FAE9, 0x1FAE9), (0x1FBCB, 0x1FBEF),
)
#: an unassigned code point in every Unicode version (a Greek block gap): what the category
#: regexes see in place of an UNDEFINED_IN_LLAMA one
UNASSIGNED = 0x0378
#: texts up to this many characters are searched with `_UNDEFINED` (numpy's fixed cost)
_SHORT_TEXT = 512
_UNDEFINED = re.compile("[" + "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}"
                                      for a, b in UNDEFINED_IN_LLAMA) + "]")
_BMP_UNDEFINED = "".join(chr(c) for lo, hi in UNDEFINED_IN_LLAMA if hi < 0x10000 for c in range(lo, hi + 1))
_ASTRAL = regex.compile("[\U00010000-\U0010FFFF]")


@lru_cache(maxsize=None)
def _undefined_table():
    """(0x110000,) bool: which code points are UNDEFINED_IN_LLAMA."""
    import numpy as np

    table = np.zeros(0x110000, dtype=bool)
    for lo, hi in UNDEFINED_IN_LLAMA:
        table[lo:hi + 1] = True
    return table


def _code_points(text: str):
    import numpy as np

    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def count_undefined(text: str) -> int:
    """How many characters of `text` are UNDEFINED_IN_LLAMA.

    >>> count_undefined("a\u1c89b\u1c8a"), count_undefined("abc")
    (2, 0)
    """
    if text.isascii():
        return 0
    if len(text) <= _SHORT_TEXT:
        return len(_UNDEFINED.findall(text))
    if not any(ch in text for ch in _BMP_UNDEFINED) and not _ASTRAL.search(text):
        return 0  # (~2 ms per MB of non-ASCII text: numpy's count below takes ~3)
    return int(_undefined_table()[_code_points(text)].sum())


def as_llama_classes(text: str) -> str:
    """`text` with every UNDEFINED_IN_LLAMA character replaced by UNASSIGNED (one for one: the
    offsets stay), so that `regex`'s classes see what llama.cpp's tables say of it.

    >>> as_llama_classes("a\u1c89b") == "a\u0378b"
    True
    """
    if not count_undefined(text):
        return text
    if len(text) <= _SHORT_TEXT:
        return _UNDEFINED.sub(chr(UNASSIGNED), text)
    points = _code_points(text).copy()
    points[_undefined_table()[points]] = UNASSIGNED
    return points.tobytes().decode("utf-32-le", "surrogatepass")


class UnknownPreTokenizer(ValueError):
    """A ``tokenizer.ggml.pre`` name llama.cpp does not know (it refuses the model too)."""


def translate(source: str) -> tuple[str, bool]:
    r"""(`regex` source, wide) for one llama.cpp regex; wide means "run it on the text with
    non-ASCII whitespace turned into U+000B".

    >>> translate(r"\s+$")
    ('\\s+\\Z', True)
    >>> translate(r"[^\p{Lu}]")[0]
    '[^\\p{L}]'
    """
    if source in CUSTOM:
        return CUSTOM[source], False
    if _CATEGORY.search(source):
        return _LETTER_KINDS.sub(r"\\p{L}", _ascii_digits(source)), False
    return _end_anchor(_ascii_digits(source)), True


def _ascii_digits(source: str) -> str:
    r"""std::regex ``\d`` is [0-9]; the `regex` module's is every decimal digit."""
    out, i, in_class = [], 0, False
    while i < len(source):
        c = source[i]
        if c == "\\" and i + 1 < len(source):
            pair = source[i:i + 2]
            out.append(("0-9" if in_class else "[0-9]") if pair == "\\d" else pair)
            i += 2
            continue
        in_class = (in_class or c == "[") and not (in_class and c == "]")
        out.append(c)
        i += 1
    return "".join(out)


def _end_anchor(source: str) -> str:
    r"""ECMAScript ``$`` (no multiline) is the end of the input: ``\Z`` in `regex`."""
    out, i, in_class = [], 0, False
    while i < len(source):
        c = source[i]
        if c == "\\" and i + 1 < len(source):
            out.append(source[i:i + 2])
            i += 2
            continue
        in_class = (in_class or c == "[") and not (in_class and c == "]")
        out.append("\\Z" if c == "$" and not in_class else c)
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class LlamaPreTokenizer:
    """One llama.cpp pre-tokenizer: its regexes compiled, and the flags its name sets."""

    name: str
    type: str
    sources: tuple[str, ...]           # llama.cpp's regexes, verbatim
    patterns: tuple[regex.Pattern, ...]  # the `regex` equivalents
    wide: tuple[bool, ...]
    flags: dict[str, bool] = field(default_factory=dict)

    @property
    def byte_encode(self) -> bool:
        """False for the SPM-style BPE types (words stay raw UTF-8)."""
        return self.type not in RAW_UTF8_TYPES

    @property
    def space_safe(self) -> bool:
        """One known pattern under which text may be cut at spaces before the regex runs."""
        return len(self.patterns) == 1 and self.patterns[0].pattern in SPACE_SAFE

    @property
    def one_pattern(self) -> regex.Pattern | None:
        """One regex whose matches on the raw text are exactly `split`'s words when the text has
        no UNDEFINED_IN_LLAMA character (`count_undefined`), or None: the
        only stage when it does not run on the wide-space rewrite, else ONE_REGEX's.

        >>> llama_pre_tokenizer("smollm").one_pattern.findall("ab 123")
        ['ab', ' ', '1', '2', '3']
        """
        if len(self.patterns) == 1:
            return None if self.wide[0] else self.patterns[0]
        source = ONE_REGEX.get(self.sources)
        return None if source is None else pats.compile_pattern(source)

    def split(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the words, as ``unicode_regex_split`` cuts `text`.

        >>> llama_pre_tokenizer("smollm").split("ab 123")
        [(0, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
        """
        spans = [(0, len(text))] if text else []
        wide_text = classed_text = None
        for pattern, wide in zip(self.patterns, self.wide):
            subject = text
            if wide and not text.isascii():  # (std::wregex: code points, no classes)
                if wide_text is None:
                    wide_text = text.translate(_WIDE_SPACES)
                subject = wide_text
            elif not wide and not text.isascii():  # (classes: llama.cpp's Unicode tables)
                if classed_text is None:
                    classed_text = as_llama_classes(text)
                subject = classed_text
            spans = [(start + s, start + e) for start, end in spans
                     for s, e in pats.split_pieces(pattern, subject[start:end])]
        return spans


def llama_pre_tokenizer(name: str | None) -> LlamaPreTokenizer:
    """The pre-tokenizer llama.cpp uses for a ``tokenizer.ggml.pre`` value.

    A missing name is llama.cpp's "default" (it warns loudly); an unknown one raises.
    """
    key = "default" if name is None or name == "" else name
    if key not in LLAMA_PRE_NAMES:
        raise UnknownPreTokenizer(f"unknown pre-tokenizer {name!r}: llama.cpp refuses it too "
                                  f"(known: {', '.join(sorted(LLAMA_PRE_NAMES))})")
    kind, flags = LLAMA_PRE_NAMES[key]
    sources = LLAMA_PRE_REGEXES[kind]
    translated = [translate(s) for s in sources]
    return LlamaPreTokenizer(
        name=key, type=kind, sources=sources,
        patterns=tuple(pats.compile_pattern(src) for src, _ in translated),
        wide=tuple(wide for _, wide in translated), flags={**DEFAULT_FLAGS, **flags})
