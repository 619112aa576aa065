"""The page's speech tool (wasm/tools/whisper.py) natively, through the worker's run message: word timestamps and
VAD as the CLI gives them (deterministic mode, the page's default), the live stream's messages, and hostile input
through the streaming path (a closed stream, a sample-rate change mid-stream, NaN samples, bytes that are not
float32) as bad_request errors that leave the worker usable."""
import asyncio

import numpy as np
import pytest

from ember.backends.cpu_matmul import set_deterministic
from ember.wasm import worker_api as W
from ember.wasm.tools import whisper as tool

from test_whisper_model import speech_clip, tiny_en  # noqa: E402


def run(coro):
    return asyncio.run(coro)


def call(input, **opts):
    return run(W.handle("run", {"tool": "whisper", "input": input, "opts": opts}))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    import shutil
    from ember.models.whisper.vad import model_path
    folder = tmp_path_factory.mktemp("page-whisper")
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(tiny_en() / name, folder / name)
    shutil.copy(model_path(), folder / tool.VAD_FILE)  # as the demos carry it
    info = W.load("whisper", str(folder))
    clip = speech_clip(tmp_path_factory.mktemp("clip"), "Hello, my name is Alice. I live near the river.", "p")
    return info, clip


def test_words_and_vad_as_the_cli(loaded):
    from ember.models.whisper.load import load_whisper
    from ember.models.whisper.transcribe import load_input, transcribe
    info, clip = loaded
    samples = np.concatenate([np.zeros(16000 * 6, np.float32), load_input(clip), np.zeros(16000 * 2, np.float32)])
    got = call(samples.tobytes(), words=True, vad=True)["ok"]
    was = set_deterministic(True)
    try:
        model, _, tok = load_whisper(tiny_en())
        ref = transcribe(model, tok, samples, timestamps=True, word_timestamps=True, vad=True)
    finally:
        set_deterministic(was)
    assert got["text"] == ref["text"].strip()
    assert [s["words"] for s in got["segments"]] == [s["words"] for s in ref["segments"]]
    assert got["segments"][0]["words"][0]["start"] >= 5.5  # the 6 s of silence are skipped, times in the input's


def test_live_stream_messages_and_hostile_pushes(loaded, monkeypatch):
    info, clip = loaded
    from ember.backends import cpu_matmul
    from ember.models.whisper.streaming import LiveTranscriber
    from ember.models.whisper.transcribe import load_input
    modes, push = [], LiveTranscriber.push
    monkeypatch.setattr(LiveTranscriber, "push", lambda self, *a: modes.append(cpu_matmul.deterministic()) or
                        push(self, *a))
    samples = np.concatenate([load_input(clip), np.zeros(16000, np.float32)])
    assert call(None, stream="start")["ok"] == {"started": True}
    committed = []
    for a in range(0, samples.size, 8000):
        u = call(samples[a:a + 8000].tobytes(), stream="push", rate=16000)["ok"]
        committed += u["committed"]
        assert set(u) >= {"committed", "partial", "t", "speech", "level"}
    call(np.zeros(160, np.float32).tobytes(), stream="push", rate=16000, deterministic=True)
    # live captions run the fast kernels unless asked (their words depend on when audio arrives), files do not
    assert modes == [False] * (len(modes) - 1) + [True] and not cpu_matmul.deterministic()
    bad = [(np.array([0.1, np.nan], np.float32).tobytes(), {"rate": 16000}, "NaN"),
           (np.zeros(4800, np.float32).tobytes(), {"rate": 48000}, "changed mid-stream"),
           (b"\x00" * 7, {}, "float32 samples")]
    for data, opts, what in bad:
        err = call(data, stream="push", **opts)
        assert err["error"] == "bad_request" and what in err["message"], err
    final = call(None, stream="stop")["ok"]
    committed += final["committed"]
    assert final["final"] and "alice" in "".join(w["word"] for w in committed).lower()
    err = call(np.zeros(160, np.float32).tobytes(), stream="push")  # the stream is closed
    assert err["error"] == "bad_request" and "no live stream" in err["message"]
    assert call(None, stream="bogus")["error"] == "bad_request"
    assert "text" in call(load_input(clip).tobytes(), words=True)["ok"]  # the worker still serves
