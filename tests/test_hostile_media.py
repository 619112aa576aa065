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

def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_header(w: int, h: int) -> bytes:
    """A PNG signature + IHDR (8-bit RGB) + an empty IDAT + IEND: 69 bytes claiming w x h pixels."""
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


def test_a_png_chunk_length_past_the_file_is_an_ember_error(tmp_path):
    # an IDAT claiming 0xFFFFFFFF bytes: read from a file, Pillow asked for 4 GiB (a raw MemoryError under a
    # 1 GiB address-space cap); now the chunk walk refuses it first, naming the chunk
    ihdr = struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0)
    bad = struct.pack(">I", 0xFFFFFFFF) + b"IDAT" + b"xx" + struct.pack(">I", zlib.crc32(b"IDATxx"))
    data = zlib.compress(b"\0" * 13 * 4)
    body = struct.pack(">I", len(data)) + b"IDAT" + data + struct.pack(">I", zlib.crc32(b"IDAT" + data))
    path = tmp_path / "bad.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + bad + body + chunk(b"IEND", b""))
    code = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from ember.models.yolo.image import ImageError, load_image
        from ember.data.image_folder import decode_image
        from ember.errors import FormatError
        for f in (load_image, decode_image):
            try:
                f({str(path)!r})
            except FormatError as e:
                print(type(e).__name__, e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout + r.stderr[-2000:]
    assert lines[0].startswith("ImageError") and lines[1].startswith("FormatError")
    for line in lines:
        assert "PNG chunk b'IDAT' at byte 33 claims 4294967295 bytes, past the end" in line


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P", "LA", "CMYK", "I;16"])
def test_decoded_pixels_equal_pillows_in_every_mode(mode, tmp_path):
    from PIL import Image  # the reference: Pillow's own conversion and array export
    rng = np.random.default_rng(2)
    img = Image.fromarray(rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)).convert(mode)
    path = tmp_path / ("x.tif" if mode in ("CMYK", "I;16") else "x.png")
    img.save(path)
    with Image.open(path) as im:
        ref = np.asarray(im.convert("RGB"))
    np.testing.assert_array_equal(load_image(str(path)), ref)
    from ember.data.image_folder import decode_image
    with Image.open(path) as im:
        ref_l = np.asarray(im.convert("L"))
    np.testing.assert_array_equal(decode_image(str(path), "L"), ref_l)


def test_exif_orientation_is_applied_as_pillow_does(tmp_path):
    from PIL import Image, ImageOps
    img = Image.fromarray(np.random.default_rng(3).integers(0, 256, (20, 30, 3), dtype=np.uint8))
    exif = img.getexif()
    exif[0x0112] = 6  # rotate 270
    path = tmp_path / "o.jpg"
    img.save(path, exif=exif.tobytes(), quality=95)
    with Image.open(path) as im:
        ref = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    got = load_image(str(path))
    assert got.shape == (30, 20, 3)
    np.testing.assert_array_equal(got, ref)


def test_decoding_stays_within_the_stated_bytes_per_pixel(tmp_path):
    # 4 MP: Pillow's frame and the array at once (the stated 8 bytes a pixel); before, np.asarray's two
    # whole-frame byte copies made it 18 bytes a pixel (0.9 GB for a 49 MP PNG just under the cap)
    from PIL import Image
    from ember.io.image import BYTES_PER_PIXEL
    h, w = 2000, 2000
    y, x = np.mgrid[0:h, 0:w]
    Image.fromarray(np.stack([x % 251, y % 241, (x ^ y) % 239], -1).astype(np.uint8)).save(tmp_path / "big.png",
                                                                                       compress_level=1)
    code = textwrap.dedent(f"""
        import resource
        from PIL import Image, ImageOps  # imported before the baseline: their import is not the image's
        from ember.models.yolo.image import load_image
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        a = load_image({str(tmp_path / 'big.png')!r})
        print(a.shape, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    shape, grown = r.stdout.rsplit(" ", 1)
    assert shape == "(2000, 2000, 3)"
    assert int(grown) <= BYTES_PER_PIXEL * h * w + (8 << 20), int(grown) / (h * w)
