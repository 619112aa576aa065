"""Whisper with GGUF-quantized weights (`ember convert whisper-gguf`): the reference is transformers'
WhisperForConditionalGeneration holding the same weights dequantized by gguf-py, so ember's quantized
layers must give its logits and its greedy tokens."""
import numpy as np
import pytest

import ember
from ember.models.whisper import audio
from ember.models.whisper.gguf import convert_to_gguf
from ember.models.whisper.load import WhisperLoadError, load_whisper
from ember.models.whisper.transcribe import transcribe
from ember.quant import QLinear

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from test_whisper_model import make_random_folder, speech_clip, tiny_en  # noqa: E402


def dequantized_reference(folder):
    """transformers' Whisper with model.gguf's tensors as gguf-py dequantizes them."""
    reader = gguf.GGUFReader(str(folder / "model.gguf"))
    sd = {t.name: torch.from_numpy(np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)
                                   .reshape(tuple(int(d) for d in reversed(t.shape))).copy())
          for t in reader.tensors}
    hf = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig.from_pretrained(folder)).eval()
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    assert missing == ["proj_out.weight"] and not unexpected  # proj_out is tied to the token embedding
    hf.tie_weights()
    hf.generation_config = transformers.GenerationConfig.from_pretrained(folder)  # as from_pretrained sets it
    return hf, reader


@pytest.fixture(scope="module")
def random_folder(tmp_path_factory):
    return make_random_folder(tmp_path_factory.mktemp("whisper-random-gguf"))


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q5_1"])
def test_quantized_model_matches_transformers_on_the_dequantized_weights(random_folder, tmp_path, qtype, device):
    out = convert_to_gguf(random_folder, tmp_path / qtype, qtype)
    hf, reader = dequantized_reference(out)
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["model.encoder.layers.0.fc1.weight"] == qtype.upper()
    assert types["model.encoder.embed_positions.weight"] in ("F32", "F16")  # kept float on purpose
    model, _, _ = load_whisper(out, device=device)
    assert isinstance(model.encoder.layers[0].fc1, QLinear)  # stays quantized in memory
    rng = np.random.default_rng(0)
    mel = rng.standard_normal((1, 80, 3000)).astype(np.float32)
    toks = np.array([[50257, 50362, 383, 2068, 13]])
    with torch.no_grad():
        ref = hf(input_features=torch.from_numpy(mel), decoder_input_ids=torch.from_numpy(toks)).logits.numpy()
    with ember.no_grad():
        got = model(ember.tensor(mel, device=device), ember.tensor(toks, device=device)).numpy()
    np.testing.assert_allclose(got, ref, atol=2e-4 * np.abs(ref).max(), rtol=0)


def test_cli_and_bad_folders(random_folder, tmp_path, capsys):
    from ember.cli import main
    assert main(["convert", "whisper-gguf", str(random_folder), str(tmp_path / "q"), "--qtype", "q8_0"]) == 0
    assert (tmp_path / "q" / "model.gguf").is_file() and (tmp_path / "q" / "tokenizer.json").is_file()
    assert not (tmp_path / "q" / "model.safetensors").exists()
    # a tensor missing from the GGUF is named, as for safetensors
    from ember.io import gguf as egguf
    tensors = egguf.load(tmp_path / "q" / "model.gguf")
    del tensors["model.decoder.layers.1.fc2.weight"]
    egguf.save(tensors, tmp_path / "q" / "model.gguf")
    with pytest.raises(WhisperLoadError, match="missing tensor model.decoder.layers.1.fc2.weight"):
        load_whisper(tmp_path / "q")
    (tmp_path / "q" / "model.gguf").unlink()
    with pytest.raises(WhisperLoadError, match="none of model.safetensors, model.gguf"):
        load_whisper(tmp_path / "q")
    with pytest.raises(WhisperLoadError, match="model.safetensors not found"):
        convert_to_gguf(tmp_path / "q", tmp_path / "again")


@pytest.mark.slow
def test_tiny_en_q8_0_transcribes_as_transformers_on_the_same_weights(tmp_path):
    out = convert_to_gguf(tiny_en(), tmp_path / "q8", "q8_0")
    hf, _ = dequantized_reference(out)
    model, _, tok = load_whisper(out)
    clip = speech_clip(tmp_path, "Please call Stella and ask her to bring these things with her from the store.", "s")
    mel = audio.log_mel_spectrogram(audio.load_audio(clip))
    with torch.no_grad():
        want = hf.generate(torch.from_numpy(mel)[None])[0].tolist()
    got = transcribe(model, tok, clip, temperature=0.0, compression_ratio_threshold=None, logprob_threshold=None,
                     no_speech_threshold=None)
    assert [t for s in got["segments"] for t in s["tokens"]] == want
    assert "stella" in got["text"].lower()


def test_gguf_folder_by_url_then_offline_from_the_cache(random_folder, tmp_path):
    import functools
    import http.server
    import threading
    from test_whisper_model import _Quiet
    convert_to_gguf(random_folder, tmp_path / "www" / "q8", "q8_0")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_Quiet, directory=str(tmp_path / "www")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/q8"
    seen = []
    try:
        model, _, _ = load_whisper(url, cache=tmp_path / "cache", progress=lambda f, d, t: seen.append(f))
    finally:
        server.shutdown()
        server.server_close()  # refused from now on
    assert "model.gguf" in seen and "model.safetensors" not in seen  # the 404 is skipped, the GGUF fetched
    assert isinstance(model.decoder.layers[0].fc1, QLinear)
    again, _, _ = load_whisper(url, cache=tmp_path / "cache")  # server gone: the cached folder is enough
    assert isinstance(again.decoder.layers[0].fc1, QLinear)
