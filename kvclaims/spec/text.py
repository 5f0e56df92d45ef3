"""Whether free text says anything: the one test of blank notes, locators and reasons.

A descriptor's note, path, url or reason must show something to a reader. Text made only of
characters that render as nothing is blank, whatever its length: whitespace, controls, format
characters (zero-width spaces and joiners, bidi marks, tag characters), combining marks with no
base to sit on (a lone U+0301, the combining grapheme joiner), variation selectors, and every
other default-ignorable code point (Hangul fillers, reserved ignorables). It is decided from
Unicode properties: the general categories of the standard `unicodedata` tables, plus the part
of DerivedCoreProperties' Default_Ignorable_Code_Point those categories do not cover, which
`unicodedata` does not expose and so is derived here from the ranges PropList.txt documents.
"""

from __future__ import annotations

import unicodedata

INVISIBLE_CATEGORIES = frozenset({"Mn", "Me", "Cf", "Zs", "Zl", "Zp", "Cc"})
"""Nonspacing and enclosing marks, format characters, space separators, line and paragraph
separators, controls. A mark renders only on a base; text of marks alone has none."""

OTHER_DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x034F, 0x034F),  # combining grapheme joiner (also Mn)
    (0x115F, 0x1160),  # Hangul choseong / jungseong fillers (Lo)
    (0x17B4, 0x17B5),  # Khmer inherent vowels (also Mn)
    (0x2065, 0x2065),  # reserved (Cn)
    (0x3164, 0x3164),  # Hangul filler (Lo)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler (Lo)
    (0xFFF0, 0xFFF8),  # reserved (Cn)
    (0xE0000, 0xE0000),  # reserved (Cn)
    (0xE0002, 0xE001F),  # reserved (Cn)
    (0xE0080, 0xE00FF),  # reserved (Cn)
    (0xE01F0, 0xE0FFF),  # reserved (Cn)
)
"""PropList.txt's Other_Default_Ignorable_Code_Point (unchanged since Unicode 6.3), which with
Variation_Selector and Cf makes Default_Ignorable_Code_Point. Cf is a category above."""

VARIATION_SELECTORS: tuple[tuple[int, int], ...] = (
    (0x180B, 0x180D),  # Mongolian free variation selectors
    (0x180F, 0x180F),  # Mongolian free variation selector four (Unicode 14)
    (0xFE00, 0xFE0F),  # variation selectors 1-16
    (0xE0100, 0xE01EF),  # variation selectors 17-256
)
"""PropList.txt's Variation_Selector (all Mn in the tables as well)."""

BLANK_GLYPHS = frozenset("\u2800")
"""Characters Unicode classes as visible symbols whose glyph is empty: the blank Braille
pattern (So) is what a reader sees as a space."""

_IGNORABLE = frozenset(
    chr(code)
    for first, last in OTHER_DEFAULT_IGNORABLE + VARIATION_SELECTORS
    for code in range(first, last + 1)
)


def renders_as_nothing(char: str) -> bool:
    """Whether one character shows nothing on its own (see the module docstring)."""
    return char in _IGNORABLE or char in BLANK_GLYPHS or unicodedata.category(char) in INVISIBLE_CATEGORIES


def is_blank(text: str) -> bool:
    """Whether `text` says nothing: empty, or only characters that render as nothing. Text
    with one visible character is not blank, whatever invisible characters it also holds."""
    return all(renders_as_nothing(char) for char in text)
