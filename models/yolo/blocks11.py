"""YOLO11 detect, pose and segmentation, inference only. Ported from ultralytics 8.4 (nn/modules/block.py C3k2, C3k,
C2PSA, PSABlock, Attention; cfg/models/11/yolo11.yaml), BatchNorms folded into the convs as for YOLOv8.

YOLO11 keeps YOLOv8's Conv, SPPF, upsample/concat neck and DFL head; what changes is the CSP block
(C3k2: C2f whose inner blocks are half-width bottlenecks or, for m/l/x, C3k), an attention block
(C2PSA, layer 10) after SPPF, and the head's class branch (depthwise convs, Detect with legacy=False).
Weight names follow ultralytics (`model.10.m.0.attn.qkv.conv.weight`). Backend-agnostic.
"""
from __future__ import annotations

import ember
from ember import nn
from ember.nn import functional as F

from .config import YoloConfig
from .model import SPPF, Bottleneck, C2f, Conv, Detect, YOLOv8


class C3k(nn.Module):
    """ultralytics C3 with 3x3 bottlenecks: cv1 -> bottlenecks, cv2 a bypass, cv3 mixes both halves."""

    def __init__(self, c1, c2, n=2, shortcut=True):
        super().__init__()
        c_ = int(c2 * 0.5)
        self.cv1, self.cv2, self.cv3 = Conv(c1, c_), Conv(c1, c_), Conv(2 * c_, c2)
        self.m = nn.Sequential(*[Bottleneck(c_, shortcut) for _ in range(n)])

    def forward(self, x):
        return self.cv3.forward_cat([self.m(self.cv1(x)), self.cv2(x)])


class C3k2(C2f):
    """C2f whose n inner blocks are bottlenecks with half the hidden width, or C3k blocks (c3k)."""

    def __init__(self, c1, c2, n, c3k=False, e=0.5, shortcut=True):
        super().__init__(c1, c2, n, shortcut, e)
        c = self.c
        self.m = nn.ModuleList([C3k(c, c, 2, shortcut) if c3k else Bottleneck(c, shortcut, int(c * 0.5))
                                for _ in range(n)])


class Attention(nn.Module):
    """Multi-head self-attention over the H*W positions of a feature map; q/k/v from one 1x1 conv
    (per head key_dim, key_dim, head_dim channels), plus a depthwise 3x3 positional term on v."""

    def __init__(self, dim, num_heads, attn_ratio=0.5):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.qkv = Conv(dim, dim + 2 * self.key_dim * num_heads, act=False)
        self.proj = Conv(dim, dim, act=False)
        self.pe = Conv(dim, dim, 3, act=False, g=dim)

    def forward(self, x):
        b, c, h, w = x.shape
        kd, hd = self.key_dim, self.head_dim
        qkv = self.qkv(x).reshape(b, self.num_heads, 2 * kd + hd, h * w)       # (b, heads, 2kd + hd, N)
        q, k, v = qkv.narrow(2, 0, kd), qkv.narrow(2, kd, kd), qkv.narrow(2, 2 * kd, hd)
        t = (lambda a: a.transpose(-1, -2))                                      # channels-last per head
        y = F.scaled_dot_product_attention(t(q), t(k), t(v), scale=kd ** -0.5)    # (b, heads, N, hd)
        y = t(y).reshape(b, c, h, w) + self.pe(v.reshape(b, c, h, w))
        return self.proj(y)


class PSABlock(nn.Module):
    def __init__(self, c, num_heads):
        super().__init__()
        self.attn = Attention(c, num_heads)
        self.ffn = nn.Sequential(Conv(c, 2 * c), Conv(2 * c, c, act=False))

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.ffn(x)


class C2PSA(nn.Module):
    """Split cv1's output in halves, run n PSABlocks on the second, mix both with cv2."""

    def __init__(self, c1, n):
        super().__init__()
        self.c = c1 // 2
        self.cv1, self.cv2 = Conv(c1, 2 * self.c), Conv(2 * self.c, c1)
        self.m = nn.Sequential(*[PSABlock(self.c, max(self.c // 64, 1)) for _ in range(n)])

    def forward(self, x):
        a, b = self.cv1(x).chunk(2, 1)
        return self.cv2.forward_cat([a, self.m(b)])


class YOLO11(YOLOv8):
    """Backbone (0-10), neck (11-22) and head (23), numbered as in yolo11.yaml; upsample and concat
    layers are Identity placeholders that keep the numbering; YOLOv8.forward_steps runs it by index."""

    P5_LAYERS = (7, 8, 9, 10)
    NECK = (13, 16, 17, 19, 20, 22)

    @staticmethod
    def layers(cfg: YoloConfig) -> list:
        c, n, k = cfg.ch, cfg.n(2), cfg.c3k  # every C3k2 repeats round(2 * depth); m/l/x use C3k inside
        c64, c128, c256, c512, c1024 = c(64), c(128), c(256), c(512), c(1024)
        gap = nn.Identity
        return [
            Conv(3, c64, 3, 2),                                  # 0  P1/2
            Conv(c64, c128, 3, 2),                               # 1  P2/4
            C3k2(c128, c256, n, k, 0.25),                        # 2
            Conv(c256, c256, 3, 2),                              # 3  P3/8
            C3k2(c256, c512, n, k, 0.25),                        # 4
            Conv(c512, c512, 3, 2),                              # 5  P4/16
            C3k2(c512, c512, n, True),                           # 6
            Conv(c512, c1024, 3, 2),                             # 7  P5/32
            C3k2(c1024, c1024, n, True),                         # 8
            SPPF(c1024, c1024, 5),                               # 9
            C2PSA(c1024, n),                                     # 10
            gap(), gap(),                                        # 11 upsample, 12 cat P4
            C3k2(c1024 + c512, c512, n, k),                      # 13
            gap(), gap(),                                        # 14 upsample, 15 cat P3
            C3k2(c512 + c512, c256, n, k),                       # 16 out P3/8
            Conv(c256, c256, 3, 2), gap(),                       # 17, 18 cat head P4
            C3k2(c256 + c512, c512, n, k),                       # 19 out P4/16
            Conv(c512, c512, 3, 2), gap(),                       # 20, 21 cat head P5
            C3k2(c512 + c1024, c1024, n, True),                  # 22 out P5/32
            Detect(cfg.nc, (c256, c512, c1024), cfg.reg_max, cfg.kpt_shape, dw_cls=True, nm=cfg.nm, npr=cfg.npr),  # 23
        ]
