"""WebGPU convolution as GEMM: the column matrix built on the GPU (conv_gemm.wgsl), then the tiled matmul.

The direct kernel (conv.wgsl: one thread per output, C*K*K loads from global memory each) took ~22 s
for one YOLOv8s layer on lavapipe; the matmul kernels tile through shared memory / vec4 loads. Per
batch of images: one im2col dispatch writes the (G, cg*KD*KH*KW, P) receptive fields, and one
batched matmul multiplies each group's (og, R) weight with them, straight into the NCHW output.
A 1x1, stride-1, unpadded conv needs no columns: its input already is the matrix. Columns are
built in slabs of at most _COLS_BYTES (whole images when they fit, else position ranges copied
into place), so a large image never needs a buffer past the binding-size limit.
float16 convolutions keep f32 products under the backend's f16 compute (only matmul, attention and norms
take f16 products): a conv sums C*K*K products whose cancellations f16 products would blur, and the direct
kernel computes in f32 as well.
"""
from __future__ import annotations

import math

_COLS_BYTES = 64 << 20  # one slab of the column matrix


class ConvGemmMixin:
    def _conv_gemm(self, x, w, stride, padding, dilation, groups, osp):
        """conv of contiguous x (N, C, *sp) by contiguous w (O, C/groups, *k) -> (N, O, *osp)."""
        n, c = x.shape[:2]
        o, k = w.shape[0], w.shape[2:]
        nd = len(k)
        sp = x.shape[2:]
        G, cg, og = groups, c // groups, o // groups
        R = cg * math.prod(k)
        P = math.prod(osp)
        wm = self.reshape(w, (1, G, og, R))                                   # (1, G, og, R)
        if all(v == 1 for v in k) and all(s == 1 for s in stride) and not any(padding):
            # 1x1: x (N, C, HW) already is the column matrix
            y = self.matmul(wm, self.reshape(x, (n, G, cg, P)), f16_products=False)
            return self.reshape(y, (n, o) + tuple(osp))
        word = self._nbytes(1, x.dtype)
        per_image = G * R * P * word
        imgs = max(1, min(n, _COLS_BYTES // max(per_image, 1)))
        span = P if per_image <= _COLS_BYTES else max(1, _COLS_BYTES // (G * R * word))

        def p3(t, fill):
            return [fill] * (3 - nd) + list(t)
        geo = p3(sp, 1) + p3(osp, 1) + p3(k, 1) + p3(stride, 1) + p3(padding, 0) + p3(dilation, 1)
        wt = self._word(x.dtype)[0]
        pipe = self.pipelines.get("conv_gemm", "im2col", wt, [wt])
        out = None if (imgs == n and span == P) else self._new((n, G, og, P), x.dtype)  # (N, G, og, P)
        for n0 in range(0, n, imgs):
            ni = min(imgs, n - n0)
            for p0 in range(0, P, span):
                pp = min(span, P - p0)
                cols = self._new((ni, G, R, pp), x.dtype)                     # (ni, G, R, pp)
                self._run(pipe, [cols.size, n0, c, G, cg, R, pp, p0] + geo, cols, [x], self._groups(cols.size))
                y = self.matmul(wm, cols, f16_products=False)                 # (ni, G, og, pp)
                if out is None:                                               # one slab: it is the output
                    return self.reshape(y, (n, o) + tuple(osp))
                self._copy_into(self.slice(out, [n0, 0, 0, p0], [n0 + ni, G, og, p0 + pp], [1, 1, 1, 1]), y)
        return self.reshape(out, (n, o) + tuple(osp))
