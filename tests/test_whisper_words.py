"""Word-level timestamps vs openai-whisper (the reference implementation, pip `openai-whisper`), computed here:

- its median_filter and dtw_cpu on random matrices (exact);
- its add_word_timestamps on the same window, the same segments (ember's transcription of espeak-ng clips) and its
  own model built from the same tiny.en weights: same words, median |start/end difference| <= 20 ms, max <= 100 ms;
- SRT/VTT writers and the CLI's --word-timestamps --json.
"""
import copy
import json

import numpy as np
import pytest

from ember.models.whisper import audio, timing
from ember.models.whisper.load import load_whisper
from ember.models.whisper.transcribe import transcribe

torch = pytest.importorskip("torch")
whisper = pytest.importorskip("whisper")  # openai-whisper
import whisper.timing as oai_timing  # noqa: E402

from test_whisper_model import speech_clip, tiny_en  # noqa: E402

CLIPS = ["The quick brown fox jumps over the lazy dog. Then it runs away into the forest, and nobody sees it again.",
         "Hello, my name is Alice! I live in a small house near the river, and every morning I walk to the station.",
         "Wait... what? \"Seven\" apples, (maybe eight); that's all we have left, isn't it?"]
GREEDY = dict(temperature=0.0, compression_ratio_threshold=None, logprob_threshold=None, no_speech_threshold=None)


def test_median_filter_and_dtw_match_openai():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 9, 40)).astype(np.float32)
    for width in (1, 3, 7):
        want = oai_timing.median_filter(torch.from_numpy(x), width).numpy()
        np.testing.assert_array_equal(timing.median_filter(x, width), want)
    for shape in ((1, 1), (5, 30), (12, 7), (20, 160)):
        m = rng.standard_normal(shape).astype(np.float32)
        m[rng.random(shape) < 0.2] = 0.5  # ties: the left step wins in both
        got, want = timing.dtw(m), oai_timing.dtw_cpu(m)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    with pytest.raises(ValueError, match="odd"):
        timing.median_filter(x, 4)


def openai_model(folder, model):
    """openai-whisper's Whisper holding the same weights (HF names -> openai names), tiny.en's alignment heads."""
    from whisper.model import ModelDimensions, Whisper
    d = model.dims
    dims = ModelDimensions(n_mels=d.n_mels, n_audio_ctx=d.n_audio_ctx, n_audio_state=d.n_audio_state,
                           n_audio_head=d.n_audio_head, n_audio_layer=d.n_audio_layer, n_vocab=d.n_vocab,
                           n_text_ctx=d.n_text_ctx, n_text_state=d.n_text_state, n_text_head=d.n_text_head,
                           n_text_layer=d.n_text_layer)
    ref = Whisper(dims)
    names = [("encoder.embed_positions.weight", "encoder.positional_embedding"),
             ("decoder.embed_positions.weight", "decoder.positional_embedding"),
             ("decoder.embed_tokens", "decoder.token_embedding"), ("encoder.layer_norm", "encoder.ln_post"),
             ("decoder.layer_norm", "decoder.ln"), ("layers.", "blocks."), ("encoder_attn_layer_norm", "cross_attn_ln"),
             ("self_attn_layer_norm", "attn_ln"), ("final_layer_norm", "mlp_ln"), ("encoder_attn.", "cross_attn."),
             ("self_attn.", "attn."), ("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"),
             ("out_proj", "out"), ("fc1", "mlp.0"), ("fc2", "mlp.2")]
    state = {}
    for k, v in model.state_dict().items():
        for a, b in names:
            k = k.replace(a, b)
        state[k] = torch.from_numpy(np.array(v.float().numpy()))
    ref.load_state_dict(state, strict=True)
    ref.set_alignment_heads(whisper._ALIGNMENT_HEADS["tiny.en"])
    return ref.eval()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tiny_en()
    model, cfg, tok = load_whisper(folder)
    return folder, model, tok, tmp_path_factory.mktemp("words")


def test_alignment_heads_table():
    from ember.models.whisper.config import WhisperConfig
    cfg = WhisperConfig.from_folder(tiny_en())
    assert timing.alignment_heads(cfg) == tuple(map(tuple, np.argwhere(
        np.frombuffer(__import__("gzip").decompress(__import__("base64").b85decode(whisper._ALIGNMENT_HEADS["tiny.en"])),
                      bool).reshape(4, 6)).tolist()))


@pytest.mark.slow
@pytest.mark.parametrize("k", range(len(CLIPS)))
def test_word_timestamps_match_openai(tiny, k):
    folder, model, tok, tmp = tiny
    clip = speech_clip(tmp, CLIPS[k], f"w{k}")
    samples = audio.load_audio(clip)
    got = transcribe(model, tok, clip, timestamps=k != 1, word_timestamps=True, **GREEDY)
    # the reference: openai's add_word_timestamps on ember's segments, before ember's word pass changed them
    plain = transcribe(model, tok, clip, timestamps=k != 1, **GREEDY)
    assert [s["tokens"] for s in plain["segments"]] == [s["tokens"] for s in got["segments"]]
    ref_model = openai_model(folder, model)
    oai_tok = whisper.tokenizer.get_tokenizer(multilingual=False)
    segs = copy.deepcopy(plain["segments"])
    mel = torch.from_numpy(audio.log_mel_spectrogram(samples))  # the window both decode
    oai_timing.add_word_timestamps(segments=segs, model=ref_model, tokenizer=oai_tok, mel=mel,
                                   num_frames=samples.size // audio.HOP_LENGTH, last_speech_timestamp=0.0)
    gw = [w for s in got["segments"] for w in s["words"]]
    rw = [w for s in segs for w in s["words"]]
    assert [w["word"] for w in gw] == [w["word"] for w in rw]
    diffs = np.abs([[a["start"] - b["start"], a["end"] - b["end"]] for a, b in zip(gw, rw)]).ravel()
    print(f"\nclip {k}: {len(gw)} words, |start/end - openai's| mean {diffs.mean() * 1e3:.1f} ms, median "
          f"{np.median(diffs) * 1e3:.1f} ms, max {diffs.max() * 1e3:.1f} ms")
    assert np.median(diffs) <= 0.02 and diffs.max() <= 0.1, diffs
    for a, b in zip(got["segments"], segs):  # segment bounds follow their words as openai moves them
        assert abs(a["start"] - b["start"]) <= 0.1 and abs(a["end"] - b["end"]) <= 0.1
    np.testing.assert_allclose([w["probability"] for w in gw], [w["probability"] for w in rw], atol=2e-3)
    starts = [w["start"] for w in gw]
    assert starts == sorted(starts) and all(w["end"] >= w["start"] for w in gw)


def test_subtitles_word_level(tmp_path):
    from ember.models.whisper.subtitles import srt, vtt
    result = {"segments": [{"start": 0.0, "end": 1.5, "text": " Hello there.",
                            "words": [{"word": " Hello", "start": 0.0, "end": 0.6},
                                      {"word": " there.", "start": 0.6, "end": 1.5}]},
                           {"start": 3661.25, "end": 3662.0, "text": " Bye -->",
                            "words": [{"word": " Bye", "start": 3661.25, "end": 3661.5},
                                      {"word": " -->", "start": 3661.5, "end": 3662.0}]}]}
    s = srt(result)
    assert s.startswith("1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n01:01:01,250 --> 01:01:02,000\n")
    assert "Bye --&gt;" not in s and "Bye ->" in s  # a cue's text never holds the arrow that separates the times
    w = srt(result, words=True).split("\n\n")
    assert w[0] == "1\n00:00:00,000 --> 00:00:00,600\n<u>Hello</u> there."
    assert w[1] == "2\n00:00:00,600 --> 00:00:01,500\nHello <u>there.</u>"
    v = vtt(result, words=True)
    assert v.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:00.600\n<u>Hello</u> there.\n\n")
    assert "01:01:01.250 --> 01:01:01.500" in v


@pytest.mark.slow
def test_cli_word_timestamps_json(tiny, capsys):
    from ember.cli import main
    folder, model, tok, tmp = tiny
    clip = speech_clip(tmp, CLIPS[1], "cli")
    assert main(["whisper", str(clip), "--model", str(folder), "--word-timestamps", "--json", "--no-fallback"]) == 0
    out = json.loads(capsys.readouterr().out)
    words = [w for s in out["segments"] for w in s["words"]]
    assert [w["word"].strip(" ,.!") for w in words][:4] == ["Hello", "my", "name", "is"]
    assert set(words[0]) == {"word", "start", "end", "probability"}
    assert main(["whisper", str(clip), "--model", str(folder), "--word-timestamps", "--format", "vtt"]) == 0
    vtt_text = capsys.readouterr().out
    assert vtt_text.startswith("WEBVTT") and "<u>" in vtt_text
