"""The scale searches behind the K-quants, ported from ggml-quants.c (llama.cpp, 2025) to numpy.

Each function works on many groups at once: x has shape (n, G) — n elements (16 or 32) per group,
G groups — so the Python loops run over the n elements of a group (and the fixed search steps),
never over blocks. Sums are accumulated element by element in float32, in C's order, because the
searches compare near-equal errors and a different summation order would pick different scales.
Products are written in C's evaluation order ((w*x)*l, not w*(x*l)) for the same reason.
"""
from __future__ import annotations

import numpy as np

F = np.float32
GROUP_MAX_EPS = F(1e-15)


def nearest_int(v):
    """ggml's nearest_int: the float trick (v + 1.5 * 2**23), emulated bit for bit on float32."""
    bits = (np.asarray(v, np.float32) + F(12582912.0)).view(np.int32)
    return (bits & 0x007FFFFF) - 0x00400000


def seqsum(a):
    """Sum over axis 0 one element after another (C's loop), not numpy's pairwise order."""
    s = a[0].copy()
    for i in range(1, a.shape[0]):
        s += a[i]
    return s


def signed_absmax(x):
    """C's `if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }` loop -> (max, amax), both (G,)."""
    ax = np.abs(x)
    amax = np.fmax.reduce(ax, axis=0, initial=F(0))  # NaN never passes `>`, so it is skipped
    first = np.argmax(ax == amax, axis=0)  # the first element reaching the max wins, as in the loop
    mx = np.take_along_axis(x, first[None], axis=0)[0]
    return np.where(amax > 0, mx, F(0)), amax


def make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep, use_mad):
    """Asymmetric (scale, min) search for Q2_K/Q4_K/Q5_K. x, w: (n, G) -> L (n, G) uint8, scale, -min (G,)."""
    rmin, rdelta, fmax = F(rmin), F(rdelta), F(nmax)
    mn = mn0 = np.minimum(x.min(axis=0), F(0))  # `if (min > 0) min = 0`
    mx = x.max(axis=0)
    sum_w = seqsum(w)
    sum_x = seqsum(w * x)

    def err(scale, mn_, L):
        d = scale * L.astype(F) + mn_ - x
        return seqsum(w * (np.abs(d) if use_mad else d * d))

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        span0 = mx - mn
        iscale = fmax / span0
        scale = F(1) / iscale
        L = np.clip(nearest_int(iscale * (x - mn)), 0, nmax)
        best = err(scale, mn, L)
        for step in range(nstep + 1):
            # C divides by (max - min) with the min of the best fit so far, so the grid moves along
            iscale = (rmin + rdelta * F(step) + fmax) / (mx - mn)
            Laux = np.clip(nearest_int(iscale * (x - mn)), 0, nmax)
            lf = Laux.astype(F)
            wl = w * lf
            sum_l, sum_l2, sum_xl = seqsum(wl), seqsum(wl * lf), seqsum(wl * x)
            D = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            clamp = this_min > 0
            this_scale = np.where(clamp, sum_xl / sum_l2, this_scale)
            this_min = np.where(clamp, F(0), this_min)
            cur = err(this_scale, this_min, Laux)
            better = (D > 0) & (cur < best)
            L = np.where(better, Laux, L)
            best = np.where(better, cur, best)
            scale = np.where(better, this_scale, scale)
            mn = np.where(better, this_min, mn)
    flat = span0 == 0  # `if (max == min)`: every element quantizes to 0
    return (np.where(flat, 0, L).astype(np.uint8), np.where(flat, F(0), scale).astype(F),
            -np.where(flat, mn0, mn))


def make_qx_quants(x, nmax):
    """Symmetric scale search with x*x weights (rmse_type 1), used by Q6_K. -> L (n, G) uint8 in [0, 2*nmax), scale (G,)."""
    mx, amax = signed_absmax(x)
    zero = amax < GROUP_MAX_EPS
    w = x * x
    wx = w * x
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        def levels(iscale):
            return np.clip(nearest_int(iscale * x), -nmax, nmax - 1)

        def sums(l):
            lf = l.astype(F)
            return seqsum(wx * lf), seqsum(w * lf * lf)

        l = levels(F(-nmax) / mx)
        sumlx, suml2 = sums(l)
        scale = np.where(suml2 != 0, sumlx / suml2, F(0))
        best = scale * sumlx
        for step in (*range(-9, 0), *range(1, 10)):
            lt = levels(-(F(nmax) + F(0.1) * F(step)) / mx)
            slx, sl2 = sums(lt)
            better = (sl2 > 0) & (slx * slx > best * sl2)
            l = np.where(better, lt, l)
            scale = np.where(better, slx / sl2, scale)
            best = np.where(better, scale * slx, best)
    L = np.where(zero, 0, l + nmax).astype(np.uint8)
    return L, np.where(zero, F(0), scale).astype(F)


def make_q3_quants(x, nmax):
    """Symmetric search with per-element refinement (do_rmse), used by Q3_K. -> L (n, G) uint8, scale (G,)."""
    mx, amax = signed_absmax(x)
    zero = amax < GROUP_MAX_EPS
    n = x.shape[0]
    w = x * x
    wx = w * x
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        L = np.clip(nearest_int((F(-nmax) / mx) * x), -nmax, nmax - 1)  # (n, G) int32
        lf = L.astype(F)
        sumlx, suml2 = seqsum(wx * lf), seqsum(w * lf * lf)
        for _ in range(5):
            changed = np.zeros(x.shape[1], bool)
            for i in range(n):  # each element in turn, the running sums updated as C does
                li = L[i].astype(F)
                slx = sumlx - wx[i] * li
                sl2 = suml2 - w[i] * li * li
                new = np.clip(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1)
                nf = new.astype(F)
                slx2 = slx + wx[i] * nf
                sl22 = sl2 + w[i] * nf * nf
                take = ((slx > 0) & (new != L[i]) & (sl22 > 0)
                        & (slx2 * slx2 * suml2 > sumlx * sumlx * sl22))
                L[i] = np.where(take, new, L[i])
                sumlx = np.where(take, slx2, sumlx)
                suml2 = np.where(take, sl22, suml2)
                changed |= take
            if not changed.any():
                break
        scale = np.where(suml2 > 0, sumlx / suml2, F(0))
    return np.where(zero, 0, L + nmax).astype(np.uint8), np.where(zero, F(0), scale).astype(F)
