"""Unigram segmentation per cached word: `sentencepiece.viterbi`'s exact result, much faster.

`viterbi` (unigram_model.cc ``EncodeOptimized``) walks every lattice edge in Python. Text
repeats its words, so this module segments each distinct word once and reuses it, and
proves per occurrence that the reuse is what `viterbi` would have done:

1. **Clean cuts.** Let D be the characters that some usable piece holds after its first
   character. Before a character X not in D no edge crosses: an edge over that place is a
   piece with X's bytes at an offset >= 1 (UTF-8 is prefix-free, so with valid UTF-8 pieces
   that is X itself, and X is not in D). When `viterbi` reaches such a place c the frontier is
   c, and all from c on depends only on the float32 score best[c] and data[c:]. Words are cut
   before every ``▁`` (when ``▁`` is not in D; a model with a piece holding ``▁`` after its
   start gets no such cuts, its text is long words), and words longer than `SUBSPLIT` bytes
   (CJK runs) again before every character not in D.
2. **Per distinct word** (`_learn`, cached): the lattice in exact arithmetic (integers: every
   float32 score is an integer multiple of 2^-K) from base 0, with `viterbi`'s tie rule (the
   first candidate to reach a position keeps it unless a later one is strictly greater). It
   gives the generic path and, for the proof: ``margin``, the least (V_w - V_k) / (n_w + n_k)
   over the positions the path may pass (the visited ones and the end) and their losing
   candidates k (exact values V; n_w, n_k the additions on the two chains since the last
   position both pass, where their computed values are one and the same; an exact tie gives
   0); ``reach``, the largest |exact candidate value| there; ``n_max``, the longest chain;
   ``inner`` and ``n_inner``, the same over the winners at the visited positions inside the
   word (not its start nor its end), the only values a reset is decided on.
3. **Per occurrence** (`_chain`, numpy): from the word's float32 start score b, each float32
   addition errs by at most half an ulp of its result, so n additions move a computed value
   at most n·δ from its start plus their exact sum, δ = half the float32 ulp at
   R >= |b| + reach + n_max·δ (`grow` keeps R an upper bound). If margin > δ every comparison
   goes as in exact arithmetic (by induction over the positions: the values they compare
   differ by D +- (n_w + n_k)·δ), so the path is the generic one, and if also
   |b| + inner + (n_inner + 1)·δ <= SCORE_RESET no score reset happens inside the word
   (`viterbi` rebases at a position only when the best value there is past SCORE_RESET, and
   the computed winners inside are within n_inner·δ of b plus their exact values). Then
   the word's end score is the float32 chain b, b + s1, ... along the path, which
   ``np.cumsum(dtype=float32)`` computes (sequential float32 additions; tested). At a word
   start the reset is trivial: |b| > SCORE_RESET makes b exactly 0. A word failing either
   check is an *event*: `viterbi_from` segments that word alone from b (on the mixed bench
   corpus ~300 of ~330k words: near ties at large |b| and the crossings of SCORE_RESET).

Whole-text fallbacks to `viterbi` (counted in `stats["fallback"]`): a usable score or the
unknown score that is not a finite float32, a usable piece that is not valid UTF-8, or a word
whose last character runs past the word end (malformed UTF-8 input).

**Doubles** (`float64_arithmetic`, llama.cpp's UGM session: ``base + score`` in double, the
best value at a position initialised to -DBL_MAX and replaced only by a strictly greater
candidate, no score reset). The proof above uses only three facts about the arithmetic,
and each holds for IEEE double as for float32 with p = 53 significand bits instead of 24:
(i) an addition is correctly rounded, so it errs by at most half an ulp of its result,
<= 2^-p·R for |result| <= R, and exactly 0 in the subnormal range (a sum of two multiples
of 2^-1074 there is representable; `tiny`, the smallest normal, keeps R normal all the
same); `grow` = 1 / (1 - n_max·2^-(p-1)) keeps R >= |b| + reach + n_max·δ; (ii) the
comparisons are "the first candidate, or a strictly greater one": llama.cpp's strict ``>``
against -DBL_MAX is that rule as long as every computed candidate exceeds -DBL_MAX, which
`MAX_FLOAT64_SCORE` guarantees (with |scores| <= 2^960, a text of fewer than 2^60 bytes,
at most one addition per byte, keeps every value below 2^1021 in magnitude: no overflow,
every position is reached, and a word's `viterbi_from` backtracks as the whole text's);
(iii) ``np.cumsum(dtype=float64)`` is the sequential double sum Python's ``+`` computes
(tested). With no reset, SCORE_RESET becomes infinity: no reset at word starts and no
crossing events; margin events remain (exact ties, and near ties that need |b| around
2^53 times the margin, e.g. scores summing past 1e12 against margins of 1e-4).
"""
from __future__ import annotations

import math
import re
import threading
from array import array
from itertools import chain, compress, repeat
from operator import is_
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

from forma_gui.core.sentencepiece import (FLT_MAX, ONE_CHAR_LEN, SCORE_RESET, SPACE,
                                          SPACE_BYTES, WORD_SLICE, lattice_steps, viterbi_arrays,
                                          viterbi_from, viterbi_steps)
from forma_gui.core.slices import SLICE, pause, sliced_array, sliced_map, sliced_set

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

#: words longer than this (bytes) are cut again before every character no piece continues with
SUBSPLIT = 128
#: at most this many words measured for `SUBSPLIT` in Python, more in numpy
FEW_WORDS = 64
#: the longest chain (additions) a cached word may have: keeps `grow` <= 8/7
MAX_CHAIN = 1 << 20
#: distinct words kept: past this, before learning more, the words the text being encoded
#: does not use are dropped (when they are at least half the cache: a text whose own words
#: are more than this keeps them all, and an edit then learns only its new words)
CACHE_WORDS = 1 << 16
#: words checked per numpy pass of `_chain`, at first (it doubles up to `MAX_WINDOW`)
MIN_WINDOW, MAX_WINDOW = 256, 1 << 16
_UP, _DOWN = 1 + 2.0 ** -50, 1 - 2.0 ** -50  # outward rounding of float64 bounds
#: at most this many words' bounds computed one by one (`limit_one`), more in numpy (`limits`)
FEW_LIMITS = 8
STAT_KEYS = ("words", "learned", "margin", "rebase", "reset", "long", "fallback", "limit")
#: `encode_live` segments texts of at most this many words word by word in Python (a region
#: around an edit: numpy's per-call cost would be most of it), longer ones in numpy passes
SMALL_WORDS = 48
#: the largest |score| `live()` takes: sums of two stay far from FLT_MAX (a reset follows at once)
LIVE_MAX_SCORE = 2.0 ** 120
#: words whose `lattice_steps` `resegment` keeps (past this it starts afresh)
STEP_WORDS = 4096
#: the largest |score| the float64 mode takes: sums over any text stay far from overflow
MAX_FLOAT64_SCORE = 2.0 ** 960

#: `viterbi_from`'s signature: (data, prefixes, scores, unk_id, unk_score, start_score)
#: -> ((id, byte length) pairs, end score)
ViterbiFrom = Callable[[bytes, dict, Sequence[float], int, float, float],
                       tuple[list[tuple[int, int]], float]]


class Arithmetic(NamedTuple):
    """How the reference Viterbi adds path scores, and the reference run on an event word."""

    dtype: str               # numpy dtype of the path scores (the chain's additions)
    typecode: str            # the same as an `array` typecode
    mantissa: int            # stored significand bits: an addition errs <= 2^-(mantissa+1)·|sum|
    tiny: float              # the smallest normal value: R stays normal
    reset: float             # |score| past which the reference rebases to 0 (inf: never)
    max_score: float         # the largest |score| the per-word path takes
    viterbi_from: ViterbiFrom


#: sentencepiece's unigram_model.cc: float32 sums, rebased past SCORE_RESET
FLOAT32 = Arithmetic("float32", "f", 23, 2.0 ** -126, SCORE_RESET, FLT_MAX, viterbi_from)


def float64_arithmetic(reference: ViterbiFrom) -> Arithmetic:
    """Double sums with no reset (llama.cpp's UGM session), `reference` for the events."""
    return Arithmetic("float64", "d", 52, 2.0 ** -1022, math.inf, MAX_FLOAT64_SCORE, reference)


class UnigramEncoder:
    """`viterbi(data, prefixes, scores, unk_id, unk_score)` with a per-word cache; the tables
    must not change afterwards. `stats` counts the words, events and fallbacks (tests use it).
    `arithmetic` is the reference's: `FLOAT32` (sentencepiece's `viterbi_from`) or
    `float64_arithmetic(a double-precision viterbi_from)`.

    >>> from forma_gui.core.sentencepiece import viterbi
    >>> enc = UnigramEncoder({b"a": 0, b"b": 1, b"ab": 2}, [-1.0, -1.0, -1.5], 3, -20.0)
    >>> enc.encode("ab▁ab".encode()) == viterbi("ab▁ab".encode(), enc.prefixes, enc.scores, 3, -20.0)
    True
    """

    def __init__(self, prefixes: dict[bytes, int], scores: Sequence[float], unk_id: int,
                 unk_score: float, arithmetic: Arithmetic = FLOAT32) -> None:
        self.prefixes, self.scores, self.unk_id, self.unk_score = prefixes, scores, unk_id, unk_score
        self.arithmetic = arithmetic
        self.stats = dict.fromkeys(STAT_KEYS, 0)
        self._steps: dict[bytes, list] = {}  # `resegment`'s words
        self._model: _Model | None = None
        self._lock = threading.Lock()  # one thread in the cache at a time: its columns must agree
        self.clear_cache()

    def clear_cache(self) -> None:
        """Forget the cached words (benchmarks measure cold starts with it)."""
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._index: dict[bytes, int] = {}
        # the path scores of all cached words, one after another, in the reference's type
        self._added = array(self.arithmetic.typecode)
        self._tokens = array("q")  # and their (id, byte length) pairs, flat
        self._columns = [array(code) for code in _COLUMNS.values()]  # per word
        self._limits = array("d")  # per word, `limits()`: filled for new words when needed
        self._arrays: dict | None = None

    def encode(self, data: bytes) -> list[tuple[int, int]]:
        """`viterbi`'s (piece id, byte length) pairs for `data`."""
        return self.encode_ended(data)[0]

    def encode_ended(self, data: bytes) -> tuple[list[tuple[int, int]], float]:
        """(`encode(data)`, the best path's score at the end, as `viterbi_from` gives it)."""
        run = self._run_unshared(data)
        if run is None:
            return self._fallback(data)
        cols, events, end = run
        return _pair_list(self._assemble(cols, events)), end

    def encode_columns(self, data: bytes):
        """`encode(data)` as an (n, 2) int64 array of (piece id, byte length), gathered from
        the cached words' tokens without a tuple per token."""
        import numpy as np

        run = self._run_unshared(data)
        if run is None:
            return np.array(self._fallback(data)[0], dtype=np.int64).reshape(-1, 2)
        return self._assemble(run[0], run[1])

    def live(self) -> "UnigramEncoder | None":
        """This encoder when `encode_live` can segment texts (the tables allow words, and no
        score is so large that path sums could overflow: a walk after an edit sums scores in
        the arithmetic's type), else None."""
        with self._lock:
            model = self._model or self._analyse()
        largest = max((abs(float(self.scores[i])) for i in set(self.prefixes.values()) if i >= 0), default=0.0)
        if model.words is None or max(largest, abs(float(self.unk_score))) > LIVE_MAX_SCORE:
            return None
        return self

    def encode_live(self, data: bytes, start: float = 0.0, *, wait: float = 0.0,
                    flat: bool = False) -> "LiveRun | FlatRun | None":
        """`data` segmented from the path score `start` (`viterbi_from`'s), with what an edit
        needs to carry on after it without the text (core.incremental): per token the path
        score before it, the score it adds, and at each word's first token its `limits()`
        bound (-inf for a word `viterbi_from` segmented). None when only `viterbi` over the
        whole text is exact, or while another thread holds the cache (after waiting up to
        `wait` seconds for it: a whole text's live columns are worth a short wait, an edit's
        region on the GUI thread is not). With `flat`, a text of few words gives a `FlatRun`
        instead (an edit's region: numpy's cost per call would dominate)."""
        if not self._lock.acquire(timeout=wait) if wait > 0 else not self._lock.acquire(blocking=False):
            return None
        try:
            model = self._model or self._analyse()
            if model.words is None:
                return None
            words = model.words(data) if data else []
            if len(words) <= SMALL_WORDS:
                found = self._live_flat(words, start)
                return found if flat or found is None else _live_run(*found)
            idx = self._indices(words)
            cols = self._gather(idx)
            if not cols["aligned"][:-1].all():
                return None
            chain: dict = {}
            events, end = self._chain(words, cols, start, chain)
            return self._live_run(cols, idx, events, chain, end)
        finally:
            self._lock.release()

    def _live_flat(self, words: list[bytes], b: float) -> "FlatRun | None":
        """`encode_live` one word at a time: a cached word when its start passes `limits()`,
        else `viterbi_from` from its start score, as a `FlatRun`."""
        arithmetic, scores = self.arithmetic, self.scores
        sums = array(arithmetic.typecode, [0.0])  # additions rounded to the reference's type
        tokens, before, added, bound = array("q"), array("d"), array("d"), array("d")
        first_of, ntok_of, aligned_of = self._columns[0], self._columns[1], self._columns[-1]
        self.stats["words"] += len(words)
        for n, word in enumerate(words):
            pre = b
            if abs(b) > arithmetic.reset:
                self.stats["reset"] += 1
                b = 0.0
            k = self._index.get(word)
            if k is None and len(self._index) < 2 * CACHE_WORDS:
                self.stats["learned"] += 1
                self._store(word, self._learn(word))
                k = self._index[word]
            if k is not None and not aligned_of[k] and n < len(words) - 1:
                return None  # a last character past the word's end: malformed UTF-8 inside
            if k is not None and abs(b) <= self._limit(k):
                first, ntok = first_of[k], ntok_of[k]
                adds = self._added[first:first + ntok]
                tokens.extend(self._tokens[2 * first:2 * (first + ntok)])
                before.append(pre)
                for a in adds[:-1]:
                    sums[0] = b + a
                    b = sums[0]
                    before.append(b)
                sums[0] = b + adds[-1]
                b = sums[0]
                added.extend(adds.tolist())
                bound.append(self._limits[k])
                bound.extend(repeat(math.nan, ntok - 1))
                continue
            self.stats["limit"] += 1
            path, b = arithmetic.viterbi_from(word, self.prefixes, scores, self.unk_id, self.unk_score, b)
            flat = list(chain.from_iterable(path))
            tokens.extend(flat)
            before.append(pre)
            before.extend(repeat(math.nan, len(path) - 1))
            added.extend(self._path_scores(path))
            generic = k is not None and self._tokens[2 * first_of[k]:2 * (first_of[k] + ntok_of[k])].tolist() == flat
            bound.append(self._limit(k) if generic else -math.inf)  # (its own path: the word's bound)
            bound.extend(repeat(math.nan, len(path) - 1))
        return FlatRun(tokens, before, added, bound, float(b))

    def spelled(self) -> dict[int, bytes]:
        """Piece id -> its bytes, for the pieces of the lattice (built once)."""
        found = self.__dict__.get("_spelled")
        if found is None:
            found = self._spelled = {i: key for key, i in self.prefixes.items() if i >= 0}
        return found

    def resegment(self, data: bytes, start: float) -> tuple[list[tuple[int, int]], float]:
        """`viterbi_from` (the arithmetic's) over `data` from the path score `start`: a word
        segmented again where an edit changed its start score (core.incremental).

        In float32 the same words come back edit after edit, so each word's `lattice_steps`
        are kept, and so is its result per binade of |start|: while every value its lattice
        can reach stays in that binade (so below the reset), each addition x + s rounds to
        x plus s rounded to the binade's grid (x is on it), unless s lies exactly halfway
        between two grid points (then the rounding depends on x: not kept). Every value is
        then the start plus a constant, every comparison goes the same way, and the result
        is (the same path, start + the same difference)."""
        if self.arithmetic is not FLOAT32:
            return self.arithmetic.viterbi_from(data, self.prefixes, self.scores, self.unk_id,
                                                self.unk_score, start)
        word = self._steps.get(data)
        if word is None:
            if len(self._steps) >= STEP_WORDS:
                self._steps.clear()
            word = self._steps[data] = _SteppedWord(lattice_steps(data, self.prefixes), self.scores,
                                                   self.unk_score)
        binade = word.binade(start)
        if binade is None:
            key = word.reset_key(start, len(data), self.scores, self.unk_id, self.unk_score)
            if key is None:
                return viterbi_steps(word.steps, len(data), self.scores, self.unk_id, self.unk_score, start)
            if key[-1] is not None:  # a reset inside: the same values after it, whatever the start
                found = word.by_reset.get(key)
                if found is None:
                    found = word.by_reset[key] = viterbi_steps(word.steps, len(data), self.scores,
                                                               self.unk_id, self.unk_score, start)
                return found
            binade = key[0]  # no reset inside after all: as below
        found = word.by_binade.get(binade)
        if found is None:
            path, end = viterbi_steps(word.steps, len(data), self.scores, self.unk_id, self.unk_score, start)
            found = word.by_binade[binade] = (path, end - start)
        return found[0], start + found[1]

    def _path_scores(self, path: list[tuple[int, int]]) -> list[float]:
        """The score each (id, length) pair of a path adds (an unknown piece: the unknown score)."""
        scores, unk_id, unk_score = self.scores, self.unk_id, self.unk_score
        return [unk_score if i == unk_id else scores[i] for i, _ in path]

    def _limit(self, k: int) -> float:
        """`limits()` of cached word k, computed for every word stored since the last call."""
        have = len(self._limits)
        if k >= have:
            import numpy as np

            if len(self._columns[0]) - have <= FEW_LIMITS:  # (an edit's new words)
                cols = [self._columns[list(_COLUMNS).index(name)][have:] for name in _BOUNDS]
                self._limits.extend(limit_one(*values[:4], self.arithmetic, *values[4:])
                                    for values in zip(*cols))
                return self._limits[k]
            cols = {name: np.frombuffer(self._columns[i], dtype=code)[have:]
                    for i, (name, code) in enumerate(_COLUMNS.items()) if name in _BOUNDS}
            self._limits.extend(limits(*(cols[name] for name in _BOUNDS[:4]), self.arithmetic,
                                       *(cols[name] for name in _BOUNDS[4:])).tolist())
        return self._limits[k]

    def _live_run(self, cols: dict, idx: list[int], events: dict, live: dict, end: float) -> LiveRun:
        """`encode_live`'s columns from the numpy passes: the words' tokens with the events'
        paths spliced in; inside an event word the scores before its tokens are not kept
        (NaN: a reset may have happened inside), and its bound is -inf when its path is not
        the cached one (else the word's own: under it the cached path holds)."""
        import numpy as np

        if idx:
            self._limit(max(idx))
        tokoff = cols["tokoff"]
        before, added = live["before"], cols["added"].astype(np.float64)
        bound = np.full(len(before), np.nan)
        bound[tokoff[:-1]] = np.frombuffer(self._limits, dtype=np.float64)[np.asarray(idx, dtype=np.intp)]
        for w in live["events"]:  # a reset may have happened inside: no scores kept there
            before[tokoff[w] + 1:tokoff[w + 1]] = np.nan
        columns = [cols["tokens"], before, added, bound]
        if events:
            columns = _spliced(columns, tokoff, {w: _event_columns(path, before[tokoff[w]], self._path_scores(path))
                                                 for w, path in events.items()})
        return LiveRun(*columns, end)

    def _run_unshared(self, data: bytes) -> tuple[dict, dict, float] | None:
        """`_run` holding the cache; None (the caller runs `viterbi`) while another thread
        holds it: the GUI thread must not wait out a worker's encode of a whole document."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self._run(data)
        finally:
            self._lock.release()

    def _run(self, data: bytes) -> tuple[dict, dict, float] | None:
        """(the words' columns, the events' paths, the end score), or None when only
        `viterbi` over the whole text is exact."""
        model = self._model or self._analyse()
        if not data or model.words is None:
            return None
        words = model.words(data)
        idx = self._indices(words)
        cols = self._gather(idx)
        if not cols["aligned"][:-1].all():
            return None
        events, end = self._chain(words, cols)
        return cols, events, end

    # ---- the model's analysis, on first use -------------------------------------------------
    def _analyse(self) -> _Model:
        self._model = _Model(self.prefixes, self.scores, self.unk_score, self.arithmetic)
        return self._model

    def _fallback(self, data: bytes) -> tuple[list[tuple[int, int]], float]:
        if data:
            self.stats["fallback"] += 1  # (not thread-safe: a count for tests)
        return self.arithmetic.viterbi_from(data, self.prefixes, self.scores, self.unk_id,
                                            self.unk_score, 0.0)

    # ---- the cache --------------------------------------------------------------------------
    def _indices(self, words: list[bytes]) -> list[int]:
        """The cache index of each word, learning the missing ones."""
        self.stats["words"] += len(words)
        idx = sliced_map(self._index.get, words)
        if None not in idx:
            return idx
        missing: set[bytes] = set()
        for i in range(0, len(words), SLICE):
            pause()
            missing.update(compress(words[i:i + SLICE], map(is_, idx[i:i + SLICE], repeat(None))))
        if len(self._index) + len(missing) > CACHE_WORDS:
            live = sliced_set(None, words)
            if len(self._index) + len(missing) > max(CACHE_WORDS, 2 * len(live)):
                self._keep(live)
        self.stats["learned"] += len(missing)
        for word in missing:
            self._store(word, self._learn(word))
        return sliced_map(self._index.__getitem__, words)

    def _keep(self, live: set[bytes]) -> None:
        """Drop the cached words not in `live`."""
        kept = [(word, k) for word, k in self._index.items() if word in live]
        tokens, added, columns = self._tokens, self._added, self._columns
        self._clear()
        for word, k in kept:
            first, ntok = columns[0][k], columns[1][k]
            self._store(word, (tokens[2 * first:2 * (first + ntok)], added[first:first + ntok],
                               *(c[k] for c in columns[2:])))

    def _store(self, word: bytes, learned: tuple) -> None:
        """Cache a word: its flat (id, length) tokens, their scores and its `bounds()`."""
        tokens, added, *numbers = learned
        self._index[word] = len(self._columns[0])
        for column, value in zip(self._columns, [len(self._added), len(added), *numbers]):
            column.append(value)
        self._added.extend(added)
        self._tokens.extend(tokens)
        self._arrays = None

    def _gather(self, idx: list[int]) -> dict:
        """The per-word columns for each occurrence, the token offsets of the words and the
        scores their paths add, one after another."""
        import numpy as np

        if self._arrays is None:
            # copies: a live view would stop the arrays from growing
            self._arrays = {name: np.frombuffer(col, dtype=code).copy()
                            for (name, code), col in zip(_COLUMNS.items(), self._columns)}
            self._arrays["added"] = np.frombuffer(self._added, dtype=self.arithmetic.dtype).copy()
            self._arrays["tokens"] = np.frombuffer(self._tokens, dtype=np.int64).reshape(-1, 2).copy()
        at = sliced_array(idx, np.intp)                          # (n_words,)
        cols = {name: self._arrays[name][at] for name in _COLUMNS}
        tokoff = np.zeros(len(idx) + 1, dtype=np.intp)          # (n_words + 1,)
        np.cumsum(cols["ntok"], out=tokoff[1:])
        # token t of occurrence w is cached token first[w] + (t - tokoff[w])
        take = np.repeat(cols["first"] - tokoff[:-1], cols["ntok"]) + np.arange(tokoff[-1])
        cols["tokoff"], cols["added"] = tokoff, self._arrays["added"][take]
        cols["tokens"] = self._arrays["tokens"][take]                       # (n_tokens, 2)
        return cols

    def _learn(self, word: bytes) -> tuple:
        """(flat (id, length) tokens, the scores they add, margin, reach, n_max, grow, inner,
        n_inner, aligned) of the generic path of `word` from base 0 (module docstring, step 2)."""
        lattice = _ExactLattice(self._model, self.prefixes, self.scores, self.unk_id,
                                self.unk_score, word)
        pairs, added = lattice.path()
        return (list(chain.from_iterable(pairs)), added,
                *lattice.bounds(self.arithmetic.mantissa))

    # ---- the chain of word-start scores ------------------------------------------------------
    def _chain(self, words: list[bytes], cols: dict, start: float = 0.0,
               live: dict | None = None) -> tuple[dict, float]:
        """Word-start scores in the reference's arithmetic, a window of words per numpy pass;
        the events' own paths by word number, and the end score. (Scores stay finite: in
        float32 a visited score is at most SCORE_RESET in magnitude after its reset, and
        FLT_MAX + 1e5 rounds to FLT_MAX; in float64 `MAX_FLOAT64_SCORE` bounds every sum.)"""
        import numpy as np

        reset, dtype = self.arithmetic.reset, self.arithmetic.dtype
        events: dict = {}
        b, w0, n_words, window = start, 0, len(words), MIN_WINDOW
        tokoff = cols["tokoff"]
        if live is not None:  # the score before each token, the events' word numbers
            live["before"], live["events"] = np.full(tokoff[-1], np.nan), []
        while w0 < n_words:
            pre = b
            if abs(b) > reset:
                self.stats["reset"] += 1
                b = 0.0
            w1 = min(n_words, w0 + window)
            run = np.empty(tokoff[w1] - tokoff[w0] + 1, dtype=dtype)  # (tokens + 1,)
            run[0] = b
            run[1:] = cols["added"][tokoff[w0]:tokoff[w1]]
            with np.errstate(over="ignore"):  # past a word that fails a check: unused
                np.cumsum(run, out=run)  # sequential sums in `dtype`: the reference's
            at = tokoff[w0:w1 + 1] - tokoff[w0]
            starts = run[at].astype(np.float64)                     # (w1 - w0 + 1,)
            evented = live["events"] if live is not None else []
            b, w, window = self._events(words, cols, events, starts, w0, w1, window, evented)
            if live is not None and w > w0:
                t0, t1 = tokoff[w0], tokoff[w]
                live["before"][t0:t1] = run[:t1 - t0]
                live["before"][t0] = pre
            w0 = w
        return events, b

    def _events(self, words, cols, events, starts, w0, w1, window, evented):
        """Handle the words of [w0, w1) that fail a check, in order, while their `viterbi_from`
        end scores agree with the chain; (next start score, next word, next window)."""
        reset, tied, crossing = self._failures(starts[:-1], cols, w0, w1)
        for first in (reset | tied | crossing).nonzero()[0].tolist():
            w, b = w0 + first, float(starts[first])
            if reset[first]:
                return b, w, max(MIN_WINDOW, window // 2)
            kind = "long" if cols["margin"][w] < 0 else "margin" if tied[first] else "rebase"
            self.stats[kind] += 1
            evented.append(w)
            path, end = self.arithmetic.viterbi_from(words[w], self.prefixes, self.scores,
                                                     self.unk_id, self.unk_score, b)
            cached = cols["tokoff"][w], cols["tokoff"][w + 1]
            if path != _pair_list(cols["tokens"][cached[0]:cached[1]]):
                events[w] = path
            if end != starts[first + 1]:
                return end, w + 1, max(MIN_WINDOW, window // 2)
        return float(starts[-1]), w1, min(MAX_WINDOW, 2 * window)

    def _failures(self, starts, cols: dict, w0: int, w1: int):
        """Per word of [w0, w1) from its start score: (needs a reset, its comparisons are not
        proven, a reset inside it is not ruled out); the first word's reset is done."""
        import numpy as np

        absb = np.abs(starts)
        tied, crossing = checks(absb, *(cols[name][w0:w1] for name in _BOUNDS[:4]), self.arithmetic,
                                *(cols[name][w0:w1] for name in _BOUNDS[4:]))
        reset = absb > self.arithmetic.reset
        reset[0] = False
        return reset, tied, crossing

    @staticmethod
    def _assemble(cols: dict, events: dict):
        """The (n, 2) int64 tokens: the cached words' with the events' paths spliced in."""
        import numpy as np

        if not events:
            return cols["tokens"]
        return _spliced([cols["tokens"]], cols["tokoff"],
                        {w: [np.array(path, dtype=np.int64).reshape(-1, 2)] for w, path in events.items()})[0]


class LiveRun(NamedTuple):
    """`UnigramEncoder.encode_live`'s result: per token (id, byte length), the path score
    before it as the reference reads it there (before a reset; NaN inside an event word),
    the score it adds, and at a word's first token the `limits()` bound of its start score
    (-inf: a word viterbi_from segmented otherwise than the cache; NaN elsewhere); and the
    end score."""

    tokens: np.ndarray     # (n, 2) int64
    before: np.ndarray     # (n,) float64 holding values of the arithmetic's type
    added: np.ndarray      # (n,) float64
    bound: np.ndarray      # (n,) float64
    end: float


class FlatRun(NamedTuple):
    """A `LiveRun` in Python arrays: the (id, byte length) pairs one after another."""

    tokens: array          # array("q")
    before: array          # array("d"), and so on
    added: array
    bound: array
    end: float


def _live_run(tokens: array, before: array, added: array, bound: array, end: float) -> LiveRun:
    """A `FlatRun`'s fields as a `LiveRun` (views, no copy)."""
    import numpy as np

    return LiveRun(np.frombuffer(tokens, dtype=np.int64).reshape(-1, 2), np.frombuffer(before, dtype=np.float64),
                   np.frombuffer(added, dtype=np.float64), np.frombuffer(bound, dtype=np.float64), end)


class _SteppedWord:
    """A word's `lattice_steps`, and its `resegment` results per binade of the start score."""

    def __init__(self, steps: list, scores: Sequence[float], unk_score: float) -> None:
        self.steps = steps
        edge_scores = {float(scores[i]) for _, _, _, edges in steps for _, i in edges}
        if not all(has_single for _, _, has_single, _ in steps):
            edge_scores.add(float(unk_score))
        self.edge_scores = tuple(edge_scores)
        # no value the lattice reaches lies further than this from the start (each path adds
        # at most one score per step), before rounding
        self.width = len(steps) * max(map(abs, edge_scores), default=0.0)
        self.by_binade: dict[int, tuple] = {}
        self.by_reset: dict[tuple, tuple] = {}
        self._tied: dict[int, bool] = {}
        self._visits: dict[tuple, list] = {}

    def binade(self, start: float, *, past_reset: bool = False) -> int | None:
        """e with 2^e <= |start| < 2^(e+1) when every value from start stays in that binade and
        under the reset (with past_reset, reset or not), and no score rounds halfway on its grid
        (2^(e-23)); else None."""
        size = abs(start)
        if not 0.0 < size <= SCORE_RESET:
            return None
        e = math.frexp(size)[1] - 1
        grid = math.ldexp(1.0, e - 23)
        reach = self.width + len(self.steps) * grid  # (rounding: at most half a grid per addition)
        if not (math.ldexp(1.0, e) <= size - reach and size + reach < math.ldexp(1.0, e + 1)
                and (past_reset or size + reach <= SCORE_RESET)):
            return None
        tied = self._tied.get(e)
        if tied is None:
            tied = self._tied[e] = any(math.fmod(abs(x) / grid, 1.0) == 0.5 for x in self.edge_scores)
        return None if tied else e

    def reset_key(self, start: float, n: int, scores: Sequence[float], unk_id: int,
                  unk_score: float) -> tuple | None:
        """For a start `binade` refuses, what `viterbi_steps`'s result depends on alone, or None:

        - ``(0,)`` when the path starts from +0 or resets at once (|start| > SCORE_RESET: it
          rebases to exactly +0 before any addition);
        - ``(e, sign, i)`` when every value before a reset stays in binade e (no halfway
          score there) and the reset falls at step i. Before it each value is the start plus
          a constant (as in `binade`), so every comparison goes the same way; the reset
          subtracts the value at step i from those reached, and two values of one binade
          differ exactly (Sterbenz): after it every value is the same for each such start.
          ``(e, sign, None)``: no reset happens, the result is the start plus a constant."""
        if abs(start) > SCORE_RESET or (start == 0.0 and math.copysign(1.0, start) > 0):
            return (0,)
        e = self.binade(start, past_reset=True)
        if e is None:
            return None
        sign = -1.0 if start < 0 else 1.0
        visits = self._visits.get((e, sign))
        if visits is None:
            visits = self._visits[(e, sign)] = self._visit_offsets(e, sign, n, scores, unk_id, unk_score)
        if visits is None:
            return None
        for i, offset in enumerate(visits):  # (exact: the start and the offset are on the grid)
            if abs(start + offset) > SCORE_RESET:
                return (e, sign, i)
        return (e, sign, None)

    def _visit_offsets(self, e: int, sign: float, n: int, scores: Sequence[float], unk_id: int,
                       unk_score: float) -> list[float] | None:
        """Per step, the path score `viterbi_steps` reads there minus the start, for every start
        of binade e and this sign: learned from one start there whose values stay under the
        reset (None when the binade has no such start)."""
        grid = math.ldexp(1.0, e - 23)
        reach = self.width + len(self.steps) * grid
        size = math.ldexp(1.0, e) + math.ceil(reach / grid) * grid  # (on the grid)
        if not (size + reach < math.ldexp(1.0, e + 1) and size + reach <= SCORE_RESET):
            return None
        start = sign * size
        best = viterbi_arrays(self.steps, n, scores, unk_id, unk_score, start)[0]
        return [best[i] - start for i, _, _, _ in self.steps]


def _event_columns(path: list[tuple[int, int]], start: float, scores: list[float]) -> list:
    """The `LiveRun` columns of an event word's path from its start score."""
    import numpy as np

    n = len(path)
    before, added, bound = np.full(n, np.nan), np.array(scores, dtype=np.float64), np.full(n, np.nan)
    before[0], bound[0] = start, -np.inf
    return [np.array(path, dtype=np.int64).reshape(-1, 2), before, added, bound]


def _spliced(columns: list, tokoff, parts: dict) -> list:
    """Each column with the token rows of word w replaced by parts[w]'s (in column order)."""
    import numpy as np

    pieces: list[list] = [[] for _ in columns]
    done = 0
    for w in sorted(parts):
        for piece, column, new in zip(pieces, columns, parts[w]):
            piece += [column[done:tokoff[w]], new]
        done = tokoff[w + 1]
    return [np.concatenate(piece + [column[done:]]) for piece, column in zip(pieces, columns)]


#: per-word columns (array typecodes): first token in `_added`, token count, then `bounds()`
_COLUMNS = {"first": "q", "ntok": "q", "margin": "d", "reach": "d", "n_max": "d", "grow": "d",
            "inner": "d", "n_inner": "d", "aligned": "b"}
#: the `bounds()` columns `limits()` takes, in its order
_BOUNDS = ("margin", "reach", "n_max", "grow", "inner", "n_inner")


def _pair_list(tokens) -> list[tuple[int, int]]:
    """An (n, 2) int array as a list of (id, length) tuples, `SLICE` rows per C-level pass."""
    out: list[tuple[int, int]] = []
    for i in range(0, len(tokens), SLICE):
        pause()
        chunk = tokens[i:i + SLICE]
        out += zip(chunk[:, 0].tolist(), chunk[:, 1].tolist())
    return out


def checks(absb, margin, reach, n_max, grow, arithmetic: Arithmetic, inner=None, n_inner=None):
    """Per word from |its start score| (float64 arrays): (its comparisons are not proven, a
    reset inside it is not ruled out): step 3 of the module docstring. Without `inner` and
    `n_inner` the crossing check takes reach and n_max (every candidate: looser)."""
    import numpy as np

    inner = reach if inner is None else inner
    n_inner = n_max if n_inner is None else n_inner
    bound = (absb + reach) * grow * _UP + arithmetic.tiny  # R of the docstring
    with np.errstate(over="ignore", invalid="ignore"):
        delta = np.spacing(bound.astype(arithmetic.dtype)).astype(np.float64) / 2
        tied = ~(margin > delta)
        crossing = ~((absb + inner + (n_inner + 1) * delta) * _UP <= arithmetic.reset)
    return tied, crossing


#: relative slack of `limits` over the few float64 roundings of `checks`
_SLACK = 2.0 ** -45


def limits(margin, reach, n_max, grow, arithmetic: Arithmetic, inner=None, n_inner=None):
    """Per word (float64 arrays): a bound L with `checks` passing for every |start score| <= L
    (-inf when none is proven). Live edits keep one number per word instead of four.

    Both checks only tighten as |b| grows (every rounding is monotonic). The margin check
    passes while the start's R rounds, in the arithmetic's type, below 2^K for the least K
    with half an ulp at 2^(K-1) not below the margin; the crossing check, with delta at most
    that half ulp and at most the one at |b| = reset (a larger |b| resets first), then bounds
    |b| linearly. Each bound is shrunk by `_SLACK` for the float64 roundings.

    >>> from forma_gui.core.unigram_fast import FLOAT32
    >>> import numpy as np
    >>> one = lambda *v: np.array(v, dtype=np.float64)
    >>> bound = limits(one(0.01), one(3.0), one(2.0), one(1.0), FLOAT32)
    >>> bool(99_990 < bound[0] < 100_000)  # the crossing decides: the margin allows 2^18 - 3
    True
    >>> [bool(c[0]) for c in checks(bound, one(0.01), one(3.0), one(2.0), one(1.0), FLOAT32)]
    [False, False]
    """
    import numpy as np

    inner = reach if inner is None else inner
    n_inner = n_max if n_inner is None else n_inner
    p = arithmetic.mantissa
    max_exp = 128 if arithmetic.dtype == "float32" else 1023
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        frac, exp = np.frexp(np.where(margin > 0, margin, 1.0))  # margin = frac * 2^exp
        top = exp + p - (frac == 0.5)        # the largest e with 2^(e - p - 1) < margin
        top = np.where(np.isinf(margin), max_exp, np.minimum(top + 1, max_exp)) - 1
        below = np.ldexp(1.0 - 2.0 ** -(p + 2), top + 1)  # R under this rounds below 2^(top+1)
        by_margin = (below - arithmetic.tiny) / (grow * _UP) * (1 - _SLACK) - reach * (1 + _SLACK)
        reset = arithmetic.reset
        if math.isinf(reset):
            by_crossing = np.full_like(by_margin, np.inf)
        else:
            at_reset = (reset + reach) * grow * _UP + arithmetic.tiny
            half_ulp = np.spacing(at_reset.astype(arithmetic.dtype)).astype(np.float64) / 2
            delta = np.minimum(np.ldexp(1.0, top - p - 1), half_ulp)
            by_crossing = (reset / _UP * (1 - _SLACK) - inner * (1 + _SLACK)
                           - (n_inner + 1) * delta * (1 + _SLACK))
        bound = np.minimum(by_margin, by_crossing)
    return np.where((margin > 0) & (bound >= 0), bound, -np.inf)


def limit_one(margin: float, reach: float, n_max: float, grow: float, arithmetic: Arithmetic,
              inner: float | None = None, n_inner: float | None = None) -> float:
    """`limits` of one word in Python floats: the same float64 operations in the same order,
    so the same bound (tested). An edit learns a word or two, where numpy's cost per call
    would dominate."""
    inner = reach if inner is None else inner
    n_inner = n_max if n_inner is None else n_inner
    p = arithmetic.mantissa
    max_exp = 128 if arithmetic.dtype == "float32" else 1023
    if not margin > 0:
        return -math.inf
    if math.isinf(margin):
        top = max_exp - 1
    else:
        frac, exp = math.frexp(margin)
        top = min(exp + p - (frac == 0.5) + 1, max_exp) - 1
    below = math.ldexp(1.0 - 2.0 ** -(p + 2), top + 1)  # (at most 2^max_exp: no overflow)
    by_margin = (below - arithmetic.tiny) / (grow * _UP) * (1 - _SLACK) - reach * (1 + _SLACK)
    reset = arithmetic.reset
    if math.isinf(reset):
        by_crossing = math.inf
    else:
        at_reset = (reset + reach) * grow * _UP + arithmetic.tiny
        half_ulp = _spacing32(at_reset) / 2
        step = math.ldexp(1.0, top - p - 1)
        delta = half_ulp if math.isnan(half_ulp) or half_ulp < step else step  # (np.minimum)
        by_crossing = (reset / _UP * (1 - _SLACK) - inner * (1 + _SLACK)
                       - (n_inner + 1) * delta * (1 + _SLACK))
    if math.isnan(by_margin) or math.isnan(by_crossing):
        return -math.inf
    bound = min(by_margin, by_crossing)
    return bound if bound >= 0 else -math.inf


def _spacing32(value: float) -> float:
    """numpy's ``spacing`` of a float64 value of at least 1 cast to float32 (the gap to the next
    float32 up; inf at FLT_MAX, NaN when the cast overflows to inf). Only float32 arithmetic
    has a finite reset, so only it reaches here, with values past the reset."""
    narrow = array("f", [value])[0]  # (rounded to nearest; inf past FLT_MAX)
    if math.isinf(narrow):
        return math.nan
    return math.inf if narrow >= FLT_MAX else math.ldexp(1.0, math.frexp(narrow)[1] - 24)


class _Model:
    """What a vocabulary allows: exact integer scores and the word splitter, or `words` None
    when only the whole-text `viterbi` is exact."""

    def __init__(self, prefixes: dict[bytes, int], scores: Sequence[float], unk_score: float,
                 arithmetic: Arithmetic) -> None:
        self.words = None
        usable = [key for key, i in prefixes.items() if i >= 0]
        ids = sorted({prefixes[key] for key in usable})
        values = [float(scores[i]) for i in ids] + [float(unk_score)]
        if not all(_representable(v, arithmetic) for v in values):
            return
        try:
            inner = {ch for key in usable for ch in key.decode("utf-8")[1:]}
        except UnicodeDecodeError:
            return
        self.shift = max(_denominator_log2(v) for v in values)   # K: scores are multiples of 2^-K
        self.int_scores = {i: _scaled(float(scores[i]), self.shift) for i in ids}
        self.int_unk = _scaled(float(unk_score), self.shift)
        self._cut_space = SPACE not in inner
        self._sub = _inner_split(inner)
        self.words = self.split

    def split(self, data: bytes) -> list[bytes]:
        """`data` cut at clean places: before each ``▁``, and inside long words before each
        character that no piece continues with."""
        words = _space_words(data) if self._cut_space else [data]
        if len(words) <= FEW_WORDS:  # (an edit's region: numpy's cost per call would dominate)
            long = [k for k, word in enumerate(words) if len(word) > SUBSPLIT]
        else:
            import numpy as np

            long = (sliced_array(map(len, words), np.intp) > SUBSPLIT).nonzero()[0].tolist()
        if not long:
            return words
        out: list[bytes] = []
        done = 0
        for k in long:
            out += words[done:k]
            out += self._subsplit(words[k])
            done = k + 1
        return out + words[done:]

    def _subsplit(self, word: bytes) -> list[bytes]:
        """`word` cut before each character not in D (kept whole unless valid UTF-8, where
        `_CHAR` matches exactly one character)."""
        try:
            word.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return [word]
        return sliced_map(re.Match.group, self._sub.finditer(word))


def _space_words(data: bytes) -> list[bytes]:
    """`data` cut before each ``▁`` (no empty head), about `WORD_SLICE` bytes per C-level
    pass (``▁`` cannot overlap itself, so each slice's occurrences are the whole one's).

    >>> _space_words("a▁b▁▁c".encode()) == [b"a"] + [("▁" + w).encode() for w in ("b", "", "c")]
    True
    """
    words: list[bytes] = []
    add = SPACE_BYTES.__add__
    lo = 0
    while True:
        pause()
        hi = data.find(SPACE_BYTES, lo + WORD_SLICE) if lo + WORD_SLICE < len(data) else -1
        parts = data[lo:hi if hi >= 0 else len(data)].split(SPACE_BYTES)
        if parts[0]:  # only the text's head: every later slice starts with ▁
            words.append(parts[0])
        words += map(add, parts[1:])
        if hi < 0:
            return words
        lo = hi


#: one character of valid UTF-8 (surrogates included)
_CHAR = rb"[\x00-\x7f\xc0-\xff][\x80-\xbf]*"
#: characters in D spelled out in the splitting regex at most (more: no second cut level)
MAX_INNER_MULTIBYTE = 64


def _inner_split(inner: set[str]) -> re.Pattern[bytes]:
    """A regex whose findall cuts valid UTF-8 before each character not in `inner`.

    >>> _inner_split({"b", "é"}).findall("abéc▁éb".encode())
    [b'ab\xc3\xa9', b'c', b'\xe2\x96\x81\xc3\xa9b']
    """
    ascii_chars = bytes(sorted(ord(ch) for ch in inner if ch < "\x80"))
    multibyte = sorted(ch.encode("utf-8") for ch in inner if ch >= "\x80")
    if len(multibyte) > MAX_INNER_MULTIBYTE:
        return re.compile(b"(?s).+")  # no cuts: the long word stays whole
    alternatives = [b"[" + re.escape(ascii_chars) + b"]"] if ascii_chars else []
    in_d = b"(?:" + b"|".join(alternatives + [re.escape(m) for m in multibyte]) + b")"
    if in_d == b"(?:)":
        return re.compile(_CHAR)
    return re.compile(b"(?!" + in_d + b")" + _CHAR + in_d + b"*|" + in_d + b"+")


class _ExactLattice:
    """`viterbi`'s lattice over one word from base 0 in exact (scaled integer) arithmetic,
    with the candidates kept for the margin (module docstring, step 2)."""

    def __init__(self, model: _Model, prefixes: dict[bytes, int], scores: Sequence[float],
                 unk_id: int, unk_score: float, word: bytes) -> None:
        n = len(word)
        self.n, self.shift = n, model.shift
        self.value, self.adds = [0] * (n + 1), [0] * (n + 1)
        self.start, self.ids, self.added = [-1] * (n + 1), [0] * (n + 1), [0.0] * (n + 1)
        self.cands: list[list | None] = [None] * (n + 1)
        self.visited: list[int] = []
        self.aligned = True
        self._fill(model, prefixes, scores, (unk_id, unk_score), word)

    def _fill(self, model: _Model, prefixes: dict[bytes, int], scores: Sequence[float],
              unk: tuple[int, float], word: bytes) -> None:
        """`viterbi`'s loop; a candidate reaching j takes it if it is the first or strictly
        greater (the offers are inlined: this is the cold path's cost)."""
        n, get, iscore, int_unk = self.n, prefixes.get, model.int_scores, model.int_unk
        value, adds, start, ids, added, cands = (self.value, self.adds, self.start, self.ids,
                                                 self.added, self.cands)
        i = 0
        while i < n:
            self.visited.append(i)
            base, a = value[i], adds[i] + 1
            lead = word[i]
            single = i + (1 if lead < 0x80 else ONE_CHAR_LEN[lead >> 4])
            if single > n:
                single, self.aligned = n, False
            has_single = False
            j = i + 1
            while j <= n:
                piece_id = get(word[i:j])
                if piece_id is None:
                    break
                if piece_id >= 0:
                    has_single = has_single or j == single
                    v = base + iscore[piece_id]
                    if start[j] != -1:  # a second candidate or later: keep them all
                        here = cands[j]
                        if here is None:
                            here = cands[j] = [(value[j], adds[j], start[j])]
                        here.append((v, a, i))
                        if not v > value[j]:
                            j += 1
                            continue
                    value[j], adds[j], start[j], ids[j], added[j] = v, a, i, piece_id, scores[piece_id]
                j += 1
            if not has_single:
                self._offer(single, base + int_unk, a, i, *unk)
            i = single
        self.visited.append(n)

    def _offer(self, j: int, v: int, a: int, i: int, piece_id: int, added: float) -> None:
        """A candidate reaches j: `viterbi`'s rule (first one, or strictly greater); the
        candidates are kept from the second on (`cands[j]` None: one, the winner)."""
        if self.start[j] != -1:
            here = self.cands[j]
            if here is None:
                here = self.cands[j] = [(self.value[j], self.adds[j], self.start[j])]
            here.append((v, a, i))
            if not v > self.value[j]:
                return
        self.value[j], self.adds[j], self.start[j] = v, a, i
        self.ids[j], self.added[j] = piece_id, added

    def path(self) -> tuple[list[tuple[int, int]], list[float]]:
        """The best path's (id, byte length) pairs and the score each of its edges adds."""
        ends = [self.n]
        start = self.start
        while ends[-1] > 0:
            ends.append(start[ends[-1]])
        ends.reverse()                                      # 0, ..., n
        ids, added = self.ids, self.added
        return ([(ids[e], e - b) for b, e in zip(ends, ends[1:])],
                [added[e] for e in ends[1:]])

    def bounds(self, mantissa: int) -> tuple[float, float, float, float, float, float, bool]:
        """(margin, reach, n_max, grow, inner, n_inner, aligned) over the candidates at the
        visited positions and the end, the only ones whose computed values are ever read, for
        sums with `mantissa` stored significand bits (inner, n_inner: the winners' at the
        visited positions before the end); margin -1 when the word's chains are too long to
        check."""
        num, den = None, 1   # the least ratio num / den, exact
        reach = n_max = 0
        start, adds = self.start, self.adds
        inner = max((abs(self.value[j]) for j in self.visited[1:-1]), default=0)
        n_inner = max((adds[j] for j in self.visited[1:-1]), default=0)
        for j in self.visited[1:]:
            here = self.cands[j]
            win_v, win_a, win_i = self.value[j], adds[j], start[j]
            if here is None:  # the winner alone
                if win_v > reach or -win_v > reach:
                    reach = abs(win_v)
                if win_a > n_max:
                    n_max = win_a
                continue
            for v, a, i in here:
                if v > reach or -v > reach:
                    reach = abs(v)
                if a > n_max:
                    n_max = a
                if i != win_i:
                    fork, other = i, win_i  # the last place both chains pass: their
                    while fork != other:    # computed values agree up to there
                        if fork > other:
                            fork = start[fork]
                        else:
                            other = start[other]
                    d, e = win_v - v, win_a + a - 2 * adds[fork]
                    if num is None or d * den < num * e:
                        num, den = d, e
        if n_max > MAX_CHAIN:
            return -1.0, 0.0, 0.0, 1.0, 0.0, 0.0, self.aligned
        margin = math.inf if num is None else math.ldexp(num, -self.shift) / den * _DOWN
        grow = 1 / (1 - n_max * 2.0 ** -mantissa) * _UP
        return (margin, math.ldexp(reach, -self.shift) * _UP, float(n_max), grow,
                math.ldexp(inner, -self.shift) * _UP, float(n_inner), self.aligned)


def _representable(x: float, arithmetic: Arithmetic) -> bool:
    """x is a value of the arithmetic's type, and at most its `max_score` in magnitude."""
    return (math.isfinite(x) and abs(x) <= arithmetic.max_score
            and array(arithmetic.typecode, [x])[0] == x)


def _denominator_log2(x: float) -> int:
    """k with x * 2^k the smallest such integer (x a finite float)."""
    return x.as_integer_ratio()[1].bit_length() - 1


def _scaled(x: float, shift: int) -> int:
    """x * 2^shift, exactly (an integer when shift >= `_denominator_log2(x)`)."""
    num, den = x.as_integer_ratio()
    return num * (1 << shift) // den
