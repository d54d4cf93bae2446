"""Clips as sprite images: every frame of a clip stacked top to bottom in one greyscale PNG.

One image per clip is a single request and decodes once in the browser; the page draws frame `t`
by cutting rows `84 t .. 84 (t + 1)` out of it. PNG is written here with zlib (no imaging
package needed); greyscale frames compress to a few KB.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ZLIB_LEVEL = 3  # a Pong sprite: level 3 is 2x faster to write than 6 and about as small


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def grey_png(image: np.ndarray) -> bytes:
    """An 8-bit greyscale PNG of a uint8 (H, W) array."""
    assert image.dtype == np.uint8 and image.ndim == 2, (image.dtype, image.shape)
    h, w = image.shape
    rows = np.zeros((h, w + 1), np.uint8)  # each row starts with filter type 0 (none)
    rows[:, 1:] = image
    header = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)  # 8 bits, greyscale, no interlace
    return (PNG_SIGNATURE + _chunk(b"IHDR", header) +
            _chunk(b"IDAT", zlib.compress(rows.tobytes(), ZLIB_LEVEL)) + _chunk(b"IEND", b""))


def sprite_png(frames: np.ndarray) -> bytes:
    """uint8 (T, H, W) frames as one (T H, W) PNG, frame 0 on top."""
    t, h, w = frames.shape
    return grey_png(np.ascontiguousarray(frames).reshape(t * h, w))
