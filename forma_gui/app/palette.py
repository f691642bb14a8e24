"""Token colours: stable per token id, and distinguishable from the neighbour.

A token's hue comes from a hash of its id into a small set of curated hues (so the same
token is the same colour everywhere, in every view and every session). Two adjacent
tokens can land on the same or a neighbouring hue; the later one then takes the other
lightness of its hue, so the boundary between them always stays visible.
"""
from __future__ import annotations

from functools import lru_cache

from PySide6.QtGui import QColor

#: curated hues (degrees), spaced so that consecutive entries differ clearly
HUES = (6, 32, 52, 90, 140, 168, 192, 212, 236, 262, 290, 322)

#: (saturation, lightness) per theme and shade; shade 1 is the alternate for neighbours
SHADES = {
    "light": ((0.70, 0.84), (0.62, 0.73)),
    "dark": ((0.45, 0.34), (0.50, 0.44)),
}


def hue_index(token_id: int) -> int:
    """The palette slot of a token id: a fixed integer hash, stable across runs.

    >>> hue_index(995) == hue_index(995)
    True
    """
    h = (token_id * 0x9E3779B1) & 0xFFFFFFFF  # Knuth's multiplicative hash
    h ^= h >> 16
    return h % len(HUES)


def too_close(a: int, b: int) -> bool:
    """Whether two hue slots are the same or adjacent on the colour wheel."""
    d = abs(a - b) % len(HUES)
    return min(d, len(HUES) - d) <= 1


@lru_cache(maxsize=64)
def token_color(slot: int, shade: int = 0, theme: str = "light") -> QColor:
    """The background colour for a hue slot and shade (0 base, 1 alternate)."""
    sat, light = SHADES[theme][shade]
    return QColor.fromHslF(HUES[slot] / 360.0, sat, light)


@lru_cache(maxsize=64)
def border_color(slot: int, theme: str = "light") -> QColor:
    """A darker edge of the same hue, for partial-token dashes and group frames."""
    return QColor.fromHslF(HUES[slot] / 360.0, 0.55, 0.40 if theme == "light" else 0.70)


def assign_shades(ids) -> tuple[list[int], list[int]]:
    """Hue slot and shade per token, alternating the shade where neighbours are too close.

    >>> slots, shades = assign_shades([5, 5, 5])
    >>> shades
    [0, 1, 0]
    """
    slots = [hue_index(i) for i in ids]
    shades = [0] * len(slots)
    for k in range(1, len(slots)):
        if too_close(slots[k], slots[k - 1]):
            shades[k] = 1 - shades[k - 1]
    return slots, shades
