"""`kvclaims check DIR` walks the directory's traces but never tool caches (`.hypothesis/`,
`__pycache__`, `.pytest_cache`, ...), where files with trace suffixes are not traces."""

from __future__ import annotations

from pathlib import Path

from kvclaims.cli.check import trace_files


def test_a_directory_walk_skips_tool_caches(tmp_path: Path) -> None:
    kept = tmp_path / "runs" / "a.ndjson"
    kept.parent.mkdir()
    kept.write_text("{}\n")
    for cache in (".hypothesis/examples", "__pycache__", ".pytest_cache/v", ".git/objects"):
        (tmp_path / cache).mkdir(parents=True)
        (tmp_path / cache / "b.ndjson").write_text("not a trace\n")
    assert trace_files([tmp_path]) == [kept]


def test_a_cache_named_on_the_command_line_is_still_walked(tmp_path: Path) -> None:
    inside = tmp_path / ".hypothesis" / "c.ndjson"
    inside.parent.mkdir()
    inside.write_text("{}\n")
    assert trace_files([tmp_path / ".hypothesis"]) == [inside]
