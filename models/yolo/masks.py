"""Instance masks of the segmentation head, as Ultralytics predict makes them (utils/ops.py process_mask with
upsample=True, crop_mask, scale_masks; 8.4): each box's coefficients times the prototypes, upsampled bilinearly
to the model input, binarized at 0 and cut to the box; masks left empty drop their detection. To the original
image: the letterbox padding cropped off, bilinear resize, threshold 0.5."""
from __future__ import annotations

import numpy as np

from ..common.image import resize_bilinear


def process_mask(protos: np.ndarray, coeffs: np.ndarray, boxes: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """protos (nm, mh, mw), coeffs (n, nm), boxes (n, 4) xyxy in input pixels -> (n, H, W) bool at input size."""
    nm, mh, mw = protos.shape
    if not len(coeffs):
        return np.zeros((0,) + tuple(shape), bool)
    logits = (coeffs.astype(np.float32) @ protos.reshape(nm, -1).astype(np.float32)).reshape(-1, mh, mw)
    masks = np.empty((len(coeffs),) + tuple(shape), bool)
    cols, rows = np.arange(shape[1], dtype=np.float32), np.arange(shape[0], dtype=np.float32)
    for i, (m, (x1, y1, x2, y2)) in enumerate(zip(logits, boxes.astype(np.float32))):  # one input-size map at a time
        up = resize_bilinear(m, *shape) > 0
        up &= ((cols >= x1) & (cols < x2))[None, :]
        up &= ((rows >= y1) & (rows < y2))[:, None]
        masks[i] = up
    return masks


def to_original(mask: np.ndarray, lb) -> np.ndarray:
    """An input-size mask -> the original image's (h0, w0) bool (ultralytics scale_masks, then > 0.5); lb: the
    letterbox placement (image.Letterbox)."""
    (nh, nw), (h0, w0) = lb.new_shape, lb.orig_shape
    part = mask[lb.top:lb.top + nh, lb.left:lb.left + nw].astype(np.float32)
    return resize_bilinear(part, h0, w0) > 0.5
