"""Whisper audio front end: WAV reader on every format, resampler, mel filters, log-mel parity.

References are computed here: sox and Python's `wave` write the files, scipy's resample_poly and
sox's rate effect judge the resampler, librosa/transformers the filterbank, transformers'
WhisperFeatureExtractor and faster-whisper's FeatureExtractor the log-mel.
"""
import importlib.util
import shutil
import subprocess
import wave

import numpy as np
import pytest

from ember.models.whisper import audio
from ember.models.whisper.resample import resample
from ember.models.whisper.wav import WavError, read_wav

needs_sox = pytest.mark.skipif(shutil.which("sox") is None, reason="sox not installed")
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None or shutil.which("sox") is None,
                                  reason="espeak-ng and sox needed for speech clips")
SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Whisper turns speech into text, one thirty second window at a time."]


def _sox(*args):
    subprocess.run(["sox", "-R", *map(str, args)], check=True, capture_output=True)


def _speech(tmp_path, text, name):
    """espeak-ng speech (22050 Hz) -> (raw path, 16 kHz 16-bit mono path made by sox)."""
    raw, clip = tmp_path / f"{name}_raw.wav", tmp_path / f"{name}.wav"
    subprocess.run(["espeak-ng", "-w", str(raw), text], check=True, capture_output=True)
    _sox(raw, "-r", 16000, "-c", 1, "-b", 16, clip)
    return raw, clip


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        pytest.skip("espeak-ng and sox needed for speech clips")
    d = tmp_path_factory.mktemp("speech")
    return [_speech(d, text, f"s{i}") for i, text in enumerate(SENTENCES)]


# ---------------------------------------------------------------------------------------------
# WAV reader
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def source_wav(tmp_path_factory):
    """A 3-channel 16-bit PCM WAV written by the stdlib `wave` module, and its samples."""
    rng = np.random.default_rng(0)
    t = np.arange(2205) / 22050
    x = np.stack([0.5 * np.sin(2 * np.pi * 440 * t), 0.3 * rng.uniform(-1, 1, t.size),
                  np.linspace(-0.9, 0.9, t.size)], axis=1)
    pcm = np.round(x * 32767).astype("<i2")  # (n, 3)
    path = tmp_path_factory.mktemp("wav") / "source.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(3), w.setsampwidth(2), w.setframerate(22050)
        w.writeframes(pcm.tobytes())
    return path, pcm / 32768.0


# (sox output options, tolerance vs the 16-bit source, expected format tag in the header)
FORMATS = {
    "pcm8": (["-e", "unsigned-integer", "-b", 8, "-t", "wavpcm"], 1 / 128, 1),
    "pcm16": (["-e", "signed-integer", "-b", 16, "-t", "wavpcm"], 0, 1),
    "pcm24": (["-e", "signed-integer", "-b", 24, "-t", "wavpcm"], 0, 1),
    "pcm32": (["-e", "signed-integer", "-b", 32, "-t", "wavpcm"], 0, 1),
    "float32": (["-e", "floating-point", "-b", 32, "-t", "wavpcm"], 0, 3),
    "float64": (["-e", "floating-point", "-b", 64, "-t", "wavpcm"], 0, 3),
    "ext_pcm24": (["-e", "signed-integer", "-b", 24, "-t", "wav"], 0, 0xFFFE),
}


@needs_sox
@pytest.mark.parametrize("fmt", FORMATS)
def test_read_wav_formats(source_wav, tmp_path, fmt):
    src, ref = source_wav
    opts, tol, tag = FORMATS[fmt]
    out = tmp_path / f"{fmt}.wav"
    _sox(src, "-D", *opts, out)  # -D: no dither, so wider formats hold the samples exactly
    assert int.from_bytes(out.read_bytes()[20:22], "little") == tag  # the variant we meant
    x, sr = read_wav(out, mono=False)
    assert sr == 22050 and x.shape == ref.shape and x.dtype == np.float32
    np.testing.assert_allclose(x, ref, atol=tol + 1e-7, rtol=0)
    mono, _ = read_wav(out.read_bytes())  # bytes in, channels averaged
    np.testing.assert_allclose(mono, ref.mean(axis=1), atol=tol + 1e-7, rtol=0)


@needs_sox
@pytest.mark.parametrize("channels", [1, 2])
def test_read_wav_mono_and_stereo(source_wav, tmp_path, channels):
    src, ref = source_wav
    out = tmp_path / "remix.wav"
    _sox(src, "-D", out, "remix", *range(1, channels + 1))  # keep the first `channels` channels
    x, sr = read_wav(out)
    assert sr == 22050
    np.testing.assert_allclose(x, ref[:, :channels].mean(axis=1), atol=1e-7, rtol=0)


def test_load_audio_averages_and_resamples(source_wav):
    src, ref = source_wav
    y = audio.load_audio(src)
    assert y.shape == (-(-len(ref) * 16000 // 22050),) and y.dtype == np.float32
    np.testing.assert_allclose(y, resample(ref.mean(axis=1), 22050, 16000), atol=1e-6, rtol=0)


def _riff(*chunks):
    body = b"WAVE" + b"".join(cid + len(data).to_bytes(4, "little") + data + b"\0" * (len(data) & 1)
                              for cid, data in chunks)
    return b"RIFF" + len(body).to_bytes(4, "little") + body


def _fmt(tag=1, channels=1, rate=16000, bits=16):
    block = channels * bits // 8
    return (tag.to_bytes(2, "little") + channels.to_bytes(2, "little") + rate.to_bytes(4, "little")
            + (rate * block).to_bytes(4, "little") + block.to_bytes(2, "little")
            + bits.to_bytes(2, "little"))


def test_read_wav_extensible_float(source_wav):
    # sox writes float WAVs with the plain tag, so this extensible one is assembled here:
    # cbSize 22, 32 valid bits, channel mask, KSDATAFORMAT_SUBTYPE_IEEE_FLOAT.
    _, ref = source_wav
    guid = bytes.fromhex("03000000000010008000" "00aa00389b71")
    ext = (_fmt(tag=0xFFFE, channels=3, rate=22050, bits=32) + (22).to_bytes(2, "little")
           + (32).to_bytes(2, "little") + (7).to_bytes(4, "little") + guid)
    x, sr = read_wav(_riff((b"fmt ", ext), (b"data", ref.astype("<f4").tobytes())), mono=False)
    assert sr == 22050
    np.testing.assert_array_equal(x, ref.astype(np.float32))


def test_read_wav_skips_other_chunks_and_streaming_size():
    pcm = np.array([0, 16384, -32768, 32767], "<i2")
    data = _riff((b"fmt ", _fmt()), (b"LIST", b"odd"), (b"data", pcm.tobytes()))
    x, sr = read_wav(data)
    np.testing.assert_array_equal(x, pcm / 32768.0)
    streamed = bytearray(data)  # a writer that could not seek back puts 0xFFFFFFFF as data size
    i = streamed.index(b"data") + 4
    streamed[i:i + 4] = b"\xff\xff\xff\xff"
    np.testing.assert_array_equal(read_wav(bytes(streamed))[0], pcm / 32768.0)


@pytest.mark.parametrize("case, message", [
    ("not_riff", "not a RIFF/WAVE file"),
    ("truncated", "truncated: data chunk declares 8 bytes, only 5 present"),
    ("partial_frame", "not a whole number of 4-byte frames"),
    ("no_fmt", "data chunk comes before the fmt chunk"),
    ("no_data", "no data chunk"),
    ("mulaw", "format tag 0x0007 is not supported"),
    ("bits12", "bits per sample 12 is not a whole number of bytes"),
    ("block_align", "block align"),
    ("nan", "NaN"),
])
def test_read_wav_errors_name_the_file(tmp_path, case, message):
    pcm = np.zeros(4, "<i2").tobytes()
    files = {
        "not_riff": b"ID3\x03" + b"\0" * 40,
        "truncated": _riff((b"fmt ", _fmt()), (b"data", pcm))[:-3],
        "partial_frame": _riff((b"fmt ", _fmt(channels=2)), (b"data", pcm[:6])),
        "no_fmt": _riff((b"data", pcm), (b"fmt ", _fmt())),
        "no_data": _riff((b"fmt ", _fmt())),
        "mulaw": _riff((b"fmt ", _fmt(tag=7, bits=8)), (b"data", pcm)),
        "bits12": _riff((b"fmt ", _fmt(bits=12)[:-2] + (12).to_bytes(2, "little")), (b"data", pcm)),
        "block_align": _riff((b"fmt ", _fmt()[:12] + (3).to_bytes(2, "little") + _fmt()[14:]),
                             (b"data", pcm)),
        "nan": _riff((b"fmt ", _fmt(tag=3, bits=32)), (b"data", np.array([0, np.nan], "<f4").tobytes())),
    }
    path = tmp_path / f"{case}.wav"
    path.write_bytes(files[case])
    with pytest.raises(WavError) as e:
        read_wav(path)
    assert str(e.value).startswith(f"ember: {path}:") and message in str(e.value)


# ---------------------------------------------------------------------------------------------
# Resampler
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sr", [8000, 22050, 44100, 48000])
def test_resample_matches_scipy_resample_poly(sr):
    signal = pytest.importorskip("scipy.signal")
    from math import gcd
    x = np.random.default_rng(sr).standard_normal(sr // 2)
    g = gcd(sr, 16000)
    ref = signal.resample_poly(x, 16000 // g, sr // g)
    y = resample(x, sr, 16000)
    assert y.shape == ref.shape and y.dtype == np.float32
    assert np.abs(y - ref).max() < 1e-6  # float32 rounding of the same filter


@pytest.mark.parametrize("n", [0, 1, 7, 441])
def test_resample_short_signals_match_scipy(n):
    signal = pytest.importorskip("scipy.signal")
    x = np.random.default_rng(n).standard_normal(n)
    y = resample(x, 22050, 16000)
    ref = signal.resample_poly(x, 320, 441) if n else np.zeros(0)
    assert y.shape == ref.shape and np.abs(y - ref).max(initial=0) < 1e-6


def test_resample_keeps_tones_and_rejects_aliases():
    t = np.arange(48000) / 48000
    y = resample(np.sin(2 * np.pi * 1000 * t), 48000, 16000)  # in band: kept
    t16 = np.arange(len(y)) / 16000
    mid = slice(1000, -1000)  # away from the zero-padded ends
    assert np.abs(y[mid] - np.sin(2 * np.pi * 1000 * t16)[mid]).max() < 1e-3
    alias = resample(np.sin(2 * np.pi * 12000 * t), 48000, 16000)  # would fold to 4 kHz
    assert np.sqrt(np.mean(alias[mid] ** 2)) < 10 ** (-50 / 20) * np.sqrt(0.5)  # below -50 dB


@needs_espeak
def test_resample_agrees_with_sox_in_band(speech):
    raw, clip = speech[0]
    x, sr = read_wav(raw)
    assert sr == 22050
    ours, theirs = resample(x, sr, 16000), read_wav(clip)[0]
    assert ours.shape == theirs.shape
    # The two designs differ only in their transition band near 8 kHz; below 6 kHz they agree.
    f = np.fft.rfftfreq(len(ours), 1 / 16000)
    d, s = np.fft.rfft(ours - theirs)[f < 6000], np.fft.rfft(theirs)[f < 6000]
    assert np.sqrt(np.sum(np.abs(d) ** 2) / np.sum(np.abs(s) ** 2)) < 5e-3


def test_resample_rejects_bad_input():
    with pytest.raises(ValueError, match="ember: resample expects a 1-D signal"):
        resample(np.zeros((2, 10)), 8000, 16000)
    with pytest.raises(ValueError, match="positive integers"):
        resample(np.zeros(10), 0, 16000)


# ---------------------------------------------------------------------------------------------
# Mel filterbank and log-mel spectrogram
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_filters_match_librosa_and_transformers(n_mels):
    ours = audio.mel_filters(n_mels)
    assert ours.shape == (n_mels, 201) and ours.dtype == np.float32
    from transformers.audio_utils import mel_filter_bank
    hf = mel_filter_bank(num_frequency_bins=201, num_mel_filters=n_mels, min_frequency=0.0,
                         max_frequency=8000.0, sampling_rate=16000, norm="slaney",
                         mel_scale="slaney")  # (201, n_mels)
    np.testing.assert_allclose(ours, hf.T, atol=1e-8, rtol=0)  # max weight ~0.03-0.04
    librosa = pytest.importorskip("librosa")
    np.testing.assert_allclose(ours, librosa.filters.mel(sr=16000, n_fft=400, n_mels=n_mels),
                               atol=1e-8, rtol=0)


@needs_espeak
@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_matches_transformers(speech, n_mels):
    from transformers import WhisperFeatureExtractor
    fe = WhisperFeatureExtractor(feature_size=n_mels)
    for _, clip in speech:
        x = audio.load_audio(clip)
        ours = audio.log_mel_spectrogram(x, n_mels)
        ref = fe(x, sampling_rate=16000, return_tensors="np").input_features[0]
        assert ours.shape == ref.shape == (n_mels, audio.N_FRAMES)
        # transformers computes in float32 (torch path when torch is present); we use float64.
        assert np.abs(ours - ref).max() < 1e-4


def _faster_whisper_extractor():
    """faster-whisper's FeatureExtractor, loaded from its wheel (a numpy-only file), so the
    heavy package (CTranslate2, PyAV) need not be installed."""
    from ember import hub
    try:
        target = hub.fetch_pypi_member("faster-whisper", "1.2.1", "faster_whisper/feature_extractor.py")
    except hub.HubError:
        pytest.skip("faster-whisper wheel not downloadable")
    spec = importlib.util.spec_from_file_location("fw_feature_extractor", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FeatureExtractor


@needs_espeak
def test_log_mel_unpadded_matches_faster_whisper(speech):
    extractor = _faster_whisper_extractor()(feature_size=80)
    x = audio.load_audio(speech[1][1])
    ours = audio.log_mel_spectrogram(x, 80, pad_to_30s=False)
    ref = extractor(x)
    assert ours.shape == ref.shape == (80, len(x) // audio.HOP_LENGTH + 1)
    assert np.abs(ours - ref).max() < 1e-4  # faster-whisper computes in float32
    assert audio.pad_or_trim(ours, audio.N_FRAMES).shape == (80, audio.N_FRAMES)
    # the two variants really differ: the 30 s padding moves the max - 8 floor and frame count
    padded = audio.log_mel_spectrogram(x, 80)
    assert padded.shape[1] != ours.shape[1]


def test_log_mel_rejects_bad_audio():
    with pytest.raises(ValueError, match="ember: log_mel_spectrogram expects mono"):
        audio.log_mel_spectrogram(np.zeros((2, 16000)))
    with pytest.raises(ValueError, match="NaN"):
        audio.log_mel_spectrogram(np.full(16000, np.nan))
    with pytest.raises(ValueError, match="empty"):
        audio.log_mel_spectrogram(np.zeros(0), pad_to_30s=False)


def test_pad_or_trim():
    x = np.arange(10.0)
    assert audio.pad_or_trim(x, 4).tolist() == [0, 1, 2, 3]
    assert audio.pad_or_trim(x, 12).tolist() == list(range(10)) + [0, 0]
    m = np.ones((80, 5))
    assert audio.pad_or_trim(m, 3000).shape == (80, 3000)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_product_is_the_dense_product_summed_in_bin_order(n_mels):
    """The filters' product over their bands gives the bits of the dense (n_mels, n_bins) @ (n_bins, frames)
    product summed bin after bin (numpy's own loop, the page's: it has no BLAS), so page and desktop features
    agree bit for bit; and BLAS's sums to rounding."""
    rng = np.random.default_rng(n_mels)
    power = audio._power_spectrogram((rng.standard_normal(16000 * 3) * 0.1).astype(np.float32))
    w = audio.mel_filters(n_mels).astype(np.float64)
    want = np.zeros((n_mels, power.shape[1]))
    for b in range(power.shape[0]):
        want = want + w[:, b:b + 1] * power[b]
    got = audio._mel_power(n_mels, power)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, w @ power, rtol=1e-14, atol=0)
