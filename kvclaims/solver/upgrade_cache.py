"""A per-user cache of the native-upgrade search, one entry per descriptor file.

The search (z3 `Optimize` over the lowering model) is the slowest part of `kvclaims prove` and
its result depends only on the descriptor as loaded (its content, its file name, and whether
each anchor counts: a local file's presence and digest are checked at load time), the solver
and spec code, the z3 version and the seed. The key hashes all of those, so an edit to any of
them misses the cache; an unreadable or malformed entry is a miss too. Entries are JSON, never
pickles, and live in the user's cache directory (`$KVCLAIMS_CACHE_DIR`, else `$XDG_CACHE_HOME/kvclaims`, else
`~/.cache/kvclaims`), never in the checkout.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

from kvclaims import userdirs
from kvclaims.solver.upgrades import Upgrade, descriptor_upgrades
from kvclaims.solver.z3env import DEFAULT_SEED, Z3_VERSION
from kvclaims.spec.descriptor import Descriptor

_FORMAT = "kvclaims-upgrade-cache/1"
_DECIDING_PACKAGES = ("solver", "spec")


def cache_directory() -> Path:
    return userdirs.cache_directory() / "native-upgrades"


@functools.cache
def code_digest() -> str:
    """The digest of every module that can change an upgrade plan."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(f"{_FORMAT} z3 {Z3_VERSION} seed {DEFAULT_SEED}".encode())
    for package in _DECIDING_PACKAGES:
        for path in sorted((root / package).glob("*.py")):
            digest.update(f"\0{package}/{path.name}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def entry_key(loaded: tuple[Path, Descriptor]) -> str:
    path, descriptor = loaded
    anchors = [anchor.problems() for anchor in descriptor.anchors()]
    digest = hashlib.sha256(code_digest().encode())
    digest.update(json.dumps([path.name, descriptor.model_dump(mode="json"), anchors]).encode())
    return digest.hexdigest()


def cached_descriptor_upgrades(loaded: tuple[Path, Descriptor]) -> list[Upgrade]:
    """`descriptor_upgrades(loaded)`, read from the cache when an entry for these exact inputs
    exists, else computed and stored (a cache that cannot be written is skipped)."""
    entry = cache_directory() / f"{entry_key(loaded)}.json"
    found = _read(entry)
    if found is not None:
        return found
    found = descriptor_upgrades(loaded)
    _write(entry, found)
    return found


def _read(entry: Path) -> list[Upgrade] | None:
    try:
        document = json.loads(entry.read_text(encoding="utf-8"))
        if document.get("format") != _FORMAT:
            return None
        return [Upgrade.from_summary(row) for row in document["rows"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write(entry: Path, found: list[Upgrade]) -> None:
    text = json.dumps({"format": _FORMAT, "rows": [u.summary() for u in found]})
    with contextlib.suppress(OSError):
        entry.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=entry.parent, delete=False, encoding="utf-8") as tmp:
            tmp.write(text)
        os.replace(tmp.name, entry)
