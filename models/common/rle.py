"""Binary masks as COCO's uncompressed run-length encoding, the layout transformers' mask-generation pipeline
and pycocotools use: {"size": [H, W], "counts": [zeros, ones, zeros, ...]} over the pixels in column-major
(Fortran) order, the first run counting zeros (0 when the mask starts with a one). Also a mask's bounding box."""
from __future__ import annotations

import numpy as np

from ember.errors import FormatError


def mask_to_rle(mask: np.ndarray) -> dict:
    """(H, W) bool -> {"size": [H, W], "counts": [...]}."""
    h, w = mask.shape
    flat = np.asarray(mask, bool).ravel(order="F")
    change = np.flatnonzero(flat[1:] != flat[:-1]) + 1                            # where a new run starts
    edges = np.concatenate([[0], change, [h * w]])
    counts = np.diff(edges).tolist()
    if flat.size and flat[0]:
        counts = [0] + counts
    return {"size": [int(h), int(w)], "counts": [int(c) for c in counts]}


def rle_to_mask(rle: dict) -> np.ndarray:
    """{"size": [H, W], "counts": [...]} -> (H, W) bool; the counts must add up to H * W."""
    try:
        h, w = (int(v) for v in rle["size"])
        counts = np.asarray(rle["counts"], np.int64)
    except (KeyError, TypeError, ValueError) as e:
        raise FormatError(f"ember: not an uncompressed RLE mask ({e})") from None
    if h < 0 or w < 0 or counts.ndim != 1 or (counts < 0).any() or counts.sum() != h * w:
        raise FormatError(f"ember: RLE counts add up to {int(counts.sum()) if counts.ndim == 1 else '?'}, "
                          f"not the {h}x{w} mask's {h * w} pixels")
    values = np.arange(len(counts)) % 2 == 1                                      # runs alternate 0, 1, 0, ...
    # repeat() casts its counts to intp "safely": int64 counts fail on 32-bit numpy (Pyodide), and the sum is
    # h * w, an image's pixels, so each count fits
    return np.repeat(values, counts.astype(np.intp)).reshape(w, h).T


def mask_box(mask: np.ndarray) -> list[int]:
    """[x0, y0, x1, y1] of a bool mask's pixels, inclusive (transformers' _batched_mask_to_box); zeros if empty."""
    rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
    if not len(rows):
        return [0, 0, 0, 0]
    return [int(cols[0]), int(rows[0]), int(cols[-1]), int(rows[-1])]
