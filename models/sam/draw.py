"""What `ember segment` writes: a mask as a black-and-white PNG, the cut-out (the image's pixels where the mask
is, transparent elsewhere) and masks tinted over the image."""
from __future__ import annotations

import numpy as np

# distinct tints for "segment everything" (cycled)
_TINTS = np.array([(255, 56, 56), (72, 249, 10), (0, 194, 255), (255, 178, 29), (132, 56, 255), (0, 212, 187),
                   (255, 55, 199), (207, 210, 49), (26, 147, 52), (100, 115, 255)], np.float32)


def mask_image(mask: np.ndarray) -> np.ndarray:
    """(H, W) bool -> (H, W) uint8, 255 where the mask is."""
    return np.where(mask, np.uint8(255), np.uint8(0))


def cutout(img: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 and (H, W) bool -> (H, W, 4) RGBA, alpha 0 outside the mask."""
    return np.concatenate([img, mask_image(mask)[:, :, None]], 2)


def overlay(img: np.ndarray, masks, alpha: float = 0.5) -> np.ndarray:
    """The image with each (H, W) bool mask tinted over it, in order (later masks on top)."""
    out = img.astype(np.float32)
    for i, m in enumerate(masks):
        out[m] = out[m] * (1 - alpha) + _TINTS[i % len(_TINTS)] * alpha
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)
