"""Clips as sprite images: every frame of a clip stacked top to bottom in one greyscale PNG.

One image per clip is a single request and decodes once in the browser; the page draws frame `t`
by cutting rows `84 t .. 84 (t + 1)` out of it. Pillow (installed with matplotlib) writes it in
under a millisecond, unnoticed at a person's pace (docs/results.md, "The labelling page's speed").
"""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

# Faster to write than level 6, a little larger (docs/results.md, "The labelling page's speed").
ZLIB_LEVEL = 3


def sprite_png(frames: np.ndarray) -> bytes:
    """uint8 (T, H, W) frames as one 8-bit greyscale (T H, W) PNG, frame 0 on top."""
    assert frames.dtype == np.uint8 and frames.ndim == 3, (frames.dtype, frames.shape)
    t, h, w = frames.shape
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frames).reshape(t * h, w)).save(
        buf, format="PNG", compress_level=ZLIB_LEVEL)
    return buf.getvalue()
