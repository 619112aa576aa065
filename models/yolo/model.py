"""YOLOv8 detect and pose, inference only. Ported from ultralytics 8.3/8.4 (nn/modules/{conv,block,head}.py,
cfg/models/v8/yolov8.yaml), with every BatchNorm folded into its convolution (convert.py does the folding).

Layer indices and weight names follow ultralytics (`model.4.m.1.cv2.conv.weight`), so checkpoints and
ONNX exports map onto this file by name. The forward pass is written out layer by layer instead of
interpreting the yaml graph. Backend-agnostic: everything is ember ops.
"""
from __future__ import annotations

import numpy as np

import ember
from ember import nn
from ember.nn import functional as F

from .config import YoloConfig


class Conv(nn.Module):
    """ultralytics Conv (conv -> BatchNorm -> SiLU) with the BatchNorm folded into the conv bias."""

    def __init__(self, c1, c2, k=1, s=1, act=True, g=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, groups=g, bias=True)  # weight (c2, c1 / g, k, k)
        self.act = act

    def forward(self, x):
        c = self.conv  # conv, bias and SiLU in one kernel where the device has one (F.conv_act)
        return F.conv_act(x, c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups, "silu" if self.act else None)

    def forward_cat(self, xs):
        """forward(cat(xs, 1)) for a 1x1 conv, without the concatenated copy where the device reads each part where
        it lies (F.conv_cat_act: YOLOv8s's concatenations were ~57 MB of copies a forward)."""
        c = self.conv
        if c.kernel_size != (1, 1) or c.stride != (1, 1) or c.groups != 1 or tuple(c.padding) != (0, 0):
            return self(ember.cat(list(xs), 1))
        return F.conv_cat_act(xs, c.weight, c.bias, "silu" if self.act else None)


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut, hidden=None):
        super().__init__()
        h = hidden or c
        self.cv1, self.cv2 = Conv(c, h, 3), Conv(h, c, 3)
        self.add = shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """CSP bottleneck with two convs: split cv1's output in halves, chain n bottlenecks on the second
    half, and mix every intermediate with cv2."""

    def __init__(self, c1, c2, n, shortcut=False, e=0.5):
        super().__init__()
        self.c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * self.c)
        self.cv2 = Conv((2 + n) * self.c, c2)
        self.m = nn.ModuleList([Bottleneck(self.c, shortcut) for _ in range(n)])

    def forward(self, x):
        """x: (b, c1, h, w), or the list of parts whose channel concatenation it is (the neck's)."""
        y = self.cv1.forward_cat(x) if isinstance(x, (list, tuple)) else self.cv1(x)
        ys = list(y.chunk(2, 1))  # 2 x (b, c, h, w)
        for m in self.m:
            ys.append(m(ys[-1]))
        return self.cv2.forward_cat(ys)


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5x5 max pools (= SPP with k = 5, 9, 13)."""

    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1, self.cv2 = Conv(c1, c_), Conv(c_ * 4, c2)
        self.k = k

    def _pool(self, x):
        return F.max_pool2d(x, self.k, 1, self.k // 2)

    def forward(self, x):
        ys = [self.cv1(x)]
        for _ in range(3):
            ys.append(self._pool(ys[-1]))
        return self.cv2.forward_cat(ys)


def _branch(c_in, c_mid, c_out):
    """Conv 3x3 -> Conv 3x3 -> plain 1x1 conv: one output branch of the head for one level."""
    return nn.Sequential(Conv(c_in, c_mid, 3), Conv(c_mid, c_mid, 3), nn.Conv2d(c_mid, c_out, 1))


def _dw_branch(c_in, c_mid, c_out):
    """YOLO11's class branch (ultralytics Detect with legacy=False): two (depthwise 3x3 -> 1x1 Conv)
    pairs, then the plain 1x1 conv; names cv3.L.0.0 / cv3.L.0.1 / cv3.L.1.0 / cv3.L.1.1 / cv3.L.2."""
    return nn.Sequential(nn.Sequential(Conv(c_in, c_in, 3, g=c_in), Conv(c_in, c_mid)),
                         nn.Sequential(Conv(c_mid, c_mid, 3, g=c_mid), Conv(c_mid, c_mid)),
                         nn.Conv2d(c_mid, c_out, 1))


class Proto(nn.Module):
    """ultralytics Proto: the segmentation head's mask prototypes from the P3 features, at twice their size."""

    def __init__(self, c1, c_, c2):
        super().__init__()
        self.cv1 = Conv(c1, c_, 3)
        self.upsample = nn.ConvTranspose2d(c_, c_, 2, 2)                         # (c_, c_, 2, 2)
        self.cv2, self.cv3 = Conv(c_, c_, 3), Conv(c_, c2)

    def forward(self, x):
        return self.cv3(self.cv2(self.upsample(self.cv1(x))))                   # (b, nm, 2h, 2w)


class Detect(nn.Module):
    """Decoupled anchor-free head: per level a box branch (cv2, 4 * reg_max DFL logits) and a class
    branch (cv3); Pose adds a keypoint branch (cv4), Segment a mask-coefficient branch (cv4) and the
    prototype net (proto). Output (b, 4 + nc [+ nk | + nm], anchors): boxes as (cx, cy, w, h) in input
    pixels, class probabilities, then decoded keypoints (x, y[, visibility]) or mask coefficients; Segment
    returns (that, prototypes (b, nm, H/4, W/4))."""

    def __init__(self, nc, ch, reg_max=16, kpt_shape=None, dw_cls=False, nm=0, npr=0):
        super().__init__()
        self.nc, self.reg_max, self.kpt_shape, self.nm = nc, reg_max, kpt_shape, nm
        c2, c3 = max(16, ch[0] // 4, reg_max * 4), max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList([_branch(c, c2, 4 * reg_max) for c in ch])
        self.cv3 = nn.ModuleList([(_dw_branch if dw_cls else _branch)(c, c3, nc) for c in ch])
        if kpt_shape:
            nk = kpt_shape[0] * kpt_shape[1]
            self.cv4 = nn.ModuleList([_branch(c, max(ch[0] // 4, nk), nk) for c in ch])
        if nm:
            self.proto = Proto(ch[0], npr, nm)
            self.cv4 = nn.ModuleList([_branch(c, max(ch[0] // 4, nm), nm) for c in ch])
        self._anchors = {}  # (feature sizes, strides, device) -> (anchor points, strides)
        self._stems = {}    # level -> (source weight arrays, merged weight, merged bias); see _branch_inputs

    def anchors(self, sizes, strides, device):
        """Cell centres in grid units (1, 2, A) and each anchor's stride (1, 1, A), level after level."""
        key = (tuple(sizes), tuple(strides), str(device))
        if key not in self._anchors:
            pts, st = [], []
            for (h, w), s in zip(sizes, strides):
                sy, sx = np.meshgrid(np.arange(h, dtype=np.float32) + 0.5, np.arange(w, dtype=np.float32) + 0.5,
                                     indexing="ij")
                pts.append(np.stack([sx.ravel(), sy.ravel()]))
                st.append(np.full(h * w, s, np.float32))
            self._anchors[key] = (ember.tensor(np.concatenate(pts, 1)[None], device=device),
                                  ember.tensor(np.concatenate(st)[None, None], device=device))
        return self._anchors[key]

    def _branch_inputs(self, level, x):
        """The first 3x3 Conv of every branch of one level reads the same x: without gradients they run
        as one conv over the concatenated weights (one im2col, one larger matmul: 20-25% less time for
        these convs), split by channels after. The merged weights are rebuilt when a source changes.
        A YOLO11 class branch starts with a depthwise pair instead and runs on its own."""
        firsts = [h[level][0] for h in self.branches]
        heads = [c for c in firsts if isinstance(c, Conv)]
        merged = iter(self._merged_stems(level, x, heads))
        return [next(merged) if isinstance(c, Conv) else c(x) for c in firsts]

    def _merged_stems(self, level, x, heads):
        if ember.is_grad_enabled() and (x.requires_grad or any(c.conv.weight.requires_grad for c in heads)):
            return [c(x) for c in heads]
        src = tuple(t._data for c in heads for t in (c.conv.weight, c.conv.bias))
        cached = self._stems.get(level)
        if cached is None or any(a is not b for a, b in zip(cached[0], src)):
            w = ember.cat([c.conv.weight.detach() for c in heads], 0)           # (sum c_mid, c_in, 3, 3)
            bias = ember.cat([c.conv.bias.detach() for c in heads], 0)
            cached = self._stems[level] = (src, w, bias)
        y = F.conv_act(x, cached[1], cached[2], padding=1, act="silu")           # (b, sum c_mid, h, w)
        out, at = [], 0
        for c in heads:
            n = c.conv.out_channels
            out.append(y.narrow(1, at, n))
            at += n
        return out

    @property
    def branches(self):
        return [self.cv2, self.cv3] + ([self.cv4] if self.kpt_shape or self.nm else [])

    def forward(self, feats, strides):
        b = feats[0].shape[0]
        firsts = [self._branch_inputs(i, x) for i, x in enumerate(feats)]       # [level][branch]

        def flat(j, heads):  # branch j's output over all levels, (b, channels, A)
            return ember.cat([h[2](h[1](firsts[i][j])).reshape(b, h[2].out_channels, -1)
                              for i, h in enumerate(heads)], 2)
        box = flat(0, self.cv2)                                                  # (b, 4 * reg_max, A)
        cls = flat(1, self.cv3)                                                  # (b, nc, A)
        anchors, stride = self.anchors([x.shape[2:] for x in feats], strides, feats[0].device)
        a = box.shape[-1]
        # DFL: the expected value of a softmax over reg_max bins is each side's distance in grid cells
        prob = F.softmax(box.reshape(b, 4, self.reg_max, a), 2)                 # (b, 4, reg_max, A)
        bins = ember.arange(self.reg_max, dtype=prob.dtype, device=prob.device).reshape(1, 1, 1, self.reg_max)
        dist = (bins @ prob).reshape(b, 4, a)                                    # (b, 4, A) l, t, r, b
        x1y1, x2y2 = anchors - dist[:, :2], anchors + dist[:, 2:]
        xywh = ember.cat([(x1y1 + x2y2) * 0.5, x2y2 - x1y1], 1) * stride         # (b, 4, A) pixels
        out = [xywh, cls.sigmoid()]
        if self.kpt_shape:
            k, nd = self.kpt_shape
            kpt = flat(2, self.cv4).reshape(b, k, nd, a)                         # (b, K, nd, A)
            xy = (kpt[:, :, :2] * 2.0 + (anchors.reshape(1, 1, 2, a) - 0.5)) * stride.reshape(1, 1, 1, a)
            parts = [xy, kpt[:, :, 2:].sigmoid()] if nd == 3 else [xy]
            out.append(ember.cat(parts, 2).reshape(b, k * nd, a))
        if self.nm:
            out.append(flat(2, self.cv4))                                        # (b, nm, A)
            return ember.cat(out, 1), self.proto(feats[0])
        return ember.cat(out, 1)


class YOLOv8(nn.Module):
    """Backbone (0-9), PAN neck (10-21) and head (22), numbered as in yolov8.yaml. Layers without
    weights (upsample 10/13, concat 11/14/17/20) are Identity placeholders that keep the numbering."""

    def __init__(self, cfg: YoloConfig):
        super().__init__()
        self.cfg = cfg
        self.model = nn.ModuleList(self.layers(cfg))
        assert len(self.model) == cfg.head_index + 1

    @staticmethod
    def layers(cfg: YoloConfig) -> list:
        c, n = cfg.ch, cfg.n
        c64, c128, c256, c512, c1024 = c(64), c(128), c(256), c(512), c(1024)
        gap = nn.Identity
        return [
            Conv(3, c64, 3, 2),                          # 0  P1/2
            Conv(c64, c128, 3, 2),                       # 1  P2/4
            C2f(c128, c128, n(3), True),                 # 2
            Conv(c128, c256, 3, 2),                      # 3  P3/8
            C2f(c256, c256, n(6), True),                 # 4
            Conv(c256, c512, 3, 2),                      # 5  P4/16
            C2f(c512, c512, n(6), True),                 # 6
            Conv(c512, c1024, 3, 2),                     # 7  P5/32
            C2f(c1024, c1024, n(3), True),               # 8
            SPPF(c1024, c1024, 5),                       # 9
            gap(), gap(),                                # 10 upsample, 11 cat P4
            C2f(c1024 + c512, c512, n(3)),               # 12
            gap(), gap(),                                # 13 upsample, 14 cat P3
            C2f(c512 + c256, c256, n(3)),                # 15 out P3/8
            Conv(c256, c256, 3, 2), gap(),               # 16, 17 cat head P4
            C2f(c256 + c512, c512, n(3)),                # 18 out P4/16
            Conv(c512, c512, 3, 2), gap(),               # 19, 20 cat head P5
            C2f(c512 + c1024, c1024, n(3)),              # 21 out P5/32
            Detect(cfg.nc, (c256, c512, c1024), cfg.reg_max, cfg.kpt_shape, nm=cfg.nm, npr=cfg.npr),  # 22
        ]

    def forward(self, x):
        """x (b, 3, H, W) RGB in [0, 1], H and W multiples of 32 -> (b, 4 + nc [+ nk | nm], H*W/64 + H*W/256 +
        H*W/1024); segmentation models: (that, prototypes (b, nm, H/4, W/4))."""
        steps = self.forward_steps(x)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def check_input(self, x):
        if x.ndim != 4 or x.shape[1] != 3 or x.shape[2] % 32 or x.shape[3] % 32:
            raise ValueError(f"ember: {type(self).__name__} expects (batch, 3, H, W) with H, W multiples of 32, "
                             f"got {tuple(x.shape)}")

    # layer indices (see layers()): the P5 stage's layers, and the neck's C2f at P4 and P3, then the
    # downsampling Conv and C2f at P4 and at P5
    P5_LAYERS = (7, 8, 9)
    NECK = (12, 15, 16, 18, 19, 21)
    FORWARD_STEPS = 9  # what forward_steps yields: the 8 groups of layers below, then the head

    def forward_steps(self, x):
        """forward() as a generator that yields the number of layer groups done (1..FORWARD_STEPS) after each,
        so a caller can report progress and stop between layers (the page's worker on a slow adapter)."""
        self.check_input(x)
        m = self.model
        top4, top3, down4, out4, down5, out5 = (m[i] for i in self.NECK)
        x = m[1](m[0](x))                                                        # (b, c128, H/4, W/4)
        yield 1
        p3 = m[4](m[3](m[2](x)))                                                 # (b, c256, H/8, W/8)
        yield 2
        p4 = m[6](m[5](p3))                                                      # (b, c512, H/16, W/16)
        yield 3
        p5 = p4
        for i in self.P5_LAYERS:
            p5 = m[i](p5)                                                        # (b, c1024, H/32, W/32)
        yield 4
        # (each C2f takes the parts of its input's concatenation: its first 1x1 conv reads them where they lie)
        h4 = top4([F.interpolate(p5, scale_factor=2), p4])                       # (b, c512, H/16, W/16)
        yield 5
        o3 = top3([F.interpolate(h4, scale_factor=2), p3])                       # (b, c256, H/8, W/8)
        yield 6
        o4 = out4([down4(o3), h4])                                               # (b, c512, H/16, W/16)
        yield 7
        o5 = out5([down5(o4), p5])                                               # (b, c1024, H/32, W/32)
        yield 8
        out = m[-1]([o3, o4, o5], self.cfg.strides)
        yield 9
        return out
