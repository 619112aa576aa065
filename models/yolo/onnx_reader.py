"""The weights and metadata of an Ultralytics .onnx export, read with ember.onnx's protobuf reader.

graph.initializer (raw_data, typed fields, external data files) -> numpy arrays, and the model's
metadata_props (ultralytics stores names, stride, imgsz there). Running the graph itself is
ember.onnx.InferenceSession's job; YOLO only needs the weights to fill its own module.
"""
from __future__ import annotations

from ...onnx.proto import load_model
from ...onnx.tensor_data import to_numpy
from ...onnx.wire import OnnxFormatError

__all__ = ["OnnxFormatError", "read_onnx"]


def read_onnx(src, where: str | None = None) -> tuple[dict, dict]:
    """An .onnx path or bytes -> ({initializer name: ndarray}, {metadata key: value}).
    bfloat16 initializers come back as uint16 bit patterns."""
    try:
        model = load_model(src, where)
    except OnnxFormatError as e:
        raise OnnxFormatError(f"{e}; the ONNX file is truncated or not an ONNX model") from None
    tensors = {t.name: to_numpy(t, model.where, model.base_dir, "initializer") for t in model.graph.initializer}
    return tensors, {m.key: m.value for m in model.metadata_props}
