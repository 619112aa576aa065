"""Ultralytics YOLOv8 / YOLO11 weights (.pt checkpoint or exported .onnx) -> ember safetensors, without ultralytics.

.pt: ember's safe pickle reader rebuilds the pickled DetectionModel/PoseModel as inert records; the
tensors are pulled out by module path, each Conv's BatchNorm is folded into the conv (in float64,
stored float32), and the yaml dict, class names and strides found on the model become metadata.
.onnx: ultralytics exports the fused model, so the initializers already carry ember's names
(`model.0.conv.weight`, `model.0.conv.bias`); the config is inferred from the weight shapes and the
class names come from the model's metadata_props.
Output: `{name: float32}` in YOLOv8's layout (model.py) or YOLO11's (blocks11.py) with YoloConfig.to_metadata().
"""
from __future__ import annotations

import ast
import os

import numpy as np

from .config import YoloConfig, YoloConfigError

_SILU = ("torch.nn.modules.activation", "SiLU")
_IDENTITY = ("torch.nn.modules.linear", "Identity")
# yolov8.yaml's / yolo11.yaml's layer classes, by index (the head, 22 / 23, is Detect or Pose)
_LAYERS = {
    8: ("Conv", "Conv", "C2f", "Conv", "C2f", "Conv", "C2f", "Conv", "C2f", "SPPF", "Upsample", "Concat",
        "C2f", "Upsample", "Concat", "C2f", "Conv", "Concat", "C2f", "Conv", "Concat", "C2f"),
    11: ("Conv", "Conv", "C3k2", "Conv", "C3k2", "Conv", "C3k2", "Conv", "C3k2", "SPPF", "C2PSA", "Upsample",
         "Concat", "C3k2", "Upsample", "Concat", "C3k2", "Conv", "Concat", "C3k2", "Conv", "Concat", "C3k2"),
}
# YOLO11's convs without activation (Conv(act=False)): attention q/k/v, projection, positional conv, ffn output
_LINEAR = (".attn.qkv", ".attn.proj", ".attn.pe", ".ffn.1")


def convert(src, out) -> str:
    """`ember convert yolo SRC OUT`: SRC a .pt or .onnx file, OUT the .safetensors to write."""
    import ember
    tensors, cfg = read_weights(src)
    out = os.fspath(out)
    if os.path.isdir(out):
        out = os.path.join(out, "model.safetensors")
    ember.save(tensors, out, metadata=cfg.to_metadata())
    return out


def read_weights(src) -> tuple[dict, YoloConfig]:
    """SRC (.pt / .onnx path) -> ({name: float32 ndarray}, YoloConfig), dispatched on the file's magic bytes."""
    path = os.fspath(src)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic[:2] == b"PK":
        tensors, cfg = from_checkpoint(path)
    elif magic[:1] == b"\x08":  # ModelProto starts with ir_version (field 1, varint)
        tensors, cfg = from_onnx(path)
    else:
        raise YoloConfigError(f"ember: {path}: not an Ultralytics .pt checkpoint (zip) or .onnx model "
                              f"(starts with {magic!r})")
    check_weights(tensors, cfg, path)
    return tensors, cfg


def check_weights(tensors: dict, cfg: YoloConfig, where: str):
    """The head's class and keypoint channels must agree with the config (and its names)."""
    p = f"model.{cfg.head_index}."
    got = tensors.get(p + "cv3.0.2.weight")
    if got is None or got.shape[0] != cfg.nc:
        raise YoloConfigError(f"ember: {where}: config says nc={cfg.nc} ({len(cfg.names)} names) but the class head "
                              f"{p}cv3.0.2.weight has shape {None if got is None else tuple(got.shape)}")
    if cfg.kpt_shape:
        kp = tensors.get(p + "cv4.0.2.weight")
        nk = cfg.kpt_shape[0] * cfg.kpt_shape[1]
        if kp is None or kp.shape[0] != nk:
            raise YoloConfigError(f"ember: {where}: kpt_shape {cfg.kpt_shape} needs {nk} keypoint channels, "
                                  f"{p}cv4.0.2.weight is {None if kp is None else tuple(kp.shape)}")
    if cfg.nm:
        mc, pr = tensors.get(p + "cv4.0.2.weight"), tensors.get(p + "proto.cv1.conv.weight")
        if mc is None or pr is None or mc.shape[0] != cfg.nm or pr.shape[0] != cfg.npr:
            raise YoloConfigError(f"ember: {where}: nm={cfg.nm}, npr={cfg.npr} but {p}cv4.0.2.weight is "
                                  f"{None if mc is None else tuple(mc.shape)} and {p}proto.cv1.conv.weight "
                                  f"{None if pr is None else tuple(pr.shape)}")


# ---------------------------------------------------------------- .pt checkpoints

def from_checkpoint(path) -> tuple[dict, YoloConfig]:
    from ember.io.torch_pickle import module_state, is_module, load_pickle
    tree = load_pickle(path, numpy=True)
    model = None
    if isinstance(tree, dict):
        model = tree.get("ema") if is_module(tree.get("ema")) else tree.get("model")  # ultralytics prefers ema
    if not is_module(model):
        raise YoloConfigError(f"ember: {path}: no pickled Ultralytics model under 'ema' or 'model' "
                              f"(top level: {type(tree).__name__})")
    st = module_state(model)
    if not isinstance(st.get("yaml"), dict):
        raise YoloConfigError(f"ember: {path}: the pickled {getattr(model, 'name', 'model')} has no yaml dict")
    names = st.get("names") or {}
    names = dict(enumerate(names)) if isinstance(names, (list, tuple)) else names
    stride = st.get("stride")
    strides = tuple(int(s) for s in np.asarray(stride.array, np.float32).ravel()) if hasattr(stride, "array") \
        else (8, 16, 32)
    cfg = YoloConfig.from_yaml_dict(st["yaml"], names=names, strides=strides)
    modules = dict(_walk(model, module_state))
    head = cfg.head_index
    layers = tuple(getattr(modules.get(f"model.{i}"), "name", None) for i in range(head + 1))
    if layers[:head] != _LAYERS[cfg.version] or layers[head] not in ("Detect", "Pose", "Segment") \
            or f"model.{head + 1}" in modules or (layers[head] == "Segment") != bool(cfg.nm):
        arch = "yolov8" if cfg.version == 8 else "yolo11"
        raise YoloConfigError(f"ember: {path}: not a YOLOv8 / YOLO11 detect/pose/segment model; its layers are "
                              f"{layers} (ember runs {arch}.yaml / {arch}-pose.yaml / {arch}-seg.yaml: "
                              f"{_LAYERS[cfg.version] + ('Detect|Pose|Segment',)})")
    return _fuse(modules, path), cfg


def _walk(m, state, prefix=""):
    """(dotted path, record) for every module under m, as torch's named_modules()."""
    yield prefix.rstrip("."), m
    for name, child in (state(m).get("_modules") or {}).items():
        if child is not None:
            yield from _walk(child, state, f"{prefix}{name}.")


def _param(rec, name, path, where):
    from ember.io.formats import to_tensor
    from ember.io.torch_pickle import module_state
    st = module_state(rec)
    t = (st.get("_parameters") or {}).get(name)
    if t is None:
        t = (st.get("_buffers") or {}).get(name)
    if t is None or not hasattr(t, "array"):
        raise YoloConfigError(f"ember: {where}: module {path} has no tensor {name!r}")
    return to_tensor(t).float().numpy().astype(np.float64)  # fp16/bf16 checkpoints fold in float64


def _fuse(modules: dict, where) -> dict:
    """Conv+BatchNorm pairs (DWConv too) -> conv weight/bias; plain convs (head outputs) and the prototype
    net's transposed conv copied; DFL dropped (fixed). A Conv's activation must be what ember's model applies
    there: SiLU, or none for YOLO11's attention and ffn-output convs."""
    from ember.io.torch_pickle import module_state
    out = {}
    for path, rec in modules.items():
        if not path.startswith("model.") or rec.name not in ("Conv", "DWConv", "Conv2d", "ConvTranspose2d"):
            continue
        if rec.name in ("Conv2d", "ConvTranspose2d"):
            if path.endswith(".conv") or ".dfl." in path + ".":
                continue  # inside a Conv (fused below) or the DFL's fixed arange kernel
            out[path + ".weight"] = _param(rec, "weight", path, where).astype(np.float32)
            out[path + ".bias"] = _param(rec, "bias", path, where).astype(np.float32)
            continue
        act = modules.get(path + ".act")
        want = _IDENTITY if path.endswith(_LINEAR) else _SILU
        if act is None or (act.module, act.name) != want:
            raise YoloConfigError(f"ember: {where}: {path} uses activation "
                                  f"{None if act is None else act.module + '.' + act.name}; ember's YOLO "
                                  f"applies {'.'.join(want)} there")
        w = _param(modules[path + ".conv"], "weight", path + ".conv", where)            # (c2, c1, k, k)
        bn_path = path + ".bn"
        if bn_path not in modules:  # an already-fused checkpoint keeps the conv bias instead
            b = _param(modules[path + ".conv"], "bias", path + ".conv", where)
        else:
            bn = modules[bn_path]
            eps = float(module_state(bn).get("eps", 1e-3))
            gamma, beta = _param(bn, "weight", bn_path, where), _param(bn, "bias", bn_path, where)
            mean, var = _param(bn, "running_mean", bn_path, where), _param(bn, "running_var", bn_path, where)
            scale = gamma / np.sqrt(var + eps)                                          # (c2,)
            w, b = w * scale[:, None, None, None], beta - mean * scale
        out[path + ".conv.weight"] = w.astype(np.float32)
        out[path + ".conv.bias"] = b.astype(np.float32)
    if not out:
        raise YoloConfigError(f"ember: {where}: no Conv layers found under model.* in the pickled model")
    return out


# ---------------------------------------------------------------- ONNX exports

def from_onnx(path) -> tuple[dict, YoloConfig]:
    from .onnx_reader import read_onnx
    inits, meta = read_onnx(path)
    tensors = {k: v.astype(np.float32) for k, v in inits.items()
               if k.startswith("model.") and k.rsplit(".", 1)[-1] in ("weight", "bias") and ".dfl." not in k}
    names = _literal(meta.get("names"), {}, "names", path)
    kpt = _literal(meta.get("kpt_shape"), None, "kpt_shape", path)
    imgsz = _literal(meta.get("imgsz"), [640], "imgsz", path)
    cfg = YoloConfig.infer({k: v.shape for k, v in tensors.items()}, where=str(path),
                           names=names, kpt_shape=tuple(kpt) if kpt else None, imgsz=int(max(imgsz)))
    stride = int(_literal(meta.get("stride"), 32, "stride", path))
    cfg.strides = tuple(stride >> i for i in (2, 1, 0))  # ultralytics stores the largest stride only
    return tensors, cfg


def _literal(text, default, key, where):
    """ultralytics writes metadata values with str(): python literals, parsed without eval."""
    if text is None:
        return default
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise YoloConfigError(f"ember: {where}: metadata {key}={text[:80]!r} is not a python literal") from None
