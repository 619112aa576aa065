"""YOLOv8 and YOLO11 object detection, pose and instance segmentation, natively in numpy/ember and in the page.

    from ember.models.yolo import load_model, detect
    model = load_model("model.safetensors")        # or an Ultralytics best.pt / best.onnx
    detect(model, "bus.jpg")                        # [{"class", "label", "score", "box"}, ...]

config.py (sizes), model.py (YOLOv8 layers and heads), blocks11.py (YOLO11 layers), convert.py +
onnx_reader.py (weights), image.py (letterbox), nms.py, masks.py (segmentation masks), predict.py, draw.py
(annotated PNG), fetch.py (demo weights), cli.py (`ember yolo`).
"""
from .load import load_model  # noqa: F401
from .predict import detect  # noqa: F401
