"""YOLOv8 / YOLO11 hyper-parameters: the width/depth scaling of ultralytics' yolov8.yaml or yolo11.yaml,
the class count and (for pose models) the keypoint shape, plus what inference needs (class names, image size).

One YoloConfig describes every YOLOv8 or YOLO11 detect/pose size: n/s/m/l/x differ only in
(depth_multiple, width_multiple, max_channels) and, for YOLO11, whether C3k2 uses C3k blocks; channel
and repeat counts follow ultralytics' parse_model rules (make_divisible(min(c, max_channels) * width, 8),
round(n * depth)).
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
# ultralytics/cfg/models/11/yolo11.yaml `scales`
SCALES11 = {
    "n": (0.50, 0.25, 1024),
    "s": (0.50, 0.50, 1024),
    "m": (0.50, 1.00, 512),
    "l": (1.00, 1.00, 512),
    "x": (1.00, 1.50, 512),
}
ARCHS = {8: "yolov8", 11: "yolo11"}  # version -> the ember.arch metadata value
REG_MAX = 16  # DFL bins per box side
HEAD_INDEX = 22  # the Detect/Pose layer's index in yolov8.yaml (23 in yolo11.yaml: see head_index)


class YoloConfigError(FormatError):
    """A checkpoint or metadata that does not describe a YOLOv8 / YOLO11 model ember can build."""


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
    version: int = 8  # 8 (yolov8.yaml) or 11 (yolo11.yaml)
    c3k: bool = False  # YOLO11 m/l/x: every C3k2 holds C3k blocks (ultralytics parse_model, scale in m/l/x)
    nm: int = 0        # segmentation models: mask coefficients per box (ultralytics Segment's nm, 32); 0 otherwise
    npr: int = 0       # segmentation models: prototype channels (Segment's npr, 256 scaled by the width)

    def __post_init__(self):
        if self.version not in ARCHS:
            raise YoloConfigError(f"ember: yolo config: version must be one of {sorted(ARCHS)}, got {self.version!r}")
        self.kpt_shape = tuple(int(v) for v in self.kpt_shape) if self.kpt_shape else None
        self.names = {int(k): str(v) for k, v in (self.names or {}).items()}
        if not isinstance(self.nc, int) or self.nc < 1:
            raise YoloConfigError(f"ember: yolo config: nc must be a positive int, got {self.nc!r}")
        if self.names and sorted(self.names) != list(range(self.nc)):
            raise YoloConfigError(f"ember: yolo config: {len(self.names)} class names {sorted(self.names)[:8]}... "
                                  f"do not match nc={self.nc} (need exactly indices 0..{self.nc - 1})")
        if self.kpt_shape is not None and (len(self.kpt_shape) != 2 or self.kpt_shape[1] not in (2, 3)):
            raise YoloConfigError(f"ember: yolo config: kpt_shape must be (keypoints, 2|3), got {self.kpt_shape}")
        if not (isinstance(self.nm, int) and isinstance(self.npr, int) and 0 <= self.nm <= 1024
                and 0 <= self.npr <= 4096 and (self.nm > 0) == (self.npr > 0)):
            raise YoloConfigError(f"ember: yolo config: nm {self.nm!r} and npr {self.npr!r} must both be 0 or both "
                                  "positive (at most 1024 and 4096)")
        if self.nm and self.kpt_shape:
            raise YoloConfigError("ember: yolo config: a model is pose (kpt_shape) or segmentation (nm), not both")

    @property
    def task(self) -> str:
        return "pose" if self.kpt_shape else "segment" if self.nm else "detect"

    @property
    def head_index(self) -> int:
        return HEAD_INDEX + (self.version == 11)  # YOLO11 inserts C2PSA as layer 10

    @classmethod
    def from_scale(cls, scale: str, version: int = 8, **kw) -> YoloConfig:
        scales = SCALES11 if version == 11 else SCALES
        if scale not in scales:
            raise YoloConfigError(f"ember: unknown {ARCHS.get(version, version)} scale {scale!r} "
                                  f"(one of {', '.join(scales)})")
        d, w, mc = scales[scale]
        return cls(depth_multiple=d, width_multiple=w, max_channels=float(mc), version=version,
                   c3k=version == 11 and scale in "mlx", **kw)

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
        return {"ember.arch": ARCHS[self.version], "ember.yolo.config": json.dumps(d),
                "ember.yolo.names": json.dumps({str(k): v for k, v in names.items()})}

    @classmethod
    def from_metadata(cls, meta: dict, where: str = "weights") -> YoloConfig:
        arch = meta.get("ember.arch")
        if arch not in ARCHS.values() or "ember.yolo.config" not in meta:
            raise YoloConfigError(f"ember: {where}: not an ember YOLOv8 / YOLO11 file (metadata ember.arch="
                                  f"{meta.get('ember.arch')!r}); convert a checkpoint with `ember convert yolo`")
        try:
            d = json.loads(meta["ember.yolo.config"])
            d["names"] = json.loads(meta.get("ember.yolo.names", "{}"))
            d["max_channels"] = float("inf") if d.get("max_channels") is None else float(d["max_channels"])
            d["strides"] = tuple(d.get("strides", (8, 16, 32)))
            cfg = cls(**d)
        except (ValueError, TypeError) as e:
            raise YoloConfigError(f"ember: {where}: bad YOLO metadata: {e}") from None
        if ARCHS[cfg.version] != arch:
            raise YoloConfigError(f"ember: {where}: metadata ember.arch={arch!r} but its config says "
                                  f"version {cfg.version}")
        return cfg

    @classmethod
    def from_yaml_dict(cls, y: dict, **kw) -> YoloConfig:
        """An ultralytics model yaml dict (as pickled in a checkpoint's model.yaml); a backbone with C3k2
        layers is YOLO11's."""
        scale = None
        if y.get("scales"):
            scale = y.get("scale") or next(iter(y["scales"]))
            d, w, mc = y["scales"][scale]
        else:
            d, w, mc = y.get("depth_multiple", 1.0), y.get("width_multiple", 1.0), float("inf")
        kpt = y.get("kpt_shape")
        layers = [row[2] for row in (y.get("backbone") or []) if isinstance(row, (list, tuple)) and len(row) > 2]
        v11 = "C3k2" in layers
        head = (y.get("head") or [[]])[-1]
        nm = npr = 0
        if isinstance(head, (list, tuple)) and len(head) > 3 and head[2] == "Segment":
            args = list(head[3]) + [32, 256][len(head[3]) - 1:]                   # [nc, nm, npr] with defaults
            nm, npr = int(args[1]), int(args[2])
        cfg = cls(nc=int(y.get("nc", 80)), depth_multiple=float(d), width_multiple=float(w),
                  max_channels=float(mc), kpt_shape=tuple(kpt) if kpt else None, version=11 if v11 else 8,
                  c3k=v11 and scale in ("m", "l", "x"), **kw)
        if nm:  # parse_model scales the prototype width as a layer's channels
            cfg.nm, cfg.npr = nm, cfg.ch(npr)
        return cfg

    @classmethod
    def infer(cls, shapes: dict, where: str = "weights", **kw) -> YoloConfig:
        """Config from weight shapes alone (ONNX exports carry no yaml): YOLO11 if layer 10 is C2PSA, the
        class count from the class head, keypoints from the pose head, and the standard scale whose
        layer shapes all match."""
        version = 11 if "model.10.m.0.attn.qkv.conv.weight" in shapes else 8
        p = f"model.{HEAD_INDEX + (version == 11)}."
        try:
            nc = int(shapes[p + "cv3.0.2.weight"][0])
        except KeyError:
            raise YoloConfigError(f"ember: {where}: no {ARCHS[version]} detect head ({p}cv3.0.2.weight) among "
                                  f"{len(shapes)} tensors") from None
        nk = int(shapes[p + "cv4.0.2.weight"][0]) if p + "cv4.0.2.weight" in shapes else 0
        kpt = kw.pop("kpt_shape", None)
        if p + "proto.cv1.conv.weight" in shapes:  # Segment: cv4 gives mask coefficients, the proto net prototypes
            kw.update(nm=nk, npr=int(shapes[p + "proto.cv1.conv.weight"][0]))
            kpt = None
        elif nk and not kpt:  # ultralytics' pose models use (x, y, visibility) triples
            kpt = (nk // 3, 3) if nk % 3 == 0 else (nk // 2, 2)
        # (layer, yaml repeats) of two CSP layers whose block count pins down the depth
        depth = ((2, 2), (4, 2)) if version == 11 else ((2, 3), (4, 6))
        scales = SCALES11 if version == 11 else SCALES
        for scale in scales:
            cfg = cls.from_scale(scale, version=version, nc=nc, kpt_shape=kpt, **kw)
            if all(tuple(shapes.get(k, ())) == v for k, v in _signature(cfg).items()) \
                    and all(_blocks(shapes, i) == cfg.n(r) for i, r in depth) \
                    and (version == 8 or ("model.2.m.0.cv3.conv.weight" in shapes) == cfg.c3k):
                return cfg
        raise YoloConfigError(f"ember: {where}: weight shapes match no {ARCHS[version]} scale ({', '.join(scales)}) "
                              f"with nc={nc}; model.0.conv.weight is {tuple(shapes.get('model.0.conv.weight', ()))}")


def _signature(cfg: YoloConfig) -> dict:
    """Shapes that pin down width and max_channels: the stem conv and the SPPF output conv."""
    c9 = cfg.ch(1024)
    return {"model.0.conv.weight": (cfg.ch(64), 3, 3, 3), "model.9.cv2.conv.weight": (c9, 2 * c9, 1, 1)}


def _blocks(shapes: dict, layer: int) -> int:
    """How many blocks C2f / C3k2 layer `layer` holds (its depth)."""
    return len({k.split(".")[3] for k in shapes if k.startswith(f"model.{layer}.m.")})
