"""Long audio in bounded memory: the long-form log-mel computed window by window (audio.LongFormMel) equals
the whole-file log_mel_spectrogram (itself checked against transformers' extractor in test_whisper_audio and
test_whisper_decode) bit for bit, transcribe() on it gives the tokens of the whole-file features, and an hour
of audio is read and featurised with a peak far below the whole-file intermediates (which overflow wasm32 in
the page: "array is too big")."""
import io
import tracemalloc
import wave

import numpy as np
import pytest

from ember.models.whisper import audio
from ember.models.whisper.wav import read_wav

HOUR = 3600 * audio.SAMPLE_RATE


def _signal(n, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / audio.SAMPLE_RATE
    x = 0.3 * np.sin(2 * np.pi * 440 * t) * (t % 7 < 3) + 0.05 * rng.standard_normal(n)
    x[: audio.SAMPLE_RATE] *= 1e-4  # a quiet start: the max - 8 floor matters
    return x.astype(np.float32)


def test_windowed_mel_equals_the_whole_file_mel():
    x = _signal(75 * audio.SAMPLE_RATE + 123)  # 7500 frames and a remainder: blocks, edges, reflection
    whole = audio.log_mel_spectrogram(x, 80, pad_to_30s=False, extra_hop=False)
    lazy = audio.LongFormMel(x, 80)
    assert lazy.shape == whole.shape
    for a, b in [(0, 3000), (0, whole.shape[1]), (1234, 4234), (2999, 3001), (whole.shape[1] - 10, whole.shape[1] + 50)]:
        np.testing.assert_array_equal(lazy[:, a:b], whole[:, a:b], err_msg=f"frames {a}:{b}")
    with pytest.raises(ValueError, match="NaN or infinite"):
        audio.LongFormMel(np.concatenate([x, [np.nan]]).astype(np.float32))


def test_an_hour_is_featurised_and_read_in_bounded_memory():
    x = np.zeros(HOUR, np.float32)
    x[::997] = 0.5  # not silent: every block has a maximum of its own
    tracemalloc.start()
    try:
        mel = audio.LongFormMel(x, 80)
        window = mel[:, 180_000:183_000]  # the window at 30 minutes
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert mel.shape == (80, HOUR // audio.HOP_LENGTH) and window.shape == (80, 3000)
    # the whole-file path holds a (360000, 201) complex STFT: 1.2 GB; one 3000-frame block is ~30 MB
    assert peak < 64e6, f"peak {peak / 1e6:.0f} MB while featurising an hour"
    print(f"LongFormMel over 1 h: peak {peak / 1e6:.1f} MB beyond the {x.nbytes / 1e6:.0f} MB of samples")

    pcm = (x * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(audio.SAMPLE_RATE), w.writeframes(pcm.tobytes())
    data = buf.getvalue()
    del buf
    tracemalloc.start()
    try:
        got, rate = read_wav(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, pcm / np.float32(32768))  # int16 / 32768 is exact in float32
    assert rate == audio.SAMPLE_RATE
    # the result (230 MB) plus one block's float64 intermediates; whole-file ones would add 920 MB
    assert peak < got.nbytes + 64e6, f"read_wav peak {peak / 1e6:.0f} MB for {got.nbytes / 1e6:.0f} MB of samples"
    print(f"read_wav of 1 h: peak {(peak - got.nbytes) / 1e6:.1f} MB beyond the samples")


def test_long_transcript_equals_the_whole_file_features(tmp_path):
    """transcribe() (windowed features) gives the segments of the seek loop run on the whole-file log-mel."""
    from test_whisper_decode import GREEDY, LONG
    from test_whisper_model import speech_clip, tiny_en

    from ember.models.whisper.load import load_whisper
    from ember.models.whisper.transcribe import transcribe, transcribe_features
    model, _, tok = load_whisper(tiny_en())
    clip = speech_clip(tmp_path, LONG, "long")  # ~46 s
    samples = audio.load_audio(clip)
    assert samples.size > audio.N_SAMPLES  # two windows at least
    got = transcribe(model, tok, clip, timestamps=True, **GREEDY)
    whole = audio.log_mel_spectrogram(samples, 80, pad_to_30s=False, extra_hop=False)
    want = transcribe_features(model, tok, whole, samples.size / audio.SAMPLE_RATE, timestamps=True, **GREEDY)
    # the same segments: tokens, text and times exactly; the log-probabilities within float32 rounding (the same bits
    # on the AVX-512 hosts this was written on; 3e-8 apart on an AVX2-only host, OpenBLAS's Haswell kernels, not
    # traced further)
    assert len(got["segments"]) == len(want["segments"])
    for g, w in zip(got["segments"], want["segments"]):
        assert g.keys() == w.keys()
        for key in g:
            if key in ("avg_logprob", "no_speech_prob", "compression_ratio"):
                assert g[key] == pytest.approx(w[key], rel=1e-5, abs=1e-6), key
            else:
                assert g[key] == w[key], key
    assert got["segments"][-1]["end"] > 30 and "smooth planks" in got["text"].lower()
