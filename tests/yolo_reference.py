"""Ultralytics reference for the YOLO tests, run in its own venv (see test_yolo_ultralytics.py):
`python yolo_reference.py IN.npz OUT.npz WORKDIR`. Inputs and outputs travel as .npz arrays.

IN keys: `images` (names, comma-joined) + `img_<name>` RGB uint8 arrays; `fall_pt` (path of best.pt);
`n_resize`, `resize_src<i>` / `resize_to<i>` (cv2.resize INTER_LINEAR cases);
`onnx_out` (raw ONNX head output to run through ultralytics' NMS); `x` (a model input batch);
`pose_conf` (threshold for the random pose model's predict).
OUT: letterboxed images (rect and square), random yolov8n / yolov8n-pose / yolo11n / yolo11n-pose
checkpoints (written to WORKDIR) and their raw outputs on `x`, a yolov8n-seg checkpoint (a head ember refuses), ultralytics'
NMS of `onnx_out`, YOLO(best.pt).predict on each image (its defaults, and rect=False), and the random
pose models' and the random yolo11n's predict on the first image.
"""
import sys

import cv2
import numpy as np
import torch

from ultralytics import YOLO
from ultralytics.data.augment import LetterBox
from ultralytics.utils.nms import non_max_suppression


def randomize_bn(model, gen):
    """Random BatchNorm statistics, so that folding BN into the convs is actually exercised."""
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            n = m.num_features
            m.weight.data = torch.rand(n, generator=gen) + 0.5
            m.bias.data = torch.randn(n, generator=gen) * 0.1
            m.running_mean.data = torch.randn(n, generator=gen) * 0.1
            m.running_var.data = torch.rand(n, generator=gen) + 0.5


def main(inp, outp, workdir):
    d = dict(np.load(inp, allow_pickle=False))
    out = {}
    names = str(d["images"]).split(",")
    for name in names:
        bgr = np.ascontiguousarray(d[f"img_{name}"][:, :, ::-1])
        out[f"letterbox_{name}"] = LetterBox((640, 640), auto=True, stride=32)(image=bgr)[:, :, ::-1]
        out[f"letterbox_square_{name}"] = LetterBox((640, 640), auto=False)(image=bgr)[:, :, ::-1]
    for i in range(int(d["n_resize"])):
        src, (h, w) = d[f"resize_src{i}"], d[f"resize_to{i}"]
        out[f"resize_{i}"] = cv2.resize(src, (int(w), int(h)), interpolation=cv2.INTER_LINEAR)
    x = torch.from_numpy(d["x"])
    for cfg in ("yolov8n.yaml", "yolov8n-pose.yaml", "yolo11n.yaml", "yolo11n-pose.yaml"):
        torch.manual_seed(0)
        y = YOLO(cfg)
        m = y.model.eval()
        randomize_bn(m, torch.Generator().manual_seed(1))
        key = cfg.split(".")[0].replace("-", "_")
        torch.save({"model": m, "ema": None}, f"{workdir}/{key}.pt")
        with torch.no_grad():
            out[f"raw_{key}"] = m(x)[0].numpy()
    torch.save({"model": YOLO("yolov8n-seg.yaml").model}, f"{workdir}/yolov8n_seg.pt")  # unsupported head
    for conf, iou in ((0.25, 0.45), (0.05, 0.7)):
        det = non_max_suppression(torch.from_numpy(d["onnx_out"]), conf, iou)[0].numpy()
        out[f"nms_{conf}_{iou}"] = det
    fall = YOLO(str(d["fall_pt"]))
    for name in names:
        bgr = np.ascontiguousarray(d[f"img_{name}"][:, :, ::-1])
        # predict's own defaults (rect letterbox, conf 0.25, iou 0.7, max_det 300), then the square input
        for key, kw in (("pred", {}), ("pred_square", {"rect": False})):
            b = fall.predict(bgr, device="cpu", verbose=False, **kw)[0].boxes
            out[f"{key}_{name}"] = np.concatenate([b.xyxy.numpy(), b.conf.numpy()[:, None], b.cls.numpy()[:, None]], 1)
    bgr = np.ascontiguousarray(d[f"img_{names[0]}"][:, :, ::-1])
    for key in ("yolov8n_pose", "yolo11n", "yolo11n_pose"):
        r = YOLO(f"{workdir}/{key}.pt").predict(bgr, device="cpu", verbose=False, conf=float(d["pose_conf"]))[0]
        out[f"predict_{key}"] = np.concatenate([r.boxes.xyxy.numpy(), r.boxes.conf.numpy()[:, None],
                                                r.boxes.cls.numpy()[:, None]], 1)
        if r.keypoints is not None:
            out[f"kpts_{key}"] = r.keypoints.data.numpy()               # (n, 17, 3)
    np.savez(outp, **out)


if __name__ == "__main__":
    main(*sys.argv[1:4])
