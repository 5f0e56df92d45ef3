"""Where kvclaims keeps files of its own, outside any checkout: the user's data directory (what
a command writes without -o) and cache directory (tiny model configs, cached solver results).

One rule each, after the XDG base directory specification: kvclaims' own variable, else the
XDG variable + `/kvclaims`, else the XDG default under the home directory. A relative XDG
variable is ignored, as the specification says, so neither can land in the working directory
(which may be a checkout).
"""

from __future__ import annotations

import os
from pathlib import Path


def data_directory() -> Path:
    """`$KVCLAIMS_OUT_DIR`, else `$XDG_DATA_HOME/kvclaims`, else `~/.local/share/kvclaims`."""
    return _directory("KVCLAIMS_OUT_DIR", "XDG_DATA_HOME", Path(".local") / "share")


def cache_directory() -> Path:
    """`$KVCLAIMS_CACHE_DIR`, else `$XDG_CACHE_HOME/kvclaims`, else `~/.cache/kvclaims`."""
    return _directory("KVCLAIMS_CACHE_DIR", "XDG_CACHE_HOME", Path(".cache"))


def _directory(own: str, xdg: str, under_home: Path) -> Path:
    explicit = os.environ.get(own)
    if explicit:
        return Path(explicit)
    base = os.environ.get(xdg, "")
    return (Path(base) if os.path.isabs(base) else Path.home() / under_home) / "kvclaims"
