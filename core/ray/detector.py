"""YOLOv8 over a dataset: `image` ((H, W, 3) uint8 RGB, as ray.data.read_images gives), `bytes` (an
encoded image) or `path` -> `detections` (ember.models.yolo's detect(): [{"class", "label", "score",
"box"}], box in the image's pixels)."""
from __future__ import annotations

import os

import numpy as np

from .batch import BatchMapper


class Detector(BatchMapper):
    inputs = ("image", "bytes", "path")
    outputs = {"detections": list}

    def __init__(self, model=None, device: str = "cpu", **options):
        """model: a converted .safetensors, an Ultralytics best.pt / .onnx, their URL or hub path (None: the
        demo fall detector), or an ObjectRef from Detector.share(). options: detect() options (conf, iou,
        max_det, square, agnostic)."""
        self.options = options
        super().__init__(model, device)

    @classmethod
    def local_path(cls, model):
        if model is None:
            from ember.models.yolo.fetch import ensure_demo_model
            return ensure_demo_model()
        from ember import hub
        source = hub.resolve(os.fspath(model))
        return source.path(source.file) if source.file is not None else source.local

    @classmethod
    def arrow_types(cls, keypoints: bool = False):
        """keypoints: for a pose model, whose detections also carry keypoints."""
        import pyarrow as pa
        fields = [("class", pa.int64()), ("label", pa.string()), ("score", pa.float64()),
                  ("box", pa.list_(pa.float64()))]                                   # detect()'s dict
        if keypoints:
            fields.append(("keypoints", pa.list_(pa.list_(pa.float64()))))
        return {"detections": pa.list_(pa.struct(fields))}

    def load(self, model):
        from ember.models.yolo import load_model
        self.model = load_model(self.local_path(model), device=self.device)

    def run(self, item, column):
        from ember.models.yolo import detect
        if column == "path":
            item = str(item)
        elif column == "bytes":
            item = bytes(item)
        else:
            item = np.asarray(item)
        return {"detections": detect(self.model, item, **self.options)}
