"""Learning BPE merges: the word-dictionary algorithm of Sennrich et al. and a byte-level trainer.

Word dictionary (Sennrich, Haddow & Birch 2016, "Neural Machine Translation of Rare Words
with Subword Units", Algorithm 1): keys are space-separated symbols, by convention ending in
`</w>`, values are word frequencies. Each step counts adjacent symbol pairs weighted by word
frequency (never across words) and replaces every occurrence of the most frequent pair,
left to right without overlap, by the concatenated symbol.

Tie rule (word dictionary): among pairs with the highest count, the winner is the pair seen
first when the *current* words are scanned in the dictionary's order (the mapping's
insertion order), each word's symbols left to right. That is what the paper's
`max(pairs, key=pairs.get)` does, because its counting loop inserts pairs into a fresh dict
in exactly that order. Runner-ups are ordered the same way. Training stops early, cleanly,
when no pair is left (every word is one symbol).

Byte-level (GPT-2 style): the text is split by a named pre-tokenizer pattern, the distinct
pre-tokens are counted, and each starts as its UTF-8 bytes (ids 0..255 = byte values). Merge
i creates id 256 + i. The result is tiktoken-style mergeable ranks (bytes -> rank, the 256
single bytes first in byte order, then the merges): token id == rank.

Tie rule (byte level): among pairs with the highest count, the smallest (left, right) wins,
where single bytes are ordered by their GPT-2 printable character (`!`..`~`, then Latin-1,
then the remapped bytes 0x00-0x20, 0x7F-0xA0, 0xAD: `tie_order()`) and merged tokens come
after all bytes, by rank. That is exactly the order of HF tokenizers' BpeTrainer, whose ids
follow that alphabet, so both learn the same merges from the same text (tested), and it
does not depend on the order of the corpus.

Why the exported ranks encode identically in tiktoken (merge the adjacent pair whose
*concatenated bytes* have the lowest rank) and HF tokenizers (merge the adjacent pair with
the lowest *merge-list* rank): a span whose boundary no merge ever crossed is segmented in
context exactly as on its own, so in the state after k merges no adjacent pair concatenates
to a token of rank <= k, and the only adjacent pairs that spell token k+1 are its own merge.
The argument needs every merge to produce new bytes; for this trainer that always holds
(the same argument shows a pair spelling an existing token is never adjacent), and a
defensive check skips any pair that would not.

Both trainers count pairs incrementally: pair -> count, pair -> set of word indices, and a
heap with lazy invalidation; after a merge only the words containing the pair are
recounted. `learn_bpe_reference` (the paper's naive recount) and `train_bytelevel_reference`
are the slow readable versions the fast ones are tested against.
"""
from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import (Callable, Generic, Hashable, Iterable, Iterator, Mapping, Sequence,
                    TypeVar)

from forma_gui.core.byte_map import BYTE_TO_UNICODE
from forma_gui.core.patterns import ALIASES, PATTERNS, compile_pattern, resolve_name

#: the example dictionary of Sennrich et al. (2016), section 3.2, trained with 10 merges
PAPER_EXAMPLE: dict[str, int] = {
    "l o w </w>": 5, "l o w e r </w>": 2, "n e w e s t </w>": 6, "w i d e s t </w>": 3,
}
PAPER_MERGES = 10

#: how many runner-up pairs each step keeps
RUNNERS_UP = 8

S = TypeVar("S", bound=Hashable)  # a symbol: str (word dictionary) or int (byte level)


@dataclass(frozen=True, slots=True)
class PairCount:
    """A candidate pair at one step; `tied` when its count equals the chosen pair's."""

    pair: tuple
    count: int
    tied: bool = False


@dataclass(frozen=True, slots=True)
class Step:
    """One merge: the pair chosen, its count, the pairs that lost, and the words it changed.

    For the word dictionary `changed` holds `(word before, word after)`; the byte-level
    trainer leaves it empty (there are thousands) and only counts them in `n_changed`.
    """

    index: int                    # 0-based merge number
    pair: tuple                   # (left, right) symbols: str, or int ids at byte level
    count: int                    # weighted frequency of the pair when it was chosen
    runners_up: tuple[PairCount, ...]
    changed: tuple[tuple[str, str], ...] = ()
    n_changed: int = 0

    @property
    def ranking(self) -> tuple[PairCount, ...]:
        """The chosen pair followed by the runner-ups, best first."""
        ties = any(p.tied for p in self.runners_up)
        return (PairCount(self.pair, self.count, ties),) + self.runners_up


@dataclass
class Training:
    """The result of `learn_bpe`: merges in order, the merged words, and every step."""

    initial: dict[str, int]                      # the dictionary as given
    merges: list[tuple[str, str]] = field(default_factory=list)
    words: dict[str, int] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)

    @property
    def symbols(self) -> list[str]:
        """The new symbol of each merge, in order.

        >>> learn_bpe({"a b </w>": 2, "a b c </w>": 1}, 2).symbols
        ['ab', 'ab</w>']
        """
        return [a + b for a, b in self.merges]

    def words_at(self, n: int) -> dict[str, int]:
        """The dictionary after the first `n` merges (words that become equal add up)."""
        current = {w: " ".join(w.split()) for w in self.initial}
        for step in self.steps[:n]:
            renamed = dict(step.changed)
            current = {w: renamed.get(c, c) for w, c in current.items()}
        out: dict[str, int] = {}
        for word, freq in self.initial.items():
            out[current[word]] = out.get(current[word], 0) + freq
        return out


# ---- shared helpers --------------------------------------------------------------------

def merge_symbols(symbols: Sequence[S], pair: tuple[S, S], new: S) -> list[S]:
    """Replace each occurrence of `pair`, left to right without overlap, by `new`.

    >>> merge_symbols(["e", "e", "e", "r"], ("e", "e"), "ee")
    ['ee', 'e', 'r']
    """
    a, b = pair
    out: list[S] = []
    i, n = 0, len(symbols)
    while i < n:
        if i + 1 < n and symbols[i] == a and symbols[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def pair_counts(words: Iterable[tuple[Sequence[S], int]]) -> dict[tuple[S, S], int]:
    """Weighted counts of adjacent pairs, in first-seen order (never across words).

    >>> pair_counts([(["l", "o", "w"], 5), (["l", "o"], 2)])
    {('l', 'o'): 7, ('o', 'w'): 5}
    """
    counts: dict[tuple[S, S], int] = {}
    for symbols, freq in words:
        for pair in zip(symbols, symbols[1:]):
            counts[pair] = counts.get(pair, 0) + freq
    return counts


def _split_vocab(vocab: Mapping[str, int]) -> tuple[list[list[str]], list[int]]:
    """Word keys -> symbol lists, with the input checked."""
    words, freqs = [], []
    for key, freq in vocab.items():
        symbols = key.split()
        if not symbols:
            raise ValueError(f"empty word {key!r} in the dictionary")
        if not isinstance(freq, int) or isinstance(freq, bool) or freq < 1:
            raise ValueError(f"frequency of {key!r} must be a positive integer, got {freq!r}")
        words.append(symbols)
        freqs.append(freq)
    return words, freqs


def _finish(vocab: Mapping[str, int], merges: list, steps: list[Step],
            words: list[list[str]], freqs: list[int]) -> Training:
    merged: dict[str, int] = {}
    for symbols, freq in zip(words, freqs):
        key = " ".join(symbols)
        merged[key] = merged.get(key, 0) + freq
    return Training(dict(vocab), merges, merged, steps)


def _check_merges(num_merges: int) -> None:
    if not isinstance(num_merges, int) or num_merges < 0:
        raise ValueError(f"number of merges must be a non-negative integer, got {num_merges!r}")


# ---- word dictionary: the paper's naive recount ------------------------------------------

def learn_bpe_reference(vocab: Mapping[str, int], num_merges: int, *,
                        top: int = RUNNERS_UP) -> Training:
    """Sennrich et al.'s algorithm as printed: recount every pair after every merge."""
    _check_merges(num_merges)
    words, freqs = _split_vocab(vocab)
    merges: list[tuple[str, str]] = []
    steps: list[Step] = []
    for index in range(num_merges):
        counts = pair_counts(zip(words, freqs))
        if not counts:
            break
        # a stable sort keeps first-seen order among equal counts: the paper's max()
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[: top + 1]
        (best, count), rest = ranked[0], ranked[1:]
        new = best[0] + best[1]
        changed = []
        for i, symbols in enumerate(words):
            after = merge_symbols(symbols, best, new)
            if after != symbols:
                changed.append((" ".join(symbols), " ".join(after)))
                words[i] = after
        runners = tuple(PairCount(p, c, c == count) for p, c in rest)
        steps.append(Step(index, best, count, runners, tuple(changed), len(changed)))
        merges.append(best)
    return _finish(vocab, merges, steps, words, freqs)


# ---- incremental pair counts -----------------------------------------------------------

class PairIndex(Generic[S]):
    """Pair -> count and pair -> word indices over a list of weighted symbol lists.

    A heap of `(-count, pair)` entries finds the most frequent pair; entries go stale when a
    count changes and are dropped when popped (lazy invalidation). `replace_word` updates
    only the pairs of the one word that changed.
    """

    def __init__(self, words: list[list[S]], freqs: list[int]) -> None:
        self.words = words
        self.freqs = freqs
        self.counts: dict[tuple[S, S], int] = {}
        self.where: dict[tuple[S, S], set[int]] = {}
        for index, symbols in enumerate(words):
            for pair in zip(symbols, symbols[1:]):
                self.counts[pair] = self.counts.get(pair, 0) + freqs[index]
                self.where.setdefault(pair, set()).add(index)
        self.heap: list[tuple[int, tuple[S, S]]] = [(-c, p) for p, c in self.counts.items()]
        heapq.heapify(self.heap)

    def pop_valid(self) -> tuple[tuple[S, S], int] | None:
        """Remove and return the heap's best live `(pair, count)`, or None when empty."""
        heap, counts = self.heap, self.counts
        while heap:
            neg, pair = heapq.heappop(heap)
            if counts.get(pair) == -neg:
                return pair, -neg
        return None

    def push(self, pair: tuple[S, S], count: int) -> None:
        """Queue `pair` at `count`; stale entries are skipped when popped."""
        heapq.heappush(self.heap, (-count, pair))

    def replace_word(self, index: int, new: list[S]) -> None:
        """Swap word `index` for `new`, updating the counts of the pairs that differ."""
        old = self.words[index]
        self.words[index] = new
        delta: dict[tuple[S, S], int] = {}
        for pair in zip(old, old[1:]):
            delta[pair] = delta.get(pair, 0) - 1
        present = set(zip(new, new[1:]))
        for pair in zip(new, new[1:]):
            delta[pair] = delta.get(pair, 0) + 1
        freq = self.freqs[index]
        for pair, d in delta.items():
            if d > 0:
                self.where.setdefault(pair, set()).add(index)
            elif d < 0 and pair not in present:
                self.where[pair].discard(index)
            if d:
                self._add(pair, d * freq)

    def _add(self, pair: tuple[S, S], delta: int) -> None:
        count = self.counts.get(pair, 0) + delta
        if count > 0:
            self.counts[pair] = count
            self.push(pair, count)
        else:  # the pair is gone from every word
            self.counts.pop(pair, None)
            self.where.pop(pair, None)

    def merge(self, pair: tuple[S, S], new: S) -> list[int]:
        """Apply one merge to every word containing `pair`; the changed word indices, sorted."""
        changed = sorted(self.where.get(pair, ()))
        for index in changed:
            self.replace_word(index, merge_symbols(self.words[index], pair, new))
        return changed


# ---- word dictionary: incremental -------------------------------------------------------

def _first_seen(index: PairIndex[str], pair: tuple[str, str]) -> tuple[int, int]:
    """(word index, symbol position) of the pair's first occurrence in scanning order."""
    w = min(index.where[pair])
    symbols = index.words[w]
    return w, next(j for j in range(len(symbols) - 1) if (symbols[j], symbols[j + 1]) == pair)


def _ranked(index: PairIndex[str], n: int) -> list[tuple[tuple[str, str], int]]:
    """The `n` best pairs by (count desc, first seen), leaving the index unchanged."""
    popped: dict[tuple[str, str], int] = {}
    lowest = 0  # counts pop in descending order, so this is the smallest popped so far
    while True:
        got = index.pop_valid()
        if got is None:
            break
        pair, count = got
        if len(popped) >= n and count < lowest:
            index.push(pair, count)  # first pair below the tie group at the cut: done
            break
        popped[pair], lowest = count, count
    for pair, count in popped.items():
        index.push(pair, count)
    ranked = sorted(popped.items(), key=lambda pc: (-pc[1], _first_seen(index, pc[0])))
    return ranked[:n]


def learn_bpe(vocab: Mapping[str, int], num_merges: int, *, top: int = RUNNERS_UP) -> Training:
    """Learn `num_merges` merges from a word dictionary (Sennrich et al. 2016), incrementally.

    >>> t = learn_bpe(PAPER_EXAMPLE, 10)
    >>> " ".join(t.symbols)
    'es est est</w> lo low ne new newest</w> low</w> wi'
    >>> list(t.words)
    ['low</w>', 'low e r </w>', 'newest</w>', 'wi d est</w>']
    """
    _check_merges(num_merges)
    words, freqs = _split_vocab(vocab)
    index: PairIndex[str] = PairIndex([list(w) for w in words], freqs)
    merges: list[tuple[str, str]] = []
    steps: list[Step] = []
    for step in range(num_merges):
        ranked = _ranked(index, top + 1)
        if not ranked:
            break
        (best, count), rest = ranked[0], ranked[1:]
        before = {i: " ".join(index.words[i]) for i in index.where[best]}
        changed = index.merge(best, best[0] + best[1])
        diffs = tuple((before[i], " ".join(index.words[i])) for i in changed)
        runners = tuple(PairCount(p, c, c == count) for p, c in rest)
        steps.append(Step(step, best, count, runners, diffs, len(diffs)))
        merges.append(best)
    return _finish(vocab, merges, steps, index.words, freqs)


def parse_words(spec: str) -> dict[str, int]:
    """`"l o w </w>:5,l o w e r </w>:2"` (commas or newlines) -> a word dictionary.

    >>> parse_words("l o w </w>:5\\nn e w </w>: 2")
    {'l o w </w>': 5, 'n e w </w>': 2}
    """
    vocab: dict[str, int] = {}
    for n, item in enumerate(spec.replace("\n", ",").split(","), 1):
        if not item.strip():
            continue
        word, sep, freq = item.rpartition(":")
        if not sep or not word.strip() or not freq.strip().isdigit() or int(freq) < 1:
            raise ValueError(f"entry {n}: expected 'symbols:frequency', got {item.strip()!r}")
        key = " ".join(word.split())
        vocab[key] = vocab.get(key, 0) + int(freq)
    return vocab


def format_words(vocab: Mapping[str, int]) -> str:
    """The inverse of `parse_words`, one `word:freq` per line."""
    return "\n".join(f"{w}:{f}" for w, f in vocab.items())


# ---- byte level -------------------------------------------------------------------------

@dataclass
class ByteLevelTraining:
    """Byte-level BPE merges, as tiktoken-style ranks: token id == rank."""

    pattern: str                                  # pre-tokenizer pattern name
    merges: list[tuple[int, int]] = field(default_factory=list)   # (left id, right id)
    steps: list[Step] = field(default_factory=list)
    cancelled: bool = False
    n_words: int = 0                              # distinct pre-tokens trained on
    skipped: list[tuple[int, int]] = field(default_factory=list)  # see the module docstring

    def __post_init__(self) -> None:
        self._bytes: list[bytes] = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            self._bytes.append(self._bytes[a] + self._bytes[b])

    def _append(self, pair: tuple[int, int]) -> None:
        self.merges.append(pair)
        self._bytes.append(self._bytes[pair[0]] + self._bytes[pair[1]])

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.merges)

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[token_id]

    @property
    def ranks(self) -> dict[bytes, int]:
        """tiktoken's mergeable ranks: bytes -> rank (= token id)."""
        return {data: rank for rank, data in enumerate(self._bytes)}

    def merged_bytes(self) -> list[tuple[bytes, bytes]]:
        """Each merge as (left bytes, right bytes), in rank order."""
        return [(self._bytes[a], self._bytes[b]) for a, b in self.merges]


def pattern_names() -> list[str]:
    """The pre-tokenizer pattern names the byte-level trainer accepts."""
    return list(PATTERNS)


def pattern_regex(name: str) -> str:
    """A named pre-tokenizer pattern's regex; ValueError naming the known ones otherwise."""
    if ALIASES.get(name, name) not in PATTERNS:
        raise ValueError(f"unknown pre-tokenizer pattern {name!r}; known: {', '.join(PATTERNS)}")
    return resolve_name(name)


def count_pretokens(text: str, pattern: str) -> Counter[bytes]:
    """Distinct pre-tokens of `text` (UTF-8 bytes) with their counts, in first-seen order."""
    compiled = compile_pattern(pattern_regex(pattern))
    return Counter(m.encode("utf-8") for m in compiled.findall(text))


def tie_order() -> list[int]:
    """byte -> its place among the bytes sorted by GPT-2 printable character (HF's ids).

    >>> order = tie_order(); order[ord("!")], order[ord(" ")]
    (0, 220)
    """
    place = [0] * 256
    for i, b in enumerate(sorted(range(256), key=BYTE_TO_UNICODE.__getitem__)):
        place[b] = i
    return place


def _tie_key(order: list[int]) -> Callable[[tuple[int, int]], tuple[int, int]]:
    """A pair's tie-break key: bytes by `order`, merged tokens (ids >= 256) by rank."""
    def key(pair: tuple[int, int]) -> tuple[int, int]:
        a, b = pair
        return (order[a] if a < 256 else a, order[b] if b < 256 else b)
    return key


def train_bytelevel_reference(text: str, num_merges: int, *, pattern: str = "gpt2",
                              top: int = RUNNERS_UP) -> ByteLevelTraining:
    """The byte-level trainer as a naive recount after every merge (to test against)."""
    _check_merges(num_merges)
    counted = count_pretokens(text, pattern)
    words, freqs = [list(w) for w in counted], list(counted.values())
    training = ByteLevelTraining(pattern, n_words=len(counted))
    tie_key = _tie_key(tie_order())
    while len(training.merges) < num_merges:
        counts = pair_counts(zip(words, freqs))
        ranked = sorted(counts.items(), key=lambda pc: (-pc[1], tie_key(pc[0])))[: top + 1]
        if not ranked:
            break
        (best, count), rest = ranked[0], ranked[1:]
        new = training.vocab_size
        merged = [merge_symbols(w, best, new) for w in words]
        n_changed = sum(a != b for a, b in zip(words, merged))
        runners = tuple(PairCount(p, c, c == count) for p, c in rest)
        training.steps.append(Step(len(training.merges), best, count, runners, (), n_changed))
        training._append(best)
        words = merged
    return training


def _byte_best(index: PairIndex[int], n: int, banned: set) -> list[tuple[tuple[int, int], int]]:
    """The `n` best pairs by (count desc, then smallest pair), leaving the index unchanged."""
    out: list[tuple[tuple[int, int], int]] = []
    seen: set[tuple[int, int]] = set()
    while len(out) < n:
        got = index.pop_valid()
        if got is None:
            break
        if got[0] not in seen and got[0] not in banned:
            seen.add(got[0])
            out.append(got)
    for pair, count in out:
        index.push(pair, count)
    return out


class ByteLevelTrainer:
    """The incremental byte-level trainer; `run()` yields after each merge (for workers).

    >>> trainer = ByteLevelTrainer("aaabdaaabac", 3)
    >>> list(trainer.run()), trainer.training.merges
    ([1, 2, 3], [(97, 97), (97, 98), (256, 257)])
    """

    def __init__(self, text: str, num_merges: int, *, pattern: str = "gpt2",
                 top: int = RUNNERS_UP) -> None:
        _check_merges(num_merges)
        counted = count_pretokens(text, pattern)
        self.num_merges, self.top = num_merges, top
        # Inside, bytes are renumbered by tie order so that the heap's "smallest pair" is
        # the tie rule; merged tokens keep their rank (256 + i) in both numberings.
        order = tie_order()
        self._byte_at = sorted(range(256), key=order.__getitem__)
        self.index: PairIndex[int] = PairIndex([[order[b] for b in w] for w in counted],
                                               list(counted.values()))
        self.training = ByteLevelTraining(pattern, n_words=len(counted))
        self._known = set(self.training.ranks)
        self._banned: set[tuple[int, int]] = set()

    def _outside(self, pair: tuple[int, int]) -> tuple[int, int]:
        return tuple(self._byte_at[x] if x < 256 else x for x in pair)

    def run(self) -> Iterator[int]:
        """Merge until `num_merges` or no pair is left, yielding the merges done after each."""
        training = self.training
        while len(training.merges) < self.num_merges:
            ranked = _byte_best(self.index, self.top + 1, self._banned)
            if not ranked:
                return
            (best, count), rest = ranked[0], ranked[1:]
            pair = self._outside(best)
            merged = training.token_bytes(pair[0]) + training.token_bytes(pair[1])
            if merged in self._known:  # never happens for this trainer; see the module docstring
                self._banned.add(best)
                training.skipped.append(pair)
                continue
            changed = self.index.merge(best, training.vocab_size)
            runners = tuple(PairCount(self._outside(p), c, c == count) for p, c in rest)
            training.steps.append(Step(len(training.merges), pair, count, runners, (), len(changed)))
            training._append(pair)
            self._known.add(merged)
            yield len(training.merges)


def train_bytelevel(text: str, num_merges: int, *, pattern: str = "gpt2",
                    top: int = RUNNERS_UP,
                    progress: Callable[[int, int], None] | None = None,
                    should_stop: Callable[[], bool] | None = None) -> ByteLevelTraining:
    """Train `num_merges` byte-level merges on `text` split by the named `pattern`.

    `progress(done, total)` is called after each merge; when `should_stop()` turns true
    (checked before each merge) the training ends with `cancelled=True` and the merges so far.
    """
    trainer = ByteLevelTrainer(text, num_merges, pattern=pattern, top=top)
    run = trainer.run()
    while not (should_stop is not None and should_stop()):
        done = next(run, None)
        if done is None:
            break
        if progress is not None:
            progress(done, num_merges)
    else:
        trainer.training.cancelled = len(trainer.training.merges) < num_merges
    return trainer.training
