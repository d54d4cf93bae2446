"""Frames to an animated GIF, through Pillow (installed with matplotlib)."""
from __future__ import annotations

import numpy as np

FPS = 25 / 1.7  # App. A.2: a 25-step clip lasts 1.7 s; every clip, episode and video plays so


def write_gif(frames: list[np.ndarray], path: str, zoom: int = 3, fps: float = FPS) -> None:
    """uint8 frames, grey (H, W) or RGB (H, W, 3), scaled up `zoom` times, to `path`: written
    beside it and renamed, so that a stop while writing leaves no part of a GIF there."""
    from PIL import Image

    from runtime.outputs import written_whole

    images = [Image.fromarray(f) for f in frames]
    if zoom != 1:
        images = [im.resize((im.width * zoom, im.height * zoom), Image.NEAREST) for im in images]
    with written_whole(path, ".part") as part:
        images[0].save(part, format="GIF", save_all=True, append_images=images[1:],
                       duration=int(1000 / fps), loop=0)
