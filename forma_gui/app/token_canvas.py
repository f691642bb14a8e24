"""The segmentation rendering: tokens drawn as coloured chips, laid out lazily.

A million-token document must neither build a million widgets nor freeze while it is
laid out. So the canvas paints chips itself (QAbstractScrollArea.paintEvent), lays them
out in slices of a few milliseconds on a zero-timer, and keeps only flat arrays: per item
its first token, x and width; per line its first item. Every line has the same height, so
line ``l`` sits at ``y = TOP + l * line_height`` and painting touches only visible lines.

An *item* is one token, or a *group*: a run of tokens whose character spans overlap
because they split one character's UTF-8 bytes (GPT-2 byte pieces, SentencePiece
``<0xE2><0x82><0xAC>``). A group is drawn as one frame holding the character, then its
parts; each part is marked partial (dashed edge) and labelled with its bytes in hex,
never with a bare U+FFFD.
"""
from __future__ import annotations

import math
import unicodedata
from array import array
from bisect import bisect_right
from time import perf_counter

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontDatabase, QFontMetricsF, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QAbstractScrollArea, QToolTip

from forma_gui.app.palette import HUES, border_color, token_color, too_close
from forma_gui.app.token_store import TokenStore
from forma_gui.app.workers import mark_gui_busy

N_HUES = len(HUES)
CLOSE = [[too_close(a, b) for b in range(N_HUES)] for a in range(N_HUES)]

MARGIN = 8.0          # left/right/top margin of the canvas
HPAD = 3.0            # horizontal padding inside a chip
VPAD = 2.0            # vertical padding inside a chip
GAP = 2.0             # between chips
LINE_GAP = 5.0        # between lines
GROUP_PAD = 3.0       # inside a group frame
RUN_GAP = 3.0         # between the text and the hex part of a partial token's label
SLICE_SECONDS = 0.008  # layout work per event-loop turn
MAX_NEWLINES = 2      # line breaks drawn for one token (a run of blank lines collapses)
#: chip pixmaps kept (`TokenCanvas._chip_pixmap`) up to about this many bytes, then drawn afresh
CHIP_CACHE_BYTES = 24 << 20

#: whitespace made visible; control characters are always shown as their pictures
VISIBLE_WS = {ord(" "): "·", ord("\t"): "⇥", ord("\n"): "↵"}
PLAIN_WS = {ord("\t"): "    ", ord("\n"): ""}
CONTROL_PICTURES = {c: chr(0x2400 + c) for c in range(32) if c not in (9, 10)}
CONTROL_PICTURES[0x7F] = "␡"
#: invisible format characters that matter in tokenization, shown by name
INVISIBLE = {0x200D: "ZWJ", 0x200C: "ZWNJ", 0x200B: "ZWSP", 0xFE0F: "VS16", 0xFE0E: "VS15",
             0xFEFF: "BOM", 0x00AD: "SHY", 0x2060: "WJ"}
SHOWN = CONTROL_PICTURES | INVISIBLE


def utf8_runs(data: bytes) -> list[tuple[str, bool]]:
    """Split bytes into (text, False) runs of valid UTF-8 and (hex, True) runs of the rest.

    >>> utf8_runs(" \xd0\xbe\xd0".encode("latin-1"))
    [(' о', False), ('D0', True)]
    """
    runs: list[tuple[str, bool]] = []
    i = 0
    while i < len(data):
        try:
            runs.append((data[i:].decode("utf-8"), False))
            break
        except UnicodeDecodeError as e:
            if e.start:
                runs.append((data[i:i + e.start].decode("utf-8"), False))
            runs.append((hex_bytes(data[i + e.start:i + e.end]), True))
            i += e.end
    merged: list[tuple[str, bool]] = []
    for text, is_hex in runs:  # an invalid sequence can be reported in pieces
        if merged and is_hex and merged[-1][1]:
            merged[-1] = (merged[-1][0] + " " + text, True)
        else:
            merged.append((text, is_hex))
    return merged


def hex_bytes(data: bytes) -> str:
    """Bytes as spaced hex.

    >>> hex_bytes(b"\\xe2\\x82")
    'E2 82'
    """
    return data.hex(" ").upper()


class TokenCanvas(QAbstractScrollArea):
    """Paints a segmentation; emits ``token_clicked(index)`` for a click on a chip."""

    token_clicked = Signal(int)
    layout_finished = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("tokenView")
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.viewport().setMouseTracking(False)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.text = ""
        self.tokens = TokenStore()
        self.as_stored = False
        self.visible_ws = False
        self.show_ids = False
        self.selected: int | None = None
        self.highlight_id: int | None = None
        self.fast_layout = True   # False: the reference layout path (for tests)
        self.reuse_layout = True  # False: every segmentation is laid out from scratch (tests)
        self._tail: dict | None = None  # the old layout's reusable end, see _reuse
        self._timer = QTimer(self, singleShot=True, interval=0, timeout=self._layout_slice)
        self._chips: dict[tuple, QPixmap] = {}  # chip pixmaps per look (`_chip_pixmap`)
        self._chip_bytes, self._chip_look, self._dpr = 0, None, 1.0
        self._set_fonts()
        self._reset_layout()

    # ---- public API -----------------------------------------------------------------
    def set_segmentation(self, text: str, tokens, changed=None) -> None:
        """Show `tokens` (a TokenStore, or a list of Token) of `text`; layout runs in slices.

        `changed` (a `core.incremental.Splice`), when the caller knows it: the tokens the
        new segmentation replaced, all others being the old ones (shifted by the text's change
        in length after it). The layout then keeps the rest without comparing every token."""
        if not isinstance(tokens, TokenStore):
            tokens = TokenStore.from_tokens(list(tokens), None)
        old = self._layout_state()
        anchor = self.first_visible_token() if len(self.tokens) else None
        self.text, self.tokens = text, tokens
        self.selected = None
        if not (self.reuse_layout and self._reuse(old, changed)):
            self._reset_layout()
            self._anchor = anchor  # stay where the reader was, not back at the top

    def set_options(self, *, as_stored: bool | None = None, visible_ws: bool | None = None,
                    show_ids: bool | None = None) -> None:
        """Change the rendering toggles; re-lays out, keeping the top token in view."""
        if as_stored is not None:
            self.as_stored = as_stored
        if visible_ws is not None:
            self.visible_ws = visible_ws
        if show_ids is not None:
            self.show_ids = show_ids
        self._set_fonts()
        self._reset_layout(keep_anchor=True)

    def set_selected(self, index: int | None, *, scroll: bool = True) -> None:
        self.selected = index
        if scroll and index is not None:
            self.scroll_to_token(index)
        self.viewport().update()

    def set_highlight_id(self, token_id: int | None) -> None:
        """Outline every occurrence of `token_id` (a token picked in another view)."""
        self.highlight_id = token_id
        self.viewport().update()

    @property
    def laid_out(self) -> bool:
        """Whether every token has a place yet."""
        return self._next_token >= len(self.tokens)

    @property
    def line_count(self) -> int:
        return len(self._line_item)

    def runs(self, k: int, tok=None) -> tuple[tuple[str, bool], ...]:
        """What token k's chip shows: (text, is_hex) runs under the current toggles."""
        tok = self.tokens[k] if tok is None else tok
        if tok.special:
            return ((tok.piece, False),)
        if self.as_stored:
            return ((tok.piece.translate(SHOWN), False),)
        if tok.partial:  # the valid part as text, the character fragment as hex, never U+FFFD
            return tuple((t if is_hex else self._show_text(t), is_hex) for t, is_hex in utf8_runs(tok.data))
        return ((self._show_text(self.text[tok.start:tok.end]), False),)

    def label(self, k: int) -> str:
        """Token k's chip text as one string (hex runs set off by spaces)."""
        tok = self.tokens[k]
        return " ".join(text for text, _ in self.runs(k, tok)) if tok.partial else self.runs(k, tok)[0][0]

    def token_at(self, pos: QPointF) -> int | None:
        """The token index under a viewport position, or None."""
        hit = self._item_at(pos)
        if hit is None:
            return None
        item, x = hit
        first, last = self._item_tokens(item)
        if last - first == 1:
            return first
        for k, (px, pw) in zip(range(first, last), self._part_boxes(item)):
            if x < px + pw + GAP / 2:
                return k
        return last - 1

    def token_rect(self, k: int) -> QRectF | None:
        """Token k's chip in viewport coordinates (None if not laid out yet)."""
        item = self._item_of_token(k)
        if item is None:
            return None
        line = bisect_right(self._line_item, item) - 1
        y = MARGIN + line * self._line_h - self.verticalScrollBar().value()
        first, last = self._item_tokens(item)
        if last - first == 1:
            return QRectF(self._item_x[item], y + GROUP_PAD, self._item_w[item], self._chip_h - 2 * GROUP_PAD)
        px, pw = self._part_boxes(item)[k - first]
        return QRectF(px, y + GROUP_PAD, pw, self._chip_h - 2 * GROUP_PAD)

    def scroll_to_token(self, k: int) -> None:
        """Scroll so token k is visible (deferred until it has been laid out)."""
        if self._item_of_token(k) is None:
            self._anchor = k
            return
        rect = self.token_rect(k)
        bar = self.verticalScrollBar()
        if rect.top() < 0 or rect.bottom() > self.viewport().height():
            bar.setValue(int(bar.value() + rect.top() - self.viewport().height() / 3))

    def first_visible_token(self) -> int:
        if not self._item_first:
            return 0
        line = max(0, int((self.verticalScrollBar().value() - MARGIN) // self._line_h))
        line = min(line, len(self._line_item) - 1)
        item = min(self._line_item[line], len(self._item_first) - 1)
        return self._item_first[item]

    # ---- layout -----------------------------------------------------------------------
    def _set_fonts(self) -> None:
        base = QFont(self.font())
        base.setPointSizeF(max(base.pointSizeF(), 9.0) + 1.5)
        self._font = base
        self._bold = QFont(base)
        self._bold.setBold(True)
        self._small = QFont(self.font())
        self._small.setPointSizeF(max(self.font().pointSizeF() - 1.5, 7.0))
        self._fm = QFontMetricsF(self._font)
        self._fm_bold = QFontMetricsF(self._bold)
        self._fm_small = QFontMetricsF(self._small)
        self._hex = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self._hex.setPointSizeF(base.pointSizeF() - 2.0)
        self._fm_hex = QFontMetricsF(self._hex)
        self._chip_h = self._fm.height() + 2 * VPAD + 2 * GROUP_PAD
        self._id_h = self._fm_small.height() if self.show_ids else 0.0
        self._line_h = self._chip_h + self._id_h + LINE_GAP
        self._widths: dict = {}
        self._fast_widths: dict = {}  # raw span (and id) -> chip width, for the current toggles
        self._small_widths: dict[str, float] = {}
        self._dark = self.palette().base().color().lightnessF() < 0.5

    def _reset_layout(self, keep_anchor: bool = False) -> None:
        anchor = self.first_visible_token() if keep_anchor and self.tokens else None
        self._item_first = array("i")   # first token of each item
        self._item_x = array("d")
        self._item_w = array("d")
        self._line_item = array("i", [0])  # first item of each line
        self._slot = bytearray()        # hue slot per token
        self._shade = bytearray()       # 0/1 lightness per token
        self._next_token = 0
        self._x = MARGIN
        self._avail = max(self.viewport().width() - 2 * MARGIN, 40.0)
        self._fast_widths = {}  # they are clamped to the width available
        self._anchor = anchor
        self._tail = None
        self.verticalScrollBar().setValue(0)
        self._timer.start()
        self.viewport().update()

    def _layout_slice(self) -> None:
        """Lay out tokens for a few milliseconds; reschedules itself until done."""
        mark_gui_busy()  # a worker encoding meanwhile waits for this slice (see workers)
        place = self._place_fast if self.fast_layout else self._place_items
        first_line = len(self._line_item) - 1
        k = place(self._next_token, perf_counter() + SLICE_SECONDS)
        self._next_token = k
        self._update_scrollbar()
        if k < len(self.tokens):
            self._timer.start()
        else:
            self._tail = None
            self.layout_finished.emit()
        if self._anchor is not None and self._item_of_token(self._anchor) is not None:
            anchor, self._anchor = self._anchor, None
            self.scroll_to_token(anchor)
        top = MARGIN + first_line * self._line_h - self.verticalScrollBar().value()
        if top <= self.viewport().height():  # new lines (or the progress note) are in view
            self.viewport().update()

    # ---- re-layout after an edit: keep what did not change -------------------------------
    def _layout_state(self) -> dict:
        return {"text": self.text, "tokens": self.tokens, "first": self._item_first,
                "x": self._item_x, "w": self._item_w, "lines": self._line_item,
                "slot": self._slot, "shade": self._shade, "next": self._next_token,
                "end_x": self._x, "avail": self._avail}

    def _reuse(self, old: dict, changed=None) -> bool:
        """Keep the old layout up to the line before the first changed token, and arrange
        to splice its unchanged end back in (see _join_tail). False: lay out afresh.

        Typing in a 1 MB document then re-lays out a few lines, not 250k tokens; with the
        splice `changed` given, without comparing the two segmentations token by token.
        """
        new, prev = self.tokens, old["tokens"]
        if not len(prev) or not len(new) or old["avail"] != self._avail or not old["next"]:
            return False
        if changed is not None and len(new) - len(prev) == changed.added - changed.removed:
            first, tail = changed.first, len(new) - changed.first - changed.added
        else:
            first, tail = self._compare(new, prev, len(self.text) - len(old["text"]))
        restart = self._truncate_before(min(first, old["next"]), old)
        if restart is None:
            return False
        if tail > 0:  # tokens [len(new) - tail, len(new)) equal the old ones, shifted
            self._tail = dict(old, start=len(new) - tail, dn=len(new) - len(prev))
        self._next_token = restart
        self._timer.start()
        self.viewport().update()
        return True

    @staticmethod
    def _compare(new: TokenStore, prev: TokenStore, shift: int) -> tuple[int, int]:
        """(the first token that differs, how many at the end equal the old ones shifted by
        `shift` characters), token by token in numpy."""
        import numpy as np

        ids_new, ids_old = np.frombuffer(new.ids, np.int32), np.frombuffer(prev.ids, np.int32)
        st_new, st_old = np.frombuffer(new.starts, np.int32), np.frombuffer(prev.starts, np.int32)
        fl_new, fl_old = np.frombuffer(new.flags, np.uint8), np.frombuffer(prev.flags, np.uint8)
        m = min(len(new), len(prev))
        diff = np.flatnonzero((ids_new[:m] != ids_old[:m]) | (st_new[:m] != st_old[:m])
                              | (fl_new[:m] != fl_old[:m]))
        first = int(diff[0]) if len(diff) else m
        tail = min(len(new), len(prev)) - first
        if tail > 0:
            same = ((ids_new[len(new) - tail:] == ids_old[len(prev) - tail:])
                    & (st_new[len(new) - tail:] == st_old[len(prev) - tail:] + shift)
                    & (fl_new[len(new) - tail:] == fl_old[len(prev) - tail:]))
            bad = np.flatnonzero(~same)
            tail -= int(bad[-1]) + 1 if len(bad) else 0
        return first, tail

    def _truncate_before(self, k: int, old: dict) -> int | None:
        """Cut the old layout back to the start of the line before the one holding token k
        (that line may now take what used to wrap); returns the token to resume at."""
        lines, first = old["lines"], old["first"]
        if not len(first):
            return None
        item = bisect_right(first, k - 1) - 1 if k else 0
        line = max(0, bisect_right(lines, item) - 2)
        if line == 0:
            return None
        keep_items = lines[line]
        restart = first[keep_items] if keep_items < len(first) else old["next"]
        self._item_first = first[:keep_items]
        self._item_x = old["x"][:keep_items]
        self._item_w = old["w"][:keep_items]
        self._line_item = lines[:line + 1]
        self._slot = old["slot"][:restart]
        self._shade = old["shade"][:restart]
        self._x = MARGIN
        return restart

    def _join_tail(self, k: int) -> int | None:
        """At a hard line break before token k: if the old layout had the same break before
        the same (shifted) token, copy its remaining lines instead of laying them out.
        Returns the token to continue at, or None to carry on normally."""
        tail = self._tail
        if k < tail["start"] or k >= len(self.tokens):
            return None
        k_old = k - tail["dn"]
        first, lines = tail["first"], tail["lines"]
        item = bisect_right(first, k_old) - 1
        if item < 0 or first[item] != k_old or k_old >= tail["next"]:
            return None
        line = bisect_right(lines, item) - 1
        if lines[line] != item or tail["x"][item] != MARGIN:
            return None
        slot = tail["slot"][k_old]
        shade = 1 - self._shade[k - 1] if CLOSE[slot][self._slot[k - 1]] else 0
        if shade != tail["shade"][k_old]:
            return None  # the colours after this point alternate differently
        d_items = len(self._item_first) - item
        self._item_first.frombytes(_shifted(first, item, tail["dn"]))
        self._item_x.extend(tail["x"][item:])
        self._item_w.extend(tail["w"][item:])
        self._line_item.pop()  # the break just made is the old line's own start
        self._line_item.frombytes(_shifted(lines, line, d_items))
        self._slot.extend(tail["slot"][k_old:])
        self._shade.extend(tail["shade"][k_old:])
        self._x = tail["end_x"]
        self._tail = None
        return tail["next"] + tail["dn"]

    def _place_items(self, k: int, deadline: float) -> int:
        """Reference layout: one item at a time through _place_item, until the deadline."""
        tokens, n = self.tokens, len(self.tokens)
        while k < n:
            k = self._place_item(k, tokens, n)
            if not (len(self._item_first) & 127) and perf_counter() > deadline:
                break
        return k

    def _place_fast(self, k: int, deadline: float) -> int:
        """The same layout as _place_items, with plain tokens inlined (~3x faster).

        Plain = not partial, not special, not overlapping the next token, shown as text.
        Anything else goes through _place_item. Tested against _place_items.
        """
        n, text = len(self.tokens), self.text
        ids, starts, ends, flags = self.tokens.ids, self.tokens.starts, self.tokens.ends, self.tokens.flags
        if self.as_stored:
            return self._place_items(k, deadline)
        widths, advance = self._fast_widths, self._fm.horizontalAdvance
        table = VISIBLE_WS if self.visible_ws else PLAIN_WS
        slots, shades, close = self._slot, self._shade, CLOSE
        first_append, x_append, w_append = (self._item_first.append, self._item_x.append,
                                            self._item_w.append)
        avail, right, show_ids = self._avail, MARGIN + self._avail, self.show_ids
        x = self._x
        count = 0
        while k < n:
            end = ends[k]
            if flags[k] or (k + 1 < n and starts[k + 1] < end):  # partial, special, overlap
                self._x = x
                k = self._place_item(k, self.tokens, n)
                x = self._x
                continue
            span, tid = text[starts[k]:end], ids[k]
            key = (span, tid) if show_ids else span
            w = widths.get(key)
            if w is None:
                w = max(advance(span.translate(table).translate(SHOWN)), 6.0) + 2 * HPAD
                if show_ids:
                    w = max(w, self._small_width(str(tid)) + 2 * HPAD)
                w = widths[key] = min(w, avail)
            h = (tid * 0x9E3779B1) & 0xFFFFFFFF
            slot = (h ^ (h >> 16)) % N_HUES
            shades.append(1 - shades[k - 1] if k and close[slot][slots[k - 1]] else 0)
            slots.append(slot)
            if x > MARGIN and x + w > right:
                self._line_item.append(len(self._item_first))
                x = MARGIN
            first_append(k)
            x_append(x)
            w_append(w)
            x += w + GAP
            if "\n" in span:
                for _ in range(min(span.count("\n"), MAX_NEWLINES)):
                    self._line_item.append(len(self._item_first))
                x = MARGIN
                if self._tail is not None:
                    joined = self._join_tail(k + 1)
                    if joined is not None:
                        return joined
            k += 1
            count += 1
            if not (count & 255) and perf_counter() > deadline:
                break
        self._x = x
        return k

    def _place_item(self, k: int, tokens: TokenStore, n: int) -> int:
        """Place the item starting at token k; returns the first token after it."""
        starts, ends = tokens.starts, tokens.ends
        j, end = k + 1, ends[k]
        while j < n and starts[j] < end:  # overlapping spans: one character split
            end = max(end, ends[j])
            j += 1
        self._colour(k, j, tokens)
        w = self._item_width(k, j) if j - k == 1 else self._group_width(k, j)
        w = min(w, self._avail)
        if self._x > MARGIN and self._x + w > MARGIN + self._avail:
            self._new_line()
        self._item_first.append(k)
        self._item_x.append(self._x)
        self._item_w.append(w)
        self._x += w + GAP
        newlines = self.text.count("\n", starts[k], end)
        for _ in range(min(newlines, MAX_NEWLINES)):
            self._new_line()
        if newlines and self._tail is not None:
            joined = self._join_tail(j)
            if joined is not None:
                return joined
        return j

    def _new_line(self) -> None:
        self._line_item.append(len(self._item_first))
        self._x = MARGIN

    def _colour(self, k: int, j: int, tokens: TokenStore) -> None:
        """Hue slot per token from its id; alternate the shade when the neighbour is close."""
        for i in range(k, j):
            h = (tokens.ids[i] * 0x9E3779B1) & 0xFFFFFFFF
            slot = (h ^ (h >> 16)) % len(HUES)
            shade = 0
            if i and CLOSE[slot][self._slot[i - 1]]:
                shade = 1 - self._shade[i - 1]
            self._slot.append(slot)
            self._shade.append(shade)

    def _item_width(self, k: int, j: int) -> float:
        """Width of token k's chip (j is k + 1; the signature matches _group_width)."""
        tok = self.tokens[k]
        w = self._runs_width(self.runs(k, tok), tok.special)
        w = max(w, 6.0) + 2 * HPAD
        if self.show_ids:
            w = max(w, self._small_width(str(tok.id)) + 2 * HPAD)
        return w

    def _group_width(self, k: int, j: int) -> float:
        char_w = self._fm_bold.horizontalAdvance(self._group_char(k, j))
        parts = sum(self._item_width(i, i + 1) for i in range(k, j))
        return 2 * GROUP_PAD + char_w + GAP * 2 + parts + GAP * (j - k - 1)

    def _runs_width(self, runs: tuple, special: bool) -> float:
        key = (runs, special)
        w = self._widths.get(key)
        if w is None:
            fm = self._fm_bold if special else self._fm
            w = sum((self._fm_hex if is_hex else fm).horizontalAdvance(text) for text, is_hex in runs)
            w = self._widths[key] = w + RUN_GAP * (len(runs) - 1)
        return w

    def _small_width(self, s: str) -> float:
        w = self._small_widths.get(s)
        if w is None:
            w = self._small_widths[s] = self._fm_small.horizontalAdvance(s)
        return w

    def _group_char(self, k: int, j: int) -> str:
        """The character(s) a group of partial tokens spells, made visible."""
        start = min(self.tokens.starts[k:j])
        end = max(self.tokens.ends[k:j])
        raw = self.text[start:end]
        if len(raw) == 1 and ord(raw) not in SHOWN and raw not in " \t\n":
            category = unicodedata.category(raw)
            if category.startswith("M"):
                return "\u25cc" + raw  # a combining mark on a dotted circle
            if category.startswith(("Z", "C")):
                return f"U+{ord(raw):04X}"
        return self._show_text(raw)

    def _show_text(self, s: str) -> str:
        s = s.translate(VISIBLE_WS if self.visible_ws else PLAIN_WS)
        return s.translate(SHOWN)

    def _update_scrollbar(self) -> None:
        total = 2 * MARGIN + len(self._line_item) * self._line_h
        bar = self.verticalScrollBar()
        bar.setRange(0, max(0, int(total - self.viewport().height())))
        bar.setPageStep(self.viewport().height())
        bar.setSingleStep(int(self._line_h))

    # ---- geometry lookups -------------------------------------------------------------
    def _item_tokens(self, item: int) -> tuple[int, int]:
        first = self._item_first[item]
        last = self._item_first[item + 1] if item + 1 < len(self._item_first) else self._next_token
        return first, last

    def _item_of_token(self, k: int) -> int | None:
        if k >= self._next_token or not self._item_first:
            return None
        return bisect_right(self._item_first, k) - 1

    def _line_items(self, line: int) -> range:
        end = self._line_item[line + 1] if line + 1 < len(self._line_item) else len(self._item_first)
        return range(self._line_item[line], end)

    def _part_boxes(self, item: int) -> list[tuple[float, float]]:
        """(x, width) of each part chip inside a group frame."""
        first, last = self._item_tokens(item)
        x = self._item_x[item] + GROUP_PAD + self._fm_bold.horizontalAdvance(
            self._group_char(first, last)) + 2 * GAP
        boxes = []
        for k in range(first, last):
            w = self._item_width(k, k + 1)
            boxes.append((x, w))
            x += w + GAP
        return boxes

    def _item_at(self, pos: QPointF) -> tuple[int, float] | None:
        y = pos.y() + self.verticalScrollBar().value() - MARGIN
        line = int(y // self._line_h)
        if y < 0 or line >= len(self._line_item) or y - line * self._line_h > self._chip_h:
            return None
        for item in self._line_items(line):
            x0 = self._item_x[item]
            if x0 <= pos.x() <= x0 + self._item_w[item]:
                return item, pos.x()
        return None

    # ---- painting ---------------------------------------------------------------------
    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        mark_gui_busy()  # thousands of calls into Qt: a worker waits meanwhile (see workers)
        p = QPainter(self.viewport())
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        p.fillRect(self.viewport().rect(), pal.base())
        self._ink = _Ink(pal, self._dark)
        self._chips_for(pal)
        top = self.verticalScrollBar().value()
        first = max(0, int((top - MARGIN) // self._line_h))
        last = min(len(self._line_item) - 1, int((top + self.viewport().height()) // self._line_h))
        for line in range(first, last + 1):
            y = MARGIN + line * self._line_h - top
            for item in self._line_items(line):
                self._paint_item(p, item, y)
        if not self.laid_out and last >= len(self._line_item) - 1:
            self._paint_note(p, "laying out…")
        p.end()

    def _paint_note(self, p: QPainter, text: str) -> None:
        p.setPen(self._ink.note)
        p.setFont(self._small)
        r = self.viewport().rect().adjusted(int(MARGIN), 0, -int(MARGIN), -4)
        p.drawText(r, ALIGN_BOTTOM_RIGHT, text)

    def _paint_item(self, p: QPainter, item: int, y: float) -> None:
        first, last = self._item_tokens(item)
        x, w = self._item_x[item], self._item_w[item]
        if last - first == 1:
            self._paint_chip(p, first, QRectF(x, y + GROUP_PAD, w, self._chip_h - 2 * GROUP_PAD))
            return
        frame = QRectF(x, y, w, self._chip_h)
        p.setPen(QPen(self._ink.frame, 1.0))
        p.setBrush(NO_BRUSH)
        p.drawRoundedRect(frame.adjusted(0.5, 0.5, -0.5, -0.5), 4, 4)
        p.setFont(self._bold)
        p.setPen(self._ink.text_on_base)
        char_rect = QRectF(x + GROUP_PAD, y, w, self._chip_h)
        p.drawText(char_rect, ALIGN_LEFT, self._group_char(first, last))
        for k, (px, pw) in zip(range(first, last), self._part_boxes(item)):
            self._paint_chip(p, k, QRectF(px, y + GROUP_PAD, pw, self._chip_h - 2 * GROUP_PAD))

    def _paint_chip(self, p: QPainter, k: int, chip: QRectF) -> None:
        """Token k's chip at `chip` (its left and top rounded down to whole pixels): drawn
        once into a pixmap kept per look (`_chip_pixmap`), then copied; the selection and
        highlight outlines on top."""
        x, y = int(chip.left()), int(chip.top())
        p.drawPixmap(x, y, self._chip_pixmap(k, chip.width()))
        if k == self.selected or self.tokens.ids[k] == self.highlight_id:
            selected = k == self.selected
            ink = self._ink
            p.setPen(QPen(ink.highlight if selected else ink.text_on_base, 2.0 if selected else 1.4))
            p.setBrush(NO_BRUSH)
            p.drawRoundedRect(QRectF(x - 0.5, y - 0.5, chip.width() + 1.0, chip.height() + 1.0), 3, 3)

    def _chip_pixmap(self, k: int, width: float) -> QPixmap:
        """Token k's chip (and id below it) as `_draw_chip` draws it at the origin, kept per
        what it shows: its id, its text, flags, colour and width (under the current toggles,
        fonts and palette: `_chips_for` empties the cache when one of those changes)."""
        tokens = self.tokens
        start, end = tokens.starts[k], tokens.ends[k]
        key = (tokens.ids[k], self.text[start:end], tokens.flags[k], self._slot[k], self._shade[k], width)
        pm = self._chips.get(key)
        if pm is None:
            if self._chip_bytes > CHIP_CACHE_BYTES:
                self._chips.clear()
                self._chip_bytes = 0
            height = self._chip_h - 2 * GROUP_PAD + (GROUP_PAD + self._id_h if self.show_ids else 0.0)
            dpr = self._dpr
            pm = QPixmap(math.ceil(width * dpr), math.ceil(height * dpr))
            pm.setDevicePixelRatio(dpr)
            pm.fill(Qt.GlobalColor.transparent)
            q = QPainter(pm)
            q.setRenderHint(QPainter.RenderHint.Antialiasing)
            self._draw_chip(q, k, QRectF(0.0, 0.0, width, self._chip_h - 2 * GROUP_PAD))
            q.end()
            self._chips[key] = pm
            self._chip_bytes += pm.width() * pm.height() * 4
        return pm

    def _chips_for(self, palette) -> None:
        """Keep the chip pixmaps only while what they were drawn with stays the same."""
        look = (palette.cacheKey(), self._font.key(), self.as_stored, self.visible_ws, self.show_ids,
                self.viewport().devicePixelRatioF())
        if look != self._chip_look:
            self._chip_look, self._dpr = look, look[-1]
            self._chips.clear()
            self._chip_bytes = 0

    def _draw_chip(self, p: QPainter, k: int, chip: QRectF) -> None:
        """Token k's chip: its colour (dashed edge when partial), its label, its id below."""
        tok = self.tokens[k]
        ink, slot = self._ink, self._slot[k]
        if tok.special:
            p.setBrush(ink.text_on_base)
            p.setPen(NO_PEN)
        else:
            p.setBrush(token_color(slot, self._shade[k], ink.theme))
            p.setPen(QPen(border_color(slot, ink.theme), 1.2, DASH) if tok.partial else NO_PEN)
        p.drawRoundedRect(chip.adjusted(0.6, 0.6, -0.6, -0.6), 3, 3)
        self._paint_label(p, k, tok, chip)
        if self.show_ids:
            p.setFont(self._small)
            p.setPen(ink.note)
            p.drawText(QRectF(chip.left(), chip.bottom() + GROUP_PAD, chip.width(), self._id_h),
                       ALIGN_TOP_CENTER, str(tok.id))

    def _paint_label(self, p: QPainter, k: int, tok, chip: QRectF) -> None:
        runs = self.runs(k, tok)
        ink = self._ink
        inner = chip.adjusted(HPAD, 0, -HPAD, 0)
        fm = self._fm_bold if tok.special else self._fm
        p.setFont(self._bold if tok.special else self._font)
        p.setPen(ink.base if tok.special else ink.chip_text)
        if len(runs) == 1 and not runs[0][1]:  # the common case: one run of text
            text = runs[0][0]
            if self._runs_width(runs, tok.special) > inner.width() + 0.5:
                text = fm.elidedText(text, ELIDE, inner.width())
            p.drawText(inner, ALIGN_CENTER, text)
            return
        total = self._runs_width(runs, tok.special)
        x = inner.left() + max(0.0, (inner.width() - total) / 2)
        p.save()
        p.setClipRect(chip)
        for text, is_hex in runs:
            if is_hex:
                p.setFont(self._hex)
                p.setPen(ink.hex_text)
            width = (self._fm_hex if is_hex else fm).horizontalAdvance(text)
            p.drawText(QRectF(x, inner.top(), width + 1, inner.height()), ALIGN_LEFT, text)
            x += width + RUN_GAP
        p.restore()

    # ---- events -----------------------------------------------------------------------
    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        avail = max(self.viewport().width() - 2 * MARGIN, 40.0)
        if abs(avail - self._avail) > 0.5:
            self._reset_layout(keep_anchor=True)
        else:
            self._update_scrollbar()

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() in (event.Type.FontChange, event.Type.PaletteChange):
            self._set_fonts()
            self._reset_layout(keep_anchor=True)

    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt override
        k = self.token_at(event.position())
        if k is not None and event.button() == Qt.MouseButton.LeftButton:
            self.set_selected(k, scroll=False)
            self.token_clicked.emit(k)
        super().mousePressEvent(event)

    def viewportEvent(self, event) -> bool:  # noqa: N802 - Qt override
        if event.type() == event.Type.ToolTip:
            k = self.token_at(QPointF(event.pos()))
            if k is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPos(), self.tooltip(k), self.viewport())
            return True
        return super().viewportEvent(event)

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt override
        step = {Qt.Key.Key_Left: -1, Qt.Key.Key_Right: 1}.get(event.key())
        if step is None or not self.tokens:
            super().keyPressEvent(event)
            return
        k = 0 if self.selected is None else min(max(self.selected + step, 0), len(self.tokens) - 1)
        self.set_selected(k)
        self.token_clicked.emit(k)

    def tooltip(self, k: int) -> str:
        """Id, piece, bytes in hex and character span of token k (rich text)."""
        tok = self.tokens[k]
        esc = _html_escape
        rows = [f"<b>#{k}</b> &nbsp; id <b>{tok.id}</b>",
                f"piece <code>{esc(tok.piece)}</code>",
                f"bytes <code>{hex_bytes(tok.data) or '—'}</code>",
                f"chars {tok.start}–{tok.end}" + (f" &nbsp; <code>{esc(self.text[tok.start:tok.end])}</code>"
                                                   if tok.end - tok.start <= 40 else "")]
        span = self.text[tok.start:tok.end]
        if len(span) <= 4:
            rows.append(" ".join(f"U+{ord(c):04X}" for c in span)
                        + (f" {esc(unicodedata.name(span, ''))}" if len(span) == 1 else ""))
        if tok.partial:
            rows.append("<i>partial: these bytes are only part of a UTF-8 character</i>")
        if tok.special:
            rows.append("<i>special token</i>")
        return "<br>".join(rows)


ALIGN_LEFT = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter | Qt.TextFlag.TextDontClip
ALIGN_CENTER = Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignVCenter | Qt.TextFlag.TextDontClip
ALIGN_TOP_CENTER = Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop
ALIGN_BOTTOM_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignBottom
NO_PEN, DASH = Qt.PenStyle.NoPen, Qt.PenStyle.DashLine  # looked up once: paint runs per chip
NO_BRUSH, ELIDE = Qt.BrushStyle.NoBrush, Qt.TextElideMode.ElideRight


def _shifted(values: array, start: int, delta: int) -> bytes:
    """values[start:] + delta, as the raw bytes of an array('i') (numpy: C speed)."""
    import numpy as np

    return (np.frombuffer(values, np.int32)[start:] + np.int32(delta)).astype(np.int32).tobytes()


class _Ink:
    """The colours of one paint pass, looked up once instead of once per chip."""

    def __init__(self, palette, dark: bool) -> None:
        self.theme = "dark" if dark else "light"
        self.base = palette.base().color()
        self.text_on_base = palette.text().color()
        self.highlight = palette.highlight().color()
        self.note = palette.placeholderText().color()
        self.frame = palette.mid().color()
        self.chip_text = QColor("#f2f2f2") if dark else QColor("#1b1b1f")
        self.hex_text = QColor("#d0d0d8") if dark else QColor("#3a3a48")


def _html_escape(s: str) -> str:
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .translate(CONTROL_PICTURES))
