"""Images in for the vision families: decoding with Pillow (imported lazily; EXIF orientation applied, as
cv2.imread does), the pixel budget checked on the header before any pixel is decoded, and RGB arrays checked;
and torch's bilinear resize of a float map (masks: SAM's and YOLO's post-processing)."""
from __future__ import annotations

import os
import struct

import numpy as np

from ember.errors import FormatError, LimitError
from ember.io.image import check_png_chunks, convert, frame_to_array
from ember.limits import budget


class ImageError(FormatError):
    """An image that cannot be read or used."""


def _pillow():
    try:
        from PIL import Image, ImageOps
    except ImportError:
        return None, None
    return Image, ImageOps


def load_image(src) -> np.ndarray:
    """A path, encoded image bytes, or an (H, W, 3) uint8 RGB array -> (H, W, 3) uint8 RGB array.
    Files are decoded with Pillow (EXIF orientation applied, as cv2.imread does).

    Budget: the header's width x height is checked against budget.max_pixels before any pixel is decoded,
    and decoding holds at most ember.io.image.BYTES_PER_PIXEL (8) bytes per pixel at its peak (50 MP, the
    default cap: ~400 MB). A PNG's chunk lengths are checked against the file first."""
    if isinstance(src, np.ndarray):
        return as_rgb(src)
    Image, ImageOps = _pillow()
    where = "<image bytes>" if isinstance(src, (bytes, bytearray)) else os.fspath(src)
    if Image is None:
        raise ImageError(f"ember: decoding {where} needs Pillow (pip install pillow; Pyodide ships it); "
                         "or pass an (H, W, 3) uint8 RGB array")
    import io
    try:
        check_png_chunks(src, where, ImageError)
        with Image.open(io.BytesIO(src) if isinstance(src, (bytes, bytearray)) else where) as im:
            _check_pixels(where, *im.size)  # the header's size, before any pixel is decoded
            return _decode_rgb(im, ImageOps)
    except (LimitError, ImageError):
        raise
    except Image.DecompressionBombError:  # Pillow's own limit (~179 MP) fires inside open()
        raise LimitError(where, "image size", f"over {2 * Image.MAX_IMAGE_PIXELS}", budget.max_pixels,
                         "max_pixels", " pixels") from None
    except FileNotFoundError:
        raise ImageError(f"ember: image file not found: {where}") from None
    except MemoryError:  # past what the checks above bound (a decoder's own buffers on a tight machine)
        raise ImageError(f"ember: {where}: ran out of memory decoding the image (see "
                         "ember.limits.budget.max_pixels)") from None
    except (OSError, SyntaxError, ValueError, EOFError, struct.error) as e:  # UnidentifiedImageError: an OSError
        raise ImageError(f"ember: {where}: not a readable image ({type(e).__name__}: {e})") from None


def _decode_rgb(im, ImageOps) -> np.ndarray:
    """Decode, orient (EXIF, in place) and convert an open image, then copy it out (ember.io.image)."""
    im.load()
    ImageOps.exif_transpose(im, in_place=True)
    return frame_to_array(convert(im, "RGB"))


def _check_pixels(where: str, w: int, h: int):
    if w * h > budget.max_pixels:
        raise LimitError(where, f"image size {w}x{h}", w * h, budget.max_pixels, "max_pixels", " pixels")


def as_rgb(a: np.ndarray) -> np.ndarray:
    if a.dtype != np.uint8:
        raise ImageError(f"ember: image array must be uint8 RGB, got dtype {a.dtype} shape {a.shape}")
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    if a.ndim != 3 or a.shape[2] not in (3, 4) or a.shape[0] < 1 or a.shape[1] < 1:
        raise ImageError(f"ember: image array must be (H, W, 3) RGB, got shape {a.shape}")
    return np.ascontiguousarray(a[:, :, :3])


# ---------------------------------------------------------------- F.interpolate(mode="bilinear")

def _axis_weights(n_in: int, n_out: int):
    """torch's upsample_linear index and weight arithmetic (align_corners=False), float32."""
    scale = np.float32(n_in) / np.float32(n_out)
    src = scale * (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) - np.float32(0.5)
    src = np.maximum(src, np.float32(0))
    i0 = np.minimum(src.astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    l1 = (src - i0.astype(np.float32)).astype(np.float32)
    return i0, i1, (np.float32(1) - l1).astype(np.float32), l1


def resize_bilinear(x: np.ndarray, h: int, w: int, crop: tuple[int, int] | None = None) -> np.ndarray:
    """F.interpolate(x, (h, w), mode="bilinear", align_corners=False) of a float32 (..., H, W) array; with crop
    (ch, cw), only the top-left ch x cw of that result (each output pixel depends on its own position alone)."""
    if x.shape[-2:] == (h, w) and crop is None:
        return x
    ch, cw = crop or (h, w)
    c0, c1, a0, a1 = (v[:cw] for v in _axis_weights(x.shape[-1], w))
    t = x[..., c0] * a0 + x[..., c1] * a1                                        # (..., H, cw)
    r0, r1, b0, b1 = (v[:ch] for v in _axis_weights(x.shape[-2], h))
    return t[..., r0, :] * b0[:, None] + t[..., r1, :] * b1[:, None]            # (..., ch, cw)
