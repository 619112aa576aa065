"""LoRA adapters over a model's Linear and QLinear layers: y = W x + (alpha / r) * B A dropout(x), with A (r, in)
and B (rows, r) the only trainable weights; the base weight (float or GGML-quantized) stays frozen.

A layer that stacks a checkpoint's separate projections along its rows (Llama's fused q/k/v, declared by the
layer's `parts`) gets one A/B pair per adapted part, named after the part, so an adapter names the
checkpoint's modules (`model.layers.0.self_attn.q_proj`) as PEFT does whichever layout ember runs.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ... import autograd
from ...errors import FormatError
from ...nn import functional as F
from ...nn.layers import Linear, ModuleDict
from ...nn.module import Module
from ...qtensor import QTensor
from ...quant.qlinear import QLinear
from ...ops_movement import cat
from ...tensor import zeros

MAX_RANK = 65536  # past any layer ember runs; a rank is also checked against the layer it adapts


class AdapterError(FormatError):
    """A LoRA configuration or adapter that does not fit: a bad rank or alpha, unknown fields, tensors
    missing, unexpected or mis-shaped for the model. The message names the field or tensor."""


@dataclass
class LoraConfig:
    """PEFT's LoraConfig fields that ember implements. target_modules: module names (a module matches when its
    name equals one or ends with '.' + one), a regular expression matched against the whole name, or
    'all-linear' (every linear layer but the output head)."""
    r: int = 8
    lora_alpha: float = 8.0
    lora_dropout: float = 0.0
    target_modules: list | str = field(default_factory=lambda: ["q_proj", "v_proj"])
    use_rslora: bool = False

    def __post_init__(self):
        if isinstance(self.r, bool) or not isinstance(self.r, int) or not 1 <= self.r <= MAX_RANK:
            raise AdapterError(f"ember: LoRA rank r={self.r!r}: expected an integer in [1, {MAX_RANK}]")
        if isinstance(self.lora_alpha, bool) or not isinstance(self.lora_alpha, (int, float)) or \
                not math.isfinite(self.lora_alpha):
            raise AdapterError(f"ember: LoRA lora_alpha={self.lora_alpha!r}: expected a finite number")
        if isinstance(self.lora_dropout, bool) or not isinstance(self.lora_dropout, (int, float)) or \
                not 0 <= self.lora_dropout < 1:
            raise AdapterError(f"ember: LoRA lora_dropout={self.lora_dropout!r}: expected a number in [0, 1)")
        t = self.target_modules
        if isinstance(t, str):
            if t != "all-linear":
                try:
                    re.compile(t)
                except re.error as e:
                    raise AdapterError(f"ember: LoRA target_modules {t!r} is not a regular expression: {e}") from None
        elif not isinstance(t, (list, tuple, set)) or not t or not all(isinstance(n, str) and n for n in t):
            raise AdapterError(f"ember: LoRA target_modules={t!r}: expected a non-empty list of module names, a "
                               "regular expression or 'all-linear'")
        else:
            self.target_modules = sorted(set(t))

    @property
    def scaling(self) -> float:
        return self.lora_alpha / (math.sqrt(self.r) if self.use_rslora else self.r)

    def matches(self, name: str) -> bool:
        """Whether the module `name` (a checkpoint's qualified name) gets an adapter, by PEFT's rule."""
        t = self.target_modules
        if t == "all-linear":
            return name.rsplit(".", 1)[-1] != "lm_head"
        if isinstance(t, str):
            return re.fullmatch(t, name) is not None
        return any(name == n or name.endswith("." + n) for n in t)


def layer_parts(layer) -> tuple:
    """((name, rows), ...) of the checkpoint's projections a layer stacks along its rows, or None for one."""
    return getattr(layer, "parts", None) if isinstance(layer, (Linear, QLinear)) else None


class LoraLinear(Module):
    """base_layer(x) plus, for each adapted part of its rows, (alpha / r) * lora_B[part](lora_A[part](dropout(x)))."""

    def __init__(self, base_layer, parts, adapted, r: int, scaling: float, dropout: float = 0.0, where: str = "layer"):
        """parts: ((name, rows), ...) covering the base layer's rows in order; adapted: the names to adapt."""
        super().__init__()
        if not isinstance(base_layer, (Linear, QLinear)):
            raise TypeError(f"ember: LoRA adapts Linear and QLinear layers, not {type(base_layer).__name__}")
        self.base_layer = base_layer
        self.in_features, self.out_features = base_layer.in_features, base_layer.out_features
        self.r, self.scaling, self.dropout, self.merged = r, scaling, dropout, None
        self.slices, start = [], 0
        for name, rows in parts:
            self.slices.append((name, start, rows))
            start += rows
        if start != self.out_features:
            raise AdapterError(f"ember: {where}: its parts cover {start} rows of {self.out_features}")
        self.lora_A, self.lora_B = ModuleDict(), ModuleDict()
        device = _device(base_layer)
        for name, _, rows in self.slices:
            if name not in adapted:
                continue
            if r > min(self.in_features, rows):
                raise AdapterError(f"ember: {where}.{name}: LoRA rank {r} exceeds the layer's smaller dimension "
                                   f"{min(self.in_features, rows)} (in={self.in_features}, out={rows})")
            a = Linear(self.in_features, r, bias=False, device=device)          # (r, in): kaiming-uniform as PEFT
            b = Linear(r, rows, bias=False, device=device)                      # (rows, r)
            with autograd.no_grad():
                b.weight.zero_()
            self.lora_A[name], self.lora_B[name] = a, b

    def delta(self, x):
        """The adapters' contribution (..., out_features) for input x (..., in_features)."""
        h = F.dropout(x, self.dropout, self.training) if self.dropout else x
        outs = []
        for name, _, rows in self.slices:
            if name in self.lora_A._modules:
                outs.append(self.lora_B[name](self.lora_A[name](h)) * self.scaling)  # (..., rows)
            else:
                outs.append(zeros(*x.shape[:-1], rows, dtype=x.dtype, device=x.device))
        return outs[0] if len(outs) == 1 else cat(outs, -1)

    def forward(self, x):
        y = self.base_layer(x)                                                  # (..., out_features)
        if self.merged is not None or not self.lora_A._modules:
            return y
        return y + self.delta(x).to(y.dtype)

    def delta_weight(self):
        """(out_features, in_features) float32: the rows' (alpha / r) * B @ A, zero for parts not adapted."""
        rows = []
        for name, _, n in self.slices:
            if name in self.lora_A._modules:
                a, b = self.lora_A[name].weight.detach(), self.lora_B[name].weight.detach()
                rows.append((b.float() @ a.float()) * self.scaling)             # (n, in)
            else:
                rows.append(zeros(n, self.in_features, device=_lora_device(self)))
        return rows[0] if len(rows) == 1 else cat(rows, 0)

    def merge(self):
        """Fold the adapters into the base weight (a quantized one is re-quantized in its type; the original is
        kept, so unmerge restores it exactly)."""
        if self.merged is not None:
            return
        w = self.base_layer.weight
        with autograd.no_grad():
            if isinstance(w, QTensor):
                self.base_layer.weight = QTensor.quantize(w.dequantize() + self.delta_weight().to("cpu"), w.ggml_type,
                                                          name=w.name)
                self.base_layer.weight.activations = w.activations
                self.merged = w
            else:
                w.copy_(w.detach() + self.delta_weight().to(w.device).to(w.dtype))
                self.merged = True

    def unmerge(self):
        if self.merged is None:
            return
        w = self.base_layer.weight
        with autograd.no_grad():
            if isinstance(self.merged, QTensor):
                self.base_layer.weight = self.merged
            else:
                w.copy_(w.detach() - self.delta_weight().to(w.device).to(w.dtype))
        self.merged = None

    def extra_repr(self):
        return f"r={self.r}, scaling={self.scaling:g}, adapted={list(self.lora_A.keys())}"


def _device(layer):
    w = layer.weight
    return "cpu" if isinstance(w, QTensor) else w.device


def _lora_device(m: LoraLinear):
    return next(iter(m.lora_A.values())).weight.device


def _children(model):
    for prefix, parent in list(model.named_modules()):
        for name, child in list(parent._modules.items()):
            if child is not None:
                yield parent, name, f"{prefix}.{name}" if prefix else name, child


def checkpoint_names(qname: str, layer) -> list:
    """[(part name, the checkpoint's qualified module name, rows)] of a Linear/QLinear at `qname`."""
    parent = qname.rsplit(".", 1)[0] + "." if "." in qname else ""
    parts = layer_parts(layer) or ((qname.rsplit(".", 1)[-1], layer.out_features),)
    return [(n, parent + n, rows) for n, rows in parts]


def add_adapters(model: Module, config: LoraConfig, seed: int | None = None) -> Module:
    """Wrap every Linear/QLinear whose checkpoint name `config` targets in a LoraLinear, in place; freeze every
    other parameter (only the adapters train). A: kaiming-uniform as PEFT (from ember's generator, seeded by
    `seed` when given), B: zeros, so the model's output is unchanged until it trains. Returns the model."""
    if not isinstance(config, LoraConfig):
        raise TypeError(f"ember: add_adapters needs a LoraConfig, got {type(config).__name__}")
    if seed is not None:
        from ...tensor import manual_seed
        manual_seed(seed)
    targets = []
    for parent, name, qname, child in _children(model):
        if isinstance(child, LoraLinear):
            raise AdapterError(f"ember: {qname} already holds a LoRA adapter")
        if isinstance(child, (Linear, QLinear)):
            parts = checkpoint_names(qname, child)
            adapted = {n for n, full, _ in parts if config.matches(full)}
            if adapted:
                targets.append((parent, name, qname, child, parts, adapted))
    if not targets:
        raise AdapterError(f"ember: LoRA target_modules {config.target_modules!r} match no linear layer of "
                           f"{type(model).__name__}")
    model.requires_grad_(False)
    for parent, name, qname, child, parts, adapted in targets:
        setattr(parent, name, LoraLinear(child, [(n, rows) for n, _, rows in parts], adapted, config.r,
                                         config.scaling, config.lora_dropout, where=qname))
    model.lora_config = config
    return model


def lora_layers(model: Module):
    """(qualified name, LoraLinear) for every adapted layer."""
    return [(q, m) for q, m in model.named_modules() if isinstance(m, LoraLinear)]


def lora_parameters(model: Module) -> list:
    """The adapters' A and B weights: what an optimizer trains."""
    return [p for _, m in lora_layers(model) for d in (m.lora_A, m.lora_B) for lin in d.values()
            for p in lin.parameters()]


def merge(model: Module) -> Module:
    for _, m in lora_layers(model):
        m.merge()
    return model


def unmerge(model: Module) -> Module:
    for _, m in lora_layers(model):
        m.unmerge()
    return model


def merge_and_unload(model: Module) -> Module:
    """Fold the adapters into the base weights and put the base layers back in place of the wrappers."""
    return _unwrap(model, merged=True)


def unload(model: Module) -> Module:
    """Remove the adapters (unmerging first where merged): the base model as it was."""
    return _unwrap(model, merged=False)


def _unwrap(model: Module, merged: bool) -> Module:
    """Each LoraLinear merged (or unmerged) and replaced by its base layer; the model's LoRA config dropped."""
    for parent, name, _, child in list(_children(model)):
        if isinstance(child, LoraLinear):
            (child.merge if merged else child.unmerge)()
            setattr(parent, name, child.base_layer)
    model.__dict__.pop("lora_config", None)
    return model
