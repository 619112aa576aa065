"""wasm/worker_api.py and the tools it serves (wasm/tools/; the Python side of the web worker) run in
CPython: the answers equal the model APIs' own, cancel stops a generation, and every bad request comes back as an error code + message
instead of an exception (the worker must stay alive)."""
import asyncio
import struct
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import ember
from ember.wasm import worker_api as W
from ember.wasm.tools import whisper as whisper_tool
from ember.wasm.tools import yolo as yolo_tool


def run(coro):
    """Run a worker coroutine on its own loop, in a thread: Playwright's sync API (e2e, same pytest process)
    keeps an event loop running in the main thread, where asyncio.run would refuse."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.load import save_pretrained
    from ember.models.llama.model import Llama
    tok = pytest.importorskip("tokenizers")
    d = tmp_path_factory.mktemp("llama")
    t = tok.Tokenizer(tok.models.BPE())
    t.pre_tokenizer = tok.pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = tok.decoders.ByteLevel()
    t.train_from_iterator(["the for statement is used to iterate over a sequence"] * 20,
                          tok.trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                                  initial_alphabet=tok.pre_tokenizers.ByteLevel.alphabet()))
    t.save(str(d / "src.json"))
    ember.manual_seed(0)
    cfg = LlamaConfig(vocab_size=t.get_vocab_size(), dim=32, hidden_dim=64, n_layers=1, n_heads=2,
                      n_kv_heads=1, max_seq_len=128, bos_token_id=0, eos_token_ids=[1])
    save_pretrained(Llama(cfg), str(d / "m"), tokenizer_json=str(d / "src.json"))
    return d / "m"


def test_llama_greedy_equals_generate(llama_dir):
    from ember.models.common.generate import SamplingParams, generate
    from ember.models.llama.load import load_llama
    info = W.load("llama", str(llama_dir))
    assert info["tool"] == "llama" and info["device"] == "cpu" and info["parameters"] > 0
    pieces = []
    r = run(W.handle("run", {"tool": "llama", "input": "the for",
                             "opts": {"temperature": 0, "max_new_tokens": 12, "seed": 0},
                             "on_partial": lambda piece, n, tps: pieces.append((piece, n))}))
    assert "ok" in r, r
    model, tok = load_llama(str(llama_dir))
    ids = tok.encode("the for", bos=True)
    ref = list(generate(model, ids, 12, SamplingParams(0.0, 0, 0.9, 1.0, 0), tok.eos_ids))
    assert r["ok"]["prompt_tokens"] == ids
    assert r["ok"]["tokens"] == ref
    assert "".join(p for p, _ in pieces) == r["ok"]["text"]
    assert [n for _, n in pieces] == sorted(n for _, n in pieces)  # streamed in order


def test_handle_now_answers_at_once_or_finishes_as_a_task_with_handles_answer(llama_dir):
    """worker.js's CPU runs go through handle_now: a request that never waits is answered on the caller's stack; one
    that waits (a generation, at each token's checkpoint) comes back as a task of the loop whose answer is handle's,
    streamed pieces and a cancel included."""
    W.load("llama", str(llama_dir))
    got = W.handle_now("run", {"tool": "bert", "input": "x"})
    assert got == run(W.handle("run", {"tool": "bert", "input": "x"})) and got["error"] == "bad_request"
    opts = {"temperature": 0, "max_new_tokens": 8, "seed": 0}

    async def both():
        now, later = [], []
        task = W.handle_now("run", {"tool": "llama", "input": "the for", "opts": dict(opts),
                                    "on_partial": lambda piece, n, tps: now.append(piece)})
        assert isinstance(task, asyncio.Future)
        a = await task
        b = await W.handle("run", {"tool": "llama", "input": "the for", "opts": dict(opts),
                                   "on_partial": lambda piece, n, tps: later.append(piece)})
        seen = []

        def cancel_at_3(piece, n, tps):
            seen.append(n)
            if n >= 3:
                W.cancel()
        c = await W.handle_now("run", {"tool": "llama", "input": "the", "on_partial": cancel_at_3,
                                       "opts": {"temperature": 1.0, "max_new_tokens": 100, "seed": 1}})
        return a, b, now, later, c
    a, b, now, later, c = run(both())
    assert a["ok"]["tokens"] == b["ok"]["tokens"] and a["ok"]["text"] == b["ok"]["text"] and now == later
    assert c["ok"]["stopped"] == "cancelled" and 3 <= len(c["ok"]["tokens"]) < 10


def test_cancel_stops_at_the_next_token(llama_dir):
    W.load("llama", str(llama_dir))
    seen = []

    def on_token(piece, n, tps):
        seen.append(n)
        if n >= 3:
            W.cancel()  # as worker.js does when the page's cancel message arrives
    r = run(W.handle("run", {"tool": "llama", "input": "the",
                             "opts": {"temperature": 1.0, "max_new_tokens": 100, "seed": 1}, "on_partial": on_token}))
    assert r["ok"]["stopped"] == "cancelled"
    assert 3 <= len(r["ok"]["tokens"]) < 10
    # the flag is reset: the next run goes to the end
    r2 = run(W.handle("run", {"tool": "llama", "input": "the", "opts": {"temperature": 0, "max_new_tokens": 5}}))
    assert r2["ok"]["stopped"] != "cancelled"


def test_prompt_over_the_context_is_refused_and_the_context_stop_says_its_length(llama_dir):
    W.load("llama", str(llama_dir))  # max_seq_len 128
    r = run(W.handle("run", {"tool": "llama", "input": "the for statement " * 200, "opts": {"max_new_tokens": 8}}))
    assert r["error"] == "too_long"
    assert "this model's context length is 128 tokens" in r["message"] and "shorten the prompt" in r["message"]
    r = run(W.handle("run", {"tool": "llama", "input": "the", "opts": {"temperature": 0, "max_new_tokens": 4096}}))
    ok = r["ok"]
    assert ok["context"] == 128
    assert ok["stopped"] in ("context", "eos")
    if ok["stopped"] == "context":  # the last generated token is never fed, so it may sit past the context
        assert len(ok["prompt_tokens"]) + len(ok["tokens"]) in (128, 129)


def test_a_piece_ending_in_a_split_character_waits_for_its_continuation(llama_dir, monkeypatch):
    """A stream decoder that passes on U+FFFD (an incomplete UTF-8 sequence) must not reach the page as such:
    the piece is held and sent with the next one; the result's text is still every piece joined."""
    import importlib
    G = importlib.import_module("ember.models.common.generate")  # the module (the package exports a function of that name)
    pieces = ["caf", "\ufffd", "\ufffd", "é au lait", " \ufffd"]

    class Stream:
        def __init__(self, gen, tok):
            self.stats = G.GenerationStats(prompt_tokens=1)

        def __iter__(self):
            for i, p in enumerate(pieces):
                self.stats.tokens.append(i)
                yield p

        def abort(self):
            pass
    monkeypatch.setattr(G, "TextStream", Stream)
    W.load("llama", str(llama_dir))
    sent = []
    r = run(W.handle("run", {"tool": "llama", "input": "the", "opts": {"max_new_tokens": 8},
                             "on_partial": lambda piece, n, tps: sent.append(piece)}))
    assert r["ok"]["text"] == "".join(pieces) == "".join(sent)
    assert sent == ["caf", "\ufffd\ufffdé au lait", " \ufffd"]  # only the text's real end may end in U+FFFD


@pytest.mark.parametrize("op,args,code", [
    ("run", {"tool": "llama", "input": "x", "opts": {"top_p": 0}}, "bad_request"),
    ("run", {"tool": "llama", "input": "x", "opts": {"max_new_tokens": 0}}, "bad_request"),
    ("run", {"tool": "bert", "input": "x"}, "bad_request"),
    ("nope", {}, "bad_request"),
    ("load", {"tool": "bert", "folder": "/"}, "bad_request"),
    ("device", {"device": "tpu"}, "bad_request"),
])
def test_bad_requests_come_back_as_codes(llama_dir, op, args, code):
    W.load("llama", str(llama_dir))
    r = run(W.handle(op, args))
    assert r["error"] == code and r["message"].startswith("ember: ")


def test_run_before_load_and_bad_model_files(tmp_path):
    yolo_tool._STATE.clear()
    r = run(W.handle("run", {"tool": "yolo", "input": b"\x89PNG"}))
    assert r["error"] == "not_loaded"
    (tmp_path / "readme.txt").write_text("hi")
    r = run(W.handle("load", {"tool": "yolo", "folder": str(tmp_path)}))
    assert r["error"] == "unsupported_file" and "readme.txt" in r["message"]
    assert "YOLO weights must be .safetensors (ember convert yolo), .onnx or .pt" in r["message"]  # the page's heading
    (tmp_path / "model.safetensors").write_bytes(b"garbage!" * 4)
    r = run(W.handle("load", {"tool": "yolo", "folder": str(tmp_path)}))
    assert r["error"] == "bad_model" and r["message"].startswith("ember: ")


def test_load_errors_name_the_users_file_not_the_workers_folder(tmp_path):
    folder = tmp_path / "models" / "yolo" / "local-weights.pt40"  # as worker.js lays out local files
    folder.mkdir(parents=True)
    (folder / "weights.pt").write_bytes(b"PK\x03\x04 not a checkpoint" * 2)
    r = run(W.handle("load", {"tool": "yolo", "folder": str(folder)}))
    assert r["error"] == "bad_model" and "weights.pt" in r["message"], r
    assert str(folder) not in r["message"] and "local-" not in r["message"], r


def test_a_wav_error_names_the_file_and_shows_bytes_as_text():
    whisper_tool._STATE["model"] = object()  # the checks below come before the model is used
    try:
        for data, want in ((b"RIFF\x24\x00\x00\x00WAVEjunk" + bytes(40), "ember: broken.wav: no fmt chunk"),
                           (b"RIFF\x10\x00\x00\x00AVI junkjunk", 'ember: broken.wav: not a RIFF/WAVE file (starts with "RIFF····AVI ")')):
            r = run(W.handle("run", {"tool": "whisper", "input": data, "opts": {"name": "broken.wav"}}))
            assert r["error"] == "unsupported_file" and r["message"].startswith(want), r
            assert "<wav bytes>" not in r["message"] and "b'" not in r["message"]
    finally:
        whisper_tool._STATE.clear()


def test_a_keyboard_interrupt_from_the_page_is_a_cancel(monkeypatch):
    async def interrupted(*a, **k):
        raise KeyboardInterrupt  # what Pyodide raises when the page writes to the interrupt buffer
    monkeypatch.setattr(yolo_tool, "run", interrupted)
    r = run(W.handle("run", {"tool": "yolo", "input": b""}))
    assert r == {"error": "cancelled", "message": "ember: cancelled"}


def test_the_device_answer_says_what_auto_picks_only_where_known():
    r = run(W.handle("device", {"device": "cpu"}))["ok"]
    assert r["device"] == "cpu" and r["auto"] is None  # natively, "cpu" asks no adapter
    r = run(W.handle("device", {"device": "auto"}))["ok"]
    assert r["auto"] == {"device": r["device"], "reason": r["reason"]}


def _wav(samples: np.ndarray, rate: int) -> bytes:
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(pcm)) + pcm
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_audio_inputs_wav_bytes_as_the_cli_and_float32_samples():
    from ember.models.whisper.transcribe import load_input
    rate = 22050
    x = np.sin(np.linspace(0, 400, rate)).astype(np.float32) * 0.5
    wav = _wav(x, rate)
    np.testing.assert_array_equal(whisper_tool._samples(wav), load_input(wav))  # resampled to 16 kHz as the CLI does
    f32 = np.arange(8, dtype=np.float32) / 8
    np.testing.assert_array_equal(whisper_tool._samples(f32.tobytes()), f32)
    for bad, what in ((b"abc", "multiple of 4"), (np.float32([np.nan]).tobytes(), "NaN"), (b"", "shape")):
        with pytest.raises(W.WorkerError, match=what) as e:
            whisper_tool._samples(bad)
        assert e.value.code == "unsupported_file"


def test_rgba_pixels_and_their_size_check():
    rgba = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    img = yolo_tool._image({"rgba": rgba.tobytes(), "width": 3, "height": 2})
    np.testing.assert_array_equal(img, rgba[:, :, :3])
    with pytest.raises(W.WorkerError, match="does not match 4x2"):
        yolo_tool._image({"rgba": rgba.tobytes(), "width": 4, "height": 2})


def test_yolo_detections_equal_the_cli(tmp_path):
    from ember.models.yolo.predict import rounded as _rounded
    from ember.models.yolo.fetch import ensure_demo_model, ensure_file
    from ember.models.yolo.load import load_model
    from ember.models.yolo.predict import detect
    weights = ensure_demo_model()
    (tmp_path / "model.safetensors").symlink_to(weights)
    W.load("yolo", str(tmp_path))
    image = ensure_file("bus.jpg")
    r = run(W.handle("run", {"tool": "yolo", "input": image.read_bytes(), "opts": {"conf": 0.25}}))
    ref = [_rounded(d) for d in detect(load_model(weights), str(image))]
    assert r["ok"]["detections"] == ref and len(ref) > 0
    assert (r["ok"]["width"], r["ok"]["height"], r["ok"]["input"]) == (810, 1080, [640, 480])
    r = run(W.handle("run", {"tool": "yolo", "input": image.read_bytes(), "opts": {"square": True, "iou": 0.45}}))
    ref = [_rounded(d) for d in detect(load_model(weights), str(image), iou=0.45, square=True)]
    assert r["ok"]["detections"] == ref and r["ok"]["input"] == [640, 640]
    r = run(W.handle("run", {"tool": "yolo", "input": b"not an image"}))
    assert r["error"] == "unsupported_file"


def test_yolo_progress_and_cancel(tmp_path):
    """Progress per stage and per layer group of the model up to done == total; a cancel during the model
    stage stops the run at the next layer group with stopped: "cancelled", and the next run works."""
    from ember.models.yolo.fetch import ensure_demo_model, ensure_file
    (tmp_path / "model.safetensors").symlink_to(ensure_demo_model())
    W.load("yolo", str(tmp_path))
    image = ensure_file("bus.jpg").read_bytes()
    seen = []
    r = run(W.handle("run", {"tool": "yolo", "input": image, "on_progress": seen.append}))
    from ember.models.yolo.model import YOLOv8
    stages = [p["stage"] for p in seen]
    assert stages == ["preprocess"] + ["model"] * YOLOv8.FORWARD_STEPS + ["nms", "done"]  # the model per layer group
    dones = [p["done"] for p in seen]
    assert dones == sorted(dones) and len(set(dones)) == len(dones)
    assert seen[-1]["done"] == seen[-1]["total"] == 3 and r["ok"]["stopped"] == "done"

    def cancel_in_model_stage(p):
        if p["stage"] == "model" and p["done"] > 1.2:  # after two layer groups: it stops before the third
            W.cancel()
        seen.append(p)
    seen.clear()
    r = run(W.handle("run", {"tool": "yolo", "input": image, "on_progress": cancel_in_model_stage}))
    assert r["ok"]["stopped"] == "cancelled" and r["ok"]["detections"] == []
    assert [p["stage"] for p in seen] == ["preprocess", "model", "model", "model"]
    r = run(W.handle("run", {"tool": "yolo", "input": image}))
    assert r["ok"]["stopped"] == "done" and len(r["ok"]["detections"]) > 0


@pytest.mark.parametrize("opts,match", [({"max_det": 0}, "max_det"), ({"iou": 2}, "iou"),
                                        ({"conf": "x"}, "bad YOLO option")])
def test_yolo_bad_options(tmp_path, opts, match):
    from ember.models.yolo.fetch import ensure_demo_model
    (tmp_path / "model.safetensors").symlink_to(ensure_demo_model())
    W.load("yolo", str(tmp_path))
    r = run(W.handle("run", {"tool": "yolo", "input": b"x", "opts": opts}))
    assert r["error"] == "bad_request" and match in r["message"]


@pytest.fixture(scope="module")
def speech_35s(tmp_path_factory):
    """Two espeak-ng sentences with silence between them, 35 s in all: two 30 s windows."""
    import shutil
    import subprocess

    from expected_skips import missing
    if shutil.which("espeak-ng") is None:
        missing("espeak-ng needed for speech clips")
    from ember.models.whisper.transcribe import load_input
    d = tmp_path_factory.mktemp("speech")
    parts = []
    for i, text in enumerate(("The quick brown fox jumps over the lazy dog.", "Ember runs Whisper in the browser.")):
        subprocess.run(["espeak-ng", "-w", str(d / f"{i}.wav"), text], check=True, capture_output=True)
        parts.append(load_input(d / f"{i}.wav"))
    gap = np.zeros(16000 * 35 - sum(p.size for p in parts), np.float32)
    return np.concatenate([parts[0], gap[: gap.size * 3 // 4], parts[1], gap[gap.size * 3 // 4:]])


def test_whisper_progress_per_window_and_cancel(tmp_path, speech_35s):
    """Progress per 30 s window reaching the duration, the CLI's text; a cancel after the first segment
    stops with stopped: "cancelled" and the segments so far; the next run works."""
    from ember.models.whisper.fetch import ensure_tiny_en
    from ember.models.whisper.load import load_whisper
    from ember.models.whisper.transcribe import transcribe
    W.load("whisper", str(ensure_tiny_en()))
    seen = []
    r = run(W.handle("run", {"tool": "whisper", "input": speech_35s.tobytes(), "on_progress": seen.append}))["ok"]
    from ember.backends.cpu_matmul import set_deterministic
    was = set_deterministic(True)  # the page's speech tool computes in deterministic mode
    try:
        model, _, tok = load_whisper(ensure_tiny_en())
        ref = transcribe(model, tok, speech_35s, timestamps=True)
    finally:
        set_deterministic(was)
    assert r["text"] == ref["text"].strip() and r["stopped"] == "done" and len(r["segments"]) >= 2
    assert seen[-1] == {"stage": "window", "done": 35.0, "total": 35.0}
    dones = [p["done"] for p in seen]
    assert dones == sorted(dones) and len(set(dones)) >= 3  # start, the second window, the end

    def cancel_after_first(seg):
        W.cancel()
    r = run(W.handle("run", {"tool": "whisper", "input": speech_35s.tobytes(), "on_partial": cancel_after_first}))["ok"]
    assert r["stopped"] == "cancelled" and len(r["segments"]) == 1
    assert r["segments"][0]["text"] == ref["segments"][0]["text"]
    r = run(W.handle("run", {"tool": "whisper", "input": speech_35s.tobytes()}))["ok"]
    assert r["stopped"] == "done" and r["text"] == ref["text"].strip()
