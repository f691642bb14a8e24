"""Byte-level BPE (GPT-2, tiktoken, HF ``BPE`` + ``ByteLevel``): `ByteLevelBPETokenizer`.

Two ways to build one:

* ``ByteLevelBPETokenizer(vocab, merges, pattern=...)`` from raw vocabulary data: `vocab` is
  the list of pieces indexed by id (or a ``{piece: id}`` mapping, as in vocab.json), pieces
  spelled in GPT-2's byte alphabet (``Ġworld``); `merges` is a list of ``"left right"``
  strings or ``(left, right)`` pairs, rank = index in the list. This is what vocab.json +
  merges.txt, tokenizer.json and GGUF (``tokenizer.ggml.tokens`` + ``tokenizer.ggml.merges``
  + a llama.cpp pre-tokenizer regex) provide.
* ``ByteLevelBPETokenizer.from_ranks(ranks, pattern=...)`` from a tiktoken rank table
  (``{token bytes: rank}``), where the rank is both the merge priority and the id.

Encoding ordinary text:

1. `prepare`: lone surrogates -> U+FFFD and surrogate pairs joined (tiktoken's fix-up:
   ``text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")``), then the
   normalizer (NFC/NFKC/NFD/NFKD), then HF's ``add_prefix_space``.
2. `pre_tokenize`: the pattern(s) cut the text into pre-tokens (spans); text between matches
   is kept as its own pre-token (HF ``Split(behavior="Isolated")``).
3. `encode_pretoken`: BPE over the UTF-8 bytes of each pre-token, cached per pre-token string.

so that ``encode(t) == [i for s, e in pre_tokenize(p) for i in encode_pretoken(p[s:e])]``
with ``p = prepare(t)``. The live-editing path builds on exactly these three calls.

Speed: for the patterns in `patterns.SPACE_SAFE` the text is first cut at spaces that follow
a non-space (an exact pre-token boundary for them) and each chunk's ids are cached too; a warm
encode is then one C-level cut plus a C-level gather (``b"".join(map(cache.__getitem__,
chunks))``: the caches hold ids packed into byte strings, `pack_ids`, which the garbage
collector does not track and which join in one call). New chunks go through one regex pass
together (the ASCII ones through the pattern's `re` twin, `patterns.ascii_pattern`, three times
faster, and many Cyrillic, CJK, ... ones through its wide twin, `patterns.wide_pattern`, twice
as fast), and their distinct pre-tokens (told apart in numpy) through BPE together: a
pre-token that is a whole vocabulary entry is looked up directly where the reference library
does so (tiktoken always, HF with ``ignore_merges``); the others are cut where no merge can
ever join two bytes (no token holds them together), the parts are told apart in numpy, and
each distinct part is merged once (`bpe_encoder.merge_batch`) and cached. Their ids stay numpy
arrays until they are cut per chunk for the chunk cache. Caches are bounded (`CACHE_LIMIT`
entries each; cleared when full).

A merges list that names the same pair twice keeps the last rank (HF's merge map does so;
llama.cpp keeps the first). The merge order is lowest rank, leftmost, in both.

Bytes with no vocabulary entry (possible in vocab.json/GGUF vocabularies, never in tiktoken
files) become `unk_id` if one is given and are dropped otherwise, as HF tokenizers does.
"""
from __future__ import annotations

import unicodedata
from array import array
from itertools import compress, count, repeat
from operator import is_, is_not, itemgetter, lshift, methodcaller, not_, or_
from typing import Any, Iterable, Mapping, Sequence

import regex

from forma_gui.core import patterns as pats
from forma_gui.core.bpe_encoder import (
    BATCH_PIECE, NO_RANK, PairTable, bpe_steps, merge_batch, merge_pairs, merge_ranked, pair_table,
    ranked_pair_rank, ranked_pairs,
)
from forma_gui.core.byte_map import (
    BYTE_TO_UNICODE, bytes_to_pieces, bytes_to_unicode_str, pieces_to_bytes,
    unicode_str_to_bytes,
)
# a 262k vocabulary loads in slices: one C-level pass over it held the GIL for ~100 ms
from forma_gui.core.gc_pause import gc_paused
from forma_gui.core.slices import (SLICE, pause, release, sliced_all, sliced_array, sliced_dict,
                                   sliced_join, sliced_map, sliced_set)
from forma_gui.core.tokenizer import AddedToken, MergeStep, Tokenizer, check_id

#: entries per cache (chunks, pre-tokens, parts) before it is cleared
CACHE_LIMIT = 1 << 18
#: batches of new pre-tokens at least this large are cut with numpy
BATCH = 64
#: new non-ASCII chunks of at least this many characters go through the pattern's wide `re` twin
WIDE_CHARS = 1 << 15
#: the array code of the ids the caches hold (see `pack_ids`) and its size in bytes
ID_CODE = "I"
ID_SIZE = array(ID_CODE).itemsize
#: parts up to this long are told apart by a 64-bit numpy key (7 bytes and the length)
_KEY_BYTES = 7
#: a rank table's merge_batch table is built once this many parts per vocabulary entry were
#: merged one by one (see `_batch_ready`)
RANKED_TABLE_AFTER = 0.2
#: the normalizers a byte-level tokenizer can apply (HF normalizer type -> unicodedata form)
NORMALIZERS = {"NFC": "NFC", "NFKC": "NFKC", "NFD": "NFD", "NFKD": "NFKD"}


class MergeError(ValueError):
    """A merge that cannot be used; `index` is its position in the merges list."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


def replace_surrogates(text: str) -> str:
    """tiktoken's fix-up for text that is not valid UTF-8: join surrogate pairs, lone ones -> U+FFFD.

    >>> replace_surrogates("a\\ud800b\\ud83d\\ude00")
    'a\\ufffdb😀'
    """
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def utf8(text: str) -> bytes:
    """UTF-8 bytes of text, with `replace_surrogates` applied if needed."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return replace_surrogates(text).encode("utf-8")


class ByteLevelBPETokenizer(Tokenizer):
    """Byte-level BPE over GPT-2's byte alphabet; see the module docstring."""

    kind = "byte-level BPE"
    piece_style = "bytelevel"

    def __init__(self, vocab: Sequence[str | None] | Mapping[str, int],
                 merges: Iterable[str | Sequence[str]], *,
                 pattern: str | regex.Pattern | Sequence[str | regex.Pattern] = "gpt2",
                 added_tokens: Sequence[AddedToken] = (), normalizer: str | Sequence[str] | None = None,
                 add_prefix_space: bool = False, ignore_merges: bool = False,
                 unk_id: int | None = None, fuse_unk: bool = False, strict: bool = True,
                 merge_ids: Any = None, name: str = "", path: str | None = None) -> None:
        """Build from pieces and merges (see module docstring).

        `strict=False` skips merges whose parts or result are not in the vocabulary instead of
        raising `MergeError` (GGUF files are sometimes inconsistent there). `merge_ids`, a
        (3, n_merges) integer array, gives each merge's left, right and result id already
        looked up in `vocab` (-1: not there): the merges are then not looked up again (the
        GGUF loader finds them in numpy from the file's bytes).
        """
        super().__init__(name=name, path=path, added_tokens=added_tokens)
        pieces = _pieces_by_id(vocab)
        self._pieces: list[str] | None = pieces
        self._bytes, self._literal = _decode_pieces(pieces)
        self._piece_ids: dict[str, int] | None = dict(vocab) if isinstance(vocab, Mapping) else None
        self._ranks: dict[bytes, int] | None = None
        self._setup_merges(merges, strict, merge_ids)
        self._ignore_merges = ignore_merges
        self.unk_id = unk_id
        self._fuse_unk = fuse_unk
        self._setup_common(pattern, normalizer, add_prefix_space)

    @classmethod
    def from_ranks(cls, ranks: Mapping[bytes, int], *,
                   pattern: str | regex.Pattern | Sequence[str | regex.Pattern] = "gpt2",
                   added_tokens: Sequence[AddedToken] = (), name: str = "",
                   path: str | None = None) -> "ByteLevelBPETokenizer":
        """Build from a tiktoken rank table {token bytes: rank}; rank == id == merge priority.

        A dict is used as it is (not copied): do not change it afterwards. Added tokens whose
        id is already a rank are left out (tiktoken's special tokens sit outside the ranks).
        """
        self = cls.__new__(cls)
        ranks = ranks if type(ranks) is dict else dict(ranks)
        if ranks and list(ranks.values()) == list(range(len(ranks))):
            size, token_bytes = len(ranks), list(ranks)  # the usual case: sorted by rank, no gaps
            holes: set[int] = set()
        else:
            size = max(ranks.values(), default=-1) + 1
            token_bytes = [b""] * size
            for data, rank in ranks.items():
                token_bytes[rank] = data
            holes = set(range(size)).difference(ranks.values())
        added_tokens = [t for t in added_tokens if t.id >= size or t.id in holes]
        Tokenizer.__init__(self, name=name, path=path, added_tokens=added_tokens)
        self._bytes, self._literal, self._holes = token_bytes, set(), holes
        self._pieces = None  # spelled lazily: most uses never ask
        self._piece_ids = None
        self._ranks = ranks
        self._merges_map = None
        self._shift = max(size, 2).bit_length()
        self._ignore_merges = True  # tiktoken looks the whole pre-token up first
        self._fuse_unk = False
        self._setup_common(pattern, None, False)
        return self

    # ---- construction helpers ---------------------------------------------------------------
    def _setup_merges(self, merges: Iterable[str | Sequence[str]], strict: bool,
                      merge_ids: Any = None) -> None:
        """Each merge's (rank, left, right, merged) ids, checked here; the id-space table
        `_merges` is built from them on first use (an inspector often only shows the vocabulary).

        A pair listed twice keeps its last rank, as HF tokenizers' merge map does.
        """
        self._holes = {i for i, data in enumerate(self._bytes) if not data} if b"" in self._bytes else set()
        self._model_bytes = self._bytes  # before added tokens: what the model vocabulary spells
        self._encoder_map: dict[bytes, int] | None = None
        self._shift = max(len(self._bytes), 2).bit_length()
        piece_ids = self._piece_id_map()
        triples = _given_id_columns(merge_ids, len(self._bytes))
        if triples is None:
            merges = list(merges)
            triples = _merge_id_columns(merges, piece_ids, self.pieces)
        if triples is None:  # some merge is malformed or unknown: find it (or skip the bad ones)
            triples = _merge_id_rows(merges, piece_ids, strict)
        self._merge_triples: tuple | None = triples  # the table is built on first use
        self._merges_map: dict[int, int] | None = None
        if isinstance(merges, list):
            release(merges)
        self._merge_columns: tuple | None = (triples[0], triples[3])  # ranks, merged ids
        self._merge_rank_map: dict[int, int] | None = None
        size = len(self._bytes)
        self._byte_ids = [i if i is not None and i < size and i not in self._literal else None
                          for i in map(piece_ids.get, BYTE_TO_UNICODE.values())]

    @property
    def _merges(self) -> dict[int, int]:
        """(left << shift | right) -> (rank << shift | merged) (built on first use)."""
        table = self._merges_map
        if table is None:
            triples = self._merge_triples
            if triples is None:  # another thread has just built it
                return self._merges_map
            ranks, lefts, rights, merged = triples
            keys, values = _pack(lefts, rights, self._shift), _pack(ranks, merged, self._shift)
            table = self._merges_map = sliced_dict(keys, values)
            release(keys, values)  # our copies: freed in slices, not all at once on return
            self._merge_triples = None
        return table

    @property
    def _encoder(self) -> dict[bytes, int]:
        """Model vocabulary bytes -> id (built on first use; tiktoken: the rank table)."""
        if self._encoder_map is None:
            encoder = dict(zip(self._model_bytes, range(len(self._model_bytes))))
            encoder.pop(b"", None)
            for i in self._literal:  # literal pieces are never BPE symbols
                if encoder.get(self._model_bytes[i]) == i:
                    del encoder[self._model_bytes[i]]
            self._encoder_map = encoder
        return self._encoder_map

    @property
    def _merge_rank(self) -> dict[int, int]:
        """Token id -> rank of the first merge that creates it (built on first use)."""
        if self._merge_rank_map is None:
            ranks, merged = self._merge_columns  # the first merge making a token goes in last
            self._merge_rank_map = sliced_dict(merged[::-1], ranks[::-1])
            self._merge_columns = None
        return self._merge_rank_map

    def _setup_common(self, pattern, normalizer, add_prefix_space: bool) -> None:
        self._patterns = _compile_all(pattern)
        self._space_safe = len(self._patterns) == 1 and pats.is_space_safe(self._patterns[0])
        forms = [normalizer] if isinstance(normalizer, str) else list(normalizer or ())
        for form in forms:
            if form not in NORMALIZERS:
                raise ValueError(f"unsupported normalizer {form!r} (supported: {', '.join(NORMALIZERS)})")
        self._forms = [NORMALIZERS[f] for f in forms]
        self.add_prefix_space = add_prefix_space
        self._piece_cache: dict[str, tuple[int, ...]] = {}
        self._chunk_cache: dict[str, tuple[int, ...]] = {}
        self._segment_cache: dict[bytes, bytes] = {}  # part -> packed ids
        self._pairs: bytes | None = None
        self._triples = None
        self._batch: tuple | None = None
        self._scalar_parts = 0
        if self._ranks is not None:
            self._encoder_map = self._ranks
            self._model_bytes = self._bytes
        self._added_by_id = {t.id: t for t in self.added_tokens}
        self._install_added()

    def _install_added(self) -> None:
        """Added tokens get their content as piece and UTF-8 bytes, growing the id space if needed."""
        top = max(self._added_by_id, default=-1) + 1
        # copies, so that self._model_bytes keeps what the model vocabulary spells
        self._holes.update(range(len(self._bytes), top))
        self._bytes = self._bytes + [b""] * (top - len(self._bytes))
        if self._pieces is not None:
            self._pieces = self._pieces + [""] * (top - len(self._pieces))
        for token in self.added_tokens:
            self._bytes[token.id] = token.content.encode("utf-8")
            self._holes.discard(token.id)
            if self._pieces is not None:
                self._pieces[token.id] = token.content
            if self._piece_ids is not None:
                self._piece_ids[token.content] = token.id

    def _piece_id_map(self) -> dict[str, int]:
        if self._piece_ids is None:
            piece_ids = sliced_dict(self.pieces, range(len(self.pieces)))
            piece_ids.pop("", None)
            self._piece_ids = piece_ids
        return self._piece_ids

    # ---- the Tokenizer interface ----------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self._bytes)

    @property
    def pieces(self) -> list[str]:
        """All pieces, indexed by id ("" for ids no entry uses)."""
        if self._pieces is None:
            pieces = bytes_to_pieces(self._bytes)
            for token in self.added_tokens:
                pieces[token.id] = token.content
            self._pieces = pieces
        return self._pieces

    def piece(self, token_id: int) -> str:
        return self.pieces[self._check_id(token_id)]

    def id_of(self, piece: str) -> int | None:
        return self._piece_id_map().get(piece)

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[self._check_id(token_id)]

    def token_type(self, token_id: int) -> str:
        added = self._added_by_id.get(self._check_id(token_id))
        if added is not None:
            return "control" if added.special else "user-defined"
        if token_id in self._holes:
            return "unused"
        return "user-defined" if token_id in self._literal else "normal"

    def token_score(self, token_id: int) -> float | None:
        """The merge rank that creates the token (tiktoken: its rank); None for bytes and added tokens."""
        self._check_id(token_id)
        if token_id in self._added_by_id or token_id in self._holes:
            return None
        if self._ranks is not None:
            return token_id if len(self._bytes[token_id]) > 1 else None
        return self._merge_rank.get(token_id)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        ids = list(ids)
        if ids and (min(ids) < 0 or max(ids) >= len(self._bytes)):
            bad = next(i for i in ids if not 0 <= i < len(self._bytes))
            self._check_id(bad)
        return b"".join(map(self._bytes.__getitem__, ids))

    def _check_id(self, token_id: int) -> int:
        return check_id(token_id, len(self._bytes))

    # ---- encoding ------------------------------------------------------------------------------
    def prepare(self, text: str) -> str:
        """The text the pattern sees: surrogates fixed, normalized, prefix space added."""
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                text = replace_surrogates(text)
            for form in self._forms:
                text = unicodedata.normalize(form, text)
        if self.add_prefix_space and text and not text.startswith(" "):
            text = " " + text
        return text

    def normalize(self, text: str) -> str:
        """Only the normalizer (used to match added tokens flagged `normalized`)."""
        for form in self._forms:
            text = unicodedata.normalize(form, text)
        return text

    def pre_tokenize(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the pre-tokens of `text` (apply `prepare` first to match `encode`)."""
        spans = [(0, len(text))] if text else []
        for pattern in self._patterns:
            spans = [(start + s, start + e) for start, end in spans
                     for s, e in pats.split_pieces(pattern, text[start:end])]
        return spans

    def encode_pretoken(self, piece: str) -> tuple[int, ...]:
        """The ids of one pre-token (cached). `piece` should come from prepared text."""
        return tuple(memoryview(self._packed_pretoken(piece)).cast(ID_CODE))

    def _packed_pretoken(self, piece: str) -> bytes:
        """`encode_pretoken` as packed ids (see `pack_ids`), the form the caches hold."""
        ids = self._piece_cache.get(piece)
        if ids is None:
            ids = pack_ids(self._bpe(utf8(piece)))
            if len(self._piece_cache) >= CACHE_LIMIT:
                self._piece_cache.clear()
            self._piece_cache[piece] = ids
        return ids

    def _encode_ordinary(self, text: str) -> list[int]:
        text = self.prepare(text)
        if not text:
            return []
        if self._space_safe:
            return self._encode_chunks(pats.chunk_at_spaces(text))
        return self._encode_pieces([text[s:e] for s, e in self.pre_tokenize(text)])

    def _encode_pieces(self, pieces: list[str]) -> list[int]:
        """Gather cached pre-token ids at C speed; encode the new pre-tokens first, in a batch."""
        cache = self._piece_cache
        try:
            return unpack_ids(b"".join(map(cache.__getitem__, pieces)))
        except KeyError:
            pass
        # a cold batch allocates a few hundred thousand tuples of ints, none in a cycle: each
        # 700 allocations would start a young collection (10-15% of a cold 2 MB encode)
        with gc_paused(settle=False):  # (batches come often: see gc_pause)
            self._encode_batch(list(set(pieces).difference(cache)))
        try:
            return unpack_ids(b"".join(map(cache.__getitem__, pieces)))
        except KeyError:  # the cache overflowed (or another thread cleared it) in between
            return unpack_ids(b"".join(map(self._packed_pretoken, pieces)))

    def _encode_chunks(self, chunks: list[str]) -> list[int]:
        """Gather cached chunk ids at C speed; encode the chunks the cache lacks first."""
        cache = self._chunk_cache
        try:
            return unpack_ids(b"".join(map(cache.__getitem__, chunks)))
        except KeyError:
            pass
        missing = set(chunks).difference(cache) if cache else set(chunks)
        if len(cache) + len(missing) > CACHE_LIMIT:
            cache.clear()
        with gc_paused(settle=False):  # (batches come often: see gc_pause)
            if len(missing) < BATCH:
                cache.update(zip(missing, map(self._packed_chunk, missing)))
            else:
                self._fill_chunks(missing, chunks[0], chunks[-1])
        try:
            return unpack_ids(b"".join(map(cache.__getitem__, chunks)))
        except KeyError:  # another thread cleared the cache in between
            return unpack_ids(b"".join(map(self._packed_chunk, chunks)))

    def _fill_chunks(self, missing: set[str], first: str, last: str) -> None:
        """Encode the missing chunks with one regex pass over all of them, then slice.

        Every chunk but the text's first starts with a space, and every chunk but its last
        ends with a non-space, so joined in this order each seam is an exact boundary: the
        pre-tokens ending at the seams tell which pre-tokens make up each chunk. The ASCII
        chunks are joined on their own and cut by the pattern's `re` twin (3x faster), if any.
        """
        import numpy as np

        order, pieces = self._pre_tokenize_chunks(missing, first, last)
        piece_ends = np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)))
        chunk_ends = np.cumsum(np.fromiter(map(len, order), dtype=np.int64, count=len(order)))
        last_piece = np.searchsorted(piece_ends, chunk_ends)  # (chunks,) the piece ending each chunk
        if not np.array_equal(piece_ends[np.minimum(last_piece, len(pieces) - 1)], chunk_ends):
            # a pre-token crossed a seam: the pattern is not space-safe after all
            raise RuntimeError(f"pattern {self._patterns[0].pattern!r} is not space-safe")
        data = "".join(order).encode()
        ends = _byte_offsets(data, piece_ends)                   # (pieces,) where each one's bytes end
        starts = np.append(0, ends[:-1])
        first, which = _distinct_spans(data, starts, ends)      # one occurrence of each distinct pre-token
        flat, counts = self._distinct_ids(list(map(pieces.__getitem__, first.tolist())))
        ids, id_counts = _gather_runs(flat, counts, which)      # (ids,) every pre-token's ids, in order
        id_ends = np.cumsum(id_counts)[last_piece] * ID_SIZE
        self._chunk_cache.update(zip(order, _split_bytes(ids.tobytes(), id_ends.tolist())))

    def _distinct_ids(self, pieces: list[str]):
        """(the ids of distinct pre-tokens one after another, the number of each) as numpy arrays;
        the ones the pre-token cache lacks are encoded in a batch.

        Not cached per pre-token: the chunk cache holds them for a repeat, the part cache keeps
        their merging cheap for new text, and caching ~40k pre-tokens of a cold 2 MB encode
        would cost ~8% of it. `encode_pretoken` (the live-editing path) caches its own.
        """
        import numpy as np

        if not self._piece_cache:  # a cold encode: all new
            return self._batch_ids(pieces, remember=False)
        packed = list(map(self._piece_cache.get, pieces))
        if None in packed:
            new = list(map(is_, packed, repeat(None)))
            flat, counts = self._batch_ids(list(compress(pieces, new)), remember=False)
            if len(counts) == len(pieces):  # all new (a cold encode)
                return flat, counts
            fresh = iter(_split_bytes(flat.tobytes(), (np.cumsum(counts) * ID_SIZE).tolist()))
            packed = [next(fresh) if ids is None else ids for ids in packed]
        return _flat_ids(packed)

    def _pre_tokenize_chunks(self, missing: set[str], first: str, last: str) -> tuple[list[str], list[str]]:
        """(the chunks in joining order, their pre-tokens): `first` leads and `last` ends its group.

        ASCII chunks go through the pattern's `re` twin for ASCII (`patterns.ascii_pattern`),
        many others of the scripts `patterns.wide_pattern` covers through its wide twin, the
        rest through the pattern itself.
        """
        pattern = self._patterns[0]
        fast = pats.ascii_pattern(pattern.pattern)
        if fast is not None:
            chunks = list(missing)
            ascii_flags = list(map(str.isascii, chunks))  # one pass over the (fresh, scattered) strings
            groups = [(list(compress(chunks, ascii_flags)), fast),
                      *self._wide_groups(list(compress(chunks, map(not_, ascii_flags))))]
        else:
            groups = [(list(missing), pattern)]
        order: list[str] = []
        pieces: list[str] = []
        for group, finder in groups:
            if first in group:
                group.remove(first)
                group.insert(0, first)
            if last in group and last != first:
                group.remove(last)
                group.append(last)
            order += group
            pieces += finder.findall("".join(group)) if group else []
        return order, pieces

    def _wide_groups(self, chunks: list[str]) -> list[tuple[list[str], object]]:
        """Non-ASCII chunks as (chunks, pattern) groups: those the wide twin covers, and the rest.

        Only for much text: the twin's classes take ~50 ms to read from `regex` (once).
        """
        pattern = self._patterns[0]
        text = "".join(chunks)
        wide = pats.wide_pattern(pattern.pattern) if len(text) >= WIDE_CHARS else None
        if wide is None:
            return [(chunks, pattern)]
        twin, other = wide
        if other.search(text) is None:
            return [(chunks, twin)]
        covered = list(map(is_, map(other.search, chunks), repeat(None)))
        return [(list(compress(chunks, covered)), twin), (list(compress(chunks, map(not_, covered))), pattern)]

    def _packed_chunk(self, chunk: str) -> bytes:
        """The packed ids of one chunk, pre-token by pre-token (few new chunks, or a fallback)."""
        return b"".join(map(self._packed_pretoken, self._patterns[0].findall(chunk)))

    def clear_cache(self) -> None:
        """Forget cached pre-token and chunk encodings (benchmarks measure cold starts with it)."""
        self._piece_cache.clear()
        self._chunk_cache.clear()
        self._segment_cache.clear()

    def _bpe(self, data: bytes) -> list[int]:
        """BPE over the bytes of one pre-token -> ids.

        The pre-token is first cut where two neighbouring bytes appear together in no token:
        no merge can ever join across such a place, so the parts merge independently, and
        the parts (a CJK character in GPT-2's vocabulary, a syllable) recur and are cached.
        """
        if self._ignore_merges:
            token = self._encoder.get(data)
            if token is not None:
                return [token]
        cuts = self._cuts(data) if len(data) > 2 else None
        if not cuts:
            return self._merge(data)
        get, out = self._segment_cache.get, []
        for start, end in zip([0, *cuts], [*cuts, len(data)]):
            part = data[start:end]
            ids = get(part)
            if ids is None:
                ids = pack_ids(self._merge(part))
                if len(self._segment_cache) >= CACHE_LIMIT:
                    self._segment_cache.clear()
                self._segment_cache[part] = ids
            out += memoryview(ids).cast(ID_CODE)
        return out

    def _cuts(self, data: bytes) -> list[int]:
        """Offsets between bytes that no token has next to each other ([] if none or unsafe)."""
        table = self._pair_table()
        if table is None:
            return []
        flags = bytes(map(table.__getitem__, map(or_, map(lshift, data[:-1], repeat(8)), data[1:])))
        cuts, at = [], flags.find(0)
        while at >= 0:
            cuts.append(at + 1)
            at = flags.find(0, at + 1)
        return cuts

    def _encode_batch(self, pieces: list[str]) -> None:
        """Encode many pre-tokens the cache lacks at once (see `_batch_ids`) and cache them."""
        self._batch_ids(pieces)

    def _batch_ids(self, pieces: list[str], remember: bool = True):
        """The same as encode_pretoken on each pre-token (cached if `remember`), as (ids one
        after another, the number of each) numpy arrays; the cuts for all of them are found in
        one numpy pass and each distinct part is merged once.

        No Python object is made per part: the parts are cut, told apart and given their ids
        as numpy arrays, and only the distinct ones become byte strings.
        """
        cache = self._piece_cache
        if len(cache) + len(pieces) > CACHE_LIMIT:
            cache.clear()
        if len(pieces) < BATCH or self._pair_table() is None:  # few: one by one (cached)
            return _flat_ids(list(map(self._packed_pretoken, pieces)))
        import numpy as np

        datas = _utf8_all(pieces)
        whole = list(map(self._encoder.get, datas)) if self._ignore_merges else [None] * len(datas)
        rest = list(map(is_, whole, repeat(None)))
        ids, counts = self._merged_ids(list(compress(datas, rest)))
        if len(counts) < len(pieces):  # some pre-tokens are whole tokens: one id each
            merged = np.array(rest, dtype=bool)                             # (pieces,)
            all_counts = np.ones(len(pieces), dtype=np.int64)
            all_counts[merged] = counts
            all_ids = np.empty(int(all_counts.sum()), dtype=np.uintc)
            from_merges = np.repeat(merged, all_counts)                      # (ids,)
            all_ids[from_merges] = ids
            all_ids[~from_merges] = list(compress(whole, map(is_not, whole, repeat(None))))
            ids, counts = all_ids, all_counts
        if remember:
            cache.update(zip(pieces, _split_bytes(ids.tobytes(), (np.cumsum(counts) * ID_SIZE).tolist())))
        return ids, counts

    def _merged_ids(self, datas: list[bytes]):
        """BPE of byte strings (cut into parts, each distinct part merged once) -> (ids one after
        another, the number of each) as numpy arrays."""
        import numpy as np

        if not datas:
            return np.zeros(0, dtype=np.uintc), np.zeros(0, dtype=np.int64)
        joined = b"".join(datas)
        lengths = np.fromiter(map(len, datas), dtype=np.int64, count=len(datas))
        starts, bounds = _cut_spans(joined, lengths, self._triple_table())
        distinct, which = _distinct_parts(joined, starts)
        flat, counts = self._part_ids(distinct)
        ids, id_counts = _gather_runs(flat, counts, which)  # the ids of every part, in order
        ends = np.cumsum(id_counts)[bounds[1:] - 1]          # (datas,) where each one's ids end
        return ids, np.diff(ends, prepend=0)

    def _part_ids(self, parts: list[bytes]):
        """(the ids of each part one after another, the number of each) as numpy arrays; each
        part (`parts` are distinct) is merged once and cached."""
        import numpy as np

        known = self._segment_cache
        if len(known) + len(parts) > CACHE_LIMIT:
            known.clear()
        packed = list(map(known.get, parts))
        new = list(compress(parts, map(is_, packed, repeat(None))))
        if len(new) >= BATCH and self._batch_ready(len(new)):
            ids, counts = self._merge_many(new)
            fresh = _split_bytes(ids.tobytes(), (np.cumsum(counts) * ID_SIZE).tolist())
            if len(new) == len(parts):  # all new (a cold encode): no need to join them again
                known.update(zip(new, fresh))
                return ids, counts
        else:
            fresh = [pack_ids(self._merge(part)) for part in new]
        known.update(zip(new, fresh))
        fresh = iter(fresh)
        return _flat_ids([next(fresh) if ids is None else ids for ids in packed])

    def _merge_many(self, datas: list[bytes]):
        """`_merge` of each byte string -> (ids one after another, the number of each) as numpy
        arrays; the short ones together with `merge_batch`."""
        import numpy as np

        table, byte_ids, byte_pairs = self._batch_table()
        lengths = np.fromiter(map(len, datas), dtype=np.int64, count=len(datas))
        short = (lengths > 0) & (lengths <= BATCH_PIECE)
        if not short.all():  # rare: very long parts go through the scalar loop
            flags = short.tolist()
            ids, counts = self._merge_many(list(compress(datas, flags)))
            merged = iter(_split_bytes(ids.tobytes(), (np.cumsum(counts) * ID_SIZE).tolist()))
            return _flat_ids([next(merged) if ok else pack_ids(self._merge(d)) for d, ok in zip(datas, flags)])
        data = np.frombuffer(b"".join(datas), dtype=np.uint8)  # (bytes,)
        pairs = np.empty(len(data), dtype=np.int64)
        pairs[:-1] = byte_pairs[data[:-1].astype(np.int64) << 8 | data[1:]]
        ids, counts = merge_batch(byte_ids[data], lengths, table, self._shift, pairs)
        return ids.astype(np.uintc), counts

    def _batch_ready(self, parts: int) -> bool:
        """Whether to merge `parts` new parts with merge_batch (building its table if worth it).

        A rank table's pair table (every two-token split of every token, `ranked_pairs`) takes
        ~2 us per vocabulary entry to build (0.1 s for r50k, 0.2 s for cl100k), what the scalar
        loop spends on ~0.2 parts per entry (~10 us a part): so it is built once that many parts
        have gone through the scalar loop, and the first encodes stay quick.
        """
        if self._batch is None and self._ranks is not None:
            self._scalar_parts += parts
            if self._scalar_parts <= RANKED_TABLE_AFTER * len(self._model_bytes):
                return False
        return self._batch_table() is not None

    def _batch_table(self) -> tuple | None:
        """(PairTable of the merges, byte -> unit id, byte pair -> packed merge) for merge_batch;
        None if some byte has no id (built on first use)."""
        if self._batch is None:
            import numpy as np

            if self._pair_table() is None:
                self._batch = ()
                return None
            if self._ranks is not None:
                table = PairTable(*ranked_pairs(self._model_bytes, self._ranks, self._shift))
                byte_ids = np.array([self._ranks[bytes([b])] for b in range(256)], dtype=np.int64)
            else:
                table, byte_ids = pair_table(self._merges), np.array(self._byte_ids, dtype=np.int64)
            byte_pairs = table.get(((byte_ids << self._shift)[:, None] | byte_ids[None, :]).ravel())  # (65536,)
            self._batch = (table, byte_ids, byte_pairs)
        return self._batch or None

    def _triple_table(self):
        """(2-byte tokens, inner byte triples as a bitset) for the finer batch cuts (numpy, on first use)."""
        if self._triples is None:
            self._triples = _inner_triples(self._model_bytes)
        return self._triples

    def _pair_table(self) -> bytes | None:
        """65536 flags: 1 if byte pair (a << 8 | b) occurs inside some token (built on first use).

        None when cutting would not be exact: a byte missing from the vocabulary is dropped
        (or becomes unk), which joins (or separates) its neighbours in a way cuts cannot see.
        """
        if self._pairs is None:
            complete = (all(bytes([b]) in self._encoder for b in range(256)) if self._ranks is not None
                        else None not in self._byte_ids)
            self._pairs = _inner_pairs(self._model_bytes) if complete else b""
        return self._pairs or None

    def _merge(self, data: bytes) -> list[int]:
        """The merge loop proper over one pre-token or part."""
        if self._ranks is not None:
            return self._bpe_ranked(data)
        symbols = list(map(self._byte_ids.__getitem__, data))
        if None in symbols:
            symbols = self._unknown_bytes(symbols)
        return merge_pairs(symbols, self._merges, self._shift) if len(symbols) > 1 else symbols

    def _bpe_ranked(self, data: bytes) -> list[int]:
        symbols = merge_ranked(data, self._ranks)
        try:
            return list(map(self._ranks.__getitem__, symbols))
        except KeyError:  # a rank table without some single bytes
            return self._unknown_bytes(list(map(self._ranks.get, symbols)))

    def _unknown_bytes(self, symbols: list[int | None]) -> list[int]:
        """Missing symbols -> unk_id (fused if fuse_unk) or dropped, as HF tokenizers does."""
        if self.unk_id is None:
            return [s for s in symbols if s is not None]
        out: list[int] = []
        for s in symbols:
            if s is None:
                if self._fuse_unk and out and out[-1] == self.unk_id:
                    continue
                s = self.unk_id
            out.append(s)
        return out

    # ---- merge steps for the GUI ----------------------------------------------------------------
    def merge_steps(self, word: str) -> list[MergeStep]:
        """The merges BPE performs on one pre-token (the byte-level rank order, even where the
        encoder short-cuts a whole-vocabulary pre-token with a direct lookup)."""
        steps = bpe_steps(utf8(word), self._pair_rank())
        return [MergeStep(left=bytes_to_unicode_str(s.left), right=bytes_to_unicode_str(s.right),
                          rank=s.rank, result=bytes_to_unicode_str(s.result), position=s.position,
                          symbols=tuple(map(bytes_to_unicode_str, s.symbols)))
                for s in steps]

    def _pair_rank(self):
        if self._ranks is not None:
            return ranked_pair_rank(self._ranks)
        encoder, table, shift = self._encoder, self._merges, self._shift

        def pair_rank(left: bytes, right: bytes) -> int | None:
            a, b = encoder.get(left), encoder.get(right)
            if a is None or b is None:
                return None
            packed = table.get(a << shift | b, NO_RANK)
            return None if packed == NO_RANK else packed >> shift

        return pair_rank

    def merge_rank(self, left: str, right: str) -> int | None:
        """The rank of merging two pieces, or None if they do not merge."""
        try:
            return self._pair_rank()(unicode_str_to_bytes(left), unicode_str_to_bytes(right))
        except ValueError:
            return None


# ---- module helpers ----------------------------------------------------------------------------

def _pieces_by_id(vocab: Sequence[str | None] | Mapping[str, int]) -> list[str]:
    """A piece list indexed by id ("" for unused ids) from a list or a {piece: id} mapping."""
    if not isinstance(vocab, Mapping):
        return [p or "" for p in vocab]
    ids = list(vocab.values())
    if ids == list(range(len(ids))):  # the usual order: one C-level compare (~2x all(map(...)))
        return list(vocab)
    size = max(ids, default=-1) + 1
    pieces = [""] * size
    for piece, token_id in vocab.items():
        if token_id < 0:
            raise ValueError(f"negative id {token_id} for piece {piece!r}")
        if pieces[token_id]:
            raise ValueError(f"id {token_id} is used by both {pieces[token_id]!r} and {piece!r}")
        pieces[token_id] = piece
    return pieces


def _decode_pieces(pieces: list[str]) -> tuple[list[bytes], set[int]]:
    """Bytes of every piece; pieces outside the byte alphabet stand for their UTF-8 (literal)."""
    try:
        return pieces_to_bytes(pieces), set()
    except ValueError:
        pass
    out: list[bytes] = []
    literal: set[int] = set()
    for i, piece in enumerate(pieces):
        try:
            out.append(unicode_str_to_bytes(piece))
        except ValueError:
            out.append(piece.encode("utf-8", "surrogatepass"))
            literal.add(i)
    return out, literal


def _merge_id_columns(merges: list, piece_ids: Mapping[str, int], pieces: list[str]):
    """(ranks, left ids, right ids, merged ids) at C speed, or None if any merge is unusable.

    Every pass over the merges is sliced (core.slices), and so is freeing the temporary
    lists: dropping half a million strings at once held the GIL for ~50 ms.
    """
    if not merges:
        return range(0), [], [], []
    temporaries: list[list] = []
    try:
        return _merge_id_columns_of(merges, piece_ids, pieces, temporaries)
    except (TypeError, KeyError):  # a number, a mapping, an unhashable side: _merge_id_rows says which
        return None
    finally:
        release(*temporaries)


def _merge_id_columns_of(merges: list, piece_ids: Mapping[str, int], pieces: list[str],
                         temporaries: list[list]):
    """`_merge_id_columns`' passes; the lists it makes for itself go in `temporaries`."""
    sides = _split_merge_strings(merges) if sliced_all(str.__instancecheck__, merges) else None
    if sides is None:  # pairs, or some string without exactly one space
        if sliced_all(str.__instancecheck__, merges):
            merges = sliced_map(str.split, merges, repeat(" "))
            temporaries.append(merges)
        if sliced_set(len, merges) != {2} or str in sliced_set(type, merges):
            return None  # "ab" would read as the pair a, b
        sides = sliced_map(itemgetter(0), merges), sliced_map(itemgetter(1), merges)
    lefts, rights = sides
    temporaries += (lefts, rights)
    get = piece_ids.get
    left_ids, right_ids = sliced_map(get, lefts), sliced_map(get, rights)
    if None in left_ids or None in right_ids:
        return None
    joined = sliced_map(str.__add__, lefts, rights)
    temporaries.append(joined)
    first = get(joined[0])
    if first is not None and _slice_equals(pieces, first, joined):
        merged = range(first, first + len(joined))  # trained vocabularies list results in merge order
    else:
        merged = sliced_map(get, joined)
        if None in merged:
            return None
    return range(len(merges)), left_ids, right_ids, merged


_count_spaces = methodcaller("count", " ")


def _split_merge_strings(merges: list[str]) -> tuple[list[str], list[str]] | None:
    """("a b" merges) -> (lefts, rights), None unless every merge has exactly one space.

    One join and one split per slice instead of a str.split call and two lookups per merge:
    ~3x faster (SmolLM2's 49k merges: 13 ms instead of 38).

    >>> _split_merge_strings(["a b", "ab c"])
    (['a', 'ab'], ['b', 'c'])
    >>> _split_merge_strings(["a", "b c d"]) is None
    True
    """
    lefts: list[str] = []
    rights: list[str] = []
    for i in range(0, len(merges), SLICE):
        pause()
        chunk = merges[i:i + SLICE]
        if set(map(_count_spaces, chunk)) != {1}:  # ["a", "b c d"] would split into 2 pairs
            return None
        parts = " ".join(chunk).split(" ")
        lefts += parts[0::2]
        rights += parts[1::2]
    return lefts, rights


def _slice_equals(items: list, start: int, other: list) -> bool:
    """items[start:start + len(other)] == other, a slice at a time."""
    if start + len(other) > len(items):
        return False
    for i in range(0, len(other), SLICE):
        pause()
        if items[start + i:start + i + SLICE] != other[i:i + SLICE]:
            return False
    return True


def _given_id_columns(merge_ids: Any, size: int):
    """`_merge_id_columns` from a (3, n) id array; None unless every id is one of `size`."""
    if merge_ids is None:
        return None
    import numpy as np

    ids = np.asarray(merge_ids, dtype=np.int64)
    if ids.ndim != 2 or len(ids) != 3 or (ids < 0).any() or (ids >= size).any():
        return None
    lefts, rights, merged = ids
    n = len(merged)
    if n and (merged == np.arange(merged[0], merged[0] + n)).all():  # as trained vocabularies list them
        return range(n), lefts.tolist(), rights.tolist(), range(int(merged[0]), int(merged[0]) + n)
    return range(n), lefts.tolist(), rights.tolist(), merged.tolist()


def _merge_id_rows(merges: list, piece_ids: dict[str, int], strict: bool):
    """Like _merge_id_columns, one merge at a time: MergeError names the first bad one (strict),
    otherwise bad merges are skipped."""
    ranks: list[int] = []
    columns: tuple[list[int], list[int], list[int]] = ([], [], [])
    for rank, merge in enumerate(merges):
        parts = merge.split(" ") if isinstance(merge, str) else \
            list(merge) if isinstance(merge, (list, tuple)) else []
        if len(parts) != 2 or not all(isinstance(p, str) and p for p in parts):
            problem = f"expected two pieces separated by one space, got {merge!r}"
        else:
            ids = (piece_ids.get(parts[0]), piece_ids.get(parts[1]), piece_ids.get(parts[0] + parts[1]))
            if None not in ids:
                ranks.append(rank)
                for column, token_id in zip(columns, ids):
                    column.append(token_id)
                continue
            names = (parts[0], parts[1], parts[0] + parts[1])
            missing = next(name for name, i in zip(names, ids) if i is None)
            problem = f"merge {parts[0]!r} + {parts[1]!r}: {missing!r} is not in the vocabulary"
        if strict:
            raise MergeError(problem, rank)
    return (ranks, *columns)


def _cut_all(datas: list[bytes], triples) -> tuple[list[bytes], list[int]]:
    """`_cut_spans` as byte strings: all parts in order, and for string k the part index range
    bounds[k]:bounds[k+1].
    """
    import numpy as np

    joined = b"".join(datas)
    starts, bounds = _cut_spans(joined, np.fromiter(map(len, datas), dtype=np.int64, count=len(datas)), triples)
    offsets = [*starts.tolist(), len(joined)]
    return list(map(joined.__getitem__, map(slice, offsets, offsets[1:]))), bounds.tolist()


def _cut_spans(joined: bytes, lengths, triples):
    """Cut byte strings (joined, and their lengths) between two bytes no merge can ever join.

    A merge across the place between bytes i and i+1 makes a token that holds both: either
    exactly those two bytes, or a triple (i-1, i, i+1) or (i, i+1, i+2) of the same string.
    Where the vocabulary has none of these, no merge ever crosses, and the parts merge on
    their own. Returns (the start of every part in `joined`, in order; for string k the part
    index range bounds[k]:bounds[k+1]) as numpy arrays.
    """
    import numpy as np

    twos, bits = triples
    data = np.frombuffer(joined, dtype=np.uint8).astype(np.int32)  # (n,)
    n = len(data)
    ends = np.cumsum(lengths)
    first = np.zeros(n + 1, dtype=bool)                             # (n + 1,): a string starts here
    first[0] = True
    first[ends] = True
    cut = first.copy()
    if n > 1:
        code = data[:-1] << 8 | data[1:]                            # (n - 1,) place i: bytes i, i+1
        inner = _in_bitset(bits, code[:-1] << 8 | data[2:])          # (n - 2,) triple from byte i in a token
        left = np.zeros(n - 1, dtype=bool)                          # triple (i-1, i, i+1) in a token
        left[1:] = inner & ~first[1:n - 1]
        right = np.zeros(n - 1, dtype=bool)                         # triple (i, i+1, i+2) in a token
        right[:-1] = inner & ~first[2:n]
        two_token = np.frombuffer(twos, dtype=np.uint8)[code] == 1
        cut[1:n] |= ~(two_token | left | right)
    positions = np.flatnonzero(cut)                                 # part starts, then n
    bounds = np.searchsorted(positions, np.concatenate(([0], ends)))
    return positions[:-1], bounds


def _distinct_parts(joined: bytes, starts) -> tuple[list[bytes], object]:
    """(the distinct parts, as byte strings; for every part its index among them).

    The parts are joined[starts[i]:starts[i + 1]] (the last one runs to the end), told apart
    by `_distinct_spans`; only the distinct ones become Python objects.
    """
    import numpy as np

    ends = np.append(starts[1:], len(joined))
    first, which = _distinct_spans(joined, starts, ends)
    spans = map(slice, starts[first].tolist(), ends[first].tolist())
    return list(map(joined.__getitem__, spans)), which


def _gather_runs(flat, counts, which):
    """Concatenate run which[0], which[1], ... of `flat` (run k: counts[k] items, in order)
    -> (the items, the length of each gathered run).

    >>> import numpy as np
    >>> [a.tolist() for a in _gather_runs(np.array([7, 8, 9]), np.array([2, 1]), np.array([1, 0, 1]))]
    [[9, 7, 8, 9], [1, 2, 1]]
    """
    import numpy as np

    run_starts = np.cumsum(counts) - counts
    lengths = counts[which]
    out_starts = np.cumsum(lengths) - lengths
    index = np.repeat(run_starts[which] - out_starts, lengths) + np.arange(int(lengths.sum()))
    return flat[index], lengths


def _byte_offsets(data: bytes, char_offsets):
    """UTF-8 byte offsets in `data` of character offsets (numpy; len(data) for the end).

    >>> import numpy as np
    >>> _byte_offsets("aé中b".encode(), np.array([1, 2, 3, 4])).tolist()
    [1, 3, 6, 7]
    """
    import numpy as np

    units = np.frombuffer(data, dtype=np.uint8)
    if len(units) == char_offsets[-1]:  # ASCII
        return char_offsets
    char_starts = np.flatnonzero((units & 0xC0) != 0x80)             # (chars,) not a continuation byte
    return np.append(char_starts, len(units))[char_offsets]


def _distinct_spans(data: bytes, starts, ends):
    """(one index of each distinct span of `data`, in increasing order; for every span the
    number of its distinct one) as numpy arrays.

    Spans of up to 7 bytes are told apart by their bytes and length packed into 64 bits; longer
    ones by a 56-bit hash of their 8-byte words, checked word for word against the span they
    are taken for (`_distinct_spans_reference` if any hash collides).

    >>> import numpy as np
    >>> first, which = _distinct_spans(b"abcab", np.array([0, 2, 3]), np.array([2, 3, 5]))
    >>> [b"abcab"[s:e] for s, e in zip([0, 2, 3], [2, 3, 5])], which[first].tolist(), which.tolist()[0] == which.tolist()[2]
    ([b'ab', b'c', b'ab'], [0, 1], True)
    """
    import numpy as np

    lengths = ends - starts
    words = np.ndarray((len(data) + 1,), dtype="<u8", buffer=data + bytes(8), strides=(1,))
    short = np.minimum(lengths, _KEY_BYTES)
    masks = np.array([(1 << 8 * k) - 1 for k in range(_KEY_BYTES + 1)], dtype=np.uint64)  # k first bytes
    keys = words[starts] & masks[short] | short.astype(np.uint64) << np.uint64(56)
    long = np.flatnonzero(lengths > _KEY_BYTES)
    if len(long):
        keys[long] = _span_hashes(words, starts[long], ends[long]) | np.uint64(0xFF << 56)
    taken = _group_keys(keys)
    other = long[taken[long] != long]                                 # long spans taken for another
    if len(other) and not _same_spans(words, starts[other], ends[other], starts[taken[other]], ends[taken[other]]):
        return _distinct_spans_reference(data, starts, ends)
    own = taken == np.arange(len(keys))                               # (spans,) each distinct one's own
    number = np.cumsum(own) - 1
    return np.flatnonzero(own), number[taken]


def _group_keys(keys):
    """For every key the index of one occurrence of it (the same for all of them) (numpy).

    Each key claims a slot of a table twice as large as the key list (one claimant wins); the
    keys that find their own value at their slot's winner are done, and the few whose slot went
    to another key are grouped by sorting.

    >>> import numpy as np
    >>> taken = _group_keys(np.array([5, 9, 5, 5], dtype=np.uint64))
    >>> bool(taken[0] == taken[2] == taken[3] != taken[1] == 1)
    True
    """
    import numpy as np

    bits = max(2 * len(keys), 2).bit_length()
    with np.errstate(over="ignore"):
        slot = ((keys * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits)).astype(np.int64)
    winner = np.empty(1 << bits, dtype=np.int64)
    winner[slot] = np.arange(len(keys))                               # of several claimants, one wins
    taken = winner[slot]
    lost = np.flatnonzero(keys[taken] != keys)
    if len(lost):
        order = lost[np.argsort(keys[lost])]
        ordered = keys[order]
        new = np.empty(len(order), dtype=bool)
        new[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
        taken[order] = order[new][np.cumsum(new) - 1]                 # the first of each run in sorted order
    return taken


def _span_hashes(words, starts, ends):
    """56-bit hashes of spans of at least 8 bytes from their 8-byte words (the last one ends at the span's end)."""
    import numpy as np

    count_words = (ends - starts + 7) // 8                             # (spans,)
    base = np.cumsum(count_words) - count_words
    k = np.arange(int(count_words.sum())) - np.repeat(base, count_words)  # (words,) word number in its span
    at = np.repeat(starts, count_words) + 8 * k
    np.minimum(at, np.repeat(ends - 8, count_words), out=at)          # the last word: the span's last 8 bytes
    with np.errstate(over="ignore"):
        mixed = (words[at] ^ k.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) * np.uint64(0xBF58476D1CE4E5B9)
        mixed ^= mixed >> np.uint64(31)
        hashes = np.add.reduceat(mixed, base) * np.uint64(0x94D049BB133111EB) + (ends - starts).astype(np.uint64)
    return hashes & np.uint64((1 << 56) - 1)


def _same_spans(words, a_starts, a_ends, b_starts, b_ends) -> bool:
    """Whether every span a equals span b (equal lengths, same 8-byte words)."""
    import numpy as np

    if not np.array_equal(a_ends - a_starts, b_ends - b_starts):
        return False
    count_words = (a_ends - a_starts + 7) // 8
    base = np.cumsum(count_words) - count_words
    step = 8 * (np.arange(int(count_words.sum())) - np.repeat(base, count_words))
    a = np.minimum(np.repeat(a_starts, count_words) + step, np.repeat(a_ends - 8, count_words))
    b = np.minimum(np.repeat(b_starts, count_words) + step, np.repeat(b_ends - 8, count_words))
    return bool(np.array_equal(words[a], words[b]))


def _distinct_spans_reference(data: bytes, starts, ends):
    """`_distinct_spans` with a dict of byte strings (the slow, readable definition)."""
    import numpy as np

    spans = list(map(data.__getitem__, map(slice, starts.tolist(), ends.tolist())))
    number = dict(zip(dict.fromkeys(spans), count()))
    which = np.fromiter(map(number.__getitem__, spans), dtype=np.int64, count=len(spans))
    first = np.full(len(number), len(spans), dtype=np.int64)
    np.minimum.at(first, which, np.arange(len(spans)))
    return first, which


def _flat_ids(packed: list[bytes]):
    """Packed ids (`pack_ids`) of several strings -> (all ids one after another, the number of
    each) as numpy arrays."""
    import numpy as np

    counts = np.fromiter(map(len, packed), dtype=np.int64, count=len(packed)) // ID_SIZE
    return np.frombuffer(b"".join(packed), dtype=np.uintc), counts


def _split_bytes(data: bytes, ends: Iterable[int]) -> list[bytes]:
    """data cut at the given end offsets (the last one should be len(data)), at C speed.

    >>> _split_bytes(b"abcd", [1, 1, 4])
    [b'a', b'', b'bcd']
    """
    ends = list(ends)
    return list(map(data.__getitem__, map(slice, [0, *ends], ends)))


def _utf8_all(pieces: list[str]) -> list[bytes]:
    """`utf8` of every piece, at C speed when none has a lone surrogate."""
    try:
        return list(map(str.encode, pieces))
    except UnicodeEncodeError:
        return list(map(utf8, pieces))


def pack_ids(ids: Iterable[int]) -> bytes:
    """Ids packed as native unsigned ints, the form the caches keep them in.

    Byte strings are not tracked by the garbage collector (tuples are, until its first pass
    over them: ~40 ms after a cold 2 MB encode), and a run of them joins in one C call.

    >>> unpack_ids(pack_ids([1, 70000]))
    [1, 70000]
    """
    return array(ID_CODE, ids).tobytes()


def unpack_ids(data: bytes) -> list[int]:
    """The ids of `pack_ids` output (or of several joined)."""
    return memoryview(data).cast(ID_CODE).tolist()


def _in_bitset(bits, codes):
    """Membership of int codes in a little-endian bitset (numpy)."""
    return (bits[codes >> 3] >> (codes & 7).astype(bits.dtype)) & 1 == 1


def _inner_triples(token_bytes: list[bytes]):
    """(65536 flags: the 2-byte tokens; a 2**24-bit set of byte triples found inside tokens)."""
    import numpy as np

    # in slices: one C pass over a 262k vocabulary held the GIL for ~20 ms
    lengths = sliced_array(map(len, token_bytes), np.int64)
    twos = np.zeros(1 << 16, dtype=np.uint8)
    two = [t for t in token_bytes if len(t) == 2]
    if two:
        pair = np.frombuffer(b"".join(two), dtype=np.uint8).astype(np.int32).reshape(-1, 2)
        twos[pair[:, 0] << 8 | pair[:, 1]] = 1
    data = np.frombuffer(sliced_join(b"", token_bytes), dtype=np.uint8).astype(np.int32)
    seen = np.zeros(1 << 24, dtype=bool)
    if len(data) > 2:
        codes = data[:-2] << 16 | data[1:-1] << 8 | data[2:]      # (n - 2,) every byte triple
        start = np.cumsum(lengths) - lengths                        # first byte of each token
        inside = np.ones(len(data) + 2, dtype=bool)
        # a triple starting at p stays inside one token unless a token starts at p+1 or p+2
        inside[start[lengths > 0] - 1] = False
        inside[start[lengths > 0] - 2] = False
        seen[codes[inside[:len(codes)]]] = True
    return twos.tobytes(), np.packbits(seen, bitorder="little")


def _inner_pairs(token_bytes: list[bytes]) -> bytes:
    """65536 flags: which byte pairs (a << 8 | b) occur next to each other inside some token."""
    import numpy as np

    lengths = sliced_array(map(len, token_bytes), np.int64)  # in slices, as in _inner_triples
    data = np.frombuffer(sliced_join(b"", token_bytes), dtype=np.uint8).astype(np.int32)
    codes = data[:-1] << 8 | data[1:]                    # (n_bytes - 1,) every neighbouring pair
    inside = np.ones(len(data), dtype=bool)              # (one more: empty pieces may end the list)
    inside[np.cumsum(lengths)[:-1][lengths[:-1] > 0] - 1] = False  # pairs across two tokens
    table = np.zeros(1 << 16, dtype=np.uint8)
    table[codes[inside[:len(codes)]]] = 1
    return table.tobytes()


def _pack(high: Sequence[int], low: Sequence[int], shift: int) -> list[int]:
    """[h << shift | l ...] for two equal-length int columns (numpy for long ones, a slice of
    `SLICE` items per pass: one pass over a 262k vocabulary held the GIL for ~60 ms)."""
    if len(high) < 4096:
        return [h << shift | l for h, l in zip(high, low)]
    import numpy as np

    def column(values: Sequence[int]):
        if isinstance(values, range):
            return np.arange(values.start, values.stop, values.step, dtype=np.int64)
        return np.fromiter(values, dtype=np.int64, count=len(values))

    out: list[int] = []
    for start in range(0, len(high), SLICE):
        pause()
        stop = start + SLICE
        out += (column(high[start:stop]) << shift | column(low[start:stop])).tolist()
    return out


def _compile_all(pattern) -> list[regex.Pattern]:
    """One compiled pattern per pre-tokenizer stage."""
    items = [pattern] if isinstance(pattern, (str, regex.Pattern)) else list(pattern)
    return [p if isinstance(p, regex.Pattern) else pats.get_pattern(p) for p in items]


__all__ = ["ByteLevelBPETokenizer", "MergeError", "replace_surrogates", "utf8"]
