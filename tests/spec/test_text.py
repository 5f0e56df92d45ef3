"""Blank text: a note, locator or reason made only of characters that render as nothing says
nothing, whatever its length; one visible character makes it say something."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from kvclaims.spec.descriptor import load_descriptor
from kvclaims.spec.errors import DescriptorError
from kvclaims.spec.text import is_blank

INVISIBLE = {
    "empty": "",
    "ascii whitespace": " \t\r\n",
    "no-break and ideographic spaces": "\u00a0\u3000\u2007",
    "line and paragraph separators": "\u2028\u2029",
    "C1 control": "\u0085",
    "zero-width space": "\u200b",
    "word joiner": "\u2060",
    "zero-width joiners and bidi marks": "\u200c\u200d\u200e\u200f\u202e",
    "byte order mark": "\ufeff",
    "soft hyphen": "\u00ad",
    "invisible times, separator, plus": "\u2062\u2063\u2064",
    "Mongolian vowel separator": "\u180e",
    "variation selector 16": "\ufe0f",
    "variation selector 17 (supplementary)": "\U000e0100",
    "Mongolian free variation selector": "\u180b",
    "tag characters": "\U000e0001\U000e0041\U000e007f",
    "Hangul filler": "\u3164",
    "Hangul choseong filler": "\u115f",
    "Hangul jungseong filler": "\u1160",
    "halfwidth Hangul filler": "\uffa0",
    "combining grapheme joiner": "\u034f",
    "lone combining acute": "\u0301",
    "combining marks only": "\u0301\u0308\u20dd",
    "enclosing mark": "\u20e3",
    "Khmer inherent vowel": "\u17b4",
    "reserved default-ignorable": "\u2065\ufff0\U000e0002",
    "blank Braille pattern": "\u2800",
    "every class at once": " \u200b\u2060\ufe0f\U000e0041\u3164\u115f\u180e\u034f\u0301\u00a0",
}

VISIBLE = {
    "a letter": "a",
    "a letter with its accent": "e\u0301",
    "a digit between zero-width spaces": "\u200b7\u200b",
    "an emoji with its variation selector": "\u2764\ufe0f",
    "a word after a Hangul filler": "\u3164note",
    "a tagged flag": "\U0001f3f4\U000e0067\U000e0062\U000e007f",
    "a CJK ideograph": "\u8a18",
    "punctuation": ".",
    "an unassigned code point (shown as a box)": "\U000effff",
}


@pytest.mark.parametrize("text", INVISIBLE.values(), ids=INVISIBLE.keys())
def test_text_of_characters_that_render_as_nothing_is_blank(text: str) -> None:
    assert is_blank(text)


@pytest.mark.parametrize("text", VISIBLE.values(), ids=VISIBLE.keys())
def test_text_with_a_visible_character_is_not_blank(text: str) -> None:
    assert not is_blank(text)


def test_blankness_follows_the_unicode_tables_not_a_list() -> None:
    """Every nonspacing mark, format character and space separator of the standard tables is
    blank, not only the few a list would name (a sweep, with the tables as the expectation)."""
    swept = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) in {"Mn", "Me", "Cf", "Zs"}]
    assert len(swept) > 2000
    assert [c for c in swept if not is_blank(c)] == []
    assert not is_blank("".join(swept) + "x")


DESCRIPTOR = """\
descriptor: 1
runtime: demo
surface: SURFACE
version: "1.0"
approximation_signals: [duration_field]
forbidden_lowerings:
  - {mode: expiring, via: duration_field, reason: REASON}
native:
  - obligation: claim_identity
    status: supported
    scope: docs
    anchor: {kind: docs, url: LOCATOR, note: NOTE}
"""


def _descriptor(tmp_path: Path, **fields: str) -> Path:
    text = DESCRIPTOR
    for name, value in {
        "SURFACE": "demo",
        "REASON": "ttl is not a claim",
        "LOCATOR": "https://x.org/d",
        "NOTE": "says so",
    }.items():
        text = text.replace(name, '"' + fields.get(name, value).encode("unicode_escape").decode() + '"')
    path = tmp_path / "d.yaml"
    path.write_text(text, encoding="utf-8")
    return path


HIDDEN = "\u200b\u2060\ufe0f\U000e0041\u3164\u115f\u180e\u034f\u0301"


@pytest.mark.parametrize("field", ["REASON", "SURFACE"])
def test_a_reason_or_surface_that_says_nothing_is_invalid(tmp_path: Path, field: str) -> None:
    with pytest.raises(DescriptorError) as raised:
        load_descriptor(_descriptor(tmp_path, **{field: HIDDEN}))
    assert [p.field for p in raised.value.problems] == [
        {"REASON": "forbidden_lowerings.0.reason", "SURFACE": "surface"}[field]
    ]
    assert load_descriptor(_descriptor(tmp_path, **{field: HIDDEN + "seen"}))


@pytest.mark.parametrize("field", ["NOTE", "LOCATOR"])
def test_an_anchor_whose_note_or_locator_says_nothing_does_not_count(tmp_path: Path, field: str) -> None:
    anchor = load_descriptor(_descriptor(tmp_path, **{field: HIDDEN})).native[0].anchor
    assert {"NOTE": "anchor has no note", "LOCATOR": "anchor has neither path nor url"}[
        field
    ] in anchor.problems()
    twin = load_descriptor(_descriptor(tmp_path, **{field: HIDDEN + "https://x.org/seen"})).native[0].anchor
    assert twin.counts


def test_a_pin_that_says_nothing_pins_nothing(tmp_path: Path) -> None:
    path = _descriptor(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace('version: "1.0"', f'version: "{HIDDEN}"'))
    with pytest.raises(DescriptorError, match="must pin its surface"):
        load_descriptor(path)
    path.write_text(
        path.read_text(encoding="utf-8").replace(f'version: "{HIDDEN}"', f'version: "{HIDDEN}1.0"')
    )
    assert load_descriptor(path).version.endswith("1.0")


@pytest.mark.parametrize("field", ["ordering", "claim_scope"])
def test_a_trace_anchor_whose_ordering_or_scope_says_nothing_does_not_count(
    tmp_path: Path, field: str
) -> None:
    path = _descriptor(tmp_path)
    trace_anchor = 'anchor: {kind: trace, url: "https://x.org/t", note: run, ordering: seq, claim_scope: id}'
    text = path.read_text(encoding="utf-8").replace("scope: docs", "scope: conformance_trace")
    text = text.replace('anchor: {kind: docs, url: "https://x.org/d", note: "says so"}', trace_anchor)
    hidden = text.replace(f"{field}: {'seq' if field == 'ordering' else 'id'}", f'{field}: "{HIDDEN}"')
    path.write_text(hidden, encoding="utf-8")
    assert not load_descriptor(path).native[0].anchor.counts
    path.write_text(text, encoding="utf-8")
    assert load_descriptor(path).native[0].anchor.counts
