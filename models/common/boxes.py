"""Boxes shared by the vision families: greedy non-maximum suppression with torchvision.ops.nms semantics
(YOLO's class-aware NMS offsets boxes per class before calling it; SAM's automatic mask generator runs it on
the masks' boxes)."""
from __future__ import annotations

import numpy as np


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float, max_keep: int | None = None) -> np.ndarray:
    """Greedy NMS: indices of kept boxes, highest score first. (N, 4) xyxy, (N,) scores.
    Boxes sorted once, coordinates as contiguous columns; each kept box updates an `alive` mask of the
    boxes after it in one vectorized step (memory O(N)). Stopping after max_keep boxes equals running
    to the end and truncating."""
    order = np.argsort(-scores, kind="stable")
    x1, y1, x2, y2 = (np.ascontiguousarray(boxes[order, k]) for k in range(4))
    area = (x2 - x1) * (y2 - y1)
    alive = np.ones(len(order), bool)
    keep, i, n = [], 0, len(order)
    max_keep = n if max_keep is None else max_keep
    while i < n and len(keep) < max_keep:
        keep.append(i)
        j = slice(i + 1, n)
        w = np.clip(np.minimum(x2[i], x2[j]) - np.maximum(x1[i], x1[j]), 0, None)
        h = np.clip(np.minimum(y2[i], y2[j]) - np.maximum(y1[i], y1[j]), 0, None)
        inter = w * h
        with np.errstate(invalid="ignore", divide="ignore"):  # 0/0 for empty boxes: NaN, kept as torchvision does
            alive[j] &= ~(inter / (area[i] + area[j] - inter) > iou)
        nxt = alive[j].argmax() if i + 1 < n else 0
        if i + 1 >= n or not alive[i + 1 + nxt]:
            break
        i += 1 + nxt
    return order[np.array(keep, np.int64)]
