"""Band-limited resampling in numpy: windowed-sinc polyphase, the design of scipy.signal.resample_poly.

For a rate change by up/down (the reduced fraction target/orig), the anti-aliasing low-pass is a
Kaiser-windowed sinc (beta 5.0) with cutoff at the lower of the two Nyquist rates and
2 * 10 * max(up, down) + 1 taps, exactly scipy's ``firwin`` design, so results match
``resample_poly`` to float rounding. Each output sample is a dot product of the input around its
position with one polyphase branch of that filter; the input is taken as zero outside its ends.
30 s of 44.1 kHz audio resamples in ~20 ms (numpy, one core).
"""
from __future__ import annotations

from math import gcd

import numpy as np

from ...errors import LimitError
from ...limits import budget

KAISER_BETA = 5.0
HALF_LEN_PER_RATE = 10  # filter half-length, in units of max(up, down)
_SLICE = 1 << 16  # taps computed at a time


def _lowpass(up: int, down: int) -> tuple[np.ndarray, int]:
    """Kaiser-windowed sinc low-pass for the up-sampled rate -> (taps (2*half+1,), half).
    Built in slices so an odd rate ratio (millions of taps) needs the taps' memory and no more."""
    max_rate = max(up, down)
    half = HALF_LEN_PER_RATE * max_rate
    cutoff = 1.0 / max_rate  # as a fraction of the up-sampled Nyquist rate
    h = np.empty(2 * half + 1, np.float64)
    for start in range(0, len(h), _SLICE):
        m = np.arange(start - half, min(len(h), start + _SLICE) - half, dtype=np.float64)  # tap offsets
        window = np.i0(KAISER_BETA * np.sqrt(1.0 - (m / half) ** 2.0)) / np.i0(KAISER_BETA)  # np.kaiser's formula
        h[start:start + len(m)] = cutoff * np.sinc(cutoff * m) * window
    h *= up / h.sum()  # unit DC gain per phase after zero-stuffing by `up`
    return h, half


def resample(x: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """Resample a 1-D signal from ``orig_sr`` to ``target_sr`` Hz -> float32, length
    ceil(len(x) * target_sr / orig_sr)."""
    if int(orig_sr) != orig_sr or int(target_sr) != target_sr or orig_sr <= 0 or target_sr <= 0:
        raise ValueError(f"ember: resample rates must be positive integers, got {orig_sr} -> "
                         f"{target_sr}")
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"ember: resample expects a 1-D signal, got shape {x.shape}")
    if orig_sr == target_sr or len(x) == 0:
        return x.astype(np.float32)
    g = gcd(int(orig_sr), int(target_sr))
    up, down = int(target_sr) // g, int(orig_sr) // g
    if max(up, down) > budget.max_sample_rate:  # the filter has 20 * max(up, down) taps
        raise LimitError(f"resample {orig_sr} -> {target_sr} Hz", "reduced rate ratio term", max(up, down),
                         budget.max_sample_rate, "max_sample_rate")
    h, half = _lowpass(up, down)
    n_in = len(x)
    n_out = -(-n_in * up // down)
    n_taps = (2 * half) // up + 1
    # Output n sits at n*down on the up-sampled grid: out[n] = sum_k x[k] * h[n*down - k*up + half]
    # over n_taps inputs from k0(n) = ceil((n*down - half) / up). Outputs n = p + j*up share one
    # phase p: the same taps, on inputs shifted by j*down. So each phase is one strided window
    # view of the input times one tap vector.
    phases = np.arange(min(up, n_out), dtype=np.int64)
    k0 = -((half - phases * down) // up)  # (phases,) first input index of each phase
    lpad = max(0, -int(k0.min()))  # zeros before x stand in for the signal's left edge
    length = max(n_in, (n_out - 1) // up * down + int(k0.max()) + n_taps) + lpad
    xp = np.zeros(length, np.float64)
    xp[lpad:lpad + n_in] = x
    windows = np.lib.stride_tricks.sliding_window_view(xp, n_taps)  # (length-n_taps+1, n_taps)
    out = np.empty(n_out, np.float64)
    for p in phases:
        tap = p * down - (k0[p] + np.arange(n_taps)) * up + half  # (n_taps,) filter indices
        w = np.where((tap >= 0) & (tap <= 2 * half), h[np.clip(tap, 0, 2 * half)], 0.0)
        rows = windows[k0[p] + lpad::down][:len(range(p, n_out, up))]  # (outputs of phase p, n_taps)
        out[p::up] = rows @ w
    return out.astype(np.float32)
