"""The best few segmentations of a word under a unigram model.

BPE builds a token by merges, which the Tokenize view lists. A unigram model instead picks,
among every way to cut the word into vocabulary pieces, the one whose piece scores (log
probabilities) sum highest. What explains its choice is the runner-up: the next-best
segmentations and how far behind they are. This keeps the k best partial paths at every
byte offset of the lattice (`sentencepiece.lattice_steps`), so the k best whole paths come
out exactly; scores are summed in float64 for display (the encoder's float32 arithmetic
decides near-ties, and `ranked_cuts` puts the encoder's own choice first).
"""
from __future__ import annotations

from heapq import nlargest
from typing import Callable, NamedTuple, Sequence

from forma_gui.core.tokenizer import Alternative


class Segmentation(NamedTuple):
    """One way to cut a word: its pieces' ids and byte spans, and their summed score."""

    ids: tuple[int, ...]
    spans: tuple[tuple[int, int], ...]
    score: float


def best_segmentations(steps: Sequence[tuple[int, int, bool, list]], n: int, scores: Sequence[float],
                       unk_id: int, unk_score: float, k: int) -> list[Segmentation]:
    """The k highest-scoring segmentations of an n-byte word, best first (equal scores in
    the order their last pieces were reached).

    `steps` is `lattice_steps`' output: per character start, its one-character step's end,
    whether a piece ends there, and the pieces from there as (end, id). A character that no
    one-character piece covers is also the unknown piece (`unk_id`, `unk_score`), as the
    encoder's lattice has it.

    >>> steps = [(0, 1, True, [(1, 0), (2, 2)]), (1, 2, True, [(2, 1)])]
    >>> [(s.ids, s.score) for s in best_segmentations(steps, 2, [-1.0, -1.5, -3.0], 9, -10.0, 5)]
    [((0, 1), -2.5), ((2,), -3.0)]
    """
    if k < 1 or n == 0:
        return []
    # per byte offset: up to k (score, offset before, rank there, piece id), best first
    paths: dict[int, list[tuple[float, int, int, int]]] = {0: [(0.0, -1, -1, -1)]}
    arrivals: dict[int, list[tuple[float, int, int, int, int]]] = {}
    for i, single, has_single, edges in steps:
        here = _settle(paths, arrivals, i, k)
        if not here:
            continue
        out = list(edges) if has_single else [*edges, (single, -1)]
        for j, piece_id in out:
            add = unk_score if piece_id < 0 else scores[piece_id]
            found = arrivals.setdefault(j, [])
            for rank, (score, *_) in enumerate(here):
                found.append((score + add, len(found), i, rank, unk_id if piece_id < 0 else piece_id))
    ends = _settle(paths, arrivals, n, k)
    return [_backtrack(paths, n, rank) for rank in range(len(ends))]


def _settle(paths: dict, arrivals: dict, j: int, k: int) -> list[tuple[float, int, int, int]]:
    """The k best partial paths ending at offset j, kept in `paths` (arrivals are complete
    once the steps reach j: every piece ending there starts before it)."""
    if j not in paths:
        found = arrivals.pop(j, [])
        # highest score first; among equals, the one that arrived first
        best = nlargest(k, found, key=lambda a: (a[0], -a[1]))
        paths[j] = [(score, i, rank, piece_id) for score, _, i, rank, piece_id in best]
    return paths[j]


def _backtrack(paths: dict, n: int, rank: int) -> Segmentation:
    ids, spans = [], []
    score = paths[n][rank][0]
    end = n
    while end > 0:
        _, start, before, piece_id = paths[end][rank]
        ids.append(piece_id)
        spans.append((start, end))
        end, rank = start, before
    return Segmentation(tuple(reversed(ids)), tuple(reversed(spans)), score)


def ranked_cuts(normalized: bytes, steps: Sequence[tuple[int, int, bool, list]], scores: Sequence[float],
                unk_id: int, unk_score: float, picked: Sequence[tuple[int, int]],
                piece: Callable[[int], str], k: int) -> list[Alternative]:
    """What a unigram tokenizer's `segmentations` shows for a normalized word: the cut its
    encoder `picked` ((id, byte length) pairs: the encoder's arithmetic decides near-ties),
    then the next best of the k best (`best_segmentations` over the word's `steps`). A run of
    unknown pieces is shown as one, as encoding reports it, with the text it covers; other
    pieces as `piece` gives them."""
    if k < 1 or not normalized:
        return []
    paths = best_segmentations(steps, len(normalized), scores, unk_id, unk_score, k)
    ids, spans, end = [], [], 0
    for piece_id, length in picked:
        ids.append(piece_id)
        spans.append((end, end + length))
        end += length
    chosen = Segmentation(tuple(ids), tuple(spans),
                          sum(unk_score if i == unk_id else scores[i] for i in ids))
    others = [p for p in paths if (p.ids, p.spans) != (chosen.ids, chosen.spans)][:k - 1]

    def shown(path: Segmentation, is_chosen: bool) -> Alternative:
        cut: list[list] = []  # [id, start, end]
        for i, (a, b) in zip(path.ids, path.spans):
            if i == unk_id and cut and cut[-1][0] == unk_id:
                cut[-1][2] = b
            else:
                cut.append([i, a, b])
        pieces = tuple(normalized[a:b].decode("utf-8", "replace") if i == unk_id else piece(i)
                       for i, a, b in cut)
        return Alternative(pieces, tuple(i for i, _, _ in cut), path.score, is_chosen)

    return [shown(chosen, True)] + [shown(p, False) for p in others]
