"""Ultralytics reference for the YOLO tests, run in its own venv (see test_yolo_ultralytics.py):
`python yolo_reference.py IN.npz OUT.npz WORKDIR`. Inputs and outputs travel as .npz arrays.

IN keys: `images` (names, comma-joined) + `img_<name>` RGB uint8 arrays; `fall_pt` (path of best.pt);
`n_resize`, `resize_src<i>` / `resize_to<i>` (cv2.resize INTER_LINEAR cases);
`onnx_out` (raw ONNX head output to run through ultralytics' NMS); `x` (a model input batch);
`pose_conf` (threshold for the random pose model's predict).
OUT: letterboxed images (rect and square), random yolov8n / yolov8n-pose checkpoints and calibrated
random yolo11n / yolo11n-pose ones (see calibrate; all written to WORKDIR) and their raw outputs on `x`
(on the letterboxed first image for the yolo11 ones), calibrated random yolov8n-seg and yolo11n-seg checkpoints
with their raw outputs and prototypes, predict's boxes and masks (at the input size, and scaled to the image by
scale_masks), ultralytics' NMS of `onnx_out`, YOLO(best.pt).predict on each image (its defaults, and rect=False), and the random
v8 pose model's predict on the first image (conf `pose_conf`), the yolo11 ones' with predict's defaults.
"""
import sys

import cv2
import numpy as np
import torch

from ultralytics import YOLO
from ultralytics.data.augment import LetterBox
from ultralytics.utils import ops
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


def calibrate(model, x, cls_bias=-5.0):
    """A random model whose detections depend on the image: BatchNorm statistics from one forward pass
    over x (each layer's output then varies over the image as a trained net's does, instead of fading
    to a near-constant map), and one class bias for all classes, so that predict's default conf 0.25
    keeps a few dozen boxes with distinct scores. Inputs unlike x (uniform noise, or x at another size)
    meet the small variances of some channels and give large, ill-conditioned activations: test it on x."""
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # running stats = this batch's
    model.train()
    with torch.no_grad():
        model(x)
    model.eval()
    for seq in model.model[-1].cv3:
        seq[-1].bias.data[:] = cls_bias


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
    bgr0 = np.ascontiguousarray(d[f"img_{names[0]}"][:, :, ::-1])
    rect = torch.from_numpy(np.ascontiguousarray(out[f"letterbox_{names[0]}"].transpose(2, 0, 1)))[None] / 255.0
    for cfg in ("yolov8n.yaml", "yolov8n-pose.yaml", "yolo11n.yaml", "yolo11n-pose.yaml"):
        torch.manual_seed(0)
        m = YOLO(cfg).model.eval()
        v11 = cfg.startswith("yolo11")
        if v11:
            calibrate(m, rect)
        else:
            randomize_bn(m, torch.Generator().manual_seed(1))
        key = cfg.split(".")[0].replace("-", "_")
        torch.save({"model": m, "ema": None}, f"{workdir}/{key}.pt")
        with torch.no_grad():  # a calibrated model only on the input it was calibrated on
            out[f"raw_{key}"] = m(rect if v11 else x)[0].numpy()
    for cfg in ("yolov8n-seg", "yolo11n-seg"):  # calibrated as the yolo11 ones: masks that depend on the image
        torch.manual_seed(0)
        m = YOLO(f"{cfg}.yaml").model.eval()
        calibrate(m, rect)
        key = cfg.replace("-", "_")
        torch.save({"model": m, "ema": None}, f"{workdir}/{key}.pt")
        with torch.no_grad():
            (raw, proto), _ = m(rect)
        out[f"raw_{key}"], out[f"proto_{key}"] = raw.numpy(), proto.numpy()
        r = YOLO(f"{workdir}/{key}.pt").predict(bgr0, device="cpu", verbose=False)[0]
        out[f"predict_{key}"] = np.concatenate([r.boxes.xyxy.numpy(), r.boxes.conf.numpy()[:, None],
                                                r.boxes.cls.numpy()[:, None]], 1)
        out[f"masks_{key}"] = r.masks.data.numpy().astype(np.uint8)                      # (n, H', W') input size
        out[f"masks0_{key}"] = (ops.scale_masks(r.masks.data[None].float(), r.orig_shape)[0] > 0.5).numpy()
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
    for key, kw in (("yolov8n_pose", {"conf": float(d["pose_conf"])}), ("yolo11n", {}), ("yolo11n_pose", {})):
        r = YOLO(f"{workdir}/{key}.pt").predict(bgr0, device="cpu", verbose=False, **kw)[0]
        out[f"predict_{key}"] = np.concatenate([r.boxes.xyxy.numpy(), r.boxes.conf.numpy()[:, None],
                                                r.boxes.cls.numpy()[:, None]], 1)
        if r.keypoints is not None:
            out[f"kpts_{key}"] = r.keypoints.data.numpy()               # (n, 17, 3)
    np.savez(outp, **out)


if __name__ == "__main__":
    main(*sys.argv[1:4])
