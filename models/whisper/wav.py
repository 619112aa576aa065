"""WAV (RIFF/WAVE) reading in pure Python + numpy, so it also runs under Pyodide.

Handles PCM 8/16/24/32-bit, IEEE float 32/64 and WAVE_FORMAT_EXTENSIBLE wrappers of either, any
channel count and sample rate. Unlike the stdlib ``wave`` module it reads float and extensible
files; compressed formats (ADPCM, mu-law, MP3-in-WAV...) are refused with a clear error.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from ...errors import FormatError, LimitError
from ...limits import budget

FORMAT_PCM, FORMAT_FLOAT, FORMAT_EXTENSIBLE = 0x0001, 0x0003, 0xFFFE
# The last 14 bytes shared by every KSDATAFORMAT_SUBTYPE GUID; the first 2 are the format tag.
_GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")
# Streaming writers (e.g. sox to a pipe) put these in the data size: "until end of file".
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)
_BLOCK_FRAMES = 1 << 20  # frames decoded at a time (a 65 s block at 16 kHz)


class WavError(FormatError):
    """A file that is not a readable WAV: malformed, truncated or an unsupported encoding."""


def _fail(name: str, msg: str):
    raise WavError(f"ember: {name}: {msg}")


def _chunks(data: memoryview, name: str):
    """Yield (id, body_start, declared_size) for each RIFF chunk after the WAVE header."""
    pos = 12
    while pos + 8 <= len(data):
        cid = bytes(data[pos:pos + 4])
        (size,) = struct.unpack("<I", data[pos + 4:pos + 8])
        yield cid, pos + 8, size
        pos += 8 + size + (size & 1)  # chunks are padded to even length
    if pos < len(data) and any(data[pos:]):
        _fail(name, f"{len(data) - pos} stray bytes after the last chunk (truncated chunk header?)")


def _parse_fmt(body: bytes, name: str) -> tuple[int, int, int, int, int]:
    """fmt chunk -> (format tag, channels, sample rate, block align, bits per sample)."""
    if len(body) < 16:
        _fail(name, f"fmt chunk is {len(body)} bytes, needs at least 16")
    tag, channels, rate, _byte_rate, block_align, bits = struct.unpack("<HHIIHH", body[:16])
    if tag == FORMAT_EXTENSIBLE:
        if len(body) < 40:
            _fail(name, f"WAVE_FORMAT_EXTENSIBLE fmt chunk is {len(body)} bytes, needs 40")
        # cbSize, validBits, channelMask, then the SubFormat GUID at 24..40. validBits may be
        # less than the container (e.g. 20 in 24); samples are left-justified, so scaling by the
        # container width is still right.
        guid = body[24:40]
        if guid[2:] != _GUID_TAIL:
            _fail(name, f"WAVE_FORMAT_EXTENSIBLE sub-format GUID {guid.hex()} is not PCM or float")
        tag = struct.unpack("<H", guid[:2])[0]
    if channels == 0:
        _fail(name, "fmt chunk says 0 channels")
    if rate == 0:
        _fail(name, "fmt chunk says sample rate 0")
    return tag, channels, rate, block_align, bits


def _decode(raw: memoryview, tag: int, bits: int, name: str) -> np.ndarray:
    """Interleaved sample bytes -> float64 samples in [-1, 1] (as soundfile/torchaudio scale)."""
    if tag == FORMAT_PCM:
        if bits == 8:  # 8-bit WAV is unsigned with a 128 offset
            return (np.frombuffer(raw, np.uint8).astype(np.float64) - 128.0) / 128.0
        if bits == 16:
            return np.frombuffer(raw, "<i2") / 32768.0
        if bits == 24:
            b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
            v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
            v = np.where(v >= 1 << 23, v - (1 << 24), v)  # sign-extend 24 -> 32 bits
            return v / float(1 << 23)
        if bits == 32:
            return np.frombuffer(raw, "<i4") / float(1 << 31)
    elif tag == FORMAT_FLOAT:
        if bits == 32:
            return np.frombuffer(raw, "<f4").astype(np.float64)
        if bits == 64:
            return np.frombuffer(raw, "<f8").copy()
    else:
        _fail(name, f"WAV format tag 0x{tag:04x} is not supported (only PCM 0x0001 and IEEE "
                    f"float 0x0003, plain or extensible); convert it, e.g. sox in.wav -b 16 out.wav")
    kind = "PCM" if tag == FORMAT_PCM else "float"
    _fail(name, f"{bits}-bit {kind} WAV is not supported (PCM: 8/16/24/32, float: 32/64)")


def read_wav(source: str | os.PathLike | bytes | bytearray | memoryview,
             mono: bool = True) -> tuple[np.ndarray, int]:
    """Read a WAV file (a path, or its bytes) -> (samples float32, sample rate).

    Samples are scaled to [-1, 1]. With ``mono`` (the default) channels are averaged into shape
    (n_samples,); otherwise the result is (n_samples, channels).
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, name = memoryview(source).cast("B"), "<wav bytes>"
    else:
        name = str(source)
        data = memoryview(Path(source).read_bytes())
    if len(data) < 12 or bytes(data[:4]) != b"RIFF" or bytes(data[8:12]) != b"WAVE":
        head = bytes(data[:12])
        hint = " (RF64/BW64 is not supported)" if head[:4] in (b"RF64", b"BW64") else ""
        _fail(name, f"not a RIFF/WAVE file (starts with {head!r}){hint}")

    fmt, samples = None, None
    for cid, start, size in _chunks(data, name):
        if cid == b"fmt ":
            if start + size > len(data):
                _fail(name, f"fmt chunk declares {size} bytes, only {len(data) - start} present")
            fmt = _parse_fmt(bytes(data[start:start + size]), name)
        elif cid == b"data":
            if fmt is None:
                _fail(name, "data chunk comes before the fmt chunk")
            available = len(data) - start
            if size in _UNKNOWN_SIZES:
                size = available
            elif size > available:
                _fail(name, f"truncated: data chunk declares {size} bytes, only {available} present")
            samples = data[start:start + size]
            break  # everything after the audio (LIST, id3...) is metadata
    if fmt is None:
        _fail(name, "no fmt chunk")
    if samples is None:
        _fail(name, "no data chunk")

    tag, channels, rate, block_align, bits = fmt
    # header values that drive decoding and resampling memory, bounded before either runs
    if channels > budget.max_channels:
        raise LimitError(name, "fmt chunk: channels", channels, budget.max_channels, "max_channels")
    if rate > budget.max_sample_rate:
        raise LimitError(name, "fmt chunk: sample rate", rate, budget.max_sample_rate, "max_sample_rate", " Hz")
    if rate < budget.min_sample_rate:  # upsampling to 16 kHz multiplies the samples by 16000 / rate
        raise LimitError(name, "fmt chunk: sample rate", rate, budget.min_sample_rate, "min_sample_rate", " Hz",
                         below=True)
    if bits == 0 or bits % 8:
        _fail(name, f"bits per sample {bits} is not a whole number of bytes")
    if block_align != channels * bits // 8:
        _fail(name, f"block align {block_align} != {channels} channels x {bits // 8} bytes")
    if len(samples) % block_align:
        _fail(name, f"truncated: {len(samples)} data bytes is not a whole number of "
                    f"{block_align}-byte frames")
    seconds = len(samples) // block_align / rate
    if seconds > budget.max_audio_seconds:
        raise LimitError(name, "data chunk: duration", round(seconds, 1), budget.max_audio_seconds,
                         "max_audio_seconds", " s")
    # decoded a block at a time into the float32 result: the float64 intermediates of a whole hour (460 MB
    # per channel) would not fit beside the file in the page's wasm32 memory
    n = len(samples) // block_align
    out = np.empty((n,) if mono else (n, channels), np.float32)
    for a in range(0, n, _BLOCK_FRAMES):
        b = min(a + _BLOCK_FRAMES, n)
        x = _decode(samples[a * block_align:b * block_align], tag, bits, name).reshape(-1, channels)
        if not np.all(np.isfinite(x)):
            _fail(name, "float samples contain NaN or infinity")
        out[a:b] = x.mean(axis=1) if mono else x
    return out, rate
