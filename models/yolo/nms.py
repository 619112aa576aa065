"""Post-processing in numpy: confidence filter, class-aware NMS, as ultralytics' non_max_suppression
(single label per box, max_wh class offsets, torchvision.ops.nms semantics: greedy by score, drop
IoU > threshold)."""
from __future__ import annotations

import numpy as np

from ..common.boxes import nms

MAX_WH = 7680     # class offset: boxes of different classes never overlap after shifting
MAX_NMS = 30000   # candidates kept before NMS, by score
MAX_DET = 300


def xywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    xy, half = b[..., :2], b[..., 2:4] / 2
    return np.concatenate([xy - half, xy + half], -1)


def postprocess(pred: np.ndarray, conf: float = 0.25, iou: float = 0.45, nc: int | None = None,
                agnostic: bool = False, max_det: int = MAX_DET) -> np.ndarray:
    """One image's model output (4 + nc [+ extra], A) -> (n, 6 [+ extra]) rows
    [x1, y1, x2, y2, score, class, extra...] in model-input pixels, best first."""
    nc = pred.shape[0] - 4 if nc is None else nc
    p = pred.T                                                                  # (A, 4 + nc + extra)
    cls_scores = p[:, 4:4 + nc]
    score, cls = cls_scores.max(1), cls_scores.argmax(1)
    keep = score > conf
    p, score, cls = p[keep], score[keep], cls[keep]
    if len(p) > MAX_NMS:
        top = np.argsort(-score, kind="stable")[:MAX_NMS]
        p, score, cls = p[top], score[top], cls[top]
    boxes = xywh_to_xyxy(p[:, :4])
    offset = 0 if agnostic else cls[:, None].astype(boxes.dtype) * MAX_WH
    idx = nms(boxes + offset, score, iou, max_det)
    return np.concatenate([boxes[idx], score[idx, None], cls[idx, None].astype(boxes.dtype),
                           p[idx, 4 + nc:]], 1)
