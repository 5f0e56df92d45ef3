"""A PNG validity check shared by the picture tests: signature, CRC-valid chunks, IHDR size."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a complete, CRC-valid PNG; raises AssertionError otherwise."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, "not a PNG"
    offset, kinds, size = 8, [], (0, 0)
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        kinds.append(kind)
        offset += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    return size
