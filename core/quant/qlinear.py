"""Quantized layers for ember.nn: QLinear, `quantize(model, type)`, and loading GGUF weights into a model."""
from __future__ import annotations

from ..nn.layers import Linear
from ..nn.module import Module
from ..ggml import types as T
from ..qtensor import QTensor


class QLinear(Module):
    """y = x @ W.T + b with W a QTensor (out_features, in_features); CPU compute, any input device.

    The forward dequantizes W a slab of rows at a time (core/backends/cpu_quant.py); when x needs a gradient
    the backward's dx = dy @ W does too (the registry's qlinear op), so W is never held in float32 whole.
    W itself is frozen (quantized weights have no gradient).
    """

    parts = None  # as nn.Linear's: the checkpoint's projections stacked along the rows, if several

    def __init__(self, weight: QTensor, bias=None):
        super().__init__()
        if not isinstance(weight, QTensor) or weight.ndim != 2:
            raise TypeError(f"ember: QLinear needs a 2-d QTensor weight, got {weight!r}")
        self.out_features, self.in_features = weight.shape
        self.weight = weight  # a plain attribute: state_dict() lists Tensors only; see quantized_state_dict
        self.bias = bias  # a Parameter (registered) or None

    @classmethod
    def from_linear(cls, linear: Linear, ggml_type) -> "QLinear":
        q = cls(QTensor.quantize(linear.weight, ggml_type), linear.bias)
        q.parts = linear.parts
        return q

    def forward(self, x):
        if x.shape[-1] != self.in_features:
            raise ValueError(f"ember: QLinear: input of shape {tuple(x.shape)} does not match in_features "
                             f"{self.in_features}")
        y = self.weight.linear(x)  # (..., out_features) float32; differentiable in x (ember.qtensor)
        if self.bias is not None:
            y = y + self.bias.to(y.device)
        return y if x.dtype.name == "float32" else y.to(x.dtype)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"ggml_type={self.weight.ggml_type.name}, bias={self.bias is not None}")


def _children(model):
    """(parent, child name, qualified name, child) for every submodule."""
    for prefix, parent in list(model.named_modules()):
        for name, child in list(parent._modules.items()):
            if child is not None:
                yield parent, name, f"{prefix}.{name}" if prefix else name, child


def quantize(model: Module, ggml_type="q4_0", include=None) -> Module:
    """Replace the model's nn.Linear layers by QLinear layers of `ggml_type`, in place; returns the model.

    Layers whose in_features is not a multiple of the type's block size (32, or 256 for K-quants)
    stay in float. include(name, linear) -> bool picks layers (default: all)."""
    t = T.get(ggml_type)
    if t.quantize_blocks is None:
        raise ValueError(f"ember: cannot quantize to {t.name}; supported: {', '.join(T.supported_quant_types())}")
    for parent, name, qname, child in _children(model):
        if isinstance(child, Linear) and child.in_features % t.block_size == 0 and (include is None or include(qname, child)):
            setattr(parent, name, QLinear.from_linear(child, t))
    return model


def set_activations(model: Module, mode: str = "q8") -> int:
    """Set how the model's quantized weights (QLinear layers and any QTensor a module holds, such as a quantized
    embedding) multiply activations on the CPU: "q8" as llama.cpp does (core/backends/cpu_q8dot.py), for the types
    that have its kernel (others stay "float32"), or "float32" for all. Returns how many weights use `mode`."""
    count = 0
    for _, m in model.named_modules():
        for v in vars(m).values():
            if isinstance(v, QTensor):
                use = mode if mode == "float32" or (v.ggml_type.vec_dot_type is not None and v.ndim == 2) else "float32"
                v.activations = use
                count += use == mode
    return count


def quantized_state_dict(model: Module) -> dict:
    """model.state_dict() plus every QLinear's QTensor weight under '<name>.weight' (to save as GGUF)."""
    out = dict(model.state_dict())
    for prefix, m in model.named_modules():
        if isinstance(m, QLinear):
            out[f"{prefix}.weight" if prefix else "weight"] = m.weight
    return out


def load_quantized(model: Module, tensors, strict: bool = True):
    """Load {name: Tensor | QTensor}, or a GGUF file (path or bytes), into a model.

    A QTensor that is the weight of an nn.Linear turns that layer into a QLinear (weights stay
    quantized); any other QTensor (embeddings, norms) is dequantized to float32 and loaded as usual.
    Names must already match the model's (mapping GGUF names such as 'blk.0.attn_q.weight' is the
    model's load.py job). Returns (missing, unexpected) like load_state_dict; strict=True raises on either."""
    if not isinstance(tensors, dict):
        from ..io import gguf
        tensors = gguf.load(tensors)
    plain = {}
    linears = {q: (p, n, c) for p, n, q, c in _children(model) if isinstance(c, (Linear, QLinear))}
    for key, v in tensors.items():
        if not isinstance(v, QTensor):
            plain[key] = v
            continue
        owner = linears.get(key[:-len(".weight")]) if key.endswith(".weight") else None
        if owner is None:
            plain[key] = v.dequantize()
            continue
        parent, name, child = owner
        if tuple(v.shape) != (child.out_features, child.in_features):
            raise ValueError(f"ember: {key}: quantized weight of shape {tuple(v.shape)} does not fit "
                             f"{type(child).__name__}(in={child.in_features}, out={child.out_features})")
        q = QLinear(v, child.bias)
        q.parts = child.parts
        setattr(parent, name, q)
    return model.load_state_dict(plain, strict=strict)
