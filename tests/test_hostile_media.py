"""Hostile WAV and image headers: sizes, rates and channel counts that would drive decoding or
resampling memory are refused from the header with an ember LimitError (issue #17's reproducers)."""
import io
import struct
import subprocess
import sys
import textwrap
import zlib

import ember
import numpy as np
import pytest
from ember.models.whisper.audio import load_audio
from ember.models.whisper.resample import resample
from ember.models.whisper.wav import read_wav
from ember.models.yolo.image import load_image


def wav_bytes(rate: int, channels: int = 1, n_frames: int = 500, seed: int = 0) -> bytes:
    data = (np.random.default_rng(seed).standard_normal(n_frames * channels) * 1000).astype("<i2").tobytes()
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * 2 * channels & 0xFFFFFFFF, 2 * channels, 16)
    body = b"WAVEfmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


# ---------------------------------------------------------------- WAV

@pytest.mark.parametrize("rate,channels,field,limit", [
    (1_000_003, 1, "sample rate is 1000003 Hz, over the limit of 384000 Hz", "max_sample_rate"),  # was 2.3 GB
    (10_000_000, 1, "sample rate is 10000000 Hz", "max_sample_rate"),  # was a numpy MemoryError
    (999, 1, "sample rate is 999 Hz, under the minimum of 1000 Hz", "min_sample_rate"),
    (16000, 1000, "channels is 1000, over the limit of 64", "max_channels"),
])
def test_wav_header_values_past_the_budget_are_refused(rate, channels, field, limit):
    with pytest.raises(ember.LimitError) as e:
        load_audio(wav_bytes(rate, channels, n_frames=2))
    assert f"<wav bytes>: fmt chunk: {field}" in str(e.value)
    assert e.value.setting == limit and f"EMBER_{limit.upper()}" in str(e.value)


def test_wav_duration_is_bounded(monkeypatch):
    src = wav_bytes(8000, n_frames=16000)  # 2 s
    assert read_wav(src)[0].shape == (16000,)
    monkeypatch.setattr(ember.limits.budget, "max_audio_seconds", 1.5)
    with pytest.raises(ember.LimitError, match="data chunk: duration is 2.0 s, over the limit of 1.5 s"):
        read_wav(src)


def test_an_odd_rate_under_the_limit_resamples_like_scipy_in_bounded_memory():
    # 383,999 Hz reduces to 16000/383999: a 7.7M-tap filter (was 828 MB peak for a 1 KB file, now sliced)
    from scipy.signal import resample_poly  # the reference
    x, rate = read_wav(wav_bytes(383_999, n_frames=3000))
    np.testing.assert_allclose(resample(x, rate, 16000), resample_poly(x.astype(np.float64), 16000, 383_999),
                               atol=1e-6)
    code = textwrap.dedent(f"""
        import resource, sys
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        from test_hostile_media import wav_bytes
        from ember.models.whisper.audio import load_audio
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        load_audio(wav_bytes(383_999))
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
    """)
    grown_mb = int(subprocess.check_output([sys.executable, "-c", code], text=True, timeout=120))
    assert grown_mb < 200, f"resampling a 1 KB WAV grew the process by {grown_mb} MB"


# ---------------------------------------------------------------- images

def png_header(w: int, h: int) -> bytes:
    """A PNG signature + IHDR (8-bit RGB) + an empty IDAT + IEND: 69 bytes claiming w x h pixels."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


def forged_jpeg(w: int, h: int) -> bytes:
    """A real 16x16 JPEG whose SOF0 frame header is rewritten to claim w x h."""
    from PIL import Image
    b = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 30, 30)).save(b, "JPEG")
    data = bytearray(b.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", h, w)
    return bytes(data)


@pytest.mark.parametrize("make,size,msg", [
    (png_header, 65535, "image size is over"),  # Pillow's DecompressionBombError escaped as a traceback
    (png_header, 13000, "image size 13000x13000 is 169000000 pixels"),  # under Pillow's limit: was 2.7 GB
    (forged_jpeg, 9000, "image size 9000x9000 is 81000000 pixels"),  # a forged frame: was 1.4 GB
])
def test_images_past_max_pixels_are_refused_before_decoding(make, size, msg):
    src = make(size, size)
    assert len(src) < 1000
    with pytest.raises(ember.LimitError, match=msg + r".* over the limit of 50000000 pixels") as e:
        load_image(src)
    assert e.value.setting == "max_pixels"


def test_an_image_under_max_pixels_decodes_as_pillow_does(monkeypatch):
    from PIL import Image  # the reference decoder
    b = io.BytesIO()
    ref = np.random.default_rng(1).integers(0, 256, (40, 30, 3), dtype=np.uint8)
    Image.fromarray(ref).save(b, "PNG")
    np.testing.assert_array_equal(load_image(b.getvalue()), ref)
    monkeypatch.setattr(ember.limits.budget, "max_pixels", 40 * 30 - 1)
    with pytest.raises(ember.LimitError, match="image size 30x40"):
        load_image(b.getvalue())
