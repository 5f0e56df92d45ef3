"""The native-upgrade cache: a hit returns what the search returned, any changed input misses."""

import json
import shutil
from pathlib import Path

import pytest

from kvclaims.solver import upgrade_cache
from kvclaims.solver.upgrade_cache import cache_directory, cached_descriptor_upgrades, entry_key
from kvclaims.solver.upgrades import descriptor_upgrades
from kvclaims.spec.descriptor import load_descriptor

ROOT = Path(__file__).resolve().parents[2]
# A descriptor with upgrade rows for several modes (not native_sound everywhere).
SAMPLE = ROOT / "descriptors" / "vllm_upstream_0_32_0.yaml"
# A descriptor whose evidence is anchored to trace files next to it.
ANCHORED = ROOT / "descriptors" / "kvclaims-vllm.yaml"


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KVCLAIMS_CACHE_DIR", str(tmp_path / "cache"))
    return cache_directory()


def _loaded(path: Path) -> tuple[Path, object]:
    return path, load_descriptor(path)


def test_a_hit_returns_exactly_what_the_search_returned(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = _loaded(SAMPLE)
    searched = descriptor_upgrades(loaded)  # type: ignore[arg-type]
    assert searched, "the sample must have upgrade rows for this test to mean anything"
    assert cached_descriptor_upgrades(loaded) == searched  # type: ignore[arg-type]
    assert len(list(cache.iterdir())) == 1

    def no_search(_: object) -> list[object]:
        raise AssertionError("a cached descriptor was searched again")

    monkeypatch.setattr(upgrade_cache, "descriptor_upgrades", no_search)
    assert cached_descriptor_upgrades(loaded) == searched  # type: ignore[arg-type]


def test_the_file_name_and_the_anchored_files_are_in_the_key(tmp_path: Path) -> None:
    renamed = tmp_path / "renamed.yaml"
    shutil.copy(SAMPLE, renamed)
    assert entry_key(_loaded(renamed)) != entry_key(_loaded(SAMPLE))  # type: ignore[arg-type]
    # Away from its evidence folder the same bytes load with anchors that do not count.
    moved = tmp_path / ANCHORED.name
    shutil.copy(ANCHORED, moved)
    assert entry_key(_loaded(moved)) != entry_key(_loaded(ANCHORED))  # type: ignore[arg-type]


def test_a_comment_does_not_change_the_key(tmp_path: Path) -> None:
    commented = tmp_path / "same" / SAMPLE.name
    shutil.copytree(SAMPLE.parent / "evidence", commented.parent / "evidence")  # its artifact anchors
    commented.write_text(SAMPLE.read_text() + "\n# a comment only\n")
    assert entry_key(_loaded(commented)) == entry_key(_loaded(SAMPLE))  # type: ignore[arg-type]


def test_a_malformed_entry_is_a_miss(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = _loaded(SAMPLE)
    cache.mkdir(parents=True)
    entry = cache / f"{entry_key(loaded)}.json"  # type: ignore[arg-type]
    rowless = {"format": upgrade_cache._FORMAT, "rows": [{}]}
    malformed = ["{", json.dumps({"format": "other"}), json.dumps(rowless)]
    for text in malformed:
        entry.write_text(text)
        assert cached_descriptor_upgrades(loaded) == descriptor_upgrades(loaded)  # type: ignore[arg-type]


def test_an_unwritable_cache_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KVCLAIMS_CACHE_DIR", str(blocker))
    loaded = _loaded(SAMPLE)
    assert cached_descriptor_upgrades(loaded) == descriptor_upgrades(loaded)  # type: ignore[arg-type]
