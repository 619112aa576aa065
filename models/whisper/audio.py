"""Whisper's audio front end in numpy: load -> 16 kHz mono -> log-mel spectrogram.

Follows openai/whisper ``audio.py`` (v20240930) and transformers' WhisperFeatureExtractor: STFT
with a periodic Hann window, reflect padding (torch.stft center=True), power spectrum without its
last frame, Slaney-style mel filterbank (librosa's default, computed here rather than shipped),
log10 clamped at 1e-10, floored at max - 8, then (x + 4) / 4.
"""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

from .resample import resample
from .wav import read_wav

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_LENGTH = 30  # seconds of audio per encoder window
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480000 samples in a window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames in a window


def load_audio(source: str | os.PathLike | bytes, sr: int = SAMPLE_RATE) -> np.ndarray:
    """Read a WAV file (path or bytes), average channels to mono, resample to ``sr``
    -> float32 (n_samples,)."""
    x, file_sr = read_wav(source)
    return resample(x, file_sr, sr)


def pad_or_trim(array: np.ndarray, length: int = N_SAMPLES, axis: int = -1) -> np.ndarray:
    """Zero-pad or cut ``array`` along ``axis`` to exactly ``length`` (as openai/whisper)."""
    n = array.shape[axis]
    if n > length:
        return np.take(array, np.arange(length), axis=axis)
    if n < length:
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, length - n)
        return np.pad(array, widths)
    return array


# ---------------------------------------------------------------------------------------------
# Mel filterbank (Slaney mel scale, Slaney area normalisation: librosa.filters.mel's defaults)
# ---------------------------------------------------------------------------------------------

def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    # Slaney: linear below 1 kHz (3 mels per 200 Hz), logarithmic above.
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
    f = np.asarray(f, np.float64)
    lin = f / f_sp
    return np.where(f >= min_log_hz, min_log_hz / f_sp + np.log(np.maximum(f, 1e-10) / min_log_hz)
                    / logstep, lin)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


@lru_cache(maxsize=4)
def mel_filters(n_mels: int, sr: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """Triangular filters from 0 Hz to sr/2 -> read-only float32 (n_mels, n_fft // 2 + 1)."""
    fft_freqs = np.linspace(0.0, sr / 2, n_fft // 2 + 1)  # (n_bins,)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sr / 2), n_mels + 2))  # (n_mels+2,)
    widths = np.diff(edges)  # (n_mels+1,)
    ramps = edges[:, None] - fft_freqs[None, :]  # (n_mels+2, n_bins)
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))  # (n_mels, n_bins)
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]  # equal area per filter
    out = weights.astype(np.float32)
    out.flags.writeable = False  # shared through the cache
    return out


@lru_cache(maxsize=4)
def _mel_bands(n_mels: int) -> tuple:
    """Each filter's band of nonzero weights: ((lo, float64 weights of bins lo, lo + 1, ...), ...) (~390 of the
    80 x 201 weights for 80 mels)."""
    w = mel_filters(n_mels).astype(np.float64)
    bands = []
    for row in w:
        nz = np.flatnonzero(row)
        lo = int(nz[0]) if nz.size else 0
        bands.append((lo, row[lo:int(nz[-1]) + 1 if nz.size else 0]))
    return tuple(bands)


def _mel_power(n_mels: int, power: np.ndarray) -> np.ndarray:
    """mel_filters(n_mels) @ power (float64 (n_bins, frames) -> (n_mels, frames)) summed over each filter's band in
    bin order: the bits of a dense product summed in bin order (the zeros outside a band add +0), so the page's numpy
    (no BLAS: ~24 ms for 30 s of audio) and the desktop's give the same features, the page in ~6 ms."""
    power = np.ascontiguousarray(power)  # (rows of bins: a band reads a few whole rows)
    mel = np.zeros((n_mels, power.shape[1]))
    for m, (lo, w) in enumerate(_mel_bands(n_mels)):
        if w.size:
            acc = mel[m]
            np.multiply(w[0], power[lo], out=acc)
            for j in range(1, w.size):
                acc += w[j] * power[lo + j]
    return mel


# ---------------------------------------------------------------------------------------------
# Log-mel spectrogram
# ---------------------------------------------------------------------------------------------

def _power_spectrogram(audio: np.ndarray) -> np.ndarray:
    """|STFT|^2 as torch.stft(center=True, pad_mode='reflect', periodic Hann), last frame
    dropped -> float64 (n_fft // 2 + 1, len(audio) // HOP_LENGTH)."""
    padded = np.pad(audio.astype(np.float64), N_FFT // 2, mode="reflect")
    return _frames_power(padded, audio.size // HOP_LENGTH)


def _frames_power(padded: np.ndarray, n_frames: int) -> np.ndarray:
    """The first n_frames STFT frames of the reflect-padded signal `padded` -> float64 (n_bins, n_frames)."""
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:n_frames]  # (T, N_FFT)
    spec = np.fft.rfft(frames * window, axis=-1)  # (T, n_bins)
    return (spec.real ** 2 + spec.imag ** 2).T


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = 80, pad_to_30s: bool = True,
                        extra_hop: bool = True) -> np.ndarray:
    """16 kHz mono audio (n_samples,) -> Whisper's normalised log-mel, float32 (n_mels, frames).

    pad_to_30s=True (transformers/openai-whisper): the audio is zero-padded or cut to 30 s first,
    giving exactly N_FRAMES frames; the max - 8 floor then sees the padding too.
    pad_to_30s=False (faster-whisper): the mel is computed on the audio plus one hop of zeros,
    giving len(audio) // HOP_LENGTH + 1 frames; pad the *features* with pad_or_trim(mel, N_FRAMES)
    (zeros, i.e. log-mel value 0) before the encoder, as faster-whisper does.
    pad_to_30s=False, extra_hop=False (transformers' long-form features, padding="longest"): the
    audio as it is, giving len(audio) // HOP_LENGTH frames.
    """
    audio = np.asarray(audio)
    if audio.ndim != 1:
        raise ValueError(f"ember: log_mel_spectrogram expects mono audio (n_samples,), got shape "
                         f"{audio.shape}; average the channels first")
    if audio.size == 0 and not pad_to_30s:
        raise ValueError("ember: log_mel_spectrogram got empty audio")
    if not np.all(np.isfinite(audio)):
        raise ValueError("ember: log_mel_spectrogram got NaN or infinite samples")
    if pad_to_30s:
        audio = pad_or_trim(audio, N_SAMPLES)
    elif extra_hop:
        audio = np.pad(audio, (0, HOP_LENGTH))
    elif audio.size < N_FFT // 2 + 1:  # reflect padding needs n_fft // 2 + 1 samples
        raise ValueError(f"ember: log_mel_spectrogram needs at least {N_FFT // 2 + 1} samples, got {audio.size}")
    mel = _mel_power(n_mels, _power_spectrogram(audio))  # (n_mels, frames)
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


class LongFormMel:
    """log_mel_spectrogram(audio, n_mels, pad_to_30s=False, extra_hop=False) (transformers' long-form
    features) computed a few frames at a time, so long audio never holds a whole-file spectrogram: an hour
    is 360,000 frames, whose float64 STFT alone (~1.2 GB) overflows wasm32's 32-bit sizes in the page.

    The max - 8 floor is over the whole file, so the constructor makes one pass over it in blocks of
    N_FRAMES frames for the global maximum; `mel[:, a:b]` then computes frames a..b from the samples (each
    frame is a window of 400 samples around frame * 160, reflected at the ends, as the whole-file STFT
    takes it). Peak memory beyond the samples: one block's STFT (~10 MB for 3000 frames)."""

    def __init__(self, audio: np.ndarray, n_mels: int = 80, block: int = N_FRAMES):
        audio = np.asarray(audio)
        if audio.ndim != 1:
            raise ValueError(f"ember: LongFormMel expects mono audio (n_samples,), got shape {audio.shape}")
        if audio.size < N_FFT // 2 + 1:  # reflect padding needs n_fft // 2 + 1 samples
            raise ValueError(f"ember: log_mel_spectrogram needs at least {N_FFT // 2 + 1} samples, got {audio.size}")
        self.audio, self.n_mels, self.block = audio, n_mels, block
        self.shape = (n_mels, audio.size // HOP_LENGTH)
        step = block * HOP_LENGTH
        if not all(np.all(np.isfinite(audio[i:i + step])) for i in range(0, audio.size, step)):
            raise ValueError("ember: log_mel_spectrogram got NaN or infinite samples")
        peak = -np.inf
        for a in range(0, self.shape[1], block):
            peak = max(peak, float(self._log_mel(a, min(a + block, self.shape[1])).max()))
        self.floor = peak - 8.0

    def _log_mel(self, a: int, b: int) -> np.ndarray:
        """log10 of the mel power of frames a..b (float64, before the floor)."""
        n = self.audio.size
        idx = np.arange(a * HOP_LENGTH - N_FFT // 2, (b - 1) * HOP_LENGTH + N_FFT // 2)  # sample of each padded position
        idx = np.abs(idx)                                     # reflect at the start ...
        idx = np.where(idx >= n, 2 * (n - 1) - idx, idx)      # ... and at the end (np.pad mode="reflect")
        power = _frames_power(self.audio[idx].astype(np.float64), b - a)
        mel = _mel_power(self.n_mels, power)
        return np.log10(np.maximum(mel, 1e-10))

    def __getitem__(self, key) -> np.ndarray:
        """mel[:, a:b] -> float32 (n_mels, b - a), equal to the whole-file log_mel_spectrogram's columns."""
        rows, cols = key
        if rows != slice(None) or not isinstance(cols, slice) or cols.step not in (None, 1):
            raise TypeError("ember: LongFormMel supports mel[:, a:b] only")
        a, b, _ = cols.indices(self.shape[1])
        if b <= a:
            return np.zeros((self.n_mels, 0), np.float32)
        parts = [self._log_mel(s, min(s + self.block, b)) for s in range(a, b, self.block)]
        log_spec = np.maximum(np.concatenate(parts, axis=1), self.floor)
        return ((log_spec + 4.0) / 4.0).astype(np.float32)
