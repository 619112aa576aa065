"""Image patches as torch.nn: F.unfold / F.fold (im2col and its adjoint) with Unfold, Fold, PixelShuffle and
PixelUnshuffle modules. Built from pads, strided slices and reshapes, so gradients come from autograd."""
from __future__ import annotations

from . import functional as F
from .errors import LayerError
from .module import Module
from .. import autograd as A
from ..ops_movement import stack


def _pair(v, what, layer):
    v = (v, v) if isinstance(v, int) else tuple(v)
    if len(v) != 2:
        raise LayerError(layer, what, f"needs 2 values, got {v}")
    return v


def _blocks(size, k, d, p, s):
    return [(size[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2)]


def unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    """(N, C, H, W) -> (N, C kh kw, L): every sliding block as a column, channels major, then kernel rows."""
    k, d, p, s = (_pair(v, n, "unfold") for v, n in ((kernel_size, "kernel_size"), (dilation, "dilation"),
                                                      (padding, "padding"), (stride, "stride")))
    if x.ndim not in (3, 4):
        raise LayerError("unfold", "input", f"must be (N, C, H, W) or (C, H, W), got {tuple(x.shape)}")
    batched = x.ndim == 4
    x = x if batched else x.unsqueeze(0)
    N, C = x.shape[:2]
    oh, ow = _blocks(x.shape[2:], k, d, p, s)
    if oh < 1 or ow < 1:
        raise LayerError("unfold", "kernel_size", f"{k} with dilation {d} does not fit input {tuple(x.shape)} "
                         f"padded by {p}")
    xp = F.pad(x, (p[1], p[1], p[0], p[0])) if any(p) else x
    cols = [A.prim_slice(xp, [0, 0, i * d[0], j * d[1]], [N, C, i * d[0] + (oh - 1) * s[0] + 1,
                                                          j * d[1] + (ow - 1) * s[1] + 1], [1, 1, s[0], s[1]])
            for i in range(k[0]) for j in range(k[1])]                     # kh kw x (N, C, oh, ow)
    y = stack(cols, 2).reshape(N, C * k[0] * k[1], oh * ow)
    return y if batched else y.squeeze(0)


def fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """(N, C kh kw, L) -> (N, C, H, W): each column added back at its block (overlaps sum), unfold's adjoint."""
    o, k, d, p, s = (_pair(v, n, "fold") for v, n in ((output_size, "output_size"), (kernel_size, "kernel_size"),
                                                       (dilation, "dilation"), (padding, "padding"), (stride, "stride")))
    batched = x.ndim == 3
    x = x if batched else x.unsqueeze(0)
    N, ckk, L = x.shape
    oh, ow = _blocks(o, k, d, p, s)
    if ckk % (k[0] * k[1]) or L != oh * ow:
        raise LayerError("fold", "input", f"shape {tuple(x.shape)} does not hold C * {k[0] * k[1]} rows and "
                         f"{oh * ow} blocks for output_size {o}")
    C = ckk // (k[0] * k[1])
    H, W = o[0] + 2 * p[0], o[1] + 2 * p[1]
    cols = x.reshape(N, C, k[0] * k[1], oh, ow)
    out = None
    for i in range(k[0]):
        for j in range(k[1]):
            b = cols[:, :, i * k[1] + j]                                   # (N, C, oh, ow)
            # spread by the stride (zeros between), then shift to the block's offset inside (H, W)
            b = F.pad(b.reshape(N, C, oh, 1, ow, 1), (0, s[1] - 1, 0, 0, 0, s[0] - 1)).reshape(N, C, oh * s[0], ow * s[1])
            top, left = i * d[0], j * d[1]
            bh, bw = min(oh * s[0], H - top), min(ow * s[1], W - left)
            b = b[:, :, :bh, :bw]
            b = F.pad(b, (left, W - left - bw, top, H - top - bh))
            out = b if out is None else out + b
    out = out[:, :, p[0]:p[0] + o[0], p[1]:p[1] + o[1]]
    return out if batched else out.squeeze(0)


class Unfold(Module):
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, x):
        return unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)


class Fold(Module):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, x):
        return fold(x, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)


class PixelShuffle(Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x):
        return F.pixel_shuffle(x, self.upscale_factor)


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x):
        return F.pixel_unshuffle(x, self.downscale_factor)
