"""Whisper model and loading: ember vs transformers' WhisperForConditionalGeneration.

Fast tests use a small random Whisper (d_model 64) saved by transformers itself, with tiny.en's
tokenizer; the slow ones load the real tiny.en (converted from CTranslate2) into both and compare
encoder output and decoder logits on espeak-ng speech. float32 compute on both sides (tiny.en's
float16 weights are upcast to float32 in both).
"""
import functools
import http.server
import json
import shutil
import subprocess
import threading

import numpy as np
import pytest

import ember
from ember.models.whisper import audio
from ember.models.whisper.config import WhisperConfig, WhisperConfigError
from ember.models.whisper.load import WhisperLoadError, load_state, load_whisper
from ember.models.whisper.model import Whisper, WhisperShapeError
from expected_skips import missing

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def tiny_en():
    from ember.models.whisper.fetch import WhisperFetchError, ensure_tiny_en
    try:
        return ensure_tiny_en()
    except WhisperFetchError as e:
        missing(f"tiny.en not available: {e}")


def make_random_folder(folder, max_length=24, seed=0):
    """A random 2+2-layer Whisper in HF layout (save_pretrained) with tiny.en's vocabulary,
    tokenizer and generation settings (max_length cut so random text ends soon)."""
    src = tiny_en()
    torch.manual_seed(seed)
    cfg = transformers.WhisperConfig(vocab_size=51864, num_mel_bins=80, d_model=64, encoder_layers=2,
                                     decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                                     encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=1500,
                                     max_target_positions=448, decoder_start_token_id=50257,
                                     bos_token_id=50257, eos_token_id=50256, pad_token_id=50256)
    model = transformers.WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # random weights big enough that the logits are far from ties
        for p in model.parameters():
            p.mul_(4.0)
    model.save_pretrained(folder, safe_serialization=True)
    gen = json.loads((src / "generation_config.json").read_text())
    gen["max_length"] = max_length
    (folder / "generation_config.json").write_text(json.dumps(gen))
    shutil.copyfile(src / "tokenizer.json", folder / "tokenizer.json")
    return folder


@pytest.fixture(scope="module")
def random_folder(tmp_path_factory):
    return make_random_folder(tmp_path_factory.mktemp("whisper-random"))


def hf_model(folder):
    return transformers.WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()


def test_random_model_matches_transformers(random_folder, device):
    model, cfg, _ = load_whisper(random_folder, device=device)
    ref = hf_model(random_folder)
    rng = np.random.default_rng(1)
    mel = rng.standard_normal((2, 80, 3000)).astype(np.float32)
    tokens = np.array([[50257, 50362, 440, 2068, 7586], [50257, 50362, 13, 11, 1849]])
    with torch.no_grad():
        enc_ref = ref.model.encoder(torch.from_numpy(mel)).last_hidden_state.numpy()
        logits_ref = ref(input_features=torch.from_numpy(mel), decoder_input_ids=torch.from_numpy(tokens)).logits.numpy()
    with ember.no_grad():
        enc = model.encoder(ember.tensor(mel, device=device))
        logits = model.decoder.logits(model.decoder(ember.tensor(tokens, device=device),
                                                    model.decoder.cross_kv(enc))[0])
    np.testing.assert_allclose(enc.numpy(), enc_ref, atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(logits.numpy(), logits_ref, atol=2e-3, rtol=1e-4)


def test_kv_cache_steps_equal_the_full_forward(random_folder, device):
    model, _, _ = load_whisper(random_folder, device=device)
    rng = np.random.default_rng(2)
    mel = ember.tensor(rng.standard_normal((1, 80, 3000)).astype(np.float32), device=device)
    tokens = [50257, 50362, 440, 2068, 7586, 21831, 13]
    with ember.no_grad():
        cross = model.decoder.cross_kv(model.encoder(mel))
        full, _ = model.decoder(ember.tensor([tokens], device=device), cross)  # (1, 7, d)
        h, cache = model.decoder(ember.tensor([tokens[:3]], device=device), cross)  # prompt of 3
        steps = [h]
        for t in tokens[3:]:
            h, cache = model.decoder(ember.tensor([[t]], device=device), cross, cache)
            steps.append(h)
        assert cache.pos == 7 and cache.k[0].shape[:2] == (1, 4) and cache.k[0].shape[3] == 16  # (batch, heads, capacity, head_dim)
        # two new tokens over a cache of five (rewound): the causal mask must be offset by the cache
        cache.pos = 5
        h2, _ = model.decoder(ember.tensor([tokens[5:]], device=device), cross, cache)
    np.testing.assert_allclose(ember.cat(steps, 1).numpy(), full.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(h2.numpy(), full.numpy()[:, 5:], atol=1e-5, rtol=1e-5)


def test_bad_shapes_and_configs_are_named(random_folder):
    model, _, _ = load_whisper(random_folder)
    with pytest.raises(WhisperShapeError, match=r"\(batch, 80, 3000\), got \(1, 80, 2999\)"):
        model.encoder(ember.zeros(1, 80, 2999))
    cache = model.decoder.new_cache()
    cache.pos = 447
    with pytest.raises(WhisperShapeError, match="448 positions; got 447 cached \\+ 2 new"):
        model.decoder(ember.tensor([[1, 2]]), None, cache)
    cfg = json.loads((random_folder / "config.json").read_text())
    with pytest.raises(WhisperConfigError, match="d_model 64 is not divisible by encoder_attention_heads 5"):
        WhisperConfig.from_dicts({**cfg, "encoder_attention_heads": 5}, None, {"<|endoftext|>": 1,
                                 "<|startoftranscript|>": 2, "<|notimestamps|>": 3})
    with pytest.raises(WhisperConfigError, match="special token <|notimestamps|>"):
        WhisperConfig.from_dicts(cfg, None, {"<|endoftext|>": 1, "<|startoftranscript|>": 2})


def test_missing_and_misshaped_tensors_are_named(random_folder, tmp_path):
    from safetensors.numpy import load_file, save_file
    state = load_file(random_folder / "model.safetensors")
    folder = tmp_path / "broken"
    shutil.copytree(random_folder, folder)
    dropped = dict(state)
    del dropped["model.decoder.layers.1.encoder_attn.v_proj.weight"]
    save_file(dropped, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(WhisperLoadError, match=r"model.safetensors: .*missing tensor "
                                               r"model.decoder.layers.1.encoder_attn.v_proj.weight"):
        load_whisper(folder)
    bad = dict(state)
    bad["model.encoder.conv1.weight"] = np.zeros((64, 80, 2), np.float32)
    save_file(bad, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(WhisperLoadError, match=r"model.encoder.conv1.weight \(64, 80, 2\) \(model wants \(64, 80, 3\)\)"):
        load_whisper(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(WhisperLoadError, match="has none of model.safetensors, model.gguf"):
        load_whisper(folder)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(WhisperLoadError, match="cannot read weights"):
        load_whisper(folder)
    with pytest.raises(WhisperLoadError, match="neither a folder, an http"):
        load_whisper(str(tmp_path / "nowhere" / "x" / "y"))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def http_root(tmp_path_factory, random_folder):
    """127.0.0.1 server: /models/tiny (a folder URL) and /org/whisper-rnd/resolve/main (hub layout)."""
    root = tmp_path_factory.mktemp("http")
    for sub in ("models/tiny", "org/whisper-rnd/resolve/main"):
        shutil.copytree(random_folder, root / sub)
    (root / "models/tiny/generation_config.json").unlink()  # optional file: a 404 is fine
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_load_by_url_and_hub_id_with_progress(http_root, random_folder, tmp_path, monkeypatch):
    seen = []
    model, cfg, _ = load_whisper(f"{http_root}/models/tiny", cache=tmp_path / "c1",
                                 progress=lambda f, d, t: seen.append((f, d, t)))
    size = (random_folder / "model.safetensors").stat().st_size
    assert ("model.safetensors", size, size) in seen and seen[0][1] == 0
    assert not list((tmp_path / "c1").rglob("generation_config.json"))  # 404: skipped
    assert list((tmp_path / "c1").rglob("*.part")) == []
    monkeypatch.setenv("HF_ENDPOINT", http_root)
    model2, cfg2, _ = load_whisper("org/whisper-rnd", cache=tmp_path / "c2")
    cached = sorted(p.name for p in (tmp_path / "c2").rglob("*.json"))
    assert cached == ["config.json", "generation_config.json", "tokenizer.json"]
    assert cfg2.suppress_tokens and not cfg.suppress_tokens  # generation_config only on the hub copy
    ref = ember.load(random_folder / "model.safetensors")["model.encoder.conv1.weight"].numpy()
    for m in (model, model2):
        np.testing.assert_array_equal(m.encoder.conv1.weight.numpy(), ref)
    with pytest.raises(WhisperLoadError, match="HTTP 404"):
        load_whisper("org/absent", cache=tmp_path / "c3")


def test_whisper_http_error_leaves_no_partial_file(http_root, tmp_path):
    with pytest.raises(WhisperLoadError, match=r"/nothing-here/config.json: HTTP 404"):
        load_whisper(f"{http_root}/nothing-here", cache=tmp_path)
    assert not list(tmp_path.rglob("*.part"))


# ---------------------------------------------------------------------------------------------
# Real tiny.en weights on speech
# ---------------------------------------------------------------------------------------------

def speech_clip(folder, text, name):
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        pytest.skip("espeak-ng and sox needed for speech clips")
    raw, clip = folder / f"{name}-raw.wav", folder / f"{name}.wav"
    subprocess.run(["espeak-ng", "-w", str(raw), text], check=True, capture_output=True)
    # -R: sox dithers its 16-bit output with a new random seed each run, so a clip's samples (and near-tie words of
    # a transcript: the no-pause live-captions WER went 0.36-0.74 between runs) differed; repeatable mode seeds it
    subprocess.run(["sox", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(clip)], check=True,
                   capture_output=True)
    return clip


@pytest.mark.slow
def test_tiny_en_encoder_and_logits_match_transformers(tmp_path):
    folder = tiny_en()
    clip = speech_clip(tmp_path, "Please call Stella and ask her to bring these things from the store.", "c")
    mel = audio.log_mel_spectrogram(audio.load_audio(clip))[None]  # (1, 80, 3000)
    model, _, tok = load_whisper(folder)
    ref = hf_model(folder)
    tokens = np.array([[50257, 50362] + tok.encode(" Please call Stella and ask her to bring")])
    with torch.no_grad():
        enc_ref = ref.model.encoder(torch.from_numpy(mel)).last_hidden_state.numpy()
        logits_ref = ref(input_features=torch.from_numpy(mel), decoder_input_ids=torch.from_numpy(tokens)).logits.numpy()
    with ember.no_grad():
        enc = model.encoder(ember.tensor(mel)).numpy()
        logits = model(ember.tensor(mel), ember.tensor(tokens)).numpy()
    # float32 on both sides, different summation orders: |enc| reaches ~15, logits ~30
    np.testing.assert_allclose(enc, enc_ref, atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(logits, logits_ref, atol=5e-4, rtol=1e-4)
    assert (logits.argmax(-1) == logits_ref.argmax(-1)).all()
