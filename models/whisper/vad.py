"""Voice activity detection with Silero VAD (MIT; the ONNX file of PyPI `silero-vad` 6.2.3, run by ember.onnx):
speech regions first, silence skipped, long audio cut at pauses, timestamps mapped back to the input's timeline.

The region rules are faster-whisper's vad.py (itself after silero-vad's get_speech_timestamps): a 512-sample frame
(32 ms, with the previous frame's last 64 samples as context) is speech above `threshold`; a region ends after
`min_silence_ms` below `threshold - 0.15`; regions are padded by `speech_pad_ms`; a region longer than
`max_speech_s` is split at its last pause of at least 98 ms.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from ember.errors import EmberError

SAMPLE_RATE = 16000
FRAME = 512       # samples per VAD decision (32 ms)
CONTEXT = 64      # samples of the previous frame the model sees with each frame
PACKAGE, VERSION = "silero-vad", "6.2.3"
# sha256 of the wheel as PyPI serves it (pip download, 2026-12-02); a different file is refused
WHEEL_SHA256 = "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8"
MEMBER = "silero_vad/data/silero_vad_16k_sequence.onnx"  # (frames, 576) in one run, LSTM state (h, c)
MEMBER_SHA256 = "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85"


class VadError(EmberError, ValueError):
    """The VAD model could not be had, or the audio given to it is not mono float samples."""


@dataclass(frozen=True)
class VadOptions:
    threshold: float = 0.5
    neg_threshold: float | None = None    # None: max(threshold - 0.15, 0.01)
    min_speech_ms: int = 0
    max_speech_s: float = float("inf")
    min_silence_ms: int = 2000
    speech_pad_ms: int = 400


def model_path(cache=None):
    """The Silero VAD ONNX file, fetched once from PyPI into ember's cache."""
    from ember import hub
    try:
        return hub.fetch_pypi_member(PACKAGE, VERSION, MEMBER, WHEEL_SHA256, member_sha256=MEMBER_SHA256, cache=cache)
    except hub.HubError as e:
        raise VadError(f"ember: the Silero VAD model ({PACKAGE}=={VERSION}) could not be fetched: {e}") from None


class SileroVAD:
    """Speech probability per 32 ms frame. `probs(audio)` for a whole signal; `stream(frames)` keeps the LSTM
    state and the last context between calls, for live audio."""

    def __init__(self, path=None, device: str = "cpu"):
        from ember.onnx import InferenceSession
        self.session = InferenceSession(path or model_path(), device=device)
        self.reset()

    def fork(self) -> SileroVAD:
        """A detector of its own state on the same loaded model (a live stream beside whole-file runs)."""
        other = object.__new__(SileroVAD)
        other.session = self.session
        other.reset()
        return other

    def reset(self):
        self.h = np.zeros((1, 1, 128), np.float32)
        self.c = np.zeros((1, 1, 128), np.float32)
        self.context = np.zeros(CONTEXT, np.float32)

    def _run(self, frames: np.ndarray) -> np.ndarray:
        """frames (n, FRAME) float32, continuing the stream -> speech probabilities (n,)."""
        if len(frames) == 0:
            return np.zeros(0, np.float32)
        ctx = np.concatenate([self.context[None], frames[:-1, -CONTEXT:]])  # (n, CONTEXT)
        batch = np.ascontiguousarray(np.concatenate([ctx, frames], 1), np.float32)  # (n, FRAME + CONTEXT)
        out = []
        for a in range(0, len(batch), 4096):  # bounded intermediate sizes for hours of audio
            p, self.h, self.c = self.session.run(None, {"input": batch[a:a + 4096], "h": self.h, "c": self.c})
            out.append(np.asarray(p, np.float32).reshape(-1))
        self.context = frames[-1, -CONTEXT:].copy()
        return np.concatenate(out)

    def probs(self, audio: np.ndarray) -> np.ndarray:
        """16 kHz mono float samples -> probability per FRAME samples (the last frame zero-padded)."""
        audio = _check(audio)
        self.reset()
        padded = np.pad(audio, (0, FRAME - audio.size % FRAME))  # as faster-whisper: always at least one pad
        return self._run(padded.reshape(-1, FRAME))

    def stream(self, frames: np.ndarray) -> np.ndarray:
        """Whole FRAME-sample frames (n * FRAME samples) of a live stream -> their probabilities."""
        frames = _check(frames, allow_empty=True)
        if frames.size % FRAME:
            raise VadError(f"ember: VAD stream input must be whole {FRAME}-sample frames, got {frames.size} samples")
        return self._run(frames.reshape(-1, FRAME))


def _check(audio, allow_empty=False) -> np.ndarray:
    a = np.asarray(audio, np.float32)
    if a.ndim != 1:
        raise VadError(f"ember: VAD expects mono samples (n,), got shape {a.shape}")
    if a.size == 0 and not allow_empty:
        raise VadError("ember: VAD got no samples")
    if not np.isfinite(a).all():
        raise VadError("ember: VAD got NaN or infinite samples")
    return a


def speech_regions(probs: np.ndarray, n_samples: int, opts: VadOptions = VadOptions()) -> list[dict]:
    """Frame probabilities of a signal of n_samples -> [{"start", "end"}] in samples (faster-whisper's rules)."""
    sr, w = SAMPLE_RATE, FRAME
    neg = opts.neg_threshold if opts.neg_threshold is not None else max(opts.threshold - 0.15, 0.01)
    min_speech = sr * opts.min_speech_ms / 1000
    pad = sr * opts.speech_pad_ms / 1000
    max_speech = sr * opts.max_speech_s - w - 2 * pad
    min_silence = sr * opts.min_silence_ms / 1000
    min_silence_at_max = sr * 98 / 1000
    triggered, speeches, cur = False, [], {}
    temp_end = prev_end = next_start = 0
    for i, p in enumerate(probs):
        if p >= opts.threshold and temp_end:
            temp_end = 0
            if next_start < prev_end:
                next_start = w * i
        if p >= opts.threshold and not triggered:
            triggered = True
            cur["start"] = w * i
            continue
        if triggered and w * i - cur["start"] > max_speech:
            if prev_end:
                cur["end"] = prev_end
                speeches.append(cur)
                cur = {}
                if next_start < prev_end:
                    triggered = False
                else:
                    cur["start"] = next_start
                prev_end = next_start = temp_end = 0
            else:
                cur["end"] = w * i
                speeches.append(cur)
                cur = {}
                prev_end = next_start = temp_end = 0
                triggered = False
                continue
        if p < neg and triggered:
            if not temp_end:
                temp_end = w * i
            if w * i - temp_end > min_silence_at_max:
                prev_end = temp_end
            if w * i - temp_end < min_silence:
                continue
            cur["end"] = temp_end
            if cur["end"] - cur["start"] > min_speech:
                speeches.append(cur)
            cur = {}
            prev_end = next_start = temp_end = 0
            triggered = False
    if cur and n_samples - cur["start"] > min_speech:
        cur["end"] = n_samples
        speeches.append(cur)
    for i, s in enumerate(speeches):
        if i == 0:
            s["start"] = int(max(0, s["start"] - pad))
        if i != len(speeches) - 1:
            gap = speeches[i + 1]["start"] - s["end"]
            if gap < 2 * pad:
                s["end"] += int(gap // 2)
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - gap // 2))
            else:
                s["end"] = int(min(n_samples, s["end"] + pad))
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - pad))
        else:
            s["end"] = int(min(n_samples, s["end"] + pad))
    return speeches


class TimelineMap:
    """Times in the speech-only signal (regions joined) -> times in the input (faster-whisper's
    SpeechTimestampsMap): each region's silence before it is added back."""

    def __init__(self, regions: list[dict], sr: int = SAMPLE_RATE):
        self.sr, self.ends, self.silence_before = sr, [], []
        prev_end = silent = 0
        for r in regions:
            silent += r["start"] - prev_end
            prev_end = r["end"]
            self.ends.append(r["end"] - silent)
            self.silence_before.append(silent / sr)

    def original(self, t: float, is_end: bool = False) -> float:
        if not self.ends:
            return t
        sample = int(t * self.sr)
        if is_end and sample in self.ends:
            k = self.ends.index(sample)
        else:
            k = min(bisect.bisect(self.ends, sample), len(self.ends) - 1)
        return round(self.silence_before[k] + t, 3)


def pieces(regions: list[dict], max_samples: int) -> list[list[dict]]:
    """Consecutive regions grouped while their total length stays within max_samples (faster-whisper's
    collect_chunks): each group is one clip of at most a window, cut only between regions."""
    out, cur, length = [], [], 0
    for r in regions:
        n = r["end"] - r["start"]
        if cur and length + n > max_samples:
            out.append(cur)
            cur, length = [], 0
        cur.append(r)
        length += n
    if cur:
        out.append(cur)
    return out
