"""The segmentation tool: Segment Anything (a SamModel folder: SAM ViT-B/L/H, SlimSAM) on an image the page sends
once; every click after that runs only the prompt encoder and the mask decoder against the cached image
embedding, as `ember segment` does. No SAM weights are bundled: the page loads them by hub id, URL or files.

A request carries the image (ImageData's RGBA or encoded bytes) with an `image_id` the first time; later ones
send the id alone, and get {"need_image": true} back if the worker no longer holds that image (ember.js then
sends it again). Masks come back as bytes at the image's size: one byte per pixel per mask (0 or 1), or for
"everything" one little-endian uint16 per pixel, 0 where no mask is and k where the k-th mask is (best on top).
"""
from __future__ import annotations

import asyncio
import os
import time

import numpy as np

from . import WorkerError, checkpoint, weight_sizes

FILES = [["config.json"], ["model.safetensors"], ["preprocessor_config.json", True],
         ["processor_config.json", True, "preprocessor_config.json"]]  # transformers 5 saves the latter
BESIDE = {".safetensors": [["config.json"], ["preprocessor_config.json", True]]}
PACKAGES = ("pillow",)  # SamProcessor's resize is Pillow's bilinear; encoded images decode with it too
BUNDLES = ""            # no SAM weights can be had here: SlimSAM-77 ~38 MB and sam-vit-base ~375 MB come from the hub
SIZES = {"Zigeng/SlimSAM-uniform-77": 38_000_000, "facebook/sam-vit-base": 375_000_000}  # what the page quotes
_STATE: dict = {}       # "segmenter", "image_id", "decoder_runs"


def demos(extra: bool = True) -> list[dict]:
    return []


def load(folder: str, device: str) -> dict:
    """-> "parameters", "bytes", "image_size", "encoder" (its shape in words), "encoder_runs"."""
    import ember
    from ember.io.formats import read_json_object
    from ember.models.sam.model import build_from_hf
    from ember.models.sam.predict import Segmenter
    from ember.models.sam.processor import Preprocessor
    _STATE.clear()  # free the old model before the new one claims memory
    names = set(os.listdir(folder))
    missing = [n for n in ("config.json", "model.safetensors") if n not in names]
    if missing:
        raise WorkerError(f"ember: {', '.join(sorted(names)) or 'no file'}: a SAM model needs config.json and "
                          f"model.safetensors (missing {', '.join(missing)})", "unsupported_file")
    config = read_json_object(os.path.join(folder, "config.json"))
    if config.get("model_type", "sam") != "sam":
        raise WorkerError(f"ember: config.json says model_type {config.get('model_type')!r}; the segmentation tool "
                          "runs SamModel checkpoints (SAM, SlimSAM)", "bad_model")
    pp = next((os.path.join(folder, n) for n in ("preprocessor_config.json", "processor_config.json") if n in names),
              None)
    model = build_from_hf(config, ember.load(os.path.join(folder, "model.safetensors")), "model.safetensors")
    seg = Segmenter(model.to(device), Preprocessor.from_file(pp))
    _STATE.update(segmenter=seg, image_id=None, decoder_runs=0)
    v = model.config.vision
    n_params, n_bytes = weight_sizes(model)
    return {"parameters": n_params, "bytes": n_bytes, "image_size": v.image_size, "encoder_runs": 0,
            "encoder": f"ViT {v.num_hidden_layers} layers x {v.hidden_size} wide, {v.grid}x{v.grid} patches"}


def _image(image) -> np.ndarray:
    """ImageData's {"rgba", "width", "height"} or encoded bytes -> (H, W, 3) uint8."""
    from ember.models.common.image import load_image
    if isinstance(image, dict):
        w, h = int(image["width"]), int(image["height"])
        rgba = np.frombuffer(image["rgba"], dtype=np.uint8)
        if rgba.size != w * h * 4:
            raise WorkerError(f"ember: RGBA buffer of {rgba.size} bytes does not match {w}x{h}", "unsupported_file")
        return rgba.reshape(h, w, 4)[:, :, :3].copy()
    try:
        return load_image(bytes(image))
    except ValueError as e:
        raise WorkerError(str(e), "unsupported_file") from None


def _prompt(opts: dict) -> dict:
    """The click prompt: points [[x, y, label], ...] and an optional box [x0, y0, x1, y1], original pixels."""
    points = opts.get("points") or []
    try:
        pts = [[float(p[0]), float(p[1])] for p in points]
        labels = [int(p[2]) if len(p) > 2 else 1 for p in points]
        box = opts.get("box")
        box = None if box is None else [[float(v) for v in box]]
    except (TypeError, ValueError, IndexError) as e:
        raise WorkerError(f"ember: bad SAM prompt ({e}); points are [x, y, label], a box [x0, y0, x1, y1]",
                          "bad_request") from None
    return {"points": pts or None, "labels": labels or None, "boxes": box,
            "multimask_output": bool(opts.get("multimask", True))}


async def run(image, opts: dict, on_partial=None, on_progress=None) -> dict:
    """Click: -> {"masks": bytes (m, H, W), "count": m, "scores", "boxes", "areas", "best", "width", "height",
    "ms" (prompt encoder + decoder + upscaling), "encode_ms" (0 when the cached embedding served), "encoder_runs",
    "decoder_runs", "stopped"}. opts: image_id, points, box, multimask (default true), everything (the automatic
    generator: points_per_side, default 16, points_per_batch and the pipeline's FILTERS; then "labels", the index + 1
    of the mask on top per pixel, replaces "masks")."""
    from ember.models.common.rle import mask_box
    from ember.models.sam.predict import PromptError
    seg = _STATE.get("segmenter")
    if seg is None:
        raise WorkerError("ember: no SAM model loaded yet; load one first", "not_loaded")
    image_id = str(opts.get("image_id") or "")
    if image is not None:
        img = _image(image)
    elif image_id and image_id == _STATE.get("image_id") and seg.embedding is not None:
        img = None
    else:
        return {"need_image": True}
    t0 = time.perf_counter()
    stopped, ran = "done", False
    if img is not None:
        steps = seg.set_image_steps(img)
        try:
            while True:
                done, total = next(steps)
                if on_progress is not None:
                    on_progress({"stage": "encode", "done": done, "total": total})
                await checkpoint()
        except StopIteration as end:
            ran = end.value
            _STATE["image_id"] = image_id
        except asyncio.CancelledError:
            steps.close()  # the previous embedding stays; this image is not embedded
            _STATE["image_id"] = None
            stopped = "cancelled"
        except ValueError as e:
            raise WorkerError(str(e), "unsupported_file") from None
    encode_ms = (time.perf_counter() - t0) * 1000 if ran else 0.0
    h, w = seg.original
    out = {"width": w, "height": h, "encode_ms": round(encode_ms, 1), "encoder_runs": seg.encoder_runs,
           "stopped": stopped}
    if stopped == "cancelled":
        return {**out, "decoder_runs": _STATE["decoder_runs"], "ms": 0.0}
    t1 = time.perf_counter()
    if opts.get("everything"):
        return {**out, **await _everything(seg, opts, on_progress), "ms": round((time.perf_counter() - t1) * 1000, 1),
                "decoder_runs": _STATE["decoder_runs"]}
    try:
        r = seg.predict(**_prompt(opts))
    except PromptError as e:
        raise WorkerError(str(e), "bad_request") from None
    _STATE["decoder_runs"] += 1
    masks, scores = r["masks"].reshape((-1, h, w)), r["scores"].reshape(-1)          # one prompt: (m, H, W)
    ms = (time.perf_counter() - t1) * 1000
    return {**out, "masks": masks.astype(np.uint8).tobytes(), "count": int(len(masks)),
            "scores": [round(float(s), 5) for s in scores], "boxes": [mask_box(m) for m in masks],
            "areas": [int(m.sum()) for m in masks], "best": int(np.argmax(scores)), "ms": round(ms, 1),
            "decoder_runs": _STATE["decoder_runs"]}


# the mask-generation pipeline's filters the page's API passes through (defaults: ember.models.sam.generate.DEFAULTS)
FILTERS = ("pred_iou_thresh", "stability_score_thresh", "stability_score_offset", "mask_threshold", "crops_nms_thresh")


async def _everything(seg, opts: dict, on_progress) -> dict:
    from ember.models.sam.generate import generate_steps
    try:
        side = int(opts.get("points_per_side", 16))
        extra = {k: float(opts[k]) for k in FILTERS if k in opts}
        if "points_per_batch" in opts:
            extra["points_per_batch"] = int(opts["points_per_batch"])
    except (TypeError, ValueError) as e:
        raise WorkerError(f"ember: bad option ({e})", "bad_request") from None
    try:
        steps = generate_steps(seg.model, seg.image, seg, points_per_crop=side, **extra)
    except ValueError as e:
        raise WorkerError(str(e), "bad_request") from None
    stopped = "done"
    try:
        while True:
            stage, done, total = next(steps)
            if on_progress is not None:
                on_progress({"stage": stage, "done": done, "total": total})
            await checkpoint()
    except StopIteration as end:
        r = end.value
    except asyncio.CancelledError:
        steps.close()
        return {"stopped": "cancelled", "labels": b"", "count": 0, "scores": [], "boxes": [], "areas": []}
    except ValueError as e:
        raise WorkerError(str(e), "bad_request") from None
    h, w = seg.original
    labels = np.zeros((h, w), "<u2")
    for k in range(len(r["masks"]) - 1, -1, -1):  # the best mask drawn last, on top
        labels[r["masks"][k]] = k + 1
    return {"stopped": stopped, "labels": labels.tobytes(), "count": len(r["masks"]),
            "scores": [round(float(s), 5) for s in r["scores"]], "boxes": r["boxes"].tolist(),
            "areas": [int(m.sum()) for m in r["masks"]]}
