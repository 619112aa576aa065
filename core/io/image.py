"""Images in, within a stated memory budget: the checks and the copy-out every Pillow decode in ember shares
(ember.models.yolo.image.load_image, ember.data's image folders).

- A PNG's chunks are walked before Pillow sees the file: a chunk length past the end of the file is refused
  (a length of 0xFFFFFFFF made Pillow ask for 4 GiB).
- The caller checks the header's width x height against ember.limits.budget.max_pixels before decoding.
- Decoding then holds at most BYTES_PER_PIXEL bytes per pixel at its peak: Pillow's frame (4 bytes a pixel for
  RGB) and the numpy array (3), copied out a strip of rows at a time (Pillow's own array export, `np.asarray`,
  goes through two whole-frame byte copies: 18 bytes a pixel at its peak). At the default cap of 50 MP that is
  400 MB.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from ..errors import FormatError

BYTES_PER_PIXEL = 8
_STRIP_BYTES = 2 << 20  # the frame is copied out about this many bytes of rows at a time
_CHANNELS = {"RGB": 3, "RGBA": 4, "L": 1}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def check_png_chunks(src, where: str, error=FormatError):
    """Walk a PNG's chunks (length, type, data, CRC) and raise `error` for a length past the end of the file,
    before Pillow reads it. src: bytes or a path; anything that is not a PNG passes."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        data = memoryview(src)
        size, f = len(data), None

        def read(at, n):
            return bytes(data[at:at + n])
    else:
        try:
            size = os.path.getsize(src)
            f = open(src, "rb")
        except OSError:
            return  # Pillow names what is wrong with the path

        def read(at, n):
            f.seek(at)
            return f.read(n)
    try:
        if read(0, 8) != PNG_MAGIC:
            return
        at = 8
        while at + 8 <= size:
            length, kind = struct.unpack(">I4s", read(at, 8))
            if at + 12 + length > size:
                raise error(f"ember: {where}: PNG chunk {kind!r} at byte {at} claims {length} bytes, past the end "
                            f"of the {size}-byte file")
            at += 12 + length
            if kind == b"IEND":
                return
    finally:
        if f is not None:
            f.close()


def frame_to_array(im) -> np.ndarray:
    """A loaded Pillow image -> a new uint8 array (H, W, C), or (H, W) for "L", without whole-frame copies
    on the way; other modes through np.asarray."""
    channels = _CHANNELS.get(im.mode)
    if channels is None:
        return np.array(im)
    w, h = im.size
    out = np.empty((h, w, channels) if im.mode != "L" else (h, w), np.uint8)
    rows = max(1, _STRIP_BYTES // (channels * w))
    for y in range(0, h, rows):
        strip = im.crop((0, y, w, min(h, y + rows))).tobytes()
        out[y:y + rows] = np.frombuffer(strip, np.uint8).reshape(out[y:y + rows].shape)
    return out


def convert(im, mode: str | None):
    """im in `mode` (None: as it is), the source frame freed when a converted copy replaces it."""
    if mode is None or im.mode == mode:
        return im
    out = im.convert(mode)
    im.im = None  # (freed before the array is made: the peak stays within BYTES_PER_PIXEL)
    return out
