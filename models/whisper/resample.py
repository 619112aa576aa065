"""Band-limited resampling in numpy: windowed-sinc polyphase, the design of scipy.signal.resample_poly.

For a rate change by up/down (the reduced fraction target/orig), the anti-aliasing low-pass is a
Kaiser-windowed sinc (beta 5.0) with cutoff at the lower of the two Nyquist rates and
2 * 10 * max(up, down) + 1 taps, exactly scipy's ``firwin`` design, so results match
``resample_poly`` to float rounding. Each output sample is a dot product of the input around its
position with one polyphase branch of that filter; the input is taken as zero outside its ends.
"""
from __future__ import annotations

from math import gcd

import numpy as np

KAISER_BETA = 5.0
HALF_LEN_PER_RATE = 10  # filter half-length, in units of max(up, down)
_CHUNK = 1 << 15  # outputs computed per block, bounding the (chunk, taps) index matrix


def _lowpass(up: int, down: int) -> tuple[np.ndarray, int]:
    """Kaiser-windowed sinc low-pass for the up-sampled rate -> (taps (2*half+1,), half)."""
    max_rate = max(up, down)
    half = HALF_LEN_PER_RATE * max_rate
    m = np.arange(-half, half + 1, dtype=np.float64)  # tap offsets, centred on 0
    cutoff = 1.0 / max_rate  # as a fraction of the up-sampled Nyquist rate
    h = cutoff * np.sinc(cutoff * m) * np.kaiser(2 * half + 1, KAISER_BETA)
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
    if orig_sr == target_sr:
        return x.astype(np.float32)
    g = gcd(int(orig_sr), int(target_sr))
    up, down = int(target_sr) // g, int(orig_sr) // g
    h, half = _lowpass(up, down)
    n_in = len(x)
    n_out = -(-n_in * up // down)
    xd = x.astype(np.float64)
    # Output n sits at position n*down on the up-sampled grid and sums x[k] * h[n*down - k*up + half]
    # over the k whose tap falls inside the filter: k from ceil((n*down - half) / up), n_taps of them.
    n_taps = (2 * half) // up + 1
    out = np.empty(n_out, np.float64)
    for s in range(0, n_out, _CHUNK):
        n = np.arange(s, min(s + _CHUNK, n_out), dtype=np.int64)
        k = -((half - n * down) // up)[:, None] + np.arange(n_taps)  # (chunk, n_taps) input idx
        tap = n[:, None] * down - k * up + half  # (chunk, n_taps) filter idx
        valid = (k >= 0) & (k < n_in) & (tap >= 0) & (tap <= 2 * half)
        w = np.where(valid, h[np.clip(tap, 0, 2 * half)], 0.0)
        out[s:s + len(n)] = np.einsum("ij,ij->i", w, xd[np.clip(k, 0, n_in - 1)])
    return out.astype(np.float32)
