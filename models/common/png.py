"""PNG out for the vision families: a small encoder (zlib + crc32 from the standard library; filter type 0 on
every row) for 8-bit grey, RGB and RGBA images, and save_png (Pillow when present, else the encoder)."""
from __future__ import annotations

import os
import struct
import zlib

import numpy as np

_COLOUR_TYPE = {1: 0, 3: 2, 4: 6}  # channels -> PNG colour type: grey, truecolour, truecolour with alpha


def encode_png(img: np.ndarray) -> bytes:
    """(H, W) grey, (H, W, 3) RGB or (H, W, 4) RGBA uint8 -> PNG bytes."""
    a = img[:, :, None] if img.ndim == 2 else img
    if a.dtype != np.uint8 or a.ndim != 3 or a.shape[2] not in _COLOUR_TYPE:
        raise ValueError(f"ember: encode_png wants (H, W[, 3 or 4]) uint8, got {img.dtype} {img.shape}")
    h, w, c = a.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), a.reshape(h, w * c)], 1).tobytes()

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, _COLOUR_TYPE[c], 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def save_png(img: np.ndarray, path, use_pillow: bool | None = None):
    """Write a grey, RGB or RGBA uint8 image as PNG (Pillow when present, else the built-in encoder)."""
    path = os.fspath(path)
    if use_pillow is not False:
        try:
            from PIL import Image
        except ImportError:
            if use_pillow:
                raise
        else:
            Image.fromarray(img).save(path, format="PNG")
            return
    with open(path, "wb") as f:
        f.write(encode_png(img))
