"""Automatic mask generation ("segment everything"), as transformers' mask-generation pipeline
(pipelines/mask_generation.py with SamImageProcessor's generate_crop_boxes, filter_masks and
post_process_for_mask_generation; v5.x): a grid of points_per_crop^2 single-point prompts over the image (and
over overlapping crops when crops_n_layers > 0), points_per_batch at a time through the decoder against one
embedding per crop; masks kept when their predicted IoU and stability score pass the thresholds and their box
does not touch a crop's inner edge; then non-maximum suppression over the masks' boxes.

Masks are filtered at the crop's size one at a time (stability only for those that pass the IoU threshold:
the same set the pipeline keeps) and held as run-length encodings until the end, so memory stays at a few
masks whatever the grid.
"""
from __future__ import annotations

import math
from itertools import product

import numpy as np

from ..common.boxes import nms
from ..common.image import load_image
from ..common.rle import mask_box, mask_to_rle, rle_to_mask
from .predict import Segmenter

DEFAULTS = dict(points_per_batch=64, pred_iou_thresh=0.88, stability_score_thresh=0.95, stability_score_offset=1.0,
                mask_threshold=0.0, crops_nms_thresh=0.7, crops_n_layers=0, crop_overlap_ratio=512 / 1500,
                points_per_crop=32, crop_n_points_downscale_factor=1)
MAX_POINTS_PER_CROP = 128   # 16k prompts per crop
MAX_CROP_LAYERS = 3         # 1 + 4 + 16 + 64 crops, one image embedding each


def point_grid(n: int) -> np.ndarray:
    """n x n points evenly spaced in [0, 1]^2, x fastest (transformers' _build_point_grid), (n n, 2) float64."""
    side = np.linspace(1 / (2 * n), 1 - 1 / (2 * n), n)
    return np.stack([np.tile(side[None, :], (n, 1)), np.tile(side[:, None], (1, n))], -1).reshape(-1, 2)


def crop_boxes(h: int, w: int, n_layers: int, overlap_ratio: float) -> list[tuple[list[int], int]]:
    """[(x0, y0, x1, y1), layer] of the whole image then each layer's 2^i x 2^i overlapping crops."""
    out = [([0, 0, w, h], 0)]
    short = min(h, w)
    for layer in range(n_layers):
        n = 2 ** (layer + 1)
        overlap = int(overlap_ratio * short * (2 / n))
        cw = int(math.ceil((overlap * (n - 1) + w) / n))
        ch = int(math.ceil((overlap * (n - 1) + h) / n))
        xs = [int((cw - overlap) * i) for i in range(n)]
        ys = [int((ch - overlap) * i) for i in range(n)]
        for x0, y0 in product(xs, ys):
            out.append(([x0, y0, min(x0 + cw, w), min(y0 + ch, h)], layer + 1))
    return out


def near_crop_edge(box, crop, orig, atol: float = 20.0) -> bool:
    """A mask box (crop coordinates) within atol of the crop's border where that border is not the image's."""
    left, top = crop[0], crop[1]
    b = np.array(box, np.float32) + np.array([left, top, left, top], np.float32)
    near_crop = np.abs(b - np.array(crop, np.float32)) <= atol
    near_image = np.abs(b - np.array(orig, np.float32)) <= atol
    return bool((near_crop & ~near_image).any())


def stability(m: np.ndarray, threshold: float, offset: float) -> float:
    """Pixels above threshold + offset over pixels above threshold - offset (one mask's logits)."""
    inter = np.count_nonzero(m > threshold + offset)
    union = np.count_nonzero(m > threshold - offset)
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.float32(inter) / np.float32(union))


def generate(model, image, segmenter: Segmenter | None = None, **opts) -> dict:
    """-> {"masks": [(H, W) bool], "scores": (n,) float32, "boxes": (n, 4) int64 x0 y0 x1 y1, "rle": [...]}, best
    first. Options and defaults as the pipeline's (DEFAULTS). `segmenter`: one whose cached embedding of this image
    serves the whole-image crop (the page's tool)."""
    steps = generate_steps(model, image, segmenter, **opts)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def check_options(opts: dict) -> dict:
    unknown = set(opts) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"ember: unknown mask generation option(s) {sorted(unknown)} (known: {sorted(DEFAULTS)})")
    o = {**DEFAULTS, **opts}
    for k in ("points_per_batch", "crops_n_layers", "points_per_crop", "crop_n_points_downscale_factor"):
        if isinstance(o[k], bool) or not isinstance(o[k], (int, np.integer)):
            raise ValueError(f"ember: {k} must be an integer, got {o[k]!r}")
    for k in ("pred_iou_thresh", "stability_score_thresh", "stability_score_offset", "mask_threshold",
              "crops_nms_thresh", "crop_overlap_ratio"):
        o[k] = float(o[k])
        if not math.isfinite(o[k]):
            raise ValueError(f"ember: {k} must be a finite number, got {o[k]}")
    if not 1 <= o["points_per_batch"] <= 1024:
        raise ValueError(f"ember: points_per_batch must be 1 .. 1024, got {o['points_per_batch']}")
    if not 1 <= o["points_per_crop"] <= MAX_POINTS_PER_CROP:
        raise ValueError(f"ember: points_per_crop must be 1 .. {MAX_POINTS_PER_CROP}, got {o['points_per_crop']}")
    if not 0 <= o["crops_n_layers"] <= MAX_CROP_LAYERS:
        raise ValueError(f"ember: crops_n_layers must be 0 .. {MAX_CROP_LAYERS}, got {o['crops_n_layers']}")
    if o["crop_n_points_downscale_factor"] < 1:
        raise ValueError("ember: crop_n_points_downscale_factor must be at least 1")
    return o


def generate_steps(model, image, segmenter: Segmenter | None = None, **opts):
    """generate() as a generator: yields (stage, done, total), stage "embed" (encoder blocks of one crop) or
    "decode" (batches of points over all crops); returns generate()'s dict. Closing it stops the work."""
    o = check_options(opts)
    img = load_image(image)
    h, w = img.shape[:2]
    seg = segmenter if segmenter is not None and segmenter.model is model else Segmenter(model)
    crops = crop_boxes(h, w, o["crops_n_layers"], o["crop_overlap_ratio"])
    grids = [point_grid(int(o["points_per_crop"] / o["crop_n_points_downscale_factor"] ** i))
             for i in range(o["crops_n_layers"] + 1)]
    n_batches = sum(-(-len(grids[layer]) // o["points_per_batch"]) for _, layer in crops)
    done = 0
    rles, scores, boxes = [], [], []
    for crop, layer in crops:
        x0, y0, x1, y1 = crop
        part = img if (x0, y0, x1, y1) == (0, 0, w, h) else np.ascontiguousarray(img[y0:y1, x0:x1])
        if part is not img or seg.key != Segmenter.digest(img):  # a whole-image crop reuses a cached embedding
            for k, n in seg.set_image_steps(part):
                yield "embed", k, n
        ch, cw = seg.original
        pts = seg.pre.scale_coords(grids[layer] * np.array([cw, ch], np.float64), (ch, cw))  # (n, 2), model frame
        for i in range(0, len(pts), o["points_per_batch"]):
            batch = pts[i:i + o["points_per_batch"]]
            out = model(image_embeddings=seg.embedding, input_points=batch[None, :, None, :],
                        input_labels=np.ones((1, len(batch), 1), np.int64))
            low = out.pred_masks.numpy()[0].reshape((-1,) + tuple(out.pred_masks.shape[-2:]))  # (b m, 256, 256)
            iou = out.iou_scores.numpy()[0].reshape(-1)                                    # (b m,)
            for j in np.flatnonzero(iou > o["pred_iou_thresh"]) if o["pred_iou_thresh"] > 0 else range(len(iou)):
                m = seg.pre.post_process_masks(low[j], seg.original, seg.resized, binarize=False)  # (ch, cw)
                if o["stability_score_thresh"] > 0 and not stability(
                        m, o["mask_threshold"], o["stability_score_offset"]) > o["stability_score_thresh"]:
                    continue
                binary = m > o["mask_threshold"]
                box = mask_box(binary)
                if near_crop_edge(box, crop, [0, 0, w, h]):
                    continue
                if part is not img:
                    full = np.zeros((h, w), bool)
                    full[y0:y1, x0:x1] = binary
                    binary = full
                rles.append(mask_to_rle(binary))
                scores.append(iou[j])
                boxes.append([box[0] + x0, box[1] + y0, box[2] + x0, box[3] + y0])
            done += 1
            yield "decode", done, n_batches
    scores = np.array(scores, np.float32)
    boxes = np.array(boxes, np.int64).reshape(-1, 4)
    keep = nms(boxes.astype(np.float32), scores, o["crops_nms_thresh"]) if len(scores) else np.zeros(0, np.int64)
    return {"masks": [rle_to_mask(rles[i]) for i in keep], "scores": scores[keep], "boxes": boxes[keep],
            "rle": [rles[i] for i in keep]}

