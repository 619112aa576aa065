"""Build a YOLOv8 or YOLO11 (as the config says) from weights: an ember safetensors file (converted, config in its metadata), or an
Ultralytics .pt / .onnx converted in memory."""
from __future__ import annotations

import os

from .blocks11 import YOLO11
from .config import YoloConfig
from .convert import check_weights, read_weights
from .model import YOLOv8


def load_model(src, device="cpu") -> YOLOv8:
    import ember
    from ember.io import load, metadata
    path = os.fspath(src)
    if path.endswith((".pt", ".pth", ".onnx")):
        arrays, cfg = read_weights(path)
        tensors = {k: ember.tensor(v) for k, v in arrays.items()}
    else:
        cfg = YoloConfig.from_metadata(metadata(path), path)
        tensors = load(path)
        check_weights(tensors, cfg, path)
    model = (YOLO11 if cfg.version == 11 else YOLOv8)(cfg)
    model.load_state_dict(tensors, strict=True)
    return model.to(device).eval()
