"""YOLOv8 hyper-parameters: the width/depth scaling of ultralytics' yolov8.yaml, the class count and
(for pose models) the keypoint shape, plus what inference needs (class names, image size).

One YoloConfig describes every YOLOv8 detect/pose size: n/s/m/l/x differ only in
(depth_multiple, width_multiple, max_channels); channel and repeat counts follow ultralytics'
parse_model rules (make_divisible(min(c, max_channels) * width, 8), round(n * depth)).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from ...errors import FormatError

# ultralytics/cfg/models/v8/yolov8.yaml `scales`: (depth_multiple, width_multiple, max_channels)
SCALES = {
    "n": (0.33, 0.25, 1024),
    "s": (0.33, 0.50, 1024),
    "m": (0.67, 0.75, 768),
    "l": (1.00, 1.00, 512),
    "x": (1.00, 1.25, 512),
}
ARCH = "yolov8"
REG_MAX = 16  # DFL bins per box side
HEAD_INDEX = 22  # the Detect/Pose layer's index in yolov8.yaml


class YoloConfigError(FormatError):
    """A checkpoint or metadata that does not describe a YOLOv8 model ember can build."""


@dataclass
class YoloConfig:
    nc: int = 80
    depth_multiple: float = 0.33
    width_multiple: float = 0.25
    max_channels: float = 1024.0  # float('inf') when a yaml gives no `scales` row
    kpt_shape: tuple | None = None  # (keypoints, 2 or 3) for pose models
    reg_max: int = REG_MAX
    imgsz: int = 640
    names: dict = field(default_factory=dict)  # {class index: label}
    strides: tuple = (8, 16, 32)

    def __post_init__(self):
        self.kpt_shape = tuple(int(v) for v in self.kpt_shape) if self.kpt_shape else None
        self.names = {int(k): str(v) for k, v in (self.names or {}).items()}
        if not isinstance(self.nc, int) or self.nc < 1:
            raise YoloConfigError(f"ember: yolo config: nc must be a positive int, got {self.nc!r}")
        if self.names and sorted(self.names) != list(range(self.nc)):
            raise YoloConfigError(f"ember: yolo config: {len(self.names)} class names {sorted(self.names)[:8]}... "
                                  f"do not match nc={self.nc} (need exactly indices 0..{self.nc - 1})")
        if self.kpt_shape is not None and (len(self.kpt_shape) != 2 or self.kpt_shape[1] not in (2, 3)):
            raise YoloConfigError(f"ember: yolo config: kpt_shape must be (keypoints, 2|3), got {self.kpt_shape}")

    @property
    def task(self) -> str:
        return "pose" if self.kpt_shape else "detect"

    @classmethod
    def from_scale(cls, scale: str, **kw) -> YoloConfig:
        if scale not in SCALES:
            raise YoloConfigError(f"ember: unknown YOLOv8 scale {scale!r} (one of {', '.join(SCALES)})")
        d, w, mc = SCALES[scale]
        return cls(depth_multiple=d, width_multiple=w, max_channels=float(mc), **kw)

    # -- channel / repeat arithmetic of ultralytics' parse_model
    def ch(self, c: int) -> int:
        return int(math.ceil(min(c, self.max_channels) * self.width_multiple / 8) * 8)

    def n(self, repeats: int) -> int:
        return max(round(repeats * self.depth_multiple), 1) if repeats > 1 else repeats

    def label(self, cls_id: int) -> str:
        return self.names.get(int(cls_id), str(int(cls_id)))

    # -- safetensors metadata round trip (all values strings)
    def to_metadata(self) -> dict:
        d = asdict(self)
        d["max_channels"] = None if math.isinf(self.max_channels) else self.max_channels
        names = d.pop("names")
        return {"ember.arch": ARCH, "ember.yolo.config": json.dumps(d),
                "ember.yolo.names": json.dumps({str(k): v for k, v in names.items()})}

    @classmethod
    def from_metadata(cls, meta: dict, where: str = "weights") -> YoloConfig:
        if meta.get("ember.arch") != ARCH or "ember.yolo.config" not in meta:
            raise YoloConfigError(f"ember: {where}: not an ember YOLOv8 file (metadata ember.arch="
                                  f"{meta.get('ember.arch')!r}); convert a checkpoint with `ember convert yolo`")
        try:
            d = json.loads(meta["ember.yolo.config"])
            d["names"] = json.loads(meta.get("ember.yolo.names", "{}"))
            d["max_channels"] = float("inf") if d.get("max_channels") is None else float(d["max_channels"])
            d["strides"] = tuple(d.get("strides", (8, 16, 32)))
            return cls(**d)
        except (ValueError, TypeError) as e:
            raise YoloConfigError(f"ember: {where}: bad YOLOv8 metadata: {e}") from None

    @classmethod
    def from_yaml_dict(cls, y: dict, **kw) -> YoloConfig:
        """An ultralytics model yaml dict (as pickled in a checkpoint's model.yaml)."""
        if y.get("scales"):
            scale = y.get("scale") or next(iter(y["scales"]))
            d, w, mc = y["scales"][scale]
        else:
            d, w, mc = y.get("depth_multiple", 1.0), y.get("width_multiple", 1.0), float("inf")
        kpt = y.get("kpt_shape")
        return cls(nc=int(y.get("nc", 80)), depth_multiple=float(d), width_multiple=float(w),
                   max_channels=float(mc), kpt_shape=tuple(kpt) if kpt else None, **kw)

    @classmethod
    def infer(cls, shapes: dict, where: str = "weights", **kw) -> YoloConfig:
        """Config from weight shapes alone (ONNX exports carry no yaml): the class count from the class
        head, keypoints from the pose head, and the standard scale whose layer shapes all match."""
        p = f"model.{HEAD_INDEX}."
        try:
            nc = int(shapes[p + "cv3.0.2.weight"][0])
        except KeyError:
            raise YoloConfigError(f"ember: {where}: no YOLOv8 detect head ({p}cv3.0.2.weight) among "
                                  f"{len(shapes)} tensors") from None
        nk = int(shapes[p + "cv4.0.2.weight"][0]) if p + "cv4.0.2.weight" in shapes else 0
        kpt = kw.pop("kpt_shape", None)
        if nk and not kpt:  # ultralytics' pose models use (x, y, visibility) triples
            kpt = (nk // 3, 3) if nk % 3 == 0 else (nk // 2, 2)
        for scale in SCALES:
            cfg = cls.from_scale(scale, nc=nc, kpt_shape=kpt, **kw)
            if all(tuple(shapes.get(k, ())) == v for k, v in _signature(cfg).items()) \
                    and all(_blocks(shapes, i) == cfg.n(r) for i, r in ((2, 3), (4, 6))):
                return cfg
        raise YoloConfigError(f"ember: {where}: weight shapes match no YOLOv8 scale ({', '.join(SCALES)}) "
                              f"with nc={nc}; model.0.conv.weight is {tuple(shapes.get('model.0.conv.weight', ()))}")


def _signature(cfg: YoloConfig) -> dict:
    """Shapes that pin down width and max_channels: the stem conv and the SPPF output conv."""
    c9 = cfg.ch(1024)
    return {"model.0.conv.weight": (cfg.ch(64), 3, 3, 3), "model.9.cv2.conv.weight": (c9, 2 * c9, 1, 1)}


def _blocks(shapes: dict, layer: int) -> int:
    """How many bottlenecks C2f layer `layer` holds (its depth)."""
    return len({k.split(".")[3] for k in shapes if k.startswith(f"model.{layer}.m.")})
