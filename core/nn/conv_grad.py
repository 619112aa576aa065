"""Transposed convolution and the conv primitive's gradients, composed from conv/pad/slice/cat.

Keeping these composed means a backend implements one `conv` primitive and gets
conv_transpose and training for free.
"""
from __future__ import annotations

from .. import autograd as A


def _dilate(x, factors):
    """Insert (f - 1) zeros between elements along each spatial dim: L -> (L - 1) * f + 1."""
    for i, f in enumerate(factors):
        ax = 2 + i
        L = x.shape[ax]
        if f == 1 or L == 0:
            continue
        z = x.zeros_like().unsqueeze(ax + 1)
        parts = [x.unsqueeze(ax + 1)] + [z] * (f - 1)
        shp = list(x.shape)
        shp[ax] = L * f
        x = A.prim_cat(parts, ax + 1).reshape(*shp).narrow(ax, 0, (L - 1) * f + 1)
    return x


def _pad_or_crop(x, pads):
    """pads: [(left, right)] per spatial dim; negative values crop."""
    if all(l >= 0 and r >= 0 for l, r in pads):
        if any(l or r for l, r in pads):
            x = A.prim_pad(x, [(0, 0), (0, 0)] + [tuple(p) for p in pads], 0.0)
        return x
    grow = [(max(l, 0), max(r, 0)) for l, r in pads]
    if any(l or r for l, r in grow):
        x = A.prim_pad(x, [(0, 0), (0, 0)] + grow, 0.0)
    starts = [0, 0] + [max(-l, 0) for l, _ in pads]
    stops = list(x.shape[:2]) + [x.shape[2 + i] - max(-r, 0) for i, (_, r) in enumerate(pads)]
    return A.prim_slice(x, starts, stops, [1] * x.ndim)


def conv_transpose(x, w, stride, padding, output_padding, dilation, groups):
    """x (N, Cin, *L), w (Cin, Cout // groups, *K) -> (N, Cout, *Lout), as torch.conv_transposeNd."""
    nd = x.ndim - 2
    k = w.shape[2:]
    cin, cout_g = w.shape[0], w.shape[1]
    g = groups
    xu = _dilate(x, stride)
    pads = [(dilation[i] * (k[i] - 1) - padding[i], dilation[i] * (k[i] - 1) - padding[i] + output_padding[i])
            for i in range(nd)]
    xu = _pad_or_crop(xu, pads)
    # (Cin, Cout/g, *K) -> (Cout, Cin/g, *K), flipped spatially
    wt = w.reshape(g, cin // g, cout_g, *k).transpose(1, 2).reshape(g * cout_g, cin // g, *k)
    wt = wt.flip(*range(2, 2 + nd))
    return A.prim_conv(xu, wt, (1,) * nd, (0,) * nd, tuple(dilation), g)


def input_grad(g, w, x_shape, stride, padding, dilation, groups):
    nd = len(x_shape) - 2
    k = w.shape[2:]
    op = [x_shape[2 + i] - ((g.shape[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k[i] - 1) + 1)
          for i in range(nd)]
    return conv_transpose(g, w, stride, padding, op, dilation, groups)


def weight_grad(g, x, w_shape, stride, padding, dilation, groups):
    nd = x.ndim - 2
    n, c = x.shape[:2]
    o, k = w_shape[0], w_shape[2:]
    cg = c // groups
    if any(padding):
        x = A.prim_pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding], 0.0)
    sp = x.shape[2:]
    # channels of x' are (group, batch): conv over the batch with dy as the kernel
    xr = x.reshape(n, groups, cg, *sp).permute(2, 1, 0, *range(3, 3 + nd)).reshape(cg, groups * n, *sp)
    gr = g.transpose(0, 1)                                            # (O, N, *Lout)
    dw = A.prim_conv(xr, gr, tuple(dilation), (0,) * nd, tuple(stride), groups)  # (Cg, O, *K')
    if tuple(dw.shape[2:]) != tuple(k):
        dw = A.prim_slice(dw, [0] * dw.ndim, list(dw.shape[:2]) + list(k), [1] * dw.ndim)
    return dw.transpose(0, 1)                                         # (O, Cg, *K)
