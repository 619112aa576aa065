"""Voice activity (Silero VAD through ember.onnx) vs references computed here:

- speech probabilities and regions vs faster-whisper's vad.py (onnxruntime) on the same ONNX file;
- a clip padded with 20 s of silence and noise-only stretches transcribes to the same words as the clip alone,
  its times shifted by the padding (within 0.1 s);
- a long file is cut only at silences, and its words are heard;
- the streaming VAD equals the whole-signal one; hostile input gets ember errors.
"""
import numpy as np
import pytest

from ember.models.whisper import audio, vad
from ember.models.whisper.load import load_whisper
from ember.models.whisper.transcribe import transcribe

from test_whisper_model import speech_clip, tiny_en  # noqa: E402

SR = 16000
GREEDY = dict(temperature=0.0, compression_ratio_threshold=None, logprob_threshold=None, no_speech_threshold=None)


def _fw():
    return pytest.importorskip("faster_whisper.vad")


@pytest.fixture(scope="module")
def detector():
    return vad.SileroVAD()


def _noise(seconds, level, seed):
    return (np.random.default_rng(seed).standard_normal(int(seconds * SR)) * level).astype(np.float32)


def _silence(seconds):
    return np.zeros(int(seconds * SR), np.float32)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vad")
    path = speech_clip(tmp, "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background.", "v")
    return audio.load_audio(path)


def test_regions_match_faster_whisper(detector, clip, monkeypatch):
    fv = _fw()
    monkeypatch.setattr(fv, "get_vad_model", lambda: fv.SileroVADModel(str(vad.model_path())))
    sig = np.concatenate([_silence(3), clip, _noise(2.5, 0.01, 1), _silence(2.2), clip[:SR * 2], _silence(0.5),
                          clip, _silence(1)])
    ref_probs = fv.get_vad_model()(np.pad(sig, (0, 512 - sig.size % 512)))
    probs = detector.probs(sig)
    np.testing.assert_allclose(probs, np.asarray(ref_probs).reshape(-1), atol=1e-4)
    print(f"\nVAD: {probs.size} frames, |p - faster-whisper's| max {np.abs(probs - np.ravel(ref_probs)).max():.2e}")
    for kw, ours in (({}, {}), ({"max_speech_duration_s": 3, "min_silence_duration_ms": 500, "speech_pad_ms": 200},
                                {"max_speech_s": 3, "min_silence_ms": 500, "speech_pad_ms": 200})):
        want = fv.get_speech_timestamps(sig, fv.VadOptions(**kw))
        got = vad.speech_regions(probs, sig.size, vad.VadOptions(**ours))
        assert got == want
    # the streaming detector (frames as they come, state kept) gives the whole-signal probabilities
    live = detector.fork()  # its own LSTM state on the same model
    n = sig.size // 512 * 512
    parts = [live.stream(sig[a:min(a + 512 * 7, n)]) for a in range(0, n, 512 * 7)]
    np.testing.assert_allclose(np.concatenate(parts), probs[:n // 512], atol=1e-5)


def test_hostile_input(detector):
    for bad, what in ((np.array([0.1, np.nan] * 600, np.float32), "NaN"), (np.zeros((2, 512), np.float32), "mono"),
                      (np.zeros(0, np.float32), "no samples")):
        with pytest.raises(vad.VadError, match=what):
            detector.probs(bad)
    with pytest.raises(vad.VadError, match="whole 512"):
        detector.stream(np.zeros(700, np.float32))
    assert vad.speech_regions(detector.probs(_silence(3)), 3 * SR) == []


@pytest.fixture(scope="module")
def tiny():
    model, _, tok = load_whisper(tiny_en())
    return model, tok


@pytest.mark.slow
def test_padding_and_noise_are_skipped(tiny, clip):
    """The padded file's one speech region covers the whole clip; transcribing it with VAD gives the text and
    words of that region transcribed alone, every time shifted by where the region starts in the file. (The
    region's edges fall a frame apart from a VAD run on the clip alone, whose LSTM saw no 20 s before it, and
    tiny.en flips a near-tie word on espeak audio for such a shift, so the region itself is the like-for-like
    clean clip.)"""
    model, tok = tiny
    lead = 20 + 1.5 + 1  # seconds before the clip: 20 s silence, 1.5 s noise, 1 s silence
    padded = np.concatenate([_silence(20), _noise(1.5, 0.003, 2), _silence(1), clip, _noise(2, 0.003, 3), _silence(4)])
    b = transcribe(model, tok, padded, timestamps=True, word_timestamps=True, vad=True, **GREEDY)
    assert len(b["speech"]) == 1  # the noise-only stretches are not speech
    start, end = b["speech"][0]["start"], b["speech"][0]["end"]
    voiced = np.flatnonzero(np.abs(clip) > 1e-3)
    assert start <= lead + voiced[0] / SR and end >= lead + voiced[-1] / SR  # no speech cut off
    assert start >= lead - 1 and end <= lead + clip.size / SR + 1  # and little beyond it
    region = padded[int(round(start * SR)):int(round(end * SR))]
    a = transcribe(model, tok, region, timestamps=True, word_timestamps=True, **GREEDY)
    assert a["text"] == b["text"] and len(a["text"].split()) > 8
    for sa, sb in zip(a["segments"], b["segments"]):
        assert abs(sb["start"] - sa["start"] - start) <= 0.1 and abs(sb["end"] - sa["end"] - start) <= 0.1
    wa = [w for s in a["segments"] for w in s["words"]]
    wb = [w for s in b["segments"] for w in s["words"]]
    assert [w["word"] for w in wa] == [w["word"] for w in wb]
    assert max(max(abs(y["start"] - x["start"] - start), abs(y["end"] - x["end"] - start)) for x, y in zip(wa, wb)) <= 0.1
    assert wb[0]["start"] >= start - 0.05 and wb[-1]["end"] <= end + 0.05  # words inside the speech region


@pytest.mark.slow
def test_long_file_is_cut_only_at_silences(tiny, clip, detector):
    model, tok = tiny
    rng = np.random.default_rng(5)
    parts, silent = [], []
    pos = 0
    for k in range(9):  # ~9 x (5.5 s speech + 0.6..1.6 s pause) > 60 s
        gap = _silence(rng.uniform(0.6, 1.6))
        parts += [clip, gap]
        pos += clip.size
        silent.append((pos, pos + gap.size))
        pos += gap.size
    sig = np.concatenate(parts)
    got = transcribe(model, tok, sig, timestamps=True, vad=detector, **GREEDY)
    cuts = [p["end"] for p in got["pieces"][:-1]]
    assert len(got["pieces"]) >= 2
    for c in cuts:  # every cut between two pieces falls inside a pause
        c = int(round(c * SR))
        assert any(a <= c <= b for a, b in silent), (c, silent)
    assert all(p["end"] - p["start"] <= 30.0 for p in got["pieces"])
    heard = got["text"].lower()
    assert heard.count("canoe") + heard.count("planks") >= 9
    starts = [s["start"] for s in got["segments"]]
    assert starts == sorted(starts) and got["segments"][-1]["end"] <= sig.size / SR + 0.05
